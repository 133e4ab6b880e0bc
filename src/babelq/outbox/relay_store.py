"""The outbox table as the relay sees it: claim pending rows, then mark them published or failed.

Two ways to claim, because the two databases offer different things:

* **PostgreSQL** (:class:`PostgresRelayStore`): ``SELECT ... FOR UPDATE SKIP LOCKED`` inside a
  transaction that stays open while the relay publishes, and the marks commit in the same
  transaction. Several relays share one table: each locks rows the others skip, so no row is
  ever published by two relays at once. A relay that dies (SIGKILL, lost connection) has its
  transaction rolled back by the server, and its rows are pending again at once.
* **SQLite** (:class:`SQLiteRelayStore`): a write transaction cannot stay open during a publish
  without blocking every producer, so a claim is a *lease*: ``lease_owner``/``lease_until`` set
  in a short ``BEGIN IMMEDIATE`` transaction. A relay killed between publish and mark leaves its
  rows leased until the deadline; then any relay takes them again. Meant for one relay (or a
  few on one machine, which the lease keeps apart as long as a batch publishes within it).

Either way a crash between the broker accepting a row and the mark publishes that row again:
at-least-once, which the consumer's idempotency (:mod:`babelq.idempotency`, keyed on
``meta.id``) turns into one effect.

Database failures (unreachable, locked past the busy timeout) are
:class:`~babelq.errors.UnavailableError`: the relay backs off and reconnects.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, TypeVar

from babelq.envelope import now_ms
from babelq.errors import UnavailableError
from babelq.outbox.schema import DEFAULT_TABLE, FAILED, PENDING, PUBLISHED, STATUSES, check_table
from babelq.outbox.target import close_quietly, connect, dialect_of_url, sqlite_path
from babelq.urls import one_line, redact

T = TypeVar("T")

#: longest error text kept in ``last_error``
MAX_ERROR = 1000


@dataclass(frozen=True, slots=True)
class Row:
    """One claimed outbox row."""

    id: int
    queue: str
    body: bytes
    headers: dict[str, str] | None
    deliver_at: int
    attempts: int


@dataclass(slots=True)
class Claim:
    """Rows one relay holds until :meth:`RelayStore.finish` (in id order)."""

    rows: list[Row] = field(default_factory=list)
    owner: str = ""


def _row(values: Sequence[Any]) -> Row:
    headers = json.loads(values[3]) if values[3] else None
    return Row(int(values[0]), str(values[1]), bytes(values[2]), headers, int(values[4]), int(values[5]))


_CLAIM_COLUMNS = "id, queue, body, headers, deliver_at, attempts"


class RelayStore(ABC):
    """Claiming and marking outbox rows (see the module docstring)."""

    def __init__(self, url: str, table: str) -> None:
        self.url = url
        self.shown = redact(url)
        self.table = check_table(table)
        self.conn: Any = None

    @abstractmethod
    def claim(self, limit: int) -> Claim:
        """Up to ``limit`` pending rows, oldest first, held by this store until :meth:`finish`."""

    @abstractmethod
    def finish(self, claim: Claim, published: Sequence[int], failed: Sequence[tuple[int, str]]) -> None:
        """Mark ``published`` ids published, ``failed`` (id, error) failed, and give the rest of the
        claim back as pending (nothing else about them changes)."""

    @abstractmethod
    def abandon(self, claim: Claim) -> None:
        """Give every row of ``claim`` back unchanged (best effort: a lost connection does it too)."""

    @abstractmethod
    def _run(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """One statement in its own transaction; returns its rows."""

    @abstractmethod
    def _mark(self) -> str:
        """The parameter placeholder."""

    def counts(self) -> dict[str, int]:
        """Rows per status (``pending``, ``published``, ``failed``), zeros included."""
        found = dict(self._run(f"SELECT status, COUNT(*) FROM {self.table} GROUP BY status"))
        return {status: int(found.get(status, 0)) for status in STATUSES}

    def failed_rows(self, limit: int = 100) -> list[tuple[int, str, int, str | None]]:
        """(id, queue, attempts, last_error) of failed rows, oldest first."""
        rows = self._run(
            f"SELECT id, queue, attempts, last_error FROM {self.table} WHERE status = '{FAILED}' "
            f"ORDER BY id LIMIT {int(limit)}"
        )
        return [(int(r[0]), str(r[1]), int(r[2]), None if r[3] is None else str(r[3])) for r in rows]

    def requeue_failed(self) -> int:
        """Make every failed row pending again (after the cause was fixed); returns how many."""
        rows = self._run(
            f"UPDATE {self.table} SET status = '{PENDING}', failed_at = NULL "
            f"WHERE status = '{FAILED}' RETURNING id"
        )
        return len(rows)

    def prune(self, older_than_ms: int) -> int:
        """Delete published rows published more than ``older_than_ms`` ago; returns how many."""
        m = self._mark()
        rows = self._run(
            f"DELETE FROM {self.table} WHERE status = '{PUBLISHED}' AND published_at < {m} RETURNING id",
            (now_ms() - int(older_than_ms),),
        )
        return len(rows)

    def close(self) -> None:
        close_quietly(self.conn)
        self.conn = None


class SQLiteRelayStore(RelayStore):
    """Lease-based claims on an SQLite outbox (module docstring)."""

    def __init__(self, url: str, *, table: str = DEFAULT_TABLE, lease_seconds: float = 60.0) -> None:
        super().__init__(url, table)
        self.path = sqlite_path(url)
        self.lease_ms = int(lease_seconds * 1000)

    def _c(self) -> sqlite3.Connection:
        if self.conn is None:
            self.conn = connect(self.url, option="--outbox")
            # the relay's own writes are claims and marks: one lost to a power cut publishes a row
            # again (a duplicate), never loses one, so they need not wait for fsync at each commit
            self.conn.execute("PRAGMA synchronous=NORMAL")
        conn: sqlite3.Connection = self.conn
        return conn

    def _mark(self) -> str:
        return "?"

    def _write(self, action: Callable[[sqlite3.Connection], T]) -> T:
        conn = self._c()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = action(conn)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.OperationalError as exc:
            raise UnavailableError(f"outbox {self.path}: {exc}") from exc
        return result

    def _run(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._write(lambda conn: [tuple(r) for r in conn.execute(sql, tuple(params)).fetchall()])

    def claim(self, limit: int) -> Claim:
        owner = secrets.token_hex(8)

        def take(conn: sqlite3.Connection) -> list[Row]:
            now = now_ms()
            found = conn.execute(
                f"UPDATE {self.table} SET lease_owner = ?, lease_until = ? WHERE id IN ("
                f"SELECT id FROM {self.table} WHERE status = '{PENDING}' "
                "AND (lease_until IS NULL OR lease_until < ?) ORDER BY id LIMIT ?) "
                f"RETURNING {_CLAIM_COLUMNS}",
                (owner, now + self.lease_ms, now, int(limit)),
            ).fetchall()
            return sorted((_row(r) for r in found), key=lambda r: r.id)

        return Claim(self._write(take), owner)

    def finish(self, claim: Claim, published: Sequence[int], failed: Sequence[tuple[int, str]]) -> None:
        if not claim.rows:
            return
        now = now_ms()

        def mark(conn: sqlite3.Connection) -> None:
            if published:
                conn.execute(
                    f"UPDATE {self.table} SET status = '{PUBLISHED}', published_at = ?, lease_owner = NULL, "
                    "lease_until = NULL WHERE id IN (SELECT value FROM json_each(?))",
                    (now, json.dumps(list(published))),
                )
            conn.executemany(
                f"UPDATE {self.table} SET status = '{FAILED}', attempts = attempts + 1, last_error = ?, "
                "failed_at = ?, lease_owner = NULL, lease_until = NULL WHERE id = ?",
                [(error[:MAX_ERROR], now, row_id) for row_id, error in failed],
            )
            settled = set(published) | {row_id for row_id, _ in failed}
            rest = [row.id for row in claim.rows if row.id not in settled]
            if rest:
                conn.execute(
                    f"UPDATE {self.table} SET lease_owner = NULL, lease_until = NULL "
                    "WHERE id IN (SELECT value FROM json_each(?)) AND lease_owner = ?",
                    (json.dumps(rest), claim.owner),
                )

        self._write(mark)

    def abandon(self, claim: Claim) -> None:
        with suppress(UnavailableError):  # else the lease lapses by itself
            self.finish(claim, (), ())


class PostgresRelayStore(RelayStore):
    """``FOR UPDATE SKIP LOCKED`` claims on a PostgreSQL outbox (module docstring)."""

    def __init__(self, url: str, *, table: str = DEFAULT_TABLE) -> None:
        super().__init__(url, table)
        import psycopg

        self._psycopg = psycopg

    def _mark(self) -> str:
        return "%s"

    def _c(self) -> Any:
        if self.conn is None or self.conn.closed:
            conn = connect(self.url, option="--outbox", autocommit=False)
            try:
                # claims and marks only: a mark lost to a server crash publishes a row again (a
                # duplicate), never loses one, so the relay's commits need not wait for the WAL flush
                conn.execute("SET synchronous_commit = off")
                conn.commit()
            except self._psycopg.Error as exc:
                close_quietly(conn)
                raise self._unavailable(exc) from exc
            self.conn = conn
        return self.conn

    def _unavailable(self, exc: BaseException) -> UnavailableError:
        close_quietly(self.conn)  # a broken connection is replaced on the next call
        self.conn = None
        return UnavailableError(f"outbox {self.shown}: {one_line(exc, first_line=True)}")

    def _guard(self, action: Callable[[Any], T]) -> T:
        conn = self._c()
        try:
            return action(conn)
        except (self._psycopg.OperationalError, self._psycopg.InterfaceError) as exc:
            raise self._unavailable(exc) from exc

    def _run(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        def run(conn: Any) -> list[tuple[Any, ...]]:
            try:
                cur = conn.execute(sql, tuple(params))
                rows = [tuple(r) for r in cur.fetchall()] if cur.description else []
                conn.commit()
            except BaseException:
                if not conn.closed:
                    conn.rollback()
                raise
            return rows

        return self._guard(run)

    def claim(self, limit: int) -> Claim:
        def take(conn: Any) -> Claim:
            rows = conn.execute(
                f"SELECT {_CLAIM_COLUMNS} FROM {self.table} WHERE status = '{PENDING}' "
                "ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED",
                (int(limit),),
            ).fetchall()
            if not rows:
                conn.rollback()  # no locks held between idle polls
            return Claim([_row(r) for r in rows], "tx")

        return self._guard(take)

    def finish(self, claim: Claim, published: Sequence[int], failed: Sequence[tuple[int, str]]) -> None:
        if not claim.rows:
            return
        now = now_ms()

        def mark(conn: Any) -> None:
            try:
                if published:
                    conn.execute(
                        f"UPDATE {self.table} SET status = '{PUBLISHED}', published_at = %s "
                        "WHERE id = ANY(%s)",
                        (now, list(published)),
                    )
                if failed:
                    with conn.cursor() as cur:
                        cur.executemany(
                            f"UPDATE {self.table} SET status = '{FAILED}', attempts = attempts + 1, "
                            "last_error = %s, failed_at = %s WHERE id = %s",
                            [(error[:MAX_ERROR], now, row_id) for row_id, error in failed],
                        )
                conn.commit()  # also releases the locks on the rows left pending
            except BaseException:
                if not conn.closed:
                    conn.rollback()
                raise

        self._guard(mark)

    def abandon(self, claim: Claim) -> None:
        if self.conn is not None and not self.conn.closed:
            try:
                self.conn.rollback()
            except Exception:  # a dead connection: the server already dropped its locks
                close_quietly(self.conn)
                self.conn = None


def open_relay_store(url: str, *, table: str = DEFAULT_TABLE, lease_seconds: float = 60.0) -> RelayStore:
    """The relay store for ``url`` (``--outbox``): SQLite file or PostgreSQL database."""
    if dialect_of_url(url, "--outbox") == "postgres":
        return PostgresRelayStore(url, table=table)
    return SQLiteRelayStore(url, table=table, lease_seconds=lease_seconds)
