"""Ingest's record of the bulk batches it published, so running ingest again is safe.

Ingest can die halfway through publishing a file (a killed job, a lost executor). Running it
again must complete the batch, not double it, and running it on a file that was already
published must publish nothing and say so. Two things make that true:

* every payment's ``meta.id`` is a name-based UUID of the batch id and its payment reference
  (:mod:`babelq.pipelines.payment_ids`), and the batch id defaults to the file's content hash, so the same row
  of the same file is the same message on every run, and settle drops the second copy;
* this journal: one row per batch (its id, the file's SHA-256, rows, state), written before
  the first envelope is published (``publishing``) and when the last one is (``published``).

The journal is a small SQLite file on the driver (``ingest-journal.db`` beside the rejects
output by default), created readable by its owner only.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from babelq.errors import ConfigurationError

PUBLISHING = "publishing"
PUBLISHED = "published"

_CHUNK = 1 << 20


def file_digest(source: str | Path) -> str:
    """SHA-256 of a bulk file, or of a Parquet directory's data files (names and bytes, in name order)."""
    path = Path(source)
    digest = hashlib.sha256()
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith((".", "_")))
        for file in files:
            digest.update(str(file.relative_to(path)).encode("utf-8", "surrogateescape") + b"\0")
            _feed(digest, file)
    else:
        _feed(digest, path)
    return digest.hexdigest()


def _feed(digest: hashlib._Hash, file: Path) -> None:
    with open(file, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)


@dataclass(frozen=True, slots=True)
class BatchRecord:
    """One batch in the journal."""

    batch_id: str
    source: str
    digest: str
    state: str
    rows_in: int
    published: int
    started_at: int
    finished_at: int | None


class IngestJournal:
    """The journal file (see the module docstring)."""

    def __init__(self, path: str | Path, *, beside_rejects: bool = False) -> None:
        """Open (create) the journal at ``path``; ``beside_rejects`` when ``path`` is the default one
        beside the rejects (:func:`default_journal`), so an error names the option that was given."""
        self.path = Path(path)
        if not self.path.parent.is_dir():
            if beside_rejects:
                raise ConfigurationError(
                    f"--rejects: directory {self.path.parent} does not exist (the batch journal is kept "
                    "beside the rejects); create it, or pass --journal PATH")
            raise ConfigurationError(f"--journal: directory {self.path.parent} does not exist")
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            os.close(fd)
        except FileExistsError:
            pass
        except OSError as exc:
            raise ConfigurationError(f"--journal: cannot create {self.path}: {exc.strerror or exc}") from None
        try:
            self.conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            self.conn.execute(
                "CREATE TABLE IF NOT EXISTS ingest_batches (batch_id TEXT PRIMARY KEY, source TEXT NOT NULL, "
                "digest TEXT NOT NULL, state TEXT NOT NULL, rows_in INTEGER NOT NULL DEFAULT 0, "
                "published INTEGER NOT NULL DEFAULT 0, started_at INTEGER NOT NULL, finished_at INTEGER)"
            )
        except sqlite3.DatabaseError as exc:
            raise ConfigurationError(f"--journal: {self.path} is not a usable SQLite file ({exc})") from None

    def get(self, batch_id: str) -> BatchRecord | None:
        row = self.conn.execute(
            "SELECT batch_id, source, digest, state, rows_in, published, started_at, finished_at "
            "FROM ingest_batches WHERE batch_id = ?", (batch_id,)).fetchone()
        return None if row is None else BatchRecord(*row)

    def begin(self, batch_id: str, source: str, digest: str) -> None:
        """Record that ``batch_id`` is being published (again)."""
        self.conn.execute(
            "INSERT INTO ingest_batches (batch_id, source, digest, state, started_at) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (batch_id) DO UPDATE SET state = excluded.state, started_at = excluded.started_at, "
            "source = excluded.source, finished_at = NULL",
            (batch_id, source, digest, PUBLISHING, _now_ms()),
        )

    def finish(self, batch_id: str, rows_in: int, published: int) -> None:
        self.conn.execute(
            "UPDATE ingest_batches SET state = ?, rows_in = ?, published = ?, finished_at = ? "
            "WHERE batch_id = ?",
            (PUBLISHED, rows_in, published, _now_ms(), batch_id),
        )

    def close(self) -> None:
        self.conn.close()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def default_journal(rejects_path: str | Path, name: str = "ingest-journal.db") -> Path:
    """The journal file ``name`` beside the rejects output (a local path)."""
    text = str(rejects_path)
    if "://" in text and not text.startswith("file://"):
        raise ConfigurationError(
            f"--rejects: {text} is not a local path, and the batch journal is kept beside the rejects; "
            "pass --journal PATH (a local file)")
    return Path(text.removeprefix("file://")).resolve().parent / name
