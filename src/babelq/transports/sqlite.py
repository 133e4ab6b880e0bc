"""An embedded, durable queue in one SQLite file (``sqlite:///path/queue.db``).

Why SQLite: it is the default broker that needs no server, survives process crashes and is
safe for several processes at once (Spark executors run separate Python workers that all open
the same file). WAL mode lets readers run beside the one writer; every claim takes the write
lock (``BEGIN IMMEDIATE``) so two workers never reserve the same row.

Two tables hold every queue: ``babelq_state`` has one small row per message (queue, due time,
lease, delivery count) and ``babelq_bodies`` its body and headers, so that leasing a row does
not rewrite its body; the view ``babelq_messages`` joins them back into one row per message
(what a person reads, and what a publish inserts into). A row is *ready* when
``available_at <= now``. Reserving a row sets a random ``lease`` token, bumps
``delivery_count`` and pushes ``available_at`` to the end of the visibility timeout, so the
same column serves three jobs: delayed delivery (a future
``available_at`` on publish), the reservation deadline, and crash recovery (a reservation
whose deadline passed is simply ready again; nothing has to sweep it). Settling (ack,
release, retry, dead-letter) is gated on ``(id, lease)``: a worker whose reservation expired
and was handed to someone else touches nothing.

Tagged reservations (:meth:`SQLiteTransport.reserve_tagged`): the ``lease`` token of every row
a tag takes is a number derived from the tag (negative, so it never equals a random token), and
table ``babelq_reads`` records that the tag was taken, in the claim's own transaction. Another
process that knows the tag renews, acks or releases "every row whose lease is the tag's" in one
statement (a partial index on ``lease`` finds them), and a second claim of the tag re-leases
those rows instead of taking new ones. A lapsed row keeps its token until someone else claims
it, so it is still the tag's until then.

Options (keyword arguments or URL query, ``sqlite:///tmp/q.db?visibility_timeout=5``):
``visibility_timeout`` (seconds, default 30), ``busy_timeout`` (seconds to wait for the write
lock, default 30), ``poll_interval`` (seconds between checks while ``reserve`` waits for
another process's publish, default 0.05; publishes from the same process wake it at once),
``synchronous`` (SQLite ``PRAGMA synchronous``: ``NORMAL`` survives process crashes,
``FULL`` also power loss; default ``NORMAL``), ``create`` (default true: a missing database file
is created; false: it is a ConfigurationError naming the path. Consumers open with false, see
:meth:`SQLiteTransport.holder_options`, so a mistyped path or a path relative to another
machine's working directory fails instead of reading a new, empty queue).

The file: its directory must exist (a mistyped path is refused, not silently given a new
directory tree), and a new database file is created owner-only (mode 0600 whatever the
umask), since message bodies carry personal data; SQLite gives its ``-wal`` and ``-shm``
files the database file's mode. An existing file keeps its mode (sharing it with a group is
the owner's decision). A path the operating system or SQLite refuses is a one-line
ConfigurationError at open naming the path and the reason.

Headers (``publish(..., headers=...)``, a W3C ``traceparent``) are kept as a JSON object in
column ``headers`` beside the body (NULL when there are none) and returned on
``Delivery.headers``; a retry or dead-letter keeps them.

Older databases. A database an older babelq made (one table ``babelq_messages`` with bodies and
state together, with or without ``headers``) is moved to the two tables when it is first
opened, in the schema transaction, keeping every row, its id and its lease (:func:`_migrate`).
Upgrade together every process that opens one file: an older babelq refuses to open a file in
the new layout ("views may not be indexed") and touches nothing in it.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import random
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from babelq.envelope import Envelope
from babelq.errors import ConfigurationError, UnavailableError
from babelq.transports.base import BaseTransport, Delivery, Outgoing, check_tag
from babelq.transports.url_options import TransportURL, URLOptions
from babelq.urls import sqlite_file

log = logging.getLogger(__name__)

T = TypeVar("T")

#: what a person or another tool reads: one row per message, its body and its delivery state
#: (a view over :data:`STATE` and :data:`BODIES`; inserting into it stores both)
MESSAGES = "babelq_messages"
#: the delivery state of every message: queue, due time, lease, delivery count (no body)
STATE = "babelq_state"
#: the body and carried headers of every message, by the id of its :data:`STATE` row
BODIES = "babelq_bodies"
#: one row per tag that was taken (reserve_tagged): a tag is claimed once
READS = "babelq_reads"

# Why two tables. A claim, a renewal and a release change a message's lease and due time only,
# but SQLite rewrites a whole row to change one column: with the body in the same row, leasing
# a batch would rewrite every body into the write-ahead log while every other slot waits for the
# write lock. The state rows are a few dozen bytes, so a lease change rewrites little. A body
# is written when the message is stored, replaced by a retry, and deleted with its state row
# (trigger below).
_SCHEMA = (
    f"""CREATE TABLE IF NOT EXISTS {STATE} (
        id INTEGER PRIMARY KEY,
        queue TEXT NOT NULL,
        available_at INTEGER NOT NULL,  -- epoch ms: due time, or reservation deadline when leased
        lease INTEGER,                  -- token of the current reservation, NULL when waiting
        delivery_count INTEGER NOT NULL DEFAULT 0,
        created_at INTEGER NOT NULL     -- epoch ms the body was stored
    )""",
    f"""CREATE TABLE IF NOT EXISTS {BODIES} (
        id INTEGER PRIMARY KEY,         -- the id of the message's {STATE} row
        body BLOB NOT NULL,
        headers TEXT                    -- JSON object of native headers, NULL when none
    )""",
    f"CREATE INDEX IF NOT EXISTS {STATE}_next ON {STATE} (queue, available_at, id)",
    # rows held under a tag are found by their lease; waiting rows (NULL) are not indexed
    f"CREATE INDEX IF NOT EXISTS {STATE}_lease ON {STATE} (lease) WHERE lease IS NOT NULL",
    f"""CREATE VIEW IF NOT EXISTS {MESSAGES} AS
        SELECT s.id AS id, s.queue AS queue, b.body AS body, s.available_at AS available_at,
               s.lease AS lease, s.delivery_count AS delivery_count, s.created_at AS created_at,
               b.headers AS headers
        FROM {STATE} AS s JOIN {BODIES} AS b ON b.id = s.id""",
    # storing a message is one INSERT (executemany-able): the state row, then its body under the
    # id SQLite just gave it (last_insert_rowid() is the trigger's own insert while it runs)
    f"""CREATE TRIGGER IF NOT EXISTS {MESSAGES}_insert INSTEAD OF INSERT ON {MESSAGES} BEGIN
        INSERT INTO {STATE} (queue, available_at, created_at)
            VALUES (NEW.queue, NEW.available_at, NEW.created_at);
        INSERT INTO {BODIES} (id, body, headers) VALUES (last_insert_rowid(), NEW.body, NEW.headers);
    END""",
    # every way a message goes (ack, dead-letter, purge, a tag's ack) deletes its state row
    f"""CREATE TRIGGER IF NOT EXISTS {STATE}_delete AFTER DELETE ON {STATE} BEGIN
        DELETE FROM {BODIES} WHERE id = OLD.id;
    END""",
    f"""CREATE TABLE IF NOT EXISTS {READS} (
        tag INTEGER PRIMARY KEY,        -- the lease token of the tag's rows
        queue TEXT NOT NULL,
        taken_at INTEGER NOT NULL       -- epoch ms of the tag's claim
    )""",
)

#: the columns of a reserved row, as :meth:`SQLiteTransport._held` reads them
_ROW = "id, body, delivery_count, created_at, headers"
#: lease up to N due rows (oldest first) under one token
_CLAIM_ROWS = f"""
UPDATE {STATE} SET lease = ?, available_at = ?, delivery_count = delivery_count + 1
WHERE id IN (
    SELECT id FROM {STATE} WHERE queue = ? AND available_at <= ? ORDER BY available_at, id LIMIT ?
)
"""
_INSERT = f"INSERT INTO {MESSAGES} (queue, body, available_at, created_at, headers) VALUES (?, ?, ?, ?, ?)"
_DELETE_LEASED = f"DELETE FROM {STATE} WHERE id = ? AND lease = ?"
_RELEASE = f"UPDATE {STATE} SET lease = NULL, available_at = ? WHERE id = ? AND lease = ?"
_RENEW = f"UPDATE {STATE} SET available_at = ? WHERE id = ? AND lease = ?"
_REPLACE_STATE = (
    f"UPDATE {STATE} SET lease = NULL, available_at = ?, delivery_count = 0, created_at = ? "
    "WHERE id = ? AND lease = ?"
)
_REPLACE_BODY = f"UPDATE {BODIES} SET body = ? WHERE id = ?"
_NEXT_DUE = f"SELECT min(available_at) FROM {STATE} WHERE queue = ?"
_SIZE = f"SELECT count(*) FROM {STATE} WHERE queue = ? AND (lease IS NULL OR available_at <= ?)"
_READY = f"SELECT count(*) FROM {STATE} WHERE queue = ? AND available_at <= ?"
_RESERVED = f"SELECT count(*) FROM {STATE} WHERE queue = ? AND lease IS NOT NULL AND available_at > ?"
_PURGE = f"DELETE FROM {STATE} WHERE queue = ?"
_READ_TAKEN = f"SELECT queue FROM {READS} WHERE tag = ?"
_READ_RECORD = f"INSERT INTO {READS} (tag, queue, taken_at) VALUES (?, ?, ?)"
_TAG_RELEASE = f"UPDATE {STATE} SET lease = NULL, available_at = ? WHERE lease = ? AND queue = ?"
_TAG_RENEW = f"UPDATE {STATE} SET available_at = ? WHERE lease = ? AND queue = ?"
#: the rows one lease token holds: read after the claim (:data:`_CLAIM_ROWS`) commits, outside the
#: write lock (nothing can take a leased row from its holder before the lease lapses)
_HELD = f"SELECT {_ROW} FROM {MESSAGES} WHERE lease = ? AND queue = ?"
_TAG_DELETE = f"DELETE FROM {STATE} WHERE lease = ? AND queue = ?"
_TAG_FORGET = f"DELETE FROM {READS} WHERE tag = ?"
# tags of runs that died: forgotten once old and holding nothing (the row may go: no claim can
# ever reuse a forgotten tag's rows, they have none)
_READS_EXPIRE = (
    f"DELETE FROM {READS} WHERE taken_at < ? AND NOT EXISTS (SELECT 1 FROM {STATE} WHERE lease = {READS}.tag)"
)
#: waiting rows (not leased) of a queue after an id, oldest id first: what an expiry scan reads.
#: ``+s.queue`` keeps SQLite off the queue index, so it walks the ids up from the cursor and stops
#: at the limit, instead of reading and sorting the whole queue for every page.
_WAITING = (
    f"SELECT s.id, b.body, s.delivery_count, s.created_at, b.headers FROM {STATE} AS s "
    f"JOIN {BODIES} AS b ON b.id = s.id "
    "WHERE s.id > ? AND +s.queue = ? AND s.lease IS NULL ORDER BY s.id LIMIT ?"
)
#: remove a row only while it waits with the body that was read (not leased, not retried since)
_DELETE_WAITING = (
    f"DELETE FROM {STATE} WHERE id = ? AND queue = ? AND lease IS NULL "
    f"AND (SELECT body FROM {BODIES} WHERE id = ?) = ?"
)
#: how long a tag's record outlives its claim when nobody settles it (its rows lapse long before)
TAG_RECORD_MS = 86_400_000

_SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")

#: mode of a database file this transport creates: owner read/write only
FILE_MODE = 0o600


def _headers_column(headers: Mapping[str, str] | None) -> str | None:
    """What column ``headers`` stores: compact JSON of the non-blank string pairs, or NULL."""
    clean = {str(k): str(v) for k, v in (headers or {}).items() if k and v is not None and v != ""}
    return json.dumps(clean, ensure_ascii=False, separators=(",", ":")) if clean else None


def _headers_of(stored: str | None) -> dict[str, str]:
    """The headers a row carries (a value that is not a JSON object of strings reads as none)."""
    if not stored:
        return {}
    try:
        doc = json.loads(stored)
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in doc.items()} if isinstance(doc, dict) else {}


def _one_table_layout(conn: sqlite3.Connection) -> bool:
    """Whether the database is in the layout babelq used before :data:`STATE` and :data:`BODIES`:
    one table :data:`MESSAGES` holding bodies and delivery state together."""
    row = conn.execute("SELECT type FROM sqlite_master WHERE name = ?", (MESSAGES,)).fetchone()
    return row is not None and row[0] == "table"


def _migrate(conn: sqlite3.Connection) -> None:
    """Bring a database made by an older babelq up to today's layout (inside the schema
    transaction, so two processes opening it at once migrate it once).

    The one-table layout is split: every row keeps its id, queue, due time, lease and delivery
    count (a reservation taken before the upgrade can still be settled after it) and its body and
    headers move to :data:`BODIES`. The oldest databases had no ``headers`` column: their rows
    carry none. An older babelq refuses to open the file afterwards (it tries to index the view)."""
    if not _one_table_layout(conn):
        return
    columns = {row[1] for row in conn.execute(f"PRAGMA table_info({MESSAGES})")}
    headers = "headers" if "headers" in columns else "NULL"
    old = f"{MESSAGES}_one_table"
    conn.execute(f"ALTER TABLE {MESSAGES} RENAME TO {old}")
    for statement in _SCHEMA:
        conn.execute(statement)
    conn.execute(
        f"INSERT INTO {STATE} (id, queue, available_at, lease, delivery_count, created_at) "
        f"SELECT id, queue, available_at, lease, delivery_count, created_at FROM {old}"
    )
    conn.execute(f"INSERT INTO {BODIES} (id, body, headers) SELECT id, body, {headers} FROM {old}")
    conn.execute(f"DROP TABLE {old}")
    log.info("sqlite: moved the database to the two-table layout (%s and %s)", STATE, BODIES)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def _prepare_file(path: str) -> None:
    """Check ``path``'s directory, and create the file owner-only when it does not exist yet.

    Why not leave it to SQLite: its "unable to open database file" names neither the path nor
    the cause, and it creates files with mode 0644 less the umask. Creating with ``os.open``
    (``O_EXCL``) gives the operating system's own reason (``No such file or directory``,
    ``Permission denied``) and lets a new file be made 0600 (chmod too, so even a umask that
    removes owner bits cannot weaken or break it); an empty file is a valid new database.

    An existing file is checked with ``stat`` and ``access`` and never opened here: closing any
    descriptor of the file drops every POSIX lock this process holds on it, including those of
    its open SQLite connections. Another process would then take itself for the file's last
    user, fold the write-ahead log into the file and delete it under our connections.
    """
    parent = os.path.dirname(path) or "."
    if not os.path.isdir(parent):
        problem = "is not a directory" if os.path.exists(parent) else "does not exist"
        raise ConfigurationError(
            f"path: directory {parent!r} of the sqlite database {path!r} {problem}; "
            "create it first (babelq does not create directories)"
        )
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        _check_usable(path)
        return
    except OSError as exc:
        raise _unusable(path, exc.strerror or str(exc)) from exc
    try:
        os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)


def _check_usable(path: str) -> None:
    """An existing database path must be a file this process may read and write."""
    if os.path.isdir(path):
        raise _unusable(path, os.strerror(errno.EISDIR))
    if not os.access(path, os.R_OK | os.W_OK):
        raise _unusable(path, os.strerror(errno.EACCES))


def _check_exists(path: str) -> None:
    """A consumer's open (``create=False``): the database must already exist."""
    if not os.path.exists(path):
        raise ConfigurationError(
            f"path: no sqlite queue database at {path!r}; a consumer does not create one "
            "(check the path: is it absolute and on a disk every process shares? publish to it first)"
        )


def tag_lease(tag: str) -> int:
    """The lease token of the rows a tag holds: 60 bits of the tag, negated, so no random token
    (``secrets.randbits(62)``, never negative) is ever equal to it."""
    return -(int(check_tag(tag)[:15], 16) + 1)


def _unusable(path: str, reason: str) -> ConfigurationError:
    return ConfigurationError(f"path: cannot open the sqlite database {path!r}: {' '.join(reason.split())}")


@dataclass(frozen=True, slots=True)
class SQLiteOptions(URLOptions):
    """The options of ``sqlite://`` (query or keywords; the module docstring says why each)."""

    transport: ClassVar[str] = "sqlite"

    visibility_timeout: float = 30.0
    """Seconds a reservation is held before it is handed out again."""
    busy_timeout: float = 30.0
    """Seconds to wait for another process's write lock."""
    poll_interval: float = 0.05
    """Seconds between looks for other processes' publishes while ``reserve`` waits."""
    synchronous: str = "NORMAL"
    """SQLite's ``PRAGMA synchronous`` (any case; the constructor checks the name)."""
    create: bool = True
    """Create a missing database file (publishers) or refuse it (consumers)."""


@dataclass(frozen=True, slots=True)
class _Receipt:
    """The settle handle of one reserved row."""

    row_id: int
    lease: int


@dataclass(frozen=True, slots=True)
class _Waiting:
    """A waiting row as a scan read it (not a reservation: only a waiting move takes it)."""

    row_id: int


class _Wakeups:
    """Per database file, a condition that same-process publishers signal after each commit."""

    _lock: ClassVar[threading.Lock] = threading.Lock()
    _by_path: ClassVar[dict[str, threading.Condition]] = {}

    @classmethod
    def for_path(cls, path: str) -> threading.Condition:
        with cls._lock:
            cond = cls._by_path.get(path)
            if cond is None:
                cond = cls._by_path[path] = threading.Condition()
            return cond


def _reopen(path: str, options: dict[str, Any]) -> SQLiteTransport:
    return SQLiteTransport(path, **options)


class SQLiteTransport(BaseTransport):
    """Queues in one SQLite file; one connection per thread (and per process after a fork)."""

    scheme = "sqlite"
    tagged_reservations = True
    scan_refusal = ""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        visibility_timeout: float = 30.0,
        busy_timeout: float = 30.0,
        poll_interval: float = 0.05,
        synchronous: str = "NORMAL",
        create: bool = True,
    ) -> None:
        self.path = os.fspath(path)
        if not self.path or self.path == ":memory:":
            raise ConfigurationError("path: the sqlite transport needs a file path (sqlite:///path/queue.db)")
        if visibility_timeout <= 0:
            raise ConfigurationError(f"visibility_timeout: must be > 0 seconds, got {visibility_timeout!r}")
        if busy_timeout < 0 or poll_interval <= 0:
            raise ConfigurationError("busy_timeout/poll_interval: must be positive numbers of seconds")
        if synchronous.upper() not in _SYNCHRONOUS:
            raise ConfigurationError(f"synchronous: one of {', '.join(_SYNCHRONOUS)}, got {synchronous!r}")
        self.visibility_timeout = float(visibility_timeout)
        self.busy_timeout = float(busy_timeout)
        self.poll_interval = float(poll_interval)
        self.synchronous = synchronous.upper()
        self.create = bool(create)
        self._local = threading.local()
        self._connections: list[tuple[sqlite3.Connection, int]] = []  # (connection, owner pid)
        self._connections_lock = threading.Lock()
        self._closed = False
        # "~" is expanded for opening only: self.path stays as given (it is what pickles).
        self._file = os.path.expanduser(self.path)
        if not self.create:
            _check_exists(self._file)
        _prepare_file(self._file)
        self._wakeup = _Wakeups.for_path(os.path.abspath(self._file))
        try:
            self._conn()  # the schema now, so a file that is not a database fails here
        except UnavailableError:
            self.close()
            raise
        except sqlite3.Error as exc:
            self.close()
            if isinstance(exc, sqlite3.OperationalError) and _is_busy(exc):
                # another process held the write lock past busy_timeout: not the path's fault
                raise UnavailableError(
                    f"sqlite database {self._file!r} stayed locked for {self.busy_timeout:g} s at open: {exc}"
                ) from exc
            raise _unusable(self._file, str(exc)) from exc

    # -- construction -------------------------------------------------------------------

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SQLiteTransport:
        """``sqlite:///abs/path.db`` (three slashes: absolute), ``sqlite://rel/path.db`` (relative)."""
        link = TransportURL.split(url)
        parsed = SQLiteOptions.parse(link, options)
        return cls(sqlite_file(url.split("?", 1)[0], "url"), **parsed.values())

    def _options(self) -> dict[str, Any]:
        return {
            "visibility_timeout": self.visibility_timeout,
            "busy_timeout": self.busy_timeout,
            "poll_interval": self.poll_interval,
            "synchronous": self.synchronous,
            "create": self.create,
        }

    @classmethod
    def holder_options(cls, *, max_held: int, visibility_timeout: float, snapshot: bool) -> dict[str, Any]:
        """The lease, and ``create=False``: a consumer never makes an empty queue database."""
        return {"visibility_timeout": visibility_timeout, "create": False}

    def __reduce__(self) -> tuple[Any, ...]:
        # Shipped to Spark executors by value: the copy opens its own connections.
        return (_reopen, (self.path, self._options()))

    # -- connections ----------------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        if self._closed:
            raise ConfigurationError("sqlite transport: used after close()")
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        pid = os.getpid()
        if conn is not None and getattr(self._local, "pid", None) == pid:
            return conn
        # First use in this thread, or a forked child that inherited the parent's handle (an
        # SQLite connection must never cross a fork: we leave the inherited one untouched).
        conn = sqlite3.connect(
            self._file, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False
        )
        try:
            self._retry_busy(lambda: self._setup(conn))
        except BaseException:
            conn.close()
            raise
        self._local.conn = conn
        self._local.pid = pid
        with self._connections_lock:
            self._connections.append((conn, pid))
        return conn

    def _setup(self, conn: sqlite3.Connection) -> None:
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        if str(mode).lower() != "wal":
            conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {self.synchronous}")
        with self._transaction(conn):
            _migrate(conn)
            for statement in _SCHEMA:
                conn.execute(statement)

    @staticmethod
    @contextmanager
    def _transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _retry_busy(self, work: Callable[[], T]) -> T:
        """Run ``work``, retrying while another process holds the write lock past busy_timeout."""
        give_up = time.monotonic() + max(self.busy_timeout, 1.0)
        pause = 0.005
        while True:
            try:
                return work()
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc):
                    raise
                if time.monotonic() >= give_up:  # another process's lock: an outage to wait out
                    raise UnavailableError(
                        f"sqlite database {self._file!r} stayed locked for {self.busy_timeout:g} s: {exc}"
                    ) from exc
                log.debug("sqlite %s busy, retrying: %s", self.path, exc)
                time.sleep(pause * (0.5 + random.random()))
                pause = min(pause * 2, 0.2)

    def _write(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work`` in one ``BEGIN IMMEDIATE`` transaction (retried as a whole when busy)."""
        conn = self._conn()

        def attempt() -> T:
            with self._transaction(conn):
                return work(conn)

        return self._retry_busy(attempt)

    def _notify(self) -> None:
        with self._wakeup:
            self._wakeup.notify_all()

    # -- publish -------------------------------------------------------------------------

    def publish(
        self,
        queue: str,
        body: bytes,
        *,
        envelope: Envelope | None = None,
        delay_ms: int = 0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        now = _now_ms()
        row = (queue, bytes(body), now + max(int(delay_ms), 0), now, _headers_column(headers))
        self._write(lambda conn: conn.execute(_INSERT, row))
        self._notify()

    def publish_many(self, queue: str, messages: Sequence[Outgoing]) -> None:
        if not messages:
            return
        now = _now_ms()
        rows = [(queue, bytes(m.body), now + max(int(m.delay_ms), 0), now, None) for m in messages]
        self._write(lambda conn: conn.executemany(_INSERT, rows))
        self._notify()

    # -- reserve -------------------------------------------------------------------------

    def _claim(self, queue: str, max_messages: int) -> list[Delivery]:
        lease = secrets.randbits(62)

        def claim(conn: sqlite3.Connection) -> int:
            now = _now_ms()
            until = now + int(self.visibility_timeout * 1000)
            claimed: int = conn.execute(_CLAIM_ROWS, (lease, until, queue, now, max_messages)).rowcount
            return claimed

        if not self._write(claim):
            return []
        return self._held(queue, lease)

    def _next_due(self, queue: str) -> int | None:
        conn = self._conn()
        due = self._retry_busy(lambda: conn.execute(_NEXT_DUE, (queue,)).fetchone()[0])
        return None if due is None else int(due)

    def reserve(self, queue: str, *, max_messages: int = 1, timeout: float = 0.0) -> list[Delivery]:
        if max_messages < 1:
            raise ValueError(f"max_messages: must be >= 1, got {max_messages}")
        end = time.monotonic() + max(timeout, 0.0)
        while True:
            due = self._next_due(queue)  # a cheap read: only take the write lock when worth it
            now = _now_ms()
            if due is not None and due <= now:
                got = self._claim(queue, max_messages)
                if got:
                    return got
                continue  # another worker took them; look again
            remaining = end - time.monotonic()
            if remaining <= 0:
                return []
            wait = min(remaining, self.poll_interval)
            if due is not None:
                wait = min(wait, max((due - now) / 1000, 0.001))
            with self._wakeup:
                self._wakeup.wait(wait)

    # -- settle --------------------------------------------------------------------------

    @staticmethod
    def _receipt(delivery: Delivery) -> _Receipt:
        receipt = delivery.receipt
        if not isinstance(receipt, _Receipt):
            raise ValueError(f"not a reservation of the sqlite transport: {receipt!r}")
        return receipt

    def _lost(self, delivery: Delivery, action: str) -> None:
        log.warning(
            "sqlite %s: %s of a reservation on %r that expired and was taken again "
            "(visibility_timeout=%ss); the message will be delivered again",
            self.path,
            action,
            delivery.queue,
            self.visibility_timeout,
        )

    def ack(self, delivery: Delivery) -> None:
        r = self._receipt(delivery)
        deleted = self._write(lambda conn: conn.execute(_DELETE_LEASED, (r.row_id, r.lease)).rowcount)
        if deleted != 1:
            self._lost(delivery, "ack")

    def _settle_many(self, verb: str, sql: str, keys: Sequence[tuple[int, ...]]) -> None:
        """Run ``sql`` for every reservation in one transaction; say so if some had lapsed."""
        changed = self._write(lambda conn: conn.executemany(sql, keys).rowcount)
        if changed != len(keys):
            log.warning(
                "sqlite %s: %s settled %d of %d reservations; the others expired and will be "
                "delivered again (visibility_timeout=%ss)",
                self.path,
                verb,
                changed,
                len(keys),
                self.visibility_timeout,
            )

    def ack_many(self, deliveries: Sequence[Delivery]) -> None:
        if not deliveries:
            return
        keys = [(r.row_id, r.lease) for r in map(self._receipt, deliveries)]
        self._settle_many("ack_many", _DELETE_LEASED, keys)

    def release(self, delivery: Delivery, *, delay_ms: int = 0) -> None:
        r = self._receipt(delivery)
        due = _now_ms() + max(int(delay_ms), 0)
        changed = self._write(lambda conn: conn.execute(_RELEASE, (due, r.row_id, r.lease)).rowcount)
        if changed != 1:
            self._lost(delivery, "release")
        self._notify()

    def release_many(self, deliveries: Sequence[Delivery]) -> None:
        """Put every reservation back at once (one transaction), ready now."""
        if not deliveries:
            return
        due = _now_ms()
        keys = [(due, r.row_id, r.lease) for r in map(self._receipt, deliveries)]
        self._settle_many("release_many", _RELEASE, keys)
        self._notify()

    def renew_many(self, deliveries: Sequence[Delivery]) -> int:
        """One transaction; a row still carrying our lease token is ours, even past its deadline
        (a claim would have replaced the token)."""
        if not deliveries:
            return 0
        until = _now_ms() + int(self.visibility_timeout * 1000)
        keys = [(until, r.row_id, r.lease) for r in map(self._receipt, deliveries)]
        renewed: int = self._write(lambda conn: conn.executemany(_RENEW, keys).rowcount)
        return renewed

    def retry(self, delivery: Delivery, body: bytes, *, delay_ms: int) -> None:
        r = self._receipt(delivery)
        now = _now_ms()
        state = (now + max(int(delay_ms), 0), now, r.row_id, r.lease)

        def replace(conn: sqlite3.Connection) -> bool:
            if conn.execute(_REPLACE_STATE, state).rowcount != 1:
                return False
            conn.execute(_REPLACE_BODY, (bytes(body), r.row_id))
            return True

        if not self._write(replace):
            self._lost(delivery, "retry")
        self._notify()

    def dead_letter(self, delivery: Delivery, body: bytes, *, dlq: str) -> None:
        r = self._receipt(delivery)
        now = _now_ms()

        def move(conn: sqlite3.Connection) -> bool:
            if conn.execute(_DELETE_LEASED, (r.row_id, r.lease)).rowcount != 1:
                return False
            conn.execute(_INSERT, (dlq, bytes(body), now, now, _headers_column(delivery.headers)))
            return True

        if not self._write(move):
            self._lost(delivery, "dead_letter")
        self._notify()

    # -- tagged reservations -----------------------------------------------------------------

    def _held(self, queue: str, lease: int) -> list[Delivery]:
        """The rows ``lease`` holds on ``queue``, oldest first, as deliveries."""
        conn = self._conn()
        rows: list[Any] = self._retry_busy(lambda: conn.execute(_HELD, (lease, queue)).fetchall())
        rows.sort(key=lambda row: row[0])
        return [
            Delivery(body=row[1], queue=queue, receipt=_Receipt(row[0], lease), delivery_count=row[2],
                     stored_at=row[3], headers=(carried := _headers_of(row[4])), carried_headers=carried)
            for row in rows
        ]  # fmt: skip

    def reserve_tagged(self, queue: str, tag: str, *, max_messages: int) -> list[Delivery]:
        """One ``BEGIN IMMEDIATE`` transaction: either the tag was taken (re-lease its rows) or
        claim up to ``max_messages`` rows with the tag's token and record the tag."""
        lease = tag_lease(tag)
        if max_messages < 1:
            raise ValueError(f"max_messages: must be >= 1, got {max_messages}")

        def claim(conn: sqlite3.Connection) -> None:
            now = _now_ms()
            until = now + int(self.visibility_timeout * 1000)
            taken = conn.execute(_READ_TAKEN, (lease,)).fetchone()
            if taken is not None:
                if taken[0] != queue:
                    raise ValueError(f"tag {tag!r} was taken on queue {taken[0]!r}, not {queue!r}")
                conn.execute(_TAG_RENEW, (until, lease, queue))
                return
            conn.execute(_CLAIM_ROWS, (lease, until, queue, now, max_messages))
            conn.execute(_READ_RECORD, (lease, queue, now))

        # the bodies are read after the commit, outside the write lock: the claim holds the lock
        # for the rows' updates only (the other slots' tasks claim meanwhile), and nothing can
        # take a leased row from the tag before its lease lapses
        self._write(claim)
        return self._held(queue, lease)

    def _by_tags(
        self, queue: str, tags: Sequence[str], sql: str, first: tuple[Any, ...], *, forget: bool
    ) -> int:
        keys = [(*first, tag_lease(tag), queue) for tag in tags]
        if not keys:
            return 0

        def run(conn: sqlite3.Connection) -> int:
            changed = sum(conn.execute(sql, key).rowcount for key in keys)
            if forget:
                conn.executemany(_TAG_FORGET, [(key[-2],) for key in keys])
                conn.execute(_READS_EXPIRE, (_now_ms() - TAG_RECORD_MS,))
            return changed

        return self._write(run)

    def renew_tagged(self, queue: str, tags: Sequence[str]) -> int:
        until = _now_ms() + int(self.visibility_timeout * 1000)
        return self._by_tags(queue, tags, _TAG_RENEW, (until,), forget=False)

    def ack_tagged(self, queue: str, tags: Sequence[str]) -> int:
        return self._by_tags(queue, tags, _TAG_DELETE, (), forget=True)

    def release_tagged(self, queue: str, tags: Sequence[str]) -> int:
        released = self._by_tags(queue, tags, _TAG_RELEASE, (_now_ms(),), forget=True)
        self._notify()
        return released

    # -- waiting scans (babelq expire) ---------------------------------------------------------

    def scan_waiting(self, queue: str, *, after: Any = None, limit: int = 500) -> tuple[list[Delivery], Any]:
        """Rows without a lease (ready or delayed), by id; the cursor is the last id read. A lapsed
        reservation still has its holder's lease and is left to it (the holder may be running it)."""
        if limit < 1:
            raise ValueError(f"limit: must be >= 1, got {limit}")
        start = int(after) if after is not None else 0
        conn = self._conn()
        rows: list[Any] = self._retry_busy(lambda: conn.execute(_WAITING, (start, queue, limit)).fetchall())
        page = [
            Delivery(body=row[1], queue=queue, receipt=_Waiting(row[0]), delivery_count=row[2],
                     stored_at=row[3], headers=(carried := _headers_of(row[4])), carried_headers=carried)
            for row in rows
        ]  # fmt: skip
        return page, (rows[-1][0] if len(rows) == limit else None)

    def dead_letter_waiting(self, moves: Sequence[tuple[Delivery, bytes]], *, dlq: str) -> int:
        """One transaction: each row is deleted only while it still waits with the body read, and
        its record inserted on ``dlq`` beside it, so a claim sees either the row or neither."""
        if not moves:
            return 0
        now = _now_ms()
        rows = []
        for delivery, record in moves:
            waiting = delivery.receipt
            if not isinstance(waiting, _Waiting):
                raise ValueError(f"not a waiting row of the sqlite transport: {waiting!r}")
            rows.append((waiting.row_id, delivery.queue, bytes(delivery.body), bytes(record),
                         _headers_column(delivery.headers)))  # fmt: skip

        def move(conn: sqlite3.Connection) -> int:
            moved = 0
            for row_id, queue, body, record, headers in rows:
                if conn.execute(_DELETE_WAITING, (row_id, queue, row_id, body)).rowcount == 1:
                    conn.execute(_INSERT, (dlq, record, now, now, headers))
                    moved += 1
            return moved

        moved = self._write(move)
        if moved:
            self._notify()
        return moved

    # -- inspection ----------------------------------------------------------------------

    def size(self, queue: str) -> int:
        conn = self._conn()
        count = self._retry_busy(lambda: conn.execute(_SIZE, (queue, _now_ms())).fetchone()[0])
        return int(count)

    def ready(self, queue: str) -> int:
        """Rows due now: waiting ones and lapsed reservations (not delayed ones)."""
        conn = self._conn()
        count = self._retry_busy(lambda: conn.execute(_READY, (queue, _now_ms())).fetchone()[0])
        return int(count)

    def reserved(self, queue: str) -> int:
        conn = self._conn()
        count = self._retry_busy(lambda: conn.execute(_RESERVED, (queue, _now_ms())).fetchone()[0])
        return int(count)

    def purge(self, queue: str) -> None:
        self._write(lambda conn: conn.execute(_PURGE, (queue,)))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._connections_lock:
            connections, self._connections = self._connections, []
        pid = os.getpid()
        for conn, owner in connections:
            if owner != pid:
                continue  # inherited across a fork: the parent still owns it
            try:
                conn.close()
            except sqlite3.Error as exc:  # pragma: no cover - closing is best effort
                log.debug("sqlite %s: close failed: %s", self.path, exc)
