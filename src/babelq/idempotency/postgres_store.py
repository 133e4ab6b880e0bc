"""A PostgreSQL idempotency store shared by a fleet of consumers.

One row per message id in a table created by :meth:`PostgresStore.migrate`. ``claim`` is
``INSERT ... ON CONFLICT (id) DO UPDATE ... WHERE <the old row expired>``: the primary key
makes exactly one concurrent caller win, and an expired claim (a crashed worker) or an
expired done id can be taken again. Times come from the database clock (``now()``), so
workers with skewed clocks agree. Needs ``psycopg`` 3 (``pip install 'babelq[postgres]'``).
The store runs in autocommit mode on its own connection: a claim must be visible to other
workers at once, not when the caller's business transaction commits.
"""

from __future__ import annotations

import re
import threading
from typing import Any, Final

from babelq.errors import ConfigurationError
from babelq.idempotency.store import check_ttls

DEFAULT_TABLE: Final = "babelq_idempotency"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}(?:\.[A-Za-z_][A-Za-z0-9_]{0,62})?\Z")


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - the dev environment has psycopg
        raise ConfigurationError(
            f"PostgresStore needs psycopg: pip install 'babelq[postgres]' ({exc})"
        ) from exc
    return psycopg


class PostgresStore:
    """Claiming idempotency store on PostgreSQL.

    ``conninfo`` is a libpq connection string/URL (the store opens its own autocommit
    connection) or an open psycopg connection in autocommit mode. ``ttl_ms`` expires done
    ids (None: keep forever); ``claim_ttl_ms`` expires claims of crashed workers.
    """

    def __init__(
        self,
        conninfo: str | Any = "postgresql://postgres@127.0.0.1:5432/test",
        *,
        table: str = DEFAULT_TABLE,
        ttl_ms: int | None = None,
        claim_ttl_ms: int = 300_000,
    ) -> None:
        if not _IDENTIFIER.match(table):
            raise ConfigurationError(f"table must be an SQL identifier (or schema.table), got {table!r}")
        check_ttls(ttl_ms, claim_ttl_ms)
        psycopg = _psycopg()
        if isinstance(conninfo, str):
            self._conn = psycopg.connect(conninfo, autocommit=True)
            self._owned = True
        else:
            if not conninfo.autocommit:
                raise ConfigurationError("PostgresStore needs a connection in autocommit mode")
            self._conn = conninfo
            self._owned = False
        self._table = table
        self._ttl_ms = ttl_ms
        self._claim_ttl_ms = claim_ttl_ms
        self._lock = threading.Lock()
        quoted = ".".join(f'"{part}"' for part in table.split("."))
        live = "(expires_at IS NULL OR expires_at > now())"
        expiry = (
            "CASE WHEN %(ttl)s::bigint IS NULL THEN NULL"
            " ELSE now() + %(ttl)s::bigint * interval '1 millisecond' END"
        )
        self._sql = {
            "migrate": (
                f"CREATE TABLE IF NOT EXISTS {quoted} ("
                " id text PRIMARY KEY,"
                " state text NOT NULL CHECK (state IN ('claimed', 'done')),"
                " updated_at timestamptz NOT NULL DEFAULT now(),"
                " expires_at timestamptz NULL)"
            ),
            "seen": f"SELECT 1 FROM {quoted} WHERE id = %(id)s AND state = 'done' AND {live}",
            "remember": (
                f"INSERT INTO {quoted} (id, state, updated_at, expires_at)"
                f" VALUES (%(id)s, 'done', now(), {expiry})"
                " ON CONFLICT (id) DO UPDATE SET state = 'done', updated_at = now(),"
                " expires_at = EXCLUDED.expires_at"
            ),
            "forget": f"DELETE FROM {quoted} WHERE id = %(id)s",
            "claim": (
                f"INSERT INTO {quoted} AS t (id, state, updated_at, expires_at)"
                f" VALUES (%(id)s, 'claimed', now(), {expiry})"
                " ON CONFLICT (id) DO UPDATE SET state = 'claimed', updated_at = now(),"
                " expires_at = EXCLUDED.expires_at"
                " WHERE t.expires_at IS NOT NULL AND t.expires_at <= now()"
                " RETURNING id"
            ),
            "release": f"DELETE FROM {quoted} WHERE id = %(id)s AND state = 'claimed'",
        }

    def _run(self, name: str, message_id: str | None = None, ttl: int | None = None) -> list[Any]:
        with self._lock, self._conn.cursor() as cur:
            cur.execute(self._sql[name], {"id": message_id, "ttl": ttl})
            rows: list[Any] = cur.fetchall() if cur.description is not None else []
            return rows

    def migrate(self) -> None:
        """Create the table if it does not exist (idempotent)."""
        self._run("migrate")

    def seen(self, message_id: str) -> bool:
        return bool(self._run("seen", message_id))

    def remember(self, message_id: str) -> None:
        self._run("remember", message_id, self._ttl_ms)

    def forget(self, message_id: str) -> None:
        self._run("forget", message_id)

    def claim(self, message_id: str) -> bool:
        return bool(self._run("claim", message_id, self._claim_ttl_ms))

    def release(self, message_id: str) -> None:
        self._run("release", message_id)

    def close(self) -> None:
        """Close the connection if the store opened it."""
        if self._owned:
            self._conn.close()
