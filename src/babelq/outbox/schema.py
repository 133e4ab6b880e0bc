"""The outbox table: its name, its columns, and the SQL that differs between SQLite and PostgreSQL.

One table per outbox (default ``babelq_outbox``). A row is one message on its way to a broker:

* ``id``: the order rows were added in; the relay publishes each queue's rows in this order;
* ``queue``, ``body`` (the canonical envelope bytes, published verbatim, never re-encoded),
  ``headers`` (JSON of the native headers publish middleware added, or NULL), ``message_id``
  (``meta.id``, for people reading the table);
* ``created_at``, ``deliver_at`` (epoch ms; a delay counts from when the row was added, so a row
  that waited in the outbox is not delayed again by the full amount);
* ``status``: ``pending`` until the broker accepted it (``published``, with ``published_at``), or
  ``failed`` when the broker refused it for its content (``last_error``, ``failed_at``); an outage
  never changes it;
* ``attempts``: how many times the relay tried and the broker refused the row;
* ``lease_owner``/``lease_until``: SQLite's claim (a relay owns the rows it leased until the
  deadline; one killed between publish and mark loses them when the lease lapses). PostgreSQL
  claims with row locks (``FOR UPDATE SKIP LOCKED``) and leaves these NULL.

A partial index over pending rows keeps the relay's scan proportional to the backlog, not to
the history of published rows (:meth:`babelq.outbox.relay_store.RelayStore.prune` deletes old
ones).
"""

from __future__ import annotations

import re
import sqlite3
from typing import Any, Literal

from babelq.errors import ConfigurationError

DEFAULT_TABLE = "babelq_outbox"
PENDING, PUBLISHED, FAILED = "pending", "published", "failed"
STATUSES = (PENDING, PUBLISHED, FAILED)
#: the columns an outbox writer fills, in the order of a :data:`babelq.outbox.writer.Row` (the
#: row id, status and attempts take their defaults)
COLUMNS = ("queue", "body", "headers", "message_id", "created_at", "deliver_at")

Dialect = Literal["sqlite", "postgres"]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,50}\Z")


def check_table(table: str) -> str:
    """``table`` unchanged when it is a plain SQL identifier (it is spliced into statements)."""
    if not isinstance(table, str) or not _IDENTIFIER.match(table):
        raise ConfigurationError(
            f"table: must start with a letter or _ and hold only letters, digits and _ "
            f"(at most 51 characters), got {table!r}"
        )
    return table


def dialect_of(connection: Any) -> Dialect:
    """Which database ``connection`` talks to: an ``sqlite3.Connection`` or a psycopg (3) one."""
    if isinstance(connection, sqlite3.Connection):
        return "sqlite"
    if type(connection).__module__.split(".")[0] == "psycopg":
        return "postgres"
    raise ConfigurationError(
        f"connection: expected an sqlite3 or psycopg (3) connection, got {type(connection).__module__}."
        f"{type(connection).__name__}"
    )


def ddl(table: str, dialect: Dialect) -> list[str]:
    """The statements that create the table and its pending index (idempotent)."""
    t = check_table(table)
    if dialect == "sqlite":
        ident, big, blob = "INTEGER PRIMARY KEY AUTOINCREMENT", "INTEGER", "BLOB"
    else:
        ident, big, blob = "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY", "BIGINT", "BYTEA"
    return [
        f"CREATE TABLE IF NOT EXISTS {t} ("
        f"id {ident}, "
        "queue TEXT NOT NULL, "
        f"body {blob} NOT NULL, "
        "headers TEXT, "
        "message_id TEXT, "
        f"created_at {big} NOT NULL, "
        f"deliver_at {big} NOT NULL, "
        f"status TEXT NOT NULL DEFAULT '{PENDING}', "
        "attempts INTEGER NOT NULL DEFAULT 0, "
        f"published_at {big}, "
        f"failed_at {big}, "
        "last_error TEXT, "
        "lease_owner TEXT, "
        f"lease_until {big})",
        f"CREATE INDEX IF NOT EXISTS {t}_pending ON {t} (id) WHERE status = '{PENDING}'",
    ]


def init_schema(connection: Any, *, table: str = DEFAULT_TABLE) -> None:
    """Create the outbox table on ``connection`` (an sqlite3 or psycopg connection) and commit.

    Safe to call again, and from several processes at once on PostgreSQL (an advisory lock
    serialises the ``CREATE ... IF NOT EXISTS``, which otherwise race on the catalog).
    """
    dialect = dialect_of(connection)
    statements = ddl(table, dialect)
    if dialect == "sqlite":
        with connection:  # commits (or rolls back) the DDL
            for statement in statements:
                connection.execute(statement)
        return
    with connection.transaction():
        connection.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"babelq.outbox:{table}",))
        for statement in statements:
            connection.execute(statement)
    if not connection.autocommit:
        connection.commit()
