"""The ledger posts each message id once, in one transaction with its processed id (SQLite and PostgreSQL)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from babelq.pipelines.ledger import Posting, open_ledger
from conftest import require_service


def _posting(message_id: str, ref: str, amount: int = 100, currency: str = "AUD") -> Posting:
    return Posting(message_id, ref, amount, currency, "012-345", "123456", "033-001", "654321", "b1", "t", 0,
                   1)


def _exercise(target: str, prefix: str = "") -> None:
    ledger = open_ledger(target, prefix=prefix)
    try:
        assert ledger.post([_posting("m1", "R1"), _posting("m2", "R2"), _posting("m1", "R1")]) == ["m1", "m2"]
        assert ledger.post([_posting("m2", "R2"), _posting("m3", "R3")]) == ["m3"]
        assert ledger.already_processed(["m1", "m3", "zz"]) == {"m1", "m3"}
        assert ledger.totals() == (3, 3, 3)
        assert ledger.references_posted_more_than_once() == []
        assert ledger.totals_by_currency() == {"AUD": (3, 300)}
        # two amounts whose sum is beyond 64 bits (SQLite's SUM would fail), a duplicate not counted
        big = 2**63 - 1
        ledger.post([_posting("m4", "R4", big, "USD"), _posting("m5", "R5", big, "USD"),
                     _posting("m6", "R6", 7, "JPY"), _posting("m4", "R4", big, "USD")])
        assert ledger.totals_by_currency() == {"AUD": (3, 300), "JPY": (1, 7), "USD": (2, 2 * big)}
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
            tables = ", ".join(f"{prefix}{t}" for t in ("processed_ids", "ledger_entries", "outbox"))
            conn.execute(f"DROP TABLE IF EXISTS {tables}")


@pytest.mark.live
def test_postgres_ledger_reconnects_when_its_connection_is_killed() -> None:
    """A dropped connection is an outage, not the batch's fault: the next transaction reconnects."""
    require_service("postgres")
    import psycopg

    prefix = f"t_{uuid.uuid4().hex[:8]}_"
    url = "postgresql://postgres@127.0.0.1:5432/test"
    ledger = open_ledger(url, prefix=prefix)
    try:
        assert ledger.post([_posting("m1", "R1")]) == ["m1"]
        pid = ledger.conn.info.backend_pid  # type: ignore[attr-defined]
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        assert ledger.post([_posting("m2", "R2"), _posting("m1", "R1")]) == ["m2"]
        assert ledger.totals() == (2, 2, 2)
    finally:
        ledger.close()
        with psycopg.connect(url, autocommit=True) as conn:
            tables = ", ".join(f"{prefix}{t}" for t in ("processed_ids", "ledger_entries", "outbox"))
            conn.execute(f"DROP TABLE IF EXISTS {tables}")


def test_a_ledger_prefix_must_be_an_identifier(tmp_path: Path) -> None:
    from babelq.errors import ConfigurationError

    for bad in ("1x", "a-b", "x; DROP TABLE y"):
        with pytest.raises(ConfigurationError, match="ledger prefix"):
            open_ledger(tmp_path / "l.db", prefix=bad)


def test_a_sqlite_ledger_is_owner_only_and_never_creates_directories(tmp_path: Path) -> None:
    from babelq.errors import ConfigurationError

    ledger = open_ledger(tmp_path / "l.db")
    ledger.close()
    assert (tmp_path / "l.db").stat().st_mode & 0o777 == 0o600
    with pytest.raises(ConfigurationError, match="does not exist"):
        open_ledger(tmp_path / "missing" / "l.db")
    assert not (tmp_path / "missing").exists()


def _rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def test_the_sqlite_ledgers_whole_table_reports_do_not_fill_its_page_cache(tmp_path: Path) -> None:
    """The report's totals scan every entry once: with the big page cache settle's inserts want,
    the scan would grow the driver by the cache's size for nothing (it reads each page once).
    The ledger is written by another process, so this one's allocator holds no freed cache."""
    target = str(tmp_path / "big.db")
    subprocess.run([sys.executable, "-c", _WRITE_BIG_LEDGER, target], check=True, timeout=120)
    assert (tmp_path / "big.db").stat().st_size > 60 * 2**20  # more than the scans may keep
    reader = open_ledger(target)
    try:
        before = _rss_mb()
        assert reader.totals() == (300_000, 300_000, 300_000)
        assert reader.references_posted_more_than_once() == []
        assert reader.totals_by_currency()["AUD"][0] == 300_000
        assert reader.outbox_counts() == (0, 0)
        grew = _rss_mb() - before
    finally:
        reader.close()
    assert grew < 20, f"the reports' scans grew the process by {grew:.0f} MB"


_WRITE_BIG_LEDGER = """
import sys
from babelq.pipelines.ledger import Posting, open_ledger
ledger = open_ledger(sys.argv[1])
for chunk in range(6):
    ledger.post([Posting(f"m{chunk}-{i}", f"REF-{chunk}-{i:06d}-" + "x" * 40, 100 + i, "AUD", "012-345",
                         "123456", "033-001", "654321", "b1", "t", 0, 1) for i in range(50_000)])
ledger.close()
"""
