"""The outbox inside a SQLAlchemy transaction: ``outbox.add(session, envelope)``.

The rows are inserted through the Session (or Connection) the application already uses, so they
commit and roll back with its ORM writes; nothing here begins, commits or rolls back. The
table is named with SQLAlchemy's lightweight ``table()``/``column()`` constructs, so no
metadata has to be declared and any dialect SQLAlchemy speaks (SQLite, PostgreSQL through
psycopg or asyncpg...) works; ``init_schema`` creates the table as for a plain connection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from babelq.errors import ConfigurationError
from babelq.outbox.schema import COLUMNS


def _insert(table: str, rows: Sequence[Sequence[Any]]) -> tuple[Any, list[dict[str, Any]]]:
    try:
        from sqlalchemy import column, insert
        from sqlalchemy import table as table_of
    except ImportError:  # pragma: no cover - a SQLAlchemy object was passed, so it is installed
        raise ConfigurationError("session: SQLAlchemy is not importable") from None
    target = table_of(table, *(column(name) for name in (*COLUMNS, "id")))
    values = [dict(zip(COLUMNS, row, strict=True)) for row in rows]
    return insert(target).returning(target.c.id), values


def _autocommit(connection: Any) -> bool:
    """Whether ``connection`` (a SQLAlchemy Connection or AsyncConnection) commits each statement
    on its own: SQLAlchemy's AUTOCOMMIT is the driver's autocommit, so the driver says."""
    sync = getattr(connection, "sync_connection", None) or connection
    raw = sync.connection.driver_connection
    if getattr(raw, "autocommit", None) is True:  # psycopg
        return True
    return bool(sync.dialect.name == "sqlite" and getattr(raw, "isolation_level", "") is None)


_ALONE = (
    "session: its connection is in AUTOCOMMIT isolation, so the outbox row would commit on its "
    "own; use a Session on a transactional engine"
)


def _connection_of(session: Any) -> Any:
    """The Connection of a Session (a Connection is its own)."""
    return session.connection() if hasattr(session, "get_bind") else session


def init_schema(session: Any, table: str) -> None:
    """Create the outbox table through ``session`` (in its transaction: the caller commits)."""
    from sqlalchemy import text

    from babelq.outbox.schema import Dialect, ddl

    connection = _connection_of(session)
    dialect: Dialect = "sqlite" if connection.dialect.name == "sqlite" else "postgres"
    for statement in ddl(table, dialect):
        session.execute(text(statement))


def add_rows(session: Any, table: str, rows: Sequence[Sequence[Any]]) -> list[int]:
    """Insert ``rows`` through ``session`` (a Session or Connection); their ids, in order."""
    if not rows:
        return []
    connection = _connection_of(session)
    if _autocommit(connection):
        raise ConfigurationError(_ALONE)
    statement, values = _insert(table, rows)
    # one statement per row keeps the ids in the order given on every dialect
    return [int(session.execute(statement, value).scalar_one()) for value in values]


async def add_rows_async(session: Any, table: str, rows: Sequence[Sequence[Any]]) -> list[int]:
    """:func:`add_rows` for an AsyncSession or AsyncConnection."""
    if not rows:
        return []
    connection = await session.connection() if hasattr(session, "sync_session") else session
    if _autocommit(connection):
        raise ConfigurationError(_ALONE)
    statement, values = _insert(table, rows)
    ids: list[int] = []
    for value in values:
        result = await session.execute(statement, value)
        ids.append(int(result.scalar_one()))
    return ids
