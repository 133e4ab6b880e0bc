"""The settlement ledger: postings, processed ids and settle's outbox, changed in ONE transaction.

Settle's idempotent consumer (docs/standard.md §7), made crash-proof for every outcome, not only for postings.
One micro-batch of settle is one call to :meth:`Ledger.settle`, one database transaction:

* **postings**: each payment's ``meta.id`` is claimed in ``processed_ids`` and its entry
  written to ``ledger_entries``. Redelivery, replays and redrives of a posted message find
  its id and post nothing. The payment's **business key**, ``payment_reference``, is unique
  too: the same payment published again under a new ``meta.id`` (an ingest re-run, another
  producer) is a duplicate and is not posted again; a *different* payment reusing a posted
  reference is refused (dead-lettered with the reason), never silently dropped or doubled.
* **outbox**: every dead letter and retry settle decides is claimed in ``outbox`` under a key
  that names the message and the attempt (:func:`outbox_key`). A key claimed by an earlier
  run (the micro-batch was redelivered after a crash) is not claimed again, so a message is
  dead-lettered or retried at most once per attempt. A row whose message id is already in
  ``processed_ids`` is not claimed at all: that payment is posted, and a late copy of it (say,
  redelivered after its ``expire_at``) must not also end on the DLQ. Rows are published after the commit
  and then marked; rows a crash left unpublished are published by the next run
  (:meth:`Ledger.pending_outbox`). A crash after the broker accepted a row and before it was
  marked publishes that row once more: the one window left, as in any outbox.
* **refusals**: a posting the database itself refuses (PostgreSQL cannot store U+0000 in
  text, an amount beyond BIGINT...) fails only that posting: the batch is retried posting by
  posting in savepoints, and each refused one becomes a dead letter in the same transaction.

Infrastructure failures are never a message's fault: a lost connection, a locked or
unreachable database raises :class:`~babelq.errors.UnavailableError` inside, and
:meth:`Ledger.settle` reconnects and runs the whole transaction again (it was rolled back)
with backoff for up to ``outage_seconds`` before giving up; nothing is dead-lettered for it.

Settle calls :meth:`Ledger.settle` from every partition of a micro-batch at once, each in its
own Spark task and connection. SQLite (a file; local mode only: every executor must reach the
same file) takes the write lock up front (``BEGIN IMMEDIATE``), so the partitions' transactions
run one after the other and two tasks cannot both decide an id is new; PostgreSQL claims with
``INSERT ... ON CONFLICT DO NOTHING RETURNING``, which serialises concurrent claims of the same
key on the index and lets the rest run in parallel.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import sqlite3
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import orjson

from babelq.errors import ConfigurationError, UnavailableError
from babelq.runtime.outage import DEFAULT_OUTAGE_SECONDS, OutagePolicy
from babelq.urls import redact, redact_text, sqlite_file

log = logging.getLogger(__name__)

T = TypeVar("T")

_PREFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,40}\Z")


class Posting(NamedTuple):
    """One transfer to post: the values of one ``ledger_entries`` row, in its column order.

    A named tuple rather than a dataclass: settle builds one per posted message on its hot path
    (a tuple is made several times faster than a frozen dataclass) and the ledger sends it to the
    database as it is."""

    message_id: str
    payment_reference: str
    amount_cents: int
    currency: str
    debtor_bsb: str
    debtor_account: str
    creditor_bsb: str
    creditor_account: str
    correlation_id: str | None
    trace_id: str
    attempts: int
    posted_at: int

    def same_payment(self, row: Sequence[Any]) -> bool:
        """Whether ``row`` (the :data:`PAYMENT_COLUMNS` of a posted entry) is this very payment."""
        return tuple(row) == self.payment()

    def payment(self) -> tuple[Any, ...]:
        """What makes a payment itself, beyond its ids and times (:data:`PAYMENT_COLUMNS`)."""
        return (self.payment_reference, self.amount_cents, self.currency, self.debtor_bsb,
                self.debtor_account, self.creditor_bsb, self.creditor_account)


@dataclass(frozen=True, slots=True)
class Outbound:
    """A message settle publishes after its transaction commits: a dead letter or a retry.

    ``key`` (:func:`outbox_key`) names the message and attempt it settles; the outbox holds
    one row per key, so the same decision taken again after a crash publishes nothing new.
    """

    key: str
    queue: str
    body: bytes
    delay_ms: int = 0
    #: the meta.id of the message it settles, when it has one: the row is dropped if that id is
    #: already processed (not stored: rows read back from the outbox carry None)
    message_id: str | None = None


def outbox_key(identity: str) -> str:
    """The outbox key of ``identity`` (``<meta.id>@<attempts>[@stored:<ms>]``, or
    ``bytes:<sha256>`` for a body without a usable id): a fixed-width hex digest, so no message
    content ever reaches the key column (a meta.id may hold U+0000, which PostgreSQL text refuses)."""
    return hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(slots=True)
class Settled:
    """What one :meth:`Ledger.settle` transaction did."""

    posted: list[str] = field(default_factory=list)  #: message ids posted
    duplicate_ids: int = 0  #: postings whose meta.id was already processed
    duplicate_payments: int = 0  #: postings whose payment (reference and details) was already posted
    #: postings dead-lettered instead: (posting, cause, why)
    refused: list[tuple[Posting, str, str]] = field(default_factory=list)
    outbound: list[Outbound] = field(default_factory=list)  #: claimed now: publish these, then mark them
    repeated: int = 0  #: outbound rows claimed by an earlier run, or given twice (not published again)
    processed_outbound: int = 0  #: outbound rows dropped: their message id was already processed


#: The causes of a refused posting: the reference is posted with other details / the database refused a value.
REFERENCE_CONFLICT = "reference_conflict"
UNPOSTABLE = "unpostable"

def conflict_reason(reference: str) -> str:
    """Why a posting reusing the posted ``reference`` with other details is refused."""
    return (f"payment_reference {reference!r} is already posted with different details; a reference "
            "identifies one payment")


def unpostable_reason(error: str) -> str:
    """Why a posting the ledger's database refused (``error``, its first line) is dead-lettered."""
    return f"the ledger database refused the posting: {error}"


#: Builds the dead letter of a posting the ledger refused, from (posting, cause, why); the
#: caller knows the envelope.
Refusal = Callable[[Posting, str, str], Outbound]

_COLUMNS: tuple[str, ...] = Posting._fields
PAYMENT_COLUMNS = (
    "payment_reference", "amount_cents", "currency", "debtor_bsb", "debtor_account", "creditor_bsb",
    "creditor_account",
)
_INTEGER_COLUMNS = frozenset({"amount_cents", "attempts", "posted_at"})
#: the split of :meth:`Ledger.totals_by_currency`'s exact sums
_HALF = 1_000_000_000


def _row(p: Posting) -> tuple[Any, ...]:
    """The values of :data:`_COLUMNS`, in that order (a plain tuple: orjson writes no named tuple)."""
    return tuple(p)


def _chunks(items: Sequence[T], size: int = 500) -> Iterable[Sequence[T]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _first_of_each(postings: Sequence[Posting]) -> list[Posting]:
    """``postings`` without later copies of a message id (a batch is deduplicated upstream too)."""
    seen: set[str] = set()
    out: list[Posting] = []
    for p in postings:
        if p.message_id not in seen:
            seen.add(p.message_id)
            out.append(p)
    return out


class _DataRefusedError(Exception):
    """Internal: the database refused a value (not a connection problem): that posting's fault."""


class Ledger(ABC):
    """The algorithm of :meth:`settle`, over a few SQL primitives each database implements."""

    #: how long :meth:`settle` keeps reconnecting through an outage before it gives up
    outage_seconds: float = DEFAULT_OUTAGE_SECONDS
    #: how many ids one processed-ids lookup sends
    id_chunk: int = 500

    def __init__(self, prefix: str) -> None:
        if prefix and not _PREFIX.match(prefix):
            raise ConfigurationError(
                f"ledger prefix {prefix!r}: must start with a letter or _ and hold only letters, digits "
                "and _ (at most 41 characters)"
            )
        self.t_ids = f"{prefix}processed_ids"
        self.t_entries = f"{prefix}ledger_entries"
        self.t_outbox = f"{prefix}outbox"
        self.i_reference = f"{prefix}ledger_entries_payment_reference"

    # -- what a database provides -------------------------------------------------------
    @abstractmethod
    def _connect(self) -> None:
        """(Re)open the connection and create the tables if needed; UnavailableError when unreachable."""

    @abstractmethod
    def _transaction(self) -> Any:
        """A context manager: one write transaction (rolled back on any exception)."""

    @abstractmethod
    def _savepoint(self) -> Any:
        """A context manager: a savepoint inside the transaction (rolled back to on any exception)."""

    @abstractmethod
    def _claim_outbox(self, rows: Sequence[Outbound], at: int) -> set[str]:
        """Insert the rows whose key is new; returns those keys."""

    @abstractmethod
    def _claim_ids(self, ids: Sequence[str], at: int) -> set[str]:
        """Insert the processed ids that are new; returns them."""

    @abstractmethod
    def _insert_entries(self, postings: Sequence[Posting]) -> set[str]:
        """Insert the entries whose payment_reference is new; returns their message ids."""

    @abstractmethod
    def _unclaim_ids(self, ids: Sequence[str]) -> None: ...

    @abstractmethod
    def _posted_payments(self, references: Sequence[str]) -> dict[str, tuple[Any, ...]]:
        """reference -> the :data:`PAYMENT_COLUMNS` of its posted entry."""

    @abstractmethod
    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...

    def _scan(self, sql: str) -> list[tuple[Any, ...]]:
        """A report's query that reads a whole table or index once (see SQLite's override)."""
        return self._query(sql)

    @abstractmethod
    def _mark(self, keys: Sequence[str], at: int) -> None: ...

    @abstractmethod
    def close(self) -> None: ...

    # -- the algorithm -------------------------------------------------------------------
    def settle(self, postings: Sequence[Posting], outbound: Sequence[Outbound], refusal: Refusal,
               *, at: int | None = None) -> Settled:
        """Post ``postings`` and claim ``outbound`` in one transaction (see the module docstring)."""
        when = at if at is not None else time.time_ns() // 1_000_000
        return self._through_outages(lambda: self._settle_once(postings, outbound, refusal, when))

    def post(self, postings: Sequence[Posting]) -> list[str]:
        """Post ``postings`` (no outbox rows); returns the ids actually posted. A posting the
        ledger refuses raises ConfigurationError naming it (use :meth:`settle` to dead-letter it)."""

        def refuse(p: Posting, cause: str, why: str) -> Outbound:
            raise ConfigurationError(f"ledger refused payment {p.payment_reference!r}: {why}")

        return self.settle(postings, (), refuse).posted

    def _settle_once(self, postings: Sequence[Posting], outbound: Sequence[Outbound], refusal: Refusal,
                     at: int) -> Settled:
        out = Settled()
        given = len(outbound)
        outbound = list({o.key: o for o in reversed(outbound)}.values())[::-1]  # one row per key, first wins
        out.repeated = given - len(outbound)  # the same decision twice in one call: the first one counts
        unique = _first_of_each(postings)
        out.duplicate_ids = len(postings) - len(unique)
        with self._transaction():
            guarded = [o.message_id for o in outbound if o.message_id]
            if guarded:  # a posted payment's late copies are neither dead-lettered nor retried
                done = {str(r[0]) for chunk in _chunks(guarded, self.id_chunk) for r in self._ids_in(chunk)}
                if done:
                    kept = [o for o in outbound if o.message_id not in done]
                    out.processed_outbound = len(outbound) - len(kept)
                    outbound = kept
            claimed = self._claim_outbox(outbound, at) if outbound else set()
            out.outbound = [o for o in outbound if o.key in claimed]
            out.repeated += len(outbound) - len(out.outbound)
            if not unique:
                return out
            fresh, inserted, refused = self._post_isolated(unique, at)
            out.duplicate_ids += len(unique) - len(fresh)
            skipped = [p for p in fresh if p.message_id not in inserted and p.message_id not in refused]
            posted_before = self._posted_payments([p.payment_reference for p in skipped]) if skipped else {}
            conflicts: dict[str, tuple[str, str]] = {}
            for p in skipped:
                existing = posted_before.get(p.payment_reference)
                if existing is not None and p.same_payment(existing):
                    out.duplicate_payments += 1  # the same payment under another meta.id: posted once
                else:
                    conflicts[p.message_id] = (REFERENCE_CONFLICT, conflict_reason(p.payment_reference))
            if conflicts:  # their ids were claimed: a refused payment is not processed
                self._unclaim_ids(list(conflicts))
                refused.update(conflicts)
            out.posted = [p.message_id for p in fresh if p.message_id in inserted]
            if refused:
                by_id = {p.message_id: p for p in fresh}
                out.refused = [(by_id[mid], cause, why) for mid, (cause, why) in refused.items()]
                dead = [refusal(p, cause, why) for p, cause, why in out.refused]
                now_claimed = self._claim_outbox(dead, at)
                out.outbound += [o for o in dead if o.key in now_claimed]
                out.repeated += len(dead) - len(now_claimed)
        return out

    def _post_isolated(
        self, postings: list[Posting], at: int
    ) -> tuple[list[Posting], set[str], dict[str, tuple[str, str]]]:
        """(postings whose id was new, message ids whose entry was inserted, refused id -> (cause, why)).

        The whole batch in one savepoint; if the database refuses a value, the batch again
        posting by posting, each in its own savepoint, so only the refused ones fail."""
        try:
            with self._savepoint():
                fresh_ids = self._claim_ids([p.message_id for p in postings], at)
                batch = [p for p in postings if p.message_id in fresh_ids]
                return batch, self._insert_entries(batch) if batch else set(), {}
        except _DataRefusedError:
            pass
        fresh: list[Posting] = []
        inserted: set[str] = set()
        refused: dict[str, tuple[str, str]] = {}
        for p in postings:
            try:
                with self._savepoint():
                    claimed = self._claim_ids([p.message_id], at)
                    got = self._insert_entries([p]) if claimed else set()
            except _DataRefusedError as exc:  # rolled back to the savepoint: nothing of it was written
                fresh.append(p)
                refused[p.message_id] = (UNPOSTABLE, unpostable_reason(str(exc)))
                continue
            if claimed:
                fresh.append(p)
                inserted |= got
        return fresh, inserted, refused

    def _through_outages(self, action: Callable[[], T]) -> T:
        """Run ``action`` through outages of the ledger database, reconnecting between attempts,
        under the commands' one outage policy bounded by :attr:`outage_seconds`."""
        return OutagePolicy(self.outage_seconds).wait_out(
            action, "ledger", reconnect=self._connect, log=log,
            outage=lambda exc: isinstance(exc, UnavailableError))

    # -- the outbox after the commit ---------------------------------------------------------
    def pending_outbox(self, limit: int = 10_000) -> list[Outbound]:
        """Outbox rows claimed but not yet marked published (a crash came in between)."""
        rows = self._through_outages(lambda: self._query(
            f"SELECT dedupe_key, queue, body, delay_ms FROM {self.t_outbox} WHERE published_at IS NULL "
            f"ORDER BY created_at LIMIT {int(limit)}"))
        return [Outbound(str(k), str(q), bytes(b), int(d)) for k, q, b, d in rows]

    def mark_published(self, keys: Sequence[str], *, at: int | None = None) -> None:
        when = at if at is not None else time.time_ns() // 1_000_000
        if keys:
            self._through_outages(lambda: self._mark(keys, when))

    # -- reading -----------------------------------------------------------------------------
    def already_processed(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` are in the processed-ids table."""
        found: set[str] = set()
        for chunk in _chunks(list(ids), self.id_chunk):
            found.update(str(r[0]) for r in self._through_outages(partial(self._ids_in, chunk)))
        return found

    @abstractmethod
    def _ids_in(self, ids: Sequence[str]) -> list[tuple[Any, ...]]: ...

    def totals(self) -> tuple[int, int, int]:
        """(entries, distinct payment references, processed ids)."""
        [(entries, refs)] = self._scan(
            f"SELECT COUNT(*), COUNT(DISTINCT payment_reference) FROM {self.t_entries}")
        [(ids,)] = self._scan(f"SELECT COUNT(*) FROM {self.t_ids}")
        return int(entries), int(refs), int(ids)

    def totals_by_currency(self) -> dict[str, tuple[int, int]]:
        """currency -> (entries, sum of ``amount_cents``): what the ledger holds, summed by the
        database itself, so a report's money comes from the book and not from a recount of what
        settle meant to post.

        The sum is taken in two halves (hi = amount / 10^9, truncated, and lo = amount - hi * 10^9,
        so ``hi * 10^9 + lo`` is the amount whatever its sign) and joined here: SQLite's SUM of
        integers fails on a total beyond 64 bits, and an amount may be as large as a BIGINT. (No
        ``%``: psycopg reads it as a placeholder; no MOD(): not every SQLite has it.)"""
        hi = f"(amount_cents / {_HALF})"
        rows = self._through_outages(lambda: self._scan(
            f"SELECT currency, COUNT(*), SUM{hi}, SUM(amount_cents - {hi} * {_HALF}) "
            f"FROM {self.t_entries} GROUP BY currency ORDER BY currency"))
        return {str(currency): (int(n), int(hi or 0) * _HALF + int(lo or 0)) for currency, n, hi, lo in rows}

    def references_posted_more_than_once(self, limit: int = 20) -> list[tuple[str, int]]:
        rows = self._scan(
            f"SELECT payment_reference, COUNT(*) FROM {self.t_entries} GROUP BY payment_reference "
            f"HAVING COUNT(*) > 1 ORDER BY 2 DESC LIMIT {int(limit)}")
        return [(str(r[0]), int(r[1])) for r in rows]

    def references(self) -> list[str]:
        return [str(r[0]) for r in self._scan(f"SELECT payment_reference FROM {self.t_entries}")]

    def outbox_counts(self) -> tuple[int, int]:
        """(outbox rows, of which not yet published)."""
        [(total, pending)] = self._scan(
            f"SELECT COUNT(*), COUNT(*) - COUNT(published_at) FROM {self.t_outbox}")
        return int(total), int(pending or 0)

    def _ddl(self, integer: str, serial: str, blob: str, keyed: str = "") -> list[str]:
        """The three tables; ``keyed`` ends the DDL of the two tables a text key identifies (SQLite:
        ``WITHOUT ROWID``, the rows stored in the key's own B-tree instead of a second one)."""
        return [
            f"CREATE TABLE IF NOT EXISTS {self.t_ids} "
            f"(message_id TEXT PRIMARY KEY, processed_at {integer} NOT NULL){keyed}",
            _entries_table(self.t_entries, integer, serial),
            f"CREATE TABLE IF NOT EXISTS {self.t_outbox} (dedupe_key TEXT PRIMARY KEY, queue TEXT NOT NULL, "
            f"body {blob} NOT NULL, delay_ms {integer} NOT NULL, created_at {integer} NOT NULL, "
            f"published_at {integer}){keyed}",
        ]

    def _unique_reference_index(self) -> str:
        return _reference_index(self.i_reference, self.t_entries)

    def _doubles_error(self, where: str) -> ConfigurationError:
        return ConfigurationError(
            f"ledger {where}: {self.t_entries} already holds payment references posted more than once "
            f"(an older babelq let that happen), so they cannot be made unique; find them with "
            f"SELECT payment_reference, COUNT(*) FROM {self.t_entries} GROUP BY 1 HAVING COUNT(*) > 1"
        )


def _entries_table(table: str, integer: str, serial: str) -> str:
    cols = ", ".join(f"{c} {integer if c in _INTEGER_COLUMNS else 'TEXT'}" for c in _COLUMNS)
    return f"CREATE TABLE IF NOT EXISTS {table} (entry_id {serial}, {cols})"


def _reference_index(index: str, table: str) -> str:
    return f"CREATE UNIQUE INDEX IF NOT EXISTS {index} ON {table} (payment_reference)"


def entries_ddl(prefix: str = "", *, postgres: bool) -> list[str]:
    """The statements that create the ledger's ``<prefix>ledger_entries`` table and its unique
    ``payment_reference`` index, as :func:`open_ledger` does (for a pipeline whose sink is the ledger)."""
    if prefix and not _PREFIX.match(prefix):
        raise ConfigurationError(f"ledger prefix {prefix!r}: must start with a letter or _ and hold only "
                                 "letters, digits and _ (at most 41 characters)")
    table = f"{prefix}ledger_entries"
    integer, serial = ("BIGINT", "BIGSERIAL PRIMARY KEY") if postgres else ("INTEGER", "INTEGER PRIMARY KEY")
    index = f"{prefix}ledger_entries_payment_reference"
    return [_entries_table(table, integer, serial), _reference_index(index, table)]


#: the SQLite ledger connection's page cache, KiB
_CACHE_KIB = 65_536
#: its page cache while a report scans a whole table (SQLite's own default size), KiB
_SCAN_CACHE_KIB = 2_000


class SQLiteLedger(Ledger):
    """The ledger in one SQLite file, safe for several processes on one machine."""

    id_chunk = 100_000

    def __init__(self, path: str | Path, *, prefix: str = "") -> None:
        super().__init__(prefix)
        self.path = str(path)
        self.conn: sqlite3.Connection | None = None
        folder = Path(self.path).parent
        if not folder.is_dir():
            raise ConfigurationError(
                f"ledger: directory {folder} does not exist (create it, or choose another path)")
        _create_private(self.path)
        # every partition of a micro-batch opens the ledger at once: on a new file one of them
        # switching it to WAL can find it locked, which is waited out like any lock
        self._through_outages(self._connect)

    def _connect(self) -> None:
        if self.conn is not None:
            with suppress(sqlite3.Error):
                self.conn.close()
        try:
            self.conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
            # the keys are random (uuids, digests): with SQLite's default 2 MB page cache a
            # micro-batch's inserts into a ledger of a million ids go to disk for most pages
            self.conn.execute(f"PRAGMA cache_size=-{_CACHE_KIB}")
            for ddl in self._ddl("INTEGER", "INTEGER PRIMARY KEY", "BLOB", " WITHOUT ROWID"):
                self.conn.execute(ddl)
            try:
                self.conn.execute(self._unique_reference_index())
            except sqlite3.IntegrityError:
                raise self._doubles_error(self.path) from None
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise UnavailableError(f"ledger {self.path}: {exc}") from exc
            raise ConfigurationError(
                f"ledger {self.path}: cannot open it as an SQLite database: {exc}") from None
        except sqlite3.DatabaseError as exc:
            raise ConfigurationError(f"ledger {self.path}: not an SQLite database ({exc})") from None

    @property
    def _c(self) -> sqlite3.Connection:
        if self.conn is None:
            raise UnavailableError(f"ledger {self.path}: closed")
        return self.conn

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        conn = self._c
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise UnavailableError(f"ledger {self.path}: {exc}") from exc
        try:
            yield
            conn.execute("COMMIT")
        except BaseException as exc:
            with suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.OperationalError):
                raise UnavailableError(f"ledger {self.path}: {exc}") from exc
            raise

    @contextmanager
    def _savepoint(self) -> Iterator[None]:
        conn = self._c
        conn.execute("SAVEPOINT posting")
        try:
            yield
        except (sqlite3.IntegrityError, sqlite3.DataError, sqlite3.InterfaceError, OverflowError) as exc:
            conn.execute("ROLLBACK TO posting")
            conn.execute("RELEASE posting")
            raise _DataRefusedError(str(exc)) from exc
        except BaseException:
            conn.execute("ROLLBACK TO posting")
            conn.execute("RELEASE posting")
            raise
        conn.execute("RELEASE posting")

    def _returning(self, sql: str, rows: Sequence[Sequence[Any]]) -> set[str]:
        got: set[str] = set()
        conn = self._c
        for row in rows:  # RETURNING with executemany is not available in sqlite3
            found = conn.execute(sql, tuple(row)).fetchone()
            if found is not None:
                got.add(str(found[0]))
        return got

    def _claim_outbox(self, rows: Sequence[Outbound], at: int) -> set[str]:
        return self._returning(
            f"INSERT INTO {self.t_outbox} (dedupe_key, queue, body, delay_ms, created_at) "
            "VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT DO NOTHING RETURNING dedupe_key",
            [(o.key, o.queue, o.body, o.delay_ms, at) for o in rows],
        )

    def _claim_ids(self, ids: Sequence[str], at: int) -> set[str]:
        # sorted: random keys inserted in key order touch each B-tree page once, which matters
        # once the table is bigger than the page cache. The usual case is that every id is
        # new: one INSERT ... ON CONFLICT DO NOTHING by executemany, and the change count says
        # so (exact: the transaction holds the write lock, BEGIN IMMEDIATE). Otherwise that is
        # undone and the taken ids are asked first (one statement: they travel as one JSON array)
        conn = self._c
        wanted = sorted(set(ids))
        conn.execute("SAVEPOINT claim_ids")
        before = conn.total_changes
        conn.executemany(
            f"INSERT INTO {self.t_ids} (message_id, processed_at) VALUES (?, ?) ON CONFLICT DO NOTHING",
            [(i, at) for i in wanted])
        if conn.total_changes - before == len(wanted):
            conn.execute("RELEASE claim_ids")
            return set(wanted)
        conn.execute("ROLLBACK TO claim_ids")
        conn.execute("RELEASE claim_ids")
        taken = {str(r[0]) for r in conn.execute(
            f"SELECT message_id FROM {self.t_ids} WHERE message_id IN (SELECT value FROM json_each(?))",
            (orjson.dumps(wanted).decode(),))}
        fresh = [i for i in wanted if i not in taken]
        conn.executemany(f"INSERT INTO {self.t_ids} (message_id, processed_at) VALUES (?, ?)",
                         [(i, at) for i in fresh])
        return set(fresh)

    def _insert_entries(self, postings: Sequence[Posting]) -> set[str]:
        # a posting is the row (a named tuple in column order): executemany takes it as it is;
        # when every row went in (the usual case) nothing else is asked, otherwise the
        # references say which of ours did
        conn = self._c
        before = conn.total_changes
        conn.executemany(
            f"INSERT INTO {self.t_entries} ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))}) "
            "ON CONFLICT (payment_reference) DO NOTHING", postings)
        if conn.total_changes - before == len(postings):
            return {p.message_id for p in postings}
        owners = dict(conn.execute(
            f"SELECT payment_reference, message_id FROM {self.t_entries} "
            "WHERE payment_reference IN (SELECT value FROM json_each(?))",
            (orjson.dumps([p.payment_reference for p in postings]).decode(),)).fetchall())
        return {p.message_id for p in postings if owners.get(p.payment_reference) == p.message_id}

    def _unclaim_ids(self, ids: Sequence[str]) -> None:
        self._c.executemany(f"DELETE FROM {self.t_ids} WHERE message_id = ?", [(i,) for i in ids])

    def _posted_payments(self, references: Sequence[str]) -> dict[str, tuple[Any, ...]]:
        out: dict[str, tuple[Any, ...]] = {}
        for chunk in _chunks(list(references)):
            marks = ",".join("?" * len(chunk))
            for row in self._c.execute(
                f"SELECT {', '.join(PAYMENT_COLUMNS)} FROM {self.t_entries} "
                f"WHERE payment_reference IN ({marks})",
                tuple(chunk),
            ):
                out[str(row[0])] = tuple(row)
        return out

    def _ids_in(self, ids: Sequence[str]) -> list[tuple[Any, ...]]:
        # the ids travel as one JSON array: one statement however many there are
        return self._query(
            f"SELECT message_id FROM {self.t_ids} WHERE message_id IN (SELECT value FROM json_each(?))",
            (orjson.dumps(list(ids)).decode(),))

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            return [tuple(r) for r in self._c.execute(sql, tuple(params)).fetchall()]
        except sqlite3.OperationalError as exc:
            raise UnavailableError(f"ledger {self.path}: {exc}") from exc

    def _scan(self, sql: str) -> list[tuple[Any, ...]]:
        """Run ``sql`` with a page cache of :data:`_SCAN_CACHE_KIB`, then give the cache back its
        size. A scan reads each page once, so the big cache that settle's inserts want would only
        grow the driver's memory with pages nobody reads again. Lowering the size frees the pages
        beyond it at once."""
        self._c.execute(f"PRAGMA cache_size=-{_SCAN_CACHE_KIB}")
        try:
            return self._query(sql)
        finally:
            self._c.execute(f"PRAGMA cache_size=-{_CACHE_KIB}")

    def _mark(self, keys: Sequence[str], at: int) -> None:
        with self._transaction():
            self._c.executemany(f"UPDATE {self.t_outbox} SET published_at = ? WHERE dedupe_key = ?",
                                [(at, k) for k in keys])

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class PostgresLedger(Ledger):
    """The ledger in PostgreSQL (``postgresql://user@host/db``), shared by every executor of a cluster."""

    id_chunk = 10_000

    def __init__(self, url: str, *, prefix: str = "") -> None:
        super().__init__(prefix)
        self.url = url
        self.shown = redact(url)
        self.conn: Any = None
        self._connect()

    def _psycopg(self) -> Any:
        import psycopg

        return psycopg

    def _unavailable(self, exc: BaseException) -> UnavailableError:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return UnavailableError(f"ledger {self.shown}: {redact_text(first)}")

    def _connect(self) -> None:
        psycopg = self._psycopg()
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
            raise ConfigurationError(f"ledger {self.shown}: {redact_text(str(exc))}") from None
        try:
            with conn.transaction():
                # DDL under an advisory lock: concurrent CREATE ... IF NOT EXISTS race on the catalog
                lock = f"babelq-ledger:{self.t_entries}"
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (lock,))
                for ddl in self._ddl("BIGINT", "BIGSERIAL PRIMARY KEY", "BYTEA"):
                    conn.execute(ddl)
                conn.execute(self._unique_reference_index())
        except psycopg.errors.UniqueViolation:
            conn.close()
            raise self._doubles_error(self.shown) from None
        except psycopg.OperationalError as exc:
            conn.close()
            raise self._unavailable(exc) from exc
        self.conn = conn

    def _errors(self) -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
        psycopg = self._psycopg()
        return (psycopg.OperationalError, psycopg.InterfaceError), (psycopg.DataError, psycopg.IntegrityError)

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        infrastructure, _ = self._errors()
        if self.conn is None or self.conn.closed:
            self._connect()
        try:
            with self.conn.transaction():
                yield
        except infrastructure as exc:
            raise self._unavailable(exc) from exc

    @contextmanager
    def _savepoint(self) -> Iterator[None]:
        _, refused = self._errors()
        try:
            with self.conn.transaction():  # nested: a savepoint
                yield
        except refused as exc:
            raise _DataRefusedError(redact_text((str(exc).splitlines() or [""])[0])) from exc
        except OverflowError as exc:
            raise _DataRefusedError(str(exc)) from exc

    def _claim_outbox(self, rows: Sequence[Outbound], at: int) -> set[str]:
        got: set[str] = set()
        for chunk in _chunks(list(rows)):
            found = self.conn.execute(
                f"INSERT INTO {self.t_outbox} (dedupe_key, queue, body, delay_ms, created_at) "
                "SELECT * FROM unnest(%s::text[], %s::text[], %s::bytea[], %s::bigint[], %s::bigint[]) "
                "ON CONFLICT DO NOTHING RETURNING dedupe_key",
                ([o.key for o in chunk], [o.queue for o in chunk], [o.body for o in chunk],
                 [o.delay_ms for o in chunk], [at] * len(chunk)),
            ).fetchall()
            got.update(str(r[0]) for r in found)
        return got

    def _claim_ids(self, ids: Sequence[str], at: int) -> set[str]:
        found = self.conn.execute(
            f"INSERT INTO {self.t_ids} (message_id, processed_at) SELECT unnest(%s::text[]), %s "
            "ON CONFLICT DO NOTHING RETURNING message_id",
            (list(ids), at),
        ).fetchall()
        return {str(r[0]) for r in found}

    def _insert_entries(self, postings: Sequence[Posting]) -> set[str]:
        columns = list(zip(*(_row(p) for p in postings), strict=True))
        types = ["bigint" if c in _INTEGER_COLUMNS else "text" for c in _COLUMNS]
        unnest = ", ".join(f"%s::{t}[]" for t in types)
        found = self.conn.execute(
            f"INSERT INTO {self.t_entries} ({', '.join(_COLUMNS)}) SELECT * FROM unnest({unnest}) "
            "ON CONFLICT (payment_reference) DO NOTHING RETURNING message_id",
            [list(c) for c in columns],
        ).fetchall()
        return {str(r[0]) for r in found}

    def _unclaim_ids(self, ids: Sequence[str]) -> None:
        self.conn.execute(f"DELETE FROM {self.t_ids} WHERE message_id = ANY(%s)", (list(ids),))

    def _posted_payments(self, references: Sequence[str]) -> dict[str, tuple[Any, ...]]:
        rows = self.conn.execute(
            f"SELECT {', '.join(PAYMENT_COLUMNS)} FROM {self.t_entries} WHERE payment_reference = ANY(%s)",
            (list(references),),
        ).fetchall()
        return {str(r[0]): tuple(r) for r in rows}

    def _ids_in(self, ids: Sequence[str]) -> list[tuple[Any, ...]]:
        return self._query(f"SELECT message_id FROM {self.t_ids} WHERE message_id = ANY(%s)", [list(ids)])

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._transaction():
            return [tuple(r) for r in self.conn.execute(sql, tuple(params)).fetchall()]

    def _mark(self, keys: Sequence[str], at: int) -> None:
        with self._transaction():
            self.conn.execute(f"UPDATE {self.t_outbox} SET published_at = %s WHERE dedupe_key = ANY(%s)",
                              (at, list(keys)))

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def _create_private(path: str) -> None:
    """Create ``path`` readable by its owner only, if it does not exist yet (SQLite keeps the mode
    for its -wal and -shm files)."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    except OSError as exc:
        raise ConfigurationError(f"ledger: cannot create {path}: {exc.strerror or exc}") from None
    os.close(fd)


def is_postgres(target: str | Path) -> bool:
    return str(target).startswith(("postgresql://", "postgres://"))


def ledger_path(target: str | Path) -> str | None:
    """The file of an SQLite ledger target (a path or ``sqlite://`` URL), None for PostgreSQL."""
    text = str(target)
    if is_postgres(text):
        return None
    if text.startswith("sqlite://"):  # as the sqlite transport: three slashes absolute, two relative
        return sqlite_file(text, "--ledger")
    if "://" in text:
        raise ConfigurationError(
            f"--ledger: unsupported URL {redact(text)!r} (a file path, sqlite:///path or postgresql://)")
    return text


def open_ledger(target: str | Path, *, prefix: str = "") -> Ledger:
    """A ledger from a path / ``sqlite:///path`` (file) or a ``postgresql://`` URL."""
    path = ledger_path(target)
    if path is None:
        return PostgresLedger(str(target), prefix=prefix)
    return SQLiteLedger(path, prefix=prefix)
