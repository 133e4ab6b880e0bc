"""Settle is a Spark job: every partition of a micro-batch settles at once; retries wait as the runtime's.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from babelq.pipelines.ledger import open_ledger
from babelq.transports import Outgoing, open_transport
from payment_fixtures import transfer

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _stages_of(spark: Any, query_name: str) -> list[tuple[int, int]]:
    """(stage id, tasks) of the last stage of every job a streaming query named ``query_name`` ran.

    A streaming micro-batch's jobs carry the query's name in their description; the last stage of
    a job is the one that ran its action (settle's Python)."""
    sc = spark.sparkContext
    jobs = sc._jsc.sc().statusStore().jobsList(None)
    found: list[tuple[int, int]] = []
    for i in range(jobs.length()):
        job = jobs.apply(i)
        description = job.description()
        if not description.isDefined() or query_name not in description.get():
            continue
        stage_ids = [job.stageIds().apply(k) for k in range(job.stageIds().length())]
        if not stage_ids:  # a job with nothing to run (an empty micro-batch)
            continue
        last = max(stage_ids)
        info = sc.statusTracker().getStageInfo(last)
        if info is not None:
            found.append((last, info.numTasks))
    return found


def test_a_micro_batch_is_settled_by_every_partition_at_once(
    spark: Any, tmp_path: Path, unique_queue: str
) -> None:
    from babelq.pipelines.settle import settle

    url, ledger_path = f"sqlite://{tmp_path}/q.db", tmp_path / "ledger.db"
    envs = [transfer(f"PAY-{i:04d}", unique_queue) for i in range(2_000)]
    open_transport(url).publish_many(unique_queue, [Outgoing(e.encode()) for e in envs])
    run = settle(spark, url=url, queue=unique_queue, ledger=ledger_path, checkpoint=tmp_path / "ck",
                 num_partitions=2, timeout=120)
    assert run.drained and run.stats.count("posted") == 2_000
    # who read each message from the broker: the executor tasks (local mode: the driver's JVM)
    assert sum(run.stats.readers.values()) == run.stats.messages, run.stats.readers
    assert all(who.startswith("executor ") for who in run.stats.readers), run.stats.readers
    stages = _stages_of(spark, f"babelq-settle-{unique_queue}")
    assert stages, "no job of the settle query was recorded"
    assert max(tasks for _, tasks in stages) == 2, stages  # not one task for the whole micro-batch
    ledger = open_ledger(ledger_path)
    try:
        assert ledger.totals() == (2_000, 2_000, 2_000)
    finally:
        ledger.close()


def test_every_micro_batch_after_the_first_reuses_the_generated_code(
    spark: Any, tmp_path: Path, unique_queue: str
) -> None:
    """Nothing in settle's plan changes from one micro-batch to the next, so Spark compiles
    decode's and the rules' code once. (A literal ``now`` in the plan, inlined into the generated
    Java, made every micro-batch compile two classes anew and run them cold.)"""
    from babelq.pipelines.settle import settle

    codegen = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics

    def compiled() -> int:
        return int(codegen.METRIC_COMPILATION_TIME().getCount())

    url, ledger_path = f"sqlite://{tmp_path}/q.db", tmp_path / "ledger.db"
    envs = [transfer(f"PAY-{i:04d}", unique_queue) for i in range(1_200)]
    open_transport(url).publish_many(unique_queue, [Outgoing(e.encode()) for e in envs])
    start = compiled()
    seen: list[tuple[int, int]] = []  # (micro-batches done, classes compiled since the start)
    run = settle(spark, url=url, queue=unique_queue, ledger=ledger_path, checkpoint=tmp_path / "ck",
                 num_partitions=2, max_messages_per_batch=200, timeout=120,
                 on_poll=lambda stats: seen.append((stats.batches, compiled() - start)))
    assert run.drained and run.stats.count("posted") == 1_200
    after_first = [compiled for batches, compiled in seen if batches >= 1]
    assert run.stats.batches >= 6 and after_first, seen
    # at least four more micro-batches ran after the first finished: they compiled (almost) nothing
    assert after_first[-1] - after_first[0] <= 2, seen


def test_retries_wait_a_jittered_backoff_like_the_runtimes(
    spark: Any, tmp_path: Path, unique_queue: str
) -> None:
    """The retry delay is the runtime's full-jitter backoff (uniform in [0, base * 2^(n-1)]), not a
    fixed delay: a batch of failures spreads its retries out."""
    from babelq.pipelines.settle import settle

    url, ledger_path = f"sqlite://{tmp_path}/q.db", tmp_path / "ledger.db"
    closed = [transfer(f"PAY-C{i:02d}", unique_queue, creditor_account="12349999") for i in range(40)]
    open_transport(url).publish_many(unique_queue, [Outgoing(e.encode()) for e in closed])
    started = time.monotonic()
    run = settle(spark, url=url, queue=unique_queue, ledger=ledger_path, checkpoint=tmp_path / "ck",
                 retry_delay_ms=600_000, timeout=12)
    assert time.monotonic() - started < 60
    # the retries wait on the queue (the odd one drawn under 12 s came back and failed again)
    assert not run.drained and run.stats.count("retried") >= 40
    ledger = open_ledger(ledger_path)
    try:
        delays = [int(r[0]) for r in ledger._query(f"SELECT delay_ms FROM {ledger.t_outbox}")]
    finally:
        ledger.close()
    assert len(delays) >= 40
    assert all(0 <= d <= 1_200_000 for d in delays)  # first retry up to the base, second up to twice it
    assert len(set(delays)) > 30  # jittered, not one fixed delay
