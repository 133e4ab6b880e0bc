"""The settlement ledger and its processed-ids table, updated in ONE database transaction.

Seed 001's idempotent consumer: a payment is posted and its ``meta.id`` recorded together, so
after a crash either both happened or neither did. Redelivery, replays and redrives of an
already-posted message find its id and post nothing. SQLite (a file, the default) takes the
write lock up front (``BEGIN IMMEDIATE``) so two Spark workers cannot both decide an id is
new; PostgreSQL claims ids with ``INSERT ... ON CONFLICT DO NOTHING RETURNING``, which
serialises concurrent claims of the same id on the primary key.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

from babelq.errors import ConfigurationError


@dataclass(frozen=True, slots=True)
class Posting:
    """One transfer to post."""

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


_COLUMNS = (
    "message_id", "payment_reference", "amount_cents", "currency", "debtor_bsb", "debtor_account",
    "creditor_bsb", "creditor_account", "correlation_id", "trace_id", "attempts", "posted_at",
)


def _row(p: Posting) -> tuple[Any, ...]:
    """The values of :data:`_COLUMNS`, in that order."""
    return (p.message_id, p.payment_reference, p.amount_cents, p.currency, p.debtor_bsb, p.debtor_account,
            p.creditor_bsb, p.creditor_account, p.correlation_id, p.trace_id, p.attempts, p.posted_at)


class Ledger(Protocol):
    def already_processed(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` are in the processed-ids table."""

    def post(self, postings: Sequence[Posting]) -> list[str]:
        """Record ids and post entries in one transaction; returns the ids actually posted."""

    def totals(self) -> tuple[int, int, int]:
        """(entries, distinct payment references, processed ids)."""

    def references_posted_more_than_once(self, limit: int = 20) -> list[tuple[str, int]]: ...

    def close(self) -> None: ...


def _chunks(items: Sequence[str], size: int = 500) -> Iterable[Sequence[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


class SQLiteLedger:
    """The ledger in one SQLite file, safe for several processes."""

    def __init__(self, path: str | Path, *, prefix: str = "") -> None:
        self.path = str(path)
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self.t_ids = f"{prefix}processed_ids"
        self.t_entries = f"{prefix}ledger_entries"
        self.conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        cols = ", ".join(f"{c} {'INTEGER' if c in ('amount_cents', 'attempts', 'posted_at') else 'TEXT'}"
                         for c in _COLUMNS)
        self.conn.execute(f"CREATE TABLE IF NOT EXISTS {self.t_ids} "
                          "(message_id TEXT PRIMARY KEY, processed_at INTEGER NOT NULL)")
        self.conn.execute(
            f"CREATE TABLE IF NOT EXISTS {self.t_entries} (entry_id INTEGER PRIMARY KEY, {cols})")

    def already_processed(self, ids: Sequence[str]) -> set[str]:
        found: set[str] = set()
        for chunk in _chunks(list(ids)):
            marks = ",".join("?" * len(chunk))
            rows = self.conn.execute(
                f"SELECT message_id FROM {self.t_ids} WHERE message_id IN ({marks})", tuple(chunk)
            ).fetchall()
            found.update(r[0] for r in rows)
        return found

    def post(self, postings: Sequence[Posting]) -> list[str]:
        if not postings:
            return []
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            seen = self.already_processed([p.message_id for p in postings])
            fresh: list[Posting] = []
            for p in postings:
                if p.message_id not in seen:
                    seen.add(p.message_id)
                    fresh.append(p)
            self.conn.executemany(f"INSERT INTO {self.t_ids} (message_id, processed_at) VALUES (?, ?)",
                                  [(p.message_id, p.posted_at) for p in fresh])
            marks = ",".join("?" * len(_COLUMNS))
            self.conn.executemany(f"INSERT INTO {self.t_entries} ({', '.join(_COLUMNS)}) VALUES ({marks})",
                                  [_row(p) for p in fresh])
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        return [p.message_id for p in fresh]

    def totals(self) -> tuple[int, int, int]:
        entries, refs = self.conn.execute(
            f"SELECT COUNT(*), COUNT(DISTINCT payment_reference) FROM {self.t_entries}").fetchone()
        ids = self.conn.execute(f"SELECT COUNT(*) FROM {self.t_ids}").fetchone()[0]
        return int(entries), int(refs), int(ids)

    def references_posted_more_than_once(self, limit: int = 20) -> list[tuple[str, int]]:
        rows = self.conn.execute(
            f"SELECT payment_reference, COUNT(*) FROM {self.t_entries} GROUP BY payment_reference "
            f"HAVING COUNT(*) > 1 ORDER BY 2 DESC LIMIT {int(limit)}").fetchall()
        return [(str(r[0]), int(r[1])) for r in rows]

    def references(self) -> list[str]:
        return [str(r[0]) for r in self.conn.execute(f"SELECT payment_reference FROM {self.t_entries}")]

    def close(self) -> None:
        self.conn.close()


class PostgresLedger:
    """The ledger in PostgreSQL (``postgresql://user@host/db``)."""

    def __init__(self, url: str, *, prefix: str = "") -> None:
        import psycopg

        self.t_ids = f"{prefix}processed_ids"
        self.t_entries = f"{prefix}ledger_entries"
        self.conn = psycopg.connect(url, autocommit=False)
        cols = ", ".join(f"{c} {'BIGINT' if c in ('amount_cents', 'attempts', 'posted_at') else 'TEXT'}"
                         for c in _COLUMNS)
        with self.conn.transaction():
            self.conn.execute(f"CREATE TABLE IF NOT EXISTS {self.t_ids} "
                              "(message_id TEXT PRIMARY KEY, processed_at BIGINT NOT NULL)")
            self.conn.execute(
                f"CREATE TABLE IF NOT EXISTS {self.t_entries} (entry_id BIGSERIAL PRIMARY KEY, {cols})")
        self.conn.commit()

    def already_processed(self, ids: Sequence[str]) -> set[str]:
        if not ids:
            return set()
        rows = self.conn.execute(
            f"SELECT message_id FROM {self.t_ids} WHERE message_id = ANY(%s)", (list(ids),)).fetchall()
        self.conn.commit()
        return {str(r[0]) for r in rows}

    def post(self, postings: Sequence[Posting]) -> list[str]:
        if not postings:
            return []
        by_id = {p.message_id: p for p in postings}
        with self.conn.transaction():
            claimed = self.conn.execute(
                f"INSERT INTO {self.t_ids} (message_id, processed_at) "
                "SELECT unnest(%s::text[]), %s ON CONFLICT DO NOTHING RETURNING message_id",
                (list(by_id), postings[0].posted_at),
            ).fetchall()
            fresh = [by_id[str(r[0])] for r in claimed]
            with self.conn.cursor() as cur:
                marks = ",".join(["%s"] * len(_COLUMNS))
                cur.executemany(f"INSERT INTO {self.t_entries} ({', '.join(_COLUMNS)}) VALUES ({marks})",
                                [_row(p) for p in fresh])
        self.conn.commit()
        return [p.message_id for p in fresh]

    def totals(self) -> tuple[int, int, int]:
        row = self.conn.execute(
            f"SELECT COUNT(*), COUNT(DISTINCT payment_reference) FROM {self.t_entries}").fetchone()
        ids = self.conn.execute(f"SELECT COUNT(*) FROM {self.t_ids}").fetchone()
        self.conn.commit()
        assert row is not None and ids is not None
        return int(row[0]), int(row[1]), int(ids[0])

    def references_posted_more_than_once(self, limit: int = 20) -> list[tuple[str, int]]:
        rows = self.conn.execute(
            f"SELECT payment_reference, COUNT(*) FROM {self.t_entries} GROUP BY payment_reference "
            f"HAVING COUNT(*) > 1 ORDER BY 2 DESC LIMIT {int(limit)}").fetchall()
        self.conn.commit()
        return [(str(r[0]), int(r[1])) for r in rows]

    def references(self) -> list[str]:
        rows = self.conn.execute(f"SELECT payment_reference FROM {self.t_entries}").fetchall()
        self.conn.commit()
        return [str(r[0]) for r in rows]

    def close(self) -> None:
        self.conn.close()


def open_ledger(target: str | Path, *, prefix: str = "") -> SQLiteLedger | PostgresLedger:
    """A ledger from a path / ``sqlite:///path`` (file) or a ``postgresql://`` URL."""
    text = str(target)
    if prefix and not prefix.replace("_", "").isalnum():
        raise ConfigurationError(f"ledger: table prefix {prefix!r} must be letters, digits and _")
    if text.startswith(("postgresql://", "postgres://")):
        return PostgresLedger(text, prefix=prefix)
    if text.startswith("sqlite://"):  # as the sqlite transport: three slashes absolute, two relative
        parts = urlsplit(text)
        text = unquote(parts.netloc + parts.path)
    elif "://" in text:
        raise ConfigurationError(f"ledger: unsupported URL {text!r} (a file path, sqlite:/// or postgresql://)")
    return SQLiteLedger(text, prefix=prefix)
