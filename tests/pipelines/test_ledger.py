"""The ledger posts each message id once, in one transaction with its processed id (SQLite and PostgreSQL)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from babelq.pipelines.ledger import Posting, open_ledger
from conftest import require_service


def _posting(message_id: str, ref: str) -> Posting:
    return Posting(message_id, ref, 100, "AUD", "012-345", "123456", "033-001", "654321", "b1", "t", 0, 1)


def _exercise(target: str, prefix: str = "") -> None:
    ledger = open_ledger(target, prefix=prefix)
    try:
        assert ledger.post([_posting("m1", "R1"), _posting("m2", "R2"), _posting("m1", "R1")]) == ["m1", "m2"]
        assert ledger.post([_posting("m2", "R2"), _posting("m3", "R3")]) == ["m3"]
        assert ledger.already_processed(["m1", "m3", "zz"]) == {"m1", "m3"}
        assert ledger.totals() == (3, 3, 3)
        assert ledger.references_posted_more_than_once() == []
    finally:
        ledger.close()


def test_sqlite_ledger_posts_each_id_once(tmp_path: Path) -> None:
    _exercise(f"sqlite://{tmp_path}/ledger.db")
    _exercise(str(tmp_path / "other.db"), prefix="p_")


@pytest.mark.live
def test_postgres_ledger_posts_each_id_once() -> None:
    require_service("postgres")
    import psycopg

    prefix = f"t_{uuid.uuid4().hex[:8]}_"
    url = "postgresql://postgres@127.0.0.1:5432/test"
    try:
        _exercise(url, prefix=prefix)
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {prefix}processed_ids, {prefix}ledger_entries")
