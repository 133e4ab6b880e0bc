"""The producer side: :class:`Outbox` writes messages into the outbox table of the caller's transaction.

The point of an outbox is that "save the business row" and "send the message" commit or roll
back together. So :meth:`Outbox.add` runs one ``INSERT`` on the connection the caller is
already using and never begins, commits or rolls back anything: the caller's commit publishes
the message (through the relay, later), the caller's rollback erases it.

It refuses a connection that would commit the insert on its own (SQLite in autocommit mode
outside ``BEGIN``, psycopg with ``autocommit=True`` outside ``conn.transaction()``): the row would
then be committed even if the business write rolls back, which is the bug an outbox exists to
prevent. Open a transaction first.

Publish middleware (schema check, GDPR protect, trace headers: the runtime's publish chain)
runs here, at add time, so what the table holds is exactly what the broker will get, and the
relay publishes it verbatim.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from babelq.envelope import Envelope, decode, now_ms
from babelq.errors import ConfigurationError, EnvelopeError
from babelq.outbox.schema import COLUMNS, DEFAULT_TABLE, Dialect, check_table, dialect_of, init_schema
from babelq.outbox.target import close_quietly, connect
from babelq.runtime.middleware import Publication, PublishMiddleware, compose_publish

Row = tuple[str, bytes, str | None, str | None, int, int]


def is_sqlalchemy(connection: object) -> bool:
    """Whether ``connection`` is a SQLAlchemy Session or Connection (no import needed to tell)."""
    return type(connection).__module__.split(".")[0] == "sqlalchemy"


def _writes_alone(connection: Any, dialect: Dialect) -> bool:
    """Whether an INSERT on ``connection`` now would be committed by itself (autocommit, no transaction)."""
    if dialect == "sqlite":
        if connection.in_transaction:
            return False
        return connection.isolation_level is None or getattr(connection, "autocommit", None) is True
    return bool(connection.autocommit) and connection.info.transaction_status.name == "IDLE"


def _envelope(value: Envelope | bytes) -> Envelope:
    if isinstance(value, Envelope):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        env = decode(bytes(value))
        problem = env.rejection()
        if problem is not None:
            raise EnvelopeError("", f"not an envelope a consumer accepts: {problem}")
        return env
    raise ConfigurationError(f"envelope: expected a babelq Envelope or its bytes, got {type(value).__name__}")


class Outbox:
    """Adds messages to an outbox table inside the caller's open transaction.

    >>> import sqlite3
    >>> from babelq.envelope import make
    >>> db = sqlite3.connect(":memory:")
    >>> outbox = Outbox()
    >>> outbox.init_schema(db)
    >>> with db:                                    # the caller's transaction
    ...     _ = db.execute("CREATE TABLE orders (id INTEGER)")
    ...     _ = db.execute("INSERT INTO orders VALUES (1042)")
    ...     row = outbox.add(db, make("urn:babel:orders:created", {"order_id": 1042}), queue="orders")
    >>> db.execute("SELECT queue, status FROM babelq_outbox").fetchall()
    [('orders', 'pending')]
    """

    def __init__(
        self, *, table: str = DEFAULT_TABLE, publish_middleware: Sequence[PublishMiddleware] = ()
    ) -> None:
        self.table = check_table(table)
        self._layers = list(publish_middleware)

    # -- schema ---------------------------------------------------------------------------
    @classmethod
    def init(cls, url: str, *, table: str = DEFAULT_TABLE) -> Outbox:
        """Create the outbox table in the database of ``url`` (sqlite:///path.db, a path, or
        postgresql://...) if it does not exist; returns an :class:`Outbox` for that table."""
        conn = connect(url, option="url")
        try:
            init_schema(conn, table=table)
        finally:
            close_quietly(conn)
        return cls(table=table)

    def init_schema(self, connection: Any) -> None:
        """Create this outbox's table on an open connection (commits), or through a SQLAlchemy
        Session or Connection (in its transaction: the caller commits)."""
        if is_sqlalchemy(connection):
            from babelq.outbox import sqlalchemy

            sqlalchemy.init_schema(connection, self.table)
            return
        init_schema(connection, table=self.table)

    # -- writing --------------------------------------------------------------------------
    def add(
        self, connection: Any, envelope: Envelope | bytes, *, queue: str | None = None, delay_ms: int = 0
    ) -> int | None:
        """Write ``envelope`` for ``queue`` (default: its ``meta.queue``) into the outbox, inside the
        transaction open on ``connection``. Returns the row id (None if publish middleware
        dropped the message).

        ``delay_ms`` (or, without it, the envelope's ``meta.deliver_at``) delays delivery,
        counted from now: the relay passes the rest of it to the broker.
        """
        ids = self.add_many(connection, [envelope], queue=queue, delay_ms=delay_ms)
        return ids[0] if ids else None

    def add_many(
        self,
        connection: Any,
        envelopes: Iterable[Envelope | bytes],
        *,
        queue: str | None = None,
        delay_ms: int = 0,
    ) -> list[int]:
        """:meth:`add` for several envelopes in one statement batch; returns their row ids in order.

        ``connection`` may also be a SQLAlchemy ``Session`` (or ``Connection``) in its
        transaction: the rows are inserted through it (:mod:`babelq.outbox.sqlalchemy`)."""
        if is_sqlalchemy(connection):
            from babelq.outbox.sqlalchemy import add_rows

            return add_rows(connection, self.table, self.rows(envelopes, queue=queue, delay_ms=delay_ms))
        dialect = dialect_of(connection)
        if _writes_alone(connection, dialect):
            raise ConfigurationError(
                "connection: not inside a transaction (autocommit), so the outbox row would commit on its "
                "own; open a transaction around the business write and the add "
                "(sqlite3: BEGIN or a default-isolation connection; psycopg: with conn.transaction())"
            )
        rows = self.rows(envelopes, queue=queue, delay_ms=delay_ms)
        if not rows:
            return []
        columns = ", ".join(COLUMNS)
        if dialect == "sqlite":
            sql = f"INSERT INTO {self.table} ({columns}) VALUES (?, ?, ?, ?, ?, ?)"
            return [int(connection.execute(sql, row).lastrowid) for row in rows]
        sql = f"INSERT INTO {self.table} ({columns}) VALUES (%s, %s, %s, %s, %s, %s) RETURNING id"
        ids: list[int] = []
        with connection.cursor() as cur:
            cur.executemany(sql, rows, returning=True)  # one round trip per pipeline, ids in order
            while True:
                found = cur.fetchone()
                ids.append(int(found[0]))
                if not cur.nextset():
                    break
        return ids

    async def add_async(
        self, session: Any, envelope: Envelope | bytes, *, queue: str | None = None, delay_ms: int = 0
    ) -> int | None:
        """:meth:`add` on a SQLAlchemy ``AsyncSession`` (or ``AsyncConnection``) in its transaction."""
        ids = await self.add_many_async(session, [envelope], queue=queue, delay_ms=delay_ms)
        return ids[0] if ids else None

    async def add_many_async(
        self,
        session: Any,
        envelopes: Iterable[Envelope | bytes],
        *,
        queue: str | None = None,
        delay_ms: int = 0,
    ) -> list[int]:
        """:meth:`add_many` on a SQLAlchemy ``AsyncSession`` (or ``AsyncConnection``)."""
        from babelq.outbox.sqlalchemy import add_rows_async

        return await add_rows_async(session, self.table, self.rows(envelopes, queue=queue, delay_ms=delay_ms))

    def rows(
        self, envelopes: Iterable[Envelope | bytes], *, queue: str | None = None, delay_ms: int = 0
    ) -> list[Row]:
        """The table rows (:data:`COLUMNS`) for ``envelopes``, after the publish middleware."""
        if type(delay_ms) is not int or delay_ms < 0:
            raise ConfigurationError(f"delay_ms: must be an int >= 0, got {delay_ms!r}")
        if queue is not None and (not isinstance(queue, str) or not queue):
            raise ConfigurationError(f"queue: must be a non-empty string, got {queue!r}")
        now = now_ms()
        publications: list[Publication] = []
        chain = compose_publish(self._layers, publications.append)
        for item in envelopes:
            env = _envelope(item)
            target = queue or env.queue or "default"
            delay = delay_ms
            deliver_at = env.deliver_at
            if delay == 0 and deliver_at is not None:
                delay = max(0, deliver_at - now)
            chain(Publication(target, env, delay))
        rows: list[Row] = [
            (
                p.queue,
                p.envelope.encode(),
                json.dumps(p.headers, ensure_ascii=False, separators=(",", ":")) if p.headers else None,
                p.envelope.id or None,
                now,
                now + max(0, int(p.delay_ms)),
            )
            for p in publications
        ]
        return rows
