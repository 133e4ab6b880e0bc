"""The sink of a consume pipeline: the user's database, where babelq keeps its own two tables.

A partition of a micro-batch is ONE transaction on the sink (:meth:`Sink.transaction`): each
handler runs in a savepoint of it with a cursor (``tx``), after babelq claimed the message's id
in ``<prefix>processed_ids`` inside the same savepoint; a handler that raises rolls back its own
writes and the claim, nothing else (a batch handler: one savepoint for its batch, all of the
batch's ids claimed in it, the claims of the rows it did not call done deleted after it). The
partition's dead letters and retries are claimed in ``<prefix>outbox`` (one row per message
and attempt, :func:`~babelq.pipelines.ledger.outbox_key`) before the commit, published after
it, then marked. So the user's rows, the processed ids and
the outbox commit or vanish together: a micro-batch delivered again after a crash finds its ids
and its keys, and nothing lands twice.

SQLite (``sqlite:///path.db``, local mode only) takes the write lock when the transaction
starts, so partitions commit one after the other; PostgreSQL claims with ``INSERT ... ON
CONFLICT DO NOTHING RETURNING`` and lets partitions run in parallel. A lost connection, a
locked database or a deadlock is an outage (:class:`~babelq.errors.UnavailableError`), never a
message's fault: the transaction is run again after a pause (:meth:`Sink.through_outages`).
"""

from __future__ import annotations

import logging
import re
import sqlite3
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

from babelq.errors import ConfigurationError, UnavailableError
from babelq.pipelines.ledger import Outbound, is_postgres, ledger_path
from babelq.runtime.outage import DEFAULT_OUTAGE_SECONDS, OutagePolicy
from babelq.urls import redact, redact_text

log = logging.getLogger(__name__)

T = TypeVar("T")

#: babelq's tables in the sink are named with this prefix unless told otherwise
DEFAULT_PREFIX = "babelq_"
_PREFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,40}\Z")


class Sink(ABC):
    """One connection to the sink database and babelq's tables in it."""

    #: how long :meth:`through_outages` keeps trying before the outage is raised
    outage_seconds: float = DEFAULT_OUTAGE_SECONDS
    #: the driver's parameter placeholder
    mark: str = "?"
    #: the open DB-API connection, None while closed
    conn: Any = None

    def __init__(self, prefix: str) -> None:
        if prefix and not _PREFIX.match(prefix):  # empty: the tables' plain names
            raise ConfigurationError(
                f"sink prefix {prefix!r}: must start with a letter or _ and hold only letters, digits and _")
        self.t_ids = f"{prefix}processed_ids"
        self.t_outbox = f"{prefix}outbox"

    # -- what a database provides ---------------------------------------------------------
    @abstractmethod
    def connect(self) -> None:
        """(Re)open the connection and create babelq's tables; UnavailableError when unreachable."""

    @abstractmethod
    def transaction(self) -> Any:
        """A context manager giving the cursor of one write transaction (rolled back on any exception)."""

    @abstractmethod
    def savepoint(self) -> Any:
        """A context manager: a savepoint in the transaction, rolled back to on any exception."""

    @abstractmethod
    def is_outage(self, exc: BaseException) -> bool:
        """Whether ``exc`` (raised inside a transaction, by babelq or a handler) is the database
        being unavailable rather than a statement's fault."""

    def _claim_returning(self, cursor: Any, sql: str, rows: Sequence[Sequence[Any]]) -> set[str]:
        """Run ``sql`` (an INSERT that returns the key it claimed) once per row; the keys claimed.
        A row at a time: sqlite3's executemany has no RETURNING, and both drivers' ``execute``
        returns the cursor."""
        got: set[str] = set()
        for row in rows:
            found = cursor.execute(sql, tuple(row)).fetchone()
            if found is not None:
                got.add(str(found[0]))
        return got

    def close(self) -> None:
        conn = self.conn
        if conn is not None:
            conn.close()
            self.conn = None

    # -- what a handler writes through (a files sink overrides these) ------------------------
    def bind(self, tables: Mapping[str, Any], batch_id: int | None) -> None:
        """The pipeline's declared tables and the micro-batch this partition belongs to."""
        return

    def view(self, cursor: Any, ids: Sequence[str], *, per_message: bool) -> Any:
        """What a handler gets as ``tx`` for the messages ``ids`` (their ``meta.id``): the cursor."""
        return cursor

    def keep_rows(self, view: Any, done: set[str]) -> None:
        """After a batch handler: keep only the rows of the messages called done. A database
        cannot tell one row's writes from another's, so here nothing changes."""
        return

    def publish_committed(self) -> int:
        """After the commit: make what this sink committed visible to readers; how many units."""
        return 0

    def flush_committed(self) -> int:
        """Before and after a run: what a crash left committed but unpublished, published."""
        return 0

    def _ddl(self, integer: str, blob: str, keyed: str) -> list[str]:
        return [
            f"CREATE TABLE IF NOT EXISTS {self.t_ids} "
            f"(message_id TEXT PRIMARY KEY, processed_at {integer} NOT NULL){keyed}",
            f"CREATE TABLE IF NOT EXISTS {self.t_outbox} (dedupe_key TEXT PRIMARY KEY, queue TEXT NOT NULL, "
            f"body {blob} NOT NULL, delay_ms {integer} NOT NULL, created_at {integer} NOT NULL, "
            f"published_at {integer}){keyed}",
        ]

    # -- inside a transaction ---------------------------------------------------------------
    def claim_id(self, cursor: Any, message_id: str, at: int) -> bool:
        """Claim ``message_id`` as processed; False when it already was."""
        m = self.mark
        return bool(self._claim_returning(
            cursor, f"INSERT INTO {self.t_ids} (message_id, processed_at) VALUES ({m}, {m}) "
            "ON CONFLICT DO NOTHING RETURNING message_id", [(message_id, at)]))

    def claim_ids(self, cursor: Any, message_ids: Sequence[str], at: int) -> set[str]:
        """Claim ``message_ids`` (distinct) as processed, a few hundred per statement; the ones
        that were not already (a batch handler's rows)."""
        got: set[str] = set()
        m = self.mark
        for start in range(0, len(message_ids), 500):
            chunk = message_ids[start : start + 500]
            values = ", ".join([f"({m}, {m})"] * len(chunk))
            cursor.execute(f"INSERT INTO {self.t_ids} (message_id, processed_at) VALUES {values} "
                           "ON CONFLICT DO NOTHING RETURNING message_id",
                           [v for mid in chunk for v in (mid, at)])
            got.update(str(r[0]) for r in cursor.fetchall())
        return got

    def unclaim_ids(self, cursor: Any, message_ids: Sequence[str]) -> None:
        """Take back claims made in this transaction (the rows a batch handler did not call done)."""
        for start in range(0, len(message_ids), 500):
            chunk = list(message_ids[start : start + 500])
            marks = ", ".join([self.mark] * len(chunk))
            cursor.execute(f"DELETE FROM {self.t_ids} WHERE message_id IN ({marks})", chunk)

    def processed_in(self, cursor: Any, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` are processed, read in the transaction."""
        found: set[str] = set()
        for i in range(0, len(ids), 500):
            chunk = list(ids[i : i + 500])
            marks = ", ".join([self.mark] * len(chunk))
            cursor.execute(f"SELECT message_id FROM {self.t_ids} WHERE message_id IN ({marks})", chunk)
            found.update(str(r[0]) for r in cursor.fetchall())
        return found

    def claim_outbox(self, cursor: Any, rows: Sequence[Outbound], at: int) -> set[str]:
        """Insert the outbox rows whose key is new; returns those keys."""
        m = self.mark
        return self._claim_returning(
            cursor, f"INSERT INTO {self.t_outbox} (dedupe_key, queue, body, delay_ms, created_at) "
            f"VALUES ({m}, {m}, {m}, {m}, {m}) ON CONFLICT DO NOTHING RETURNING dedupe_key",
            [(o.key, o.queue, o.body, o.delay_ms, at) for o in rows])

    # -- outside a transaction --------------------------------------------------------------
    def through_outages(self, action: Callable[[], T]) -> T:
        """Run ``action`` through outages of the sink, reconnecting between attempts, under the
        commands' one outage policy bounded by :attr:`outage_seconds`."""
        return OutagePolicy(self.outage_seconds).wait_out(
            action, "sink", reconnect=self.connect, log=log,
            outage=lambda exc: isinstance(exc, UnavailableError))

    def processed(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` are processed (read before the partition's transaction)."""
        if not ids:
            return set()

        def read() -> set[str]:
            with self.transaction() as cursor:
                return self.processed_in(cursor, ids)

        return self.through_outages(read)

    def run_setup(self, hooks: Sequence[Callable[[Any], object]]) -> None:
        """Run the pipeline's setup hooks, each in a transaction of its own."""
        for hook in hooks:
            def once(hook: Callable[[Any], object] = hook) -> None:
                with self.transaction() as cursor:
                    hook(cursor)

            self.through_outages(once)

    def pending_outbox(self, limit: int = 10_000) -> list[Outbound]:
        """Outbox rows claimed but not yet marked published (a crash came in between)."""
        def read() -> list[tuple[Any, ...]]:
            with self.transaction() as cursor:
                cursor.execute(f"SELECT dedupe_key, queue, body, delay_ms FROM {self.t_outbox} "
                               f"WHERE published_at IS NULL ORDER BY created_at LIMIT {int(limit)}")
                return [tuple(r) for r in cursor.fetchall()]

        return [Outbound(str(k), str(q), bytes(b), int(d)) for k, q, b, d in self.through_outages(read)]

    def mark_published(self, keys: Sequence[str], *, at: int | None = None) -> None:
        when = at if at is not None else time.time_ns() // 1_000_000
        if not keys:
            return

        def mark() -> None:
            with self.transaction() as cursor:
                cursor.executemany(f"UPDATE {self.t_outbox} SET published_at = {self.mark} "
                                   f"WHERE dedupe_key = {self.mark}", [(when, k) for k in keys])

        self.through_outages(mark)

    def counts(self) -> tuple[int, int, int]:
        """(processed ids, outbox rows, of which unpublished)."""
        def read() -> tuple[int, int, int]:
            with self.transaction() as cursor:
                cursor.execute(f"SELECT COUNT(*) FROM {self.t_ids}")
                ids = int(cursor.fetchone()[0])
                cursor.execute(f"SELECT COUNT(*), COUNT(*) - COUNT(published_at) FROM {self.t_outbox}")
                total, pending = cursor.fetchone()
                return ids, int(total), int(pending or 0)

        return self.through_outages(read)


class SQLiteSink(Sink):
    """A sink in one SQLite file (every executor must reach it: local mode)."""

    def __init__(self, path: str, *, prefix: str = DEFAULT_PREFIX) -> None:
        super().__init__(prefix)
        self.path = path
        self.conn: sqlite3.Connection | None = None
        if not Path(path).parent.is_dir():
            raise ConfigurationError(f"sink: directory {Path(path).parent} does not exist")
        # every partition opens the sink at once: switching a new file to WAL can find it locked
        self.through_outages(self.connect)

    def connect(self) -> None:
        if self.conn is not None:
            with suppress(sqlite3.Error):
                self.conn.close()
            self.conn = None
        try:
            conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            for ddl in self._ddl("INTEGER", "BLOB", " WITHOUT ROWID"):
                conn.execute(ddl)
        except sqlite3.OperationalError as exc:
            if self.is_outage(exc):
                raise UnavailableError(f"sink {self.path}: {exc}") from exc
            raise ConfigurationError(
                f"sink {self.path}: cannot open it as an SQLite database: {exc}") from None
        except sqlite3.DatabaseError as exc:
            raise ConfigurationError(f"sink {self.path}: not an SQLite database ({exc})") from None
        self.conn = conn

    def is_outage(self, exc: BaseException) -> bool:
        if isinstance(exc, UnavailableError):
            return True
        text = str(exc)
        # a full disk is an outage too: space can come back, and the message is not at fault
        return isinstance(exc, sqlite3.OperationalError) and (
            "locked" in text or "busy" in text or "disk I/O" in text or "unable to open" in text
            or "disk is full" in text)

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Cursor]:
        if self.conn is None:
            raise UnavailableError(f"sink {self.path}: closed")
        conn = self.conn
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise UnavailableError(f"sink {self.path}: {exc}") from exc
        try:
            yield conn.cursor()
            conn.execute("COMMIT")
        except BaseException as exc:
            with suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            if self.is_outage(exc) and not isinstance(exc, UnavailableError):
                raise UnavailableError(f"sink {self.path}: {exc}") from exc
            raise

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        if self.conn is None:
            raise UnavailableError(f"sink {self.path}: closed")
        conn = self.conn
        conn.execute("SAVEPOINT babelq_message")
        try:
            yield
        except BaseException:
            conn.execute("ROLLBACK TO babelq_message")
            conn.execute("RELEASE babelq_message")
            raise
        conn.execute("RELEASE babelq_message")



class PostgresSink(Sink):
    """A sink in PostgreSQL (``postgresql://user@host/db``), shared by every executor of a cluster."""

    mark = "%s"

    def __init__(self, url: str, *, prefix: str = DEFAULT_PREFIX) -> None:
        super().__init__(prefix)
        self.url = url
        self.shown = redact(url)
        self.conn: Any = None
        self.connect()

    def _unavailable(self, exc: BaseException) -> UnavailableError:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return UnavailableError(f"sink {self.shown}: {redact_text(first)}")

    def connect(self) -> None:
        import psycopg

        if self.conn is not None:
            with suppress(psycopg.Error):
                self.conn.close()
            self.conn = None
        try:
            # autocommit: every transaction() block is a real transaction, nested ones savepoints
            conn = psycopg.connect(self.url, autocommit=True, connect_timeout=10)
        except psycopg.OperationalError as exc:
            raise self._unavailable(exc) from exc
        except psycopg.ProgrammingError as exc:  # a malformed URL or option
            raise ConfigurationError(f"sink {self.shown}: {redact_text(str(exc))}") from None
        try:
            with conn.transaction():
                # concurrent CREATE ... IF NOT EXISTS race on the catalog: one at a time
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"babelq-sink:{self.t_ids}",))
                for ddl in self._ddl("BIGINT", "BYTEA", ""):
                    conn.execute(ddl)
        except psycopg.OperationalError as exc:
            conn.close()
            raise self._unavailable(exc) from exc
        except psycopg.Error as exc:
            conn.close()
            raise ConfigurationError(f"sink {self.shown}: {redact_text(str(exc).strip())}") from None
        self.conn = conn

    def is_outage(self, exc: BaseException) -> bool:
        import psycopg

        # OperationalError covers lost connections, deadlocks and serialization failures
        return isinstance(exc, UnavailableError | psycopg.OperationalError | psycopg.InterfaceError)

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        if self.conn is None or self.conn.closed:
            self.connect()
        try:
            with self.conn.transaction(), self.conn.cursor() as cursor:
                yield cursor
        except UnavailableError:
            raise
        except BaseException as exc:
            if self.is_outage(exc):
                raise self._unavailable(exc) from exc
            raise

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        with self.conn.transaction():  # nested: a savepoint, rolled back to on any exception
            yield



def open_sql_sink(target: str | Path, *, prefix: str = DEFAULT_PREFIX) -> Sink:
    """An SQL sink from ``sqlite:///path`` (or a file path) or a ``postgresql://`` URL; a files sink
    is opened by :func:`babelq.pipelines.consume.sinks.open_sink`."""
    text = str(target)
    if is_postgres(text):
        return PostgresSink(text, prefix=prefix)
    try:
        path = ledger_path(text)
    except ConfigurationError:
        raise ConfigurationError(
            f"--sink: unsupported URL {redact(text)!r} (sqlite:///path.db, postgresql://... "
            "or parquet:///dir)") from None
    if not path:
        raise ConfigurationError(f"--sink: {redact(text)!r} names no file")
    return SQLiteSink(str(path), prefix=prefix)
