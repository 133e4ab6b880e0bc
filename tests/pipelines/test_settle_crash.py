"""Settle SIGKILLed again and again: the reconciliation still balances, the DLQ counts each message once.

One settle of a bulk file with every kind of defect is run as a real ``babelq settle`` process
group (driver, JVM, Python workers) and killed with SIGKILL, at three failpoints first (each needs
a micro-batch left to fire on), then at random:

* once right after the driver acked a settled micro-batch, before Spark wrote it to the commit
  log (failpoint ``settle.after_batch_ack``: the next run replays a batch whose messages are gone);
* once right after a micro-batch's ledger commit, before its dead letters and retries are
  published (failpoint ``settle.after_sink_commit``);
* once right after the broker accepted those, before the outbox marked them (failpoint
  ``settle.after_outbox_publish``: the one window where a dead letter can be written twice);
* three times at random moments, each shortly after the ledger showed progress (so the kill
  lands mid-micro-batch, not only during start-up), unless that run settled everything first.

Then a last run settles what is left. The demo's own checks decide: every row is rejected,
posted or dead-lettered, each valid payment is posted once, poison is dead-lettered.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kills import gone, kill_after_progress

from babelq.pipelines.failpoints import ENV as FAILPOINT_ENV
from babelq.transports import Outgoing, open_transport

# six cold settle processes: minutes alone, several times that beside other workers on a slow machine
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]

ROWS = 4_000
VISIBILITY = 3.0


def _settle_args(url: str, queue: str, tmp_path: Path) -> list[str]:
    return [
        sys.executable, "-c", "import sys; from babelq.cli.main import main; sys.exit(main())",
        "settle", "--broker", url, "--queue", queue, "--ledger", str(tmp_path / "ledger.db"),
        "--checkpoint", str(tmp_path / "checkpoint"), "--micro-batch", "400", "--retry-delay", "0.2",
        "--visibility-timeout", str(VISIBILITY), "--timeout", "240",
        # six cold JVMs per test on 2 shared cores: C1 only, which compiles far less than it saves here
        "--conf", "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:-DontCompileHugeMethods",
    ]


def _ledger_rows(path: Path) -> int:
    import sqlite3

    if not path.exists():
        return 0
    try:
        with sqlite3.connect(path, timeout=5) as conn:
            found = conn.execute(
                "SELECT (SELECT COUNT(*) FROM processed_ids) + (SELECT COUNT(*) FROM outbox)").fetchone()
            return int(found[0])
    except sqlite3.Error:  # tables not created yet
        return 0


def _kill_after_progress(args: list[str], ledger: Path, rng: random.Random, log: list[str]) -> None:
    kill_after_progress(args, lambda: _ledger_rows(ledger), rng, log, within=1.5)
    time.sleep(VISIBILITY)  # the dead run's leases lapse; the next run takes them again


def _run_to_failpoint(args: list[str], point: str, log: list[str]) -> None:
    env = {**os.environ, FAILPOINT_ENV: point}
    proc = subprocess.Popen(
        args, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    out, _ = proc.communicate(timeout=240)
    log.append(f"failpoint {point}: exit {proc.returncode}")
    assert proc.returncode == -signal.SIGKILL, f"{point} did not fire: {out!r}"
    gone(proc.pid)
    time.sleep(VISIBILITY)


def test_settle_killed_six_times_still_reconciles(spark: Any, tmp_path: Path, unique_queue: str) -> None:
    from babelq.envelope import dlq_name
    from babelq.pipelines.demo import DemoResult, _checks
    from babelq.pipelines.dlq import triage
    from babelq.pipelines.generator import generate_bulk_file, poison_bodies
    from babelq.pipelines.ingest import ingest
    from babelq.pipelines.ledger import open_ledger
    from babelq.pipelines.settle import SettleRun, SettleStats
    from babelq.pipelines.stages import StageClock

    seed = int(os.environ.get("BABELQ_CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    url = f"sqlite://{tmp_path}/q.db"
    bulk = generate_bulk_file(tmp_path / "bulk.csv", ROWS, seed=seed % 1000)
    ingested = ingest(spark, bulk.path, url=url, queue=unique_queue, rejects_path=tmp_path / "rejects")
    transport = open_transport(url)
    transport.publish_many(unique_queue, [Outgoing(b) for b in poison_bodies(max(1, ROWS // 1000))])

    args = _settle_args(url, unique_queue, tmp_path)
    ledger_file = tmp_path / "ledger.db"
    log: list[str] = [f"seed {seed}"]
    # the failpoints first: each needs a micro-batch left to fire on, and three random kills can
    # leave none (a run that drains the queue within its 0-1.5 s before the kill finishes, and a
    # failpoint run then finds nothing to settle). A random kill that finds the work done is only logged.
    _run_to_failpoint(args, "settle.after_batch_ack", log)
    _run_to_failpoint(args, "settle.after_sink_commit", log)
    _run_to_failpoint(args, "settle.after_outbox_publish", log)
    for _ in range(3):
        _kill_after_progress(args, ledger_file, rng, log)
    final = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
    log.append(f"final: exit {final.returncode}: {final.stdout.strip()}")
    assert final.returncode == 0 and "drained" in final.stdout, "\n".join(log) + final.stderr

    dlq = triage(transport, dlq_name(unique_queue))
    ledger = open_ledger(ledger_file)
    try:
        entries, refs, _ = ledger.totals()
        doubles = ledger.references_posted_more_than_once()
        posted = ledger.totals_by_currency()
        assert ledger.outbox_counts()[1] == 0  # every committed dead letter / retry was published
    finally:
        ledger.close()
    result = DemoResult(tmp_path, url, unique_queue, bulk, ingested, SettleRun(SettleStats(), 0.0, True), dlq,
                        entries, refs, doubles, StageClock())
    result.posted_by_currency = posted  # the demo's checks include each currency's value adding up
    checks = _checks(result)
    failed = [f"{c.name}: {c.actual} (expected {c.expected})" for c in checks if not c.ok]
    assert not failed and not doubles, "\n".join([*log, *failed, dlq.table()])
    # copies only come from the publish-then-mark window the last failpoint hit on purpose
    copies = dlq.total - dlq.distinct_messages
    assert copies <= 400, "\n".join([*log, dlq.table()])
    assert transport.size(unique_queue) == 0 and transport.reserved(unique_queue) == 0
