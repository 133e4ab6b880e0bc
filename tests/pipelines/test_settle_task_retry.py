"""A settle task killed between its ledger commit and its outbox publish, retried by Spark in the same run.

The crash tests of ``test_settle_crash.py`` kill the whole settle run; the next run publishes what
the dead one committed but never published. On a cluster, one executor can die instead
(``test_cluster_settle_kill.py`` SIGKILLs one): Spark retries its task in the *same* run, the
retry finds the partition's postings and outbox keys already claimed (the first attempt
committed them) and publishes nothing, so unless settle publishes those rows before it calls the
queue drained, the run ends "drained" with dead letters and retries still in the outbox: the
retried payments wait for another run, the DLQ misses its records.

Here the session-wide ``spark`` fixture (``local[2]``: Spark never retries a task) will not do, so
the run is a child process on ``local[2,3]`` (three attempts per task), with the failpoint armed
to SIGKILL only the Python worker that first reaches ``settle.after_sink_commit``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from babelq.envelope import dlq_name, now_ms
from babelq.pipelines.failpoints import ENV as FAILPOINT_ENV
from babelq.pipelines.failpoints import ONCE_ENV
from babelq.pipelines.ledger import open_ledger
from babelq.transports import Outgoing, open_transport
from payment_fixtures import transfer

pytestmark = [pytest.mark.spark, pytest.mark.slow]

CHILD = textwrap.dedent(
    """
    import json, os, sys
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    from babelq.pipelines.settle import settle

    url, queue, ledger, ck = sys.argv[1:5]
    spark = (SparkSession.builder.master("local[2,3]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("OFF")
    run = settle(spark, url=url, queue=queue, ledger=ledger, checkpoint=ck, retry_delay_ms=50,
                 num_partitions=2, timeout=240)
    print(json.dumps({"drained": run.drained, "republished": run.republished,
                      "outcomes": {f"{o}/{c}": n for (o, c), n in run.stats.outcomes.items()}}))
    """
)


def test_a_task_killed_after_its_ledger_commit_is_retried_and_its_outbox_still_published(
    tmp_path: Path, unique_queue: str
) -> None:
    url, ledger_path = f"sqlite://{tmp_path}/q.db", tmp_path / "ledger.db"
    posted = [transfer(f"PAY-{i:04d}", unique_queue) for i in range(400)]
    # creditor accounts ending 0000 fail core banking once: retried, then posted
    flaky = [transfer(f"FLAKY-{i:04d}", unique_queue, creditor_account="12340000") for i in range(40)]
    expired = [transfer(f"OLD-{i:04d}", unique_queue, expire_at=now_ms() - 1) for i in range(30)]
    transport = open_transport(url)
    transport.publish_many(unique_queue, [Outgoing(e.encode()) for e in posted + flaky + expired])
    transport.close()

    env = {**os.environ, FAILPOINT_ENV: "settle.after_sink_commit:process",
           ONCE_ENV: str(tmp_path / "failpoint-fired")}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, url, unique_queue, str(ledger_path), str(tmp_path / "ck")],
        capture_output=True, text=True, timeout=280, env=env, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "failpoint-fired").exists(), "the failpoint never fired: nothing was tested"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["drained"], result

    ledger = open_ledger(ledger_path)
    try:
        entries, _, _ = ledger.totals()
        assert entries == len(posted) + len(flaky), result  # the retried payments too, in this run
        assert ledger.outbox_counts()[1] == 0, "outbox rows left unpublished"  # (total, pending)
    finally:
        ledger.close()
    transport = open_transport(url)
    try:
        assert transport.size(unique_queue) == 0
        assert transport.size(dlq_name(unique_queue)) == len(expired), result
    finally:
        transport.close()
