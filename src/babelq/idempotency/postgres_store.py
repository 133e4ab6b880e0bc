"""A PostgreSQL idempotency store shared by a fleet of consumers.

One row per message id in a table created by :meth:`PostgresStore.migrate`. ``claim`` is
``INSERT ... ON CONFLICT (id) DO UPDATE ... WHERE <the old row expired, or is our own
claim>``: the primary key makes exactly one concurrent caller win, an expired claim (a
crashed worker) or an expired done id can be taken again, and a claim this store wrote
itself is recognised by its owner token (:mod:`babelq.idempotency.claims`) -- so a claim
whose INSERT committed but whose reply was lost is not mistaken for another worker's.
Times come from the database clock (``now()``), so workers with skewed clocks agree. Needs
``psycopg`` 3 (``pip install 'babelq[postgres]'``). The store runs in autocommit mode on its
own connections: a claim must be visible to other workers at once, not when the caller's
business transaction commits. It keeps a small pool of them (``max_connections``, opened
only as concurrent handler threads need them), because every claim and every remember is a
commit: one connection would serialize a multi-threaded worker on its commits.

Connections fail; messages are not to blame (house rule). The store therefore:

* connects lazily, on first use, so a worker starts while its database is still down;
* when a connection breaks (server restart, ``pg_terminate_backend``, a network cut),
  drops it, runs the statement once more on a new connection -- every statement is safe to
  repeat -- and counts it in :attr:`PostgresStore.reconnects`;
* raises :class:`~babelq.errors.UnavailableError` (the driver's error as ``__cause__``, the
  password never in the text) when the database really cannot be reached, or fails in a way
  no message can cause; the runtime then puts the message back instead of failing it.
  After a failed connection attempt it waits :data:`RECONNECT_PAUSE` seconds before the next
  one, answering UnavailableError at once meanwhile, so a down database is not hammered once
  per message;
* lets ``psycopg.DataError`` through unchanged: that one *is* the message's doing (an id
  PostgreSQL cannot store, such as one with a NUL character), a failed attempt like any other.

A connection passed in by the caller is used as it is (alone) and cannot be re-opened: when
it breaks, the store raises UnavailableError until the caller gives it a new one. Pass a
conninfo string to get reconnects.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import threading
import time
from typing import Any, Final

from babelq.errors import ConfigurationError, UnavailableError
from babelq.extras import optional_import
from babelq.idempotency.claims import ClaimTokens
from babelq.idempotency.store import check_ttls
from babelq.urls import one_line, redact, redact_text

DEFAULT_TABLE: Final = "babelq_idempotency"
#: Seconds between two attempts to connect to a database that refused the last one.
RECONNECT_PAUSE: Final = 0.5
#: libpq's connect_timeout (seconds) unless the conninfo sets one: an unreachable host fails
#: in seconds, not after the operating system's minutes-long TCP timeout.
CONNECT_TIMEOUT: Final = 5
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}(?:\.[A-Za-z_][A-Za-z0-9_]{0,62})?\Z")

log = logging.getLogger(__name__)


def _psycopg() -> Any:
    return optional_import("psycopg", needed_for="PostgresStore")


def _describe_conninfo(conninfo: str) -> str:
    return redact(conninfo) if "://" in conninfo else redact_text(conninfo)


def _describe_connection(conn: Any) -> str:
    try:
        info = conn.info
        return f"postgresql://{info.user}@{info.host}:{info.port}/{info.dbname}"
    except Exception:  # a closed connection cannot say
        return "the caller's PostgreSQL connection"


def _lock_key(table: str) -> int:
    """The advisory lock that serializes :meth:`PostgresStore.migrate` of one table (signed 64 bit)."""
    digest = hashlib.blake2b(f"babelq.idempotency.migrate:{table}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class PostgresStore:
    """Claiming idempotency store on PostgreSQL.

    ``conninfo`` is a libpq connection string/URL (the store opens, and re-opens, up to
    ``max_connections`` autocommit connections of its own) or an open psycopg connection in
    autocommit mode. ``ttl_ms`` expires done ids (None: keep forever); ``claim_ttl_ms``
    expires claims of crashed workers.
    """

    def __init__(
        self,
        conninfo: str | Any = "postgresql://postgres@127.0.0.1:5432/test",
        *,
        table: str = DEFAULT_TABLE,
        ttl_ms: int | None = None,
        claim_ttl_ms: int = 300_000,
        max_connections: int = 4,
    ) -> None:
        if not _IDENTIFIER.match(table):
            raise ConfigurationError(f"table must be an SQL identifier (or schema.table), got {table!r}")
        check_ttls(ttl_ms, claim_ttl_ms)
        if type(max_connections) is not int or max_connections < 1:
            raise ConfigurationError(f"max_connections must be an int >= 1, got {max_connections!r}")
        psycopg = _psycopg()
        self._psycopg = psycopg
        self._idle: list[Any] = []  #: open connections nobody is using
        self._conninfo: str | None = None
        self._connect_options: dict[str, Any] = {"autocommit": True}
        if isinstance(conninfo, str):
            try:
                given = psycopg.conninfo.conninfo_to_dict(conninfo)
            except psycopg.Error as exc:
                raise ConfigurationError(
                    f"conninfo: not a usable PostgreSQL connection string: {one_line(exc)}"
                ) from exc
            if "connect_timeout" not in given:
                self._connect_options["connect_timeout"] = CONNECT_TIMEOUT
            self._conninfo = conninfo
            self._owned = True
            #: the database as errors and log lines name it (password redacted)
            self.target = _describe_conninfo(conninfo)
        else:
            if not conninfo.autocommit:
                raise ConfigurationError("PostgresStore needs a connection in autocommit mode")
            self._idle.append(conninfo)
            self._owned = False
            self.target = _describe_connection(conninfo)
            max_connections = 1
        #: connections re-opened because one broke or the database was unreachable
        self.reconnects = 0
        self._slots = threading.BoundedSemaphore(max_connections)  #: connections in use at most
        self._state = threading.Lock()  #: guards the idle list and the reconnect pause
        self._down = False  #: the last connection attempt failed
        self._retry_at = 0.0
        self._last_error: BaseException | None = None
        self._table = table
        self._lock_key = _lock_key(table)
        self._ttl_ms = ttl_ms
        self._claim_ttl_ms = claim_ttl_ms
        self._tokens = ClaimTokens()
        quoted = self._quoted = ".".join(f'"{part}"' for part in table.split("."))
        live = "(expires_at IS NULL OR expires_at > now())"
        expiry = (
            "CASE WHEN %(ttl)s::bigint IS NULL THEN NULL"
            " ELSE now() + %(ttl)s::bigint * interval '1 millisecond' END"
        )
        self._migration = (
            "SELECT pg_advisory_xact_lock(%(lock)s)",
            (
                f"CREATE TABLE IF NOT EXISTS {quoted} ("
                " id text PRIMARY KEY,"
                " state text NOT NULL CHECK (state IN ('claimed', 'done')),"
                " owner text NULL,"
                " updated_at timestamptz NOT NULL DEFAULT now(),"
                " expires_at timestamptz NULL)"
            ),
        )
        # Tables made before claims had owners get the column; checked first because ALTER
        # TABLE takes an exclusive lock even when there is nothing to add.
        self._has_owner = (
            "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(%(table)s)"
            " AND attname = 'owner' AND NOT attisdropped"
        )
        self._add_owner = f"ALTER TABLE {quoted} ADD COLUMN IF NOT EXISTS owner text NULL"
        self._sql = {
            "seen": f"SELECT 1 FROM {quoted} WHERE id = %(id)s AND state = 'done' AND {live}",
            "remember": (
                f"INSERT INTO {quoted} (id, state, owner, updated_at, expires_at)"
                f" VALUES (%(id)s, 'done', NULL, now(), {expiry})"
                " ON CONFLICT (id) DO UPDATE SET state = 'done', owner = NULL, updated_at = now(),"
                " expires_at = EXCLUDED.expires_at"
            ),
            "forget": f"DELETE FROM {quoted} WHERE id = %(id)s",
            "claim": (
                f"INSERT INTO {quoted} AS t (id, state, owner, updated_at, expires_at)"
                f" VALUES (%(id)s, 'claimed', %(owner)s, now(), {expiry})"
                " ON CONFLICT (id) DO UPDATE SET state = 'claimed', owner = EXCLUDED.owner,"
                " updated_at = now(), expires_at = EXCLUDED.expires_at"
                " WHERE (t.expires_at IS NOT NULL AND t.expires_at <= now())"
                " OR (t.state = 'claimed' AND t.owner = EXCLUDED.owner)"
                " RETURNING id"
            ),
            "release": f"DELETE FROM {quoted} WHERE id = %(id)s AND state = 'claimed' AND owner = %(owner)s",
        }

    # -- connection handling ---------------------------------------------------------------
    def _unavailable(self, action: str, exc: BaseException) -> UnavailableError:
        detail = one_line(exc)
        errors = self._psycopg.errors
        if isinstance(exc, errors.UndefinedTable | errors.UndefinedColumn):  # not made, or by an older babelq
            detail += f" (PostgresStore(table={self._table!r}).migrate() creates or upgrades the table)"
        return UnavailableError(f"idempotency store {self.target} unavailable during {action}: {detail}")

    def _checkout(self, action: str) -> Any:
        """An idle connection, or a new one (a slot is held by the caller)."""
        with self._state:
            if self._idle:
                return self._idle.pop()
        return self._connect(action)

    def _checkin(self, conn: Any) -> None:
        with self._state:
            self._idle.append(conn)

    def _connect(self, action: str, *, replacing: bool = False) -> Any:
        """A new connection, or UnavailableError (at once while the reconnect pause lasts).
        ``replacing``: it stands in for one that just broke (counted as a reconnect)."""
        if self._conninfo is None:
            raise UnavailableError(
                f"idempotency store {self.target} unavailable during {action}: the connection it was "
                "given is closed (give the store a conninfo string so it can reconnect by itself)"
            )
        with self._state:
            now = time.monotonic()
            if now < self._retry_at:  # refused a moment ago: do not hammer it once per message
                error = self._unavailable(action, self._last_error or ConnectionError("not reachable"))
                raise error from self._last_error
        try:
            conn = self._psycopg.connect(self._conninfo, **self._connect_options)
        except self._psycopg.Error as exc:
            with self._state:
                self._down = True
                self._retry_at = time.monotonic() + RECONNECT_PAUSE
                self._last_error = exc
            raise self._unavailable(action, exc) from exc
        with self._state:
            came_back, self._down = self._down, False
            if came_back or replacing:
                self.reconnects += 1
        if came_back:
            log.info("idempotency store %s reachable again", self.target)
        return conn

    def _discard(self, conn: Any) -> None:
        if self._owned:
            with contextlib.suppress(Exception):  # already broken; closing is only tidying up
                conn.close()
        else:  # the caller's connection: keep it, so later calls say why they fail
            self._checkin(conn)

    def _execute(self, conn: Any, name: str, params: dict[str, Any]) -> list[Any]:
        if name == "migrate":
            with conn.transaction(), conn.cursor() as cur:
                for statement in self._migration:
                    cur.execute(statement, params)
                cur.execute(self._has_owner, params)
                if cur.fetchone() is None:
                    cur.execute(self._add_owner)
            return []
        with conn.cursor() as cur:
            cur.execute(self._sql[name], params)
            rows: list[Any] = cur.fetchall() if cur.description is not None else []
            return rows

    def _run(
        self, name: str, message_id: str | None = None, ttl: int | None = None, owner: str | None = None
    ) -> list[Any]:
        """Run one statement; on a broken connection reconnect and run it once more."""
        psycopg = self._psycopg
        params = {"id": message_id, "ttl": ttl, "owner": owner, "lock": self._lock_key, "table": self._quoted}
        with self._slots:
            conn = self._checkout(name)
            for attempt in (1, 2):
                try:
                    rows = self._execute(conn, name, params)
                except psycopg.DataError:
                    self._checkin(conn)
                    raise  # the message's own content (an id PostgreSQL cannot store): its fault
                except psycopg.Error as exc:
                    if not conn.closed:  # the database answered, but not usefully: still not the message
                        self._checkin(conn)
                        raise self._unavailable(name, exc) from exc
                    self._discard(conn)
                    if attempt == 2 or self._conninfo is None:
                        raise self._unavailable(name, exc) from exc
                    log.warning(
                        "idempotency store %s lost a connection during %s (%s); reconnecting",
                        self.target, name, one_line(exc),
                    )  # fmt: skip
                    with self._state:
                        self._retry_at = 0.0  # the server was there a moment ago: try at once
                    conn = self._connect(name, replacing=True)
                    continue
                except BaseException:  # interrupted mid-statement: the connection's state is unknown
                    self._discard(conn)
                    raise
                self._checkin(conn)
                return rows
        raise AssertionError("unreachable")  # pragma: no cover

    # -- the store contract ----------------------------------------------------------------
    def migrate(self) -> None:
        """Create the table (or add what an older one lacks) if needed.

        Idempotent, and safe when a whole fleet starts at once: callers serialize on a
        transaction-scoped advisory lock per table, so a second caller waits and then finds
        the table there (``CREATE TABLE IF NOT EXISTS`` alone races on the catalog).
        """
        self._run("migrate")

    def seen(self, message_id: str) -> bool:
        return bool(self._run("seen", message_id))

    def remember(self, message_id: str) -> None:
        token = self._tokens.take(message_id)
        try:
            self._run("remember", message_id, self._ttl_ms)
        except UnavailableError:
            if token is not None:
                self._tokens.in_doubt(message_id, token)
            raise

    def forget(self, message_id: str) -> None:
        self._tokens.take(message_id)
        self._run("forget", message_id)

    def claim(self, message_id: str) -> bool:
        token = self._tokens.for_claim(message_id)
        try:
            won = bool(self._run("claim", message_id, self._claim_ttl_ms, token))
        except UnavailableError:
            self._tokens.in_doubt(message_id, token)  # it may have committed
            raise
        if won:
            self._tokens.claimed(message_id, token)
        return won

    def release(self, message_id: str) -> None:
        """Give back this store's claim on ``message_id`` (a claim held by anyone else, or a done
        id, is left alone)."""
        token = self._tokens.take(message_id)
        if token is None:
            return
        try:
            self._run("release", message_id, owner=token)
        except UnavailableError:
            self._tokens.in_doubt(message_id, token)
            raise

    def close(self) -> None:
        """Close the idle connections the store opened (a caller's connection stays open)."""
        if not self._owned:
            return
        with self._state:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
