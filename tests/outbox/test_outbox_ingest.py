"""``ingest --outbox``: a bulk file's envelopes are staged in the outbox with the batch's record, in one
transaction; a re-run stages nothing; the relay publishes them."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from babelq.envelope import decode
from babelq.outbox import Relay
from babelq.pipelines import TRANSFER_URN
from babelq.pipelines.ingest_outbox import ALREADY_STAGED, RESTAGED, STAGED, batches_table, stage_ingest

from .support import BABELQ, Target, read_all

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.live]

GOOD = {
    "payment_reference": "PAY-1",
    "amount_cents": "150000",
    "currency": "AUD",
    "debtor_bsb": "012-345",
    "debtor_account": "123456789",
    "creditor_bsb": "033-001",
    "creditor_account": "987654321",
    "requested_at": "",
    "ttl_seconds": "",
    "narrative": "Invoice",
}


def _bulk(path: Path, good: int, bad: int) -> Path:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(GOOD))
        writer.writeheader()
        writer.writerows({**GOOD, "payment_reference": f"PAY-{i}"} for i in range(good))
        writer.writerows({**GOOD, "payment_reference": f"BAD-{i}", "currency": "AUX"} for i in range(bad))
    return path


def test_stage_rerun_and_relay(spark: Any, target: Target, tmp_path: Path, unique_queue: str) -> None:
    source = _bulk(tmp_path / "bulk.csv", good=40, bad=3)
    kwargs: dict[str, Any] = {
        "outbox_url": target.url,
        "queue": unique_queue,
        "rejects_path": tmp_path / "rejects",
        "table": target.table,
    }
    first = stage_ingest(spark, source, **kwargs)
    assert (first.status, first.rows_in, first.published, first.rejected) == (STAGED, 43, 40, 3)
    assert target.statuses() == {"pending": 40}
    conn = target.connect()
    [(batch, staged, rejected)] = conn.execute(
        f"SELECT batch_id, staged, rejected FROM {batches_table(target.table)}"
    ).fetchall()
    conn.close()
    assert (batch, staged, rejected) == (first.batch_id, 40, 3)

    again = stage_ingest(spark, source, **kwargs)
    assert (again.status, again.published) == (ALREADY_STAGED, 0)
    assert len(target.rows()) == 40

    broker = f"sqlite://{tmp_path}/broker.db"
    with Relay(target.url, broker, table=target.table) as relay:
        assert relay.drain().published == 40
        bodies = read_all(relay.transport, unique_queue)
    envs = [decode(b) for b in bodies]
    assert {e.urn for e in envs} == {TRANSFER_URN}
    assert {e.correlation_id for e in envs} == {first.batch_id}
    assert sorted(e.data["payment_reference"] for e in envs) == sorted(f"PAY-{i}" for i in range(40))

    restaged = stage_ingest(spark, source, restage=True, **kwargs)
    assert (restaged.status, restaged.published) == (RESTAGED, 40)
    ids = [decode(bytes(b)).id for (b,) in target.rows("body")]
    assert len(ids) == 80 and len(set(ids)) == 40, "the same meta.ids: consumers drop the copies"


def test_a_killed_staging_leaves_nothing_and_a_rerun_stages_once(target: Target, tmp_path: Path) -> None:
    """SIGKILL the ingest while it writes the outbox rows (the transaction is open): nothing of the
    batch is visible, not even its record; running it again stages it exactly once."""
    source = _bulk(tmp_path / "bulk.csv", good=12_000, bad=0)
    args = [
        *BABELQ,
        "ingest",
        str(source),
        "--outbox",
        target.url,
        "--outbox-table",
        target.table,
        "--queue",
        "payments-staged",
        "--rejects",
        str(tmp_path / "rejects"),
    ]
    env = {k: v for k, v in os.environ.items() if k != "BABELQ_BROKER"}
    proc = subprocess.Popen(
        args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        seen_rows = _wait_for_uncommitted_rows(target, proc)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    assert seen_rows, "the kill came while staging"
    assert target.rows() == []
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "12,000 staged in the outbox" in done.stdout
    assert target.statuses() == {"pending": 12_000}


def _wait_for_uncommitted_rows(target: Target, proc: subprocess.Popen[bytes]) -> bool:
    """Wait until the staging transaction has written rows (seen through the sequence / WAL growth)."""
    import time

    end = time.monotonic() + 240
    while time.monotonic() < end and proc.poll() is None:
        if _uncommitted(target):
            return True
        time.sleep(0.05)
    return False


def _uncommitted(target: Target) -> bool:
    conn = target.connect()
    try:
        if target.kind == "sqlite":
            path = Path(target.url.removeprefix("sqlite://") + "-wal")
            return path.exists() and path.stat().st_size > 1_000_000
        [(value,)] = conn.execute(
            "SELECT COALESCE(last_value, 0) FROM pg_sequences WHERE sequencename = %s",
            (f"{target.table}_id_seq",),
        ).fetchall()
        return int(value) > 1000
    finally:
        conn.close()
