"""Settle on a Spark standalone cluster: messages/s with one worker's executor vs two, same run.

The cluster is the test suite's (``tests/cluster.py``): a master and two workers of 1 core and
1 GB each, started from PySpark's own ``spark-class`` on 127.0.0.1. The broker is the live Redis,
the ledger the live PostgreSQL (a schema of its own per run, dropped afterwards).

Each run is one application on that cluster, driven from this process through the library
(:func:`babelq.pipelines.settle.settle`, the code ``babelq settle --master`` runs):

* ``1 worker``: ``spark.cores.max=1``, so the master gives the application one executor (one
  worker's core);
* ``2 workers``: ``spark.cores.max=2``, one executor on each worker.

Both settle every micro-batch in the same 2 partitions (``num_partitions=2``): the work is split
the same way, only the executors that run the tasks differ. An application first settles a
small warm-up queue (its executors registered, their JVMs and Python workers started and warm),
then the timed queue: N payment messages (default 50k; ``bench_settle``'s mix: 1% transient
core-banking failures, 0.2% closed accounts, 0.3% expired, 0.1% poison, 0.5% redelivered
copies), published to a fresh Redis queue. Timed: the ``settle`` call, query start to "drained".
The two set-ups alternate, round after round (``--rounds``, default 2), so load from neighbours on
a shared machine hits both; printed per run and as median [min - max] with the ratio.

What to expect on one machine: the two workers share its cores with the driver, Redis and
PostgreSQL (on the two-core machine this was written on, 2 executors cannot double anything),
so the ratio says how much of settle's time is executor work that a second executor takes over.
Each run's line also splits the time into the micro-batch bodies (``foreachBatch``: the Spark
jobs that read the broker and settle, where executors work) and the rest (the driver's planning,
acks, triggers and drain check, which no executor speeds up), and gives the partitions' Python
seconds per phase summed over the tasks: the same work done by two executors at once on shared
cores shows up there as longer tasks.

Usage: ``python3 dev.py bench cluster_settle [--rows N] [--batch N] [--rounds N]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # bench_settle: the workload
sys.path.insert(0, str(HERE.parent / "tests"))  # cluster: the test suite's standalone cluster

from _util import BENCH_REDIS, timed_calls  # noqa: E402 - the bench directory is not a package

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # the executors reach the driver at the address it advertises
for _name in ("PYSPARK_SUBMIT_ARGS", "SPARK_CONF_DIR", "MASTER", "BABELQ_SPARK_MASTER"):
    os.environ.pop(_name, None)

REDIS = BENCH_REDIS
POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"
PARTITIONS = 2
WARMUP_ROWS = 4_000
SETUPS = {"1 worker": 1, "2 workers": 2}


@dataclass(frozen=True)
class Run:
    seconds: float
    messages: int
    batches: int
    readers: int  #: executor JVMs that read the broker
    #: seconds inside the micro-batch bodies (foreachBatch: the Spark jobs that read and settle)
    in_batches: float
    #: seconds of the partitions' Python work per phase, summed over the tasks (SettleStats.seconds)
    phases: dict[str, float]

    @property
    def rate(self) -> float:
        return self.messages / self.seconds


def settle_queue(spark: Any, payload: list[bytes], expected: int, *, batch: int, work: Path) -> Run:
    """Publish ``payload`` to a fresh Redis queue, settle it into a PostgreSQL schema of its own, check
    the ledger, clean up."""
    import psycopg

    import babelq.pipelines.consume.query as engine
    import babelq.pipelines.settle.query as settle_module
    from babelq.envelope import dlq_name
    from babelq.pipelines.ledger import open_ledger
    from babelq.transports import Outgoing, open_transport

    tag = uuid.uuid4().hex[:10]
    queue, schema = f"bench-cluster-settle-{tag}", f"bench_cluster_{tag}"
    ledger = f"{POSTGRES}?options=-csearch_path%3D{schema}"
    transport = open_transport(REDIS)
    with psycopg.connect(POSTGRES, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        for start in range(0, len(payload), 20_000):
            transport.publish_many(queue, [Outgoing(b) for b in payload[start:start + 20_000]])
        busy: list[float] = []
        original = engine._process_batch
        engine._process_batch = timed_calls(original, busy)  # type: ignore[assignment]
        try:
            run = settle_module.settle(
                spark, url=REDIS, queue=queue, ledger=ledger, checkpoint=work / f"ck-{tag}",
                retry_delay_ms=50, max_messages_per_batch=batch, num_partitions=PARTITIONS, timeout=900,
            )
        finally:
            engine._process_batch = original  # type: ignore[assignment]
        book = open_ledger(ledger)
        try:
            entries = book.totals()[0]
        finally:
            book.close()
        if not run.drained or entries != expected:
            raise SystemExit(f"run did not settle: drained={run.drained}, posted {entries} of {expected}")
        readers = sum(1 for who in run.stats.readers if who.startswith("executor "))
        return Run(run.seconds, run.stats.messages, run.stats.batches, readers, sum(busy),
                   dict(run.stats.seconds))
    finally:
        transport.purge(queue)
        transport.purge(dlq_name(queue))
        transport.close()
        with psycopg.connect(POSTGRES, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def one_app(master: str, cores: int, payload: list[bytes], expected: int, warmup: tuple[list[bytes], int],
            *, batch: int, work: Path) -> Run:
    """One application with ``spark.cores.max=cores``: warm up, then the timed settle."""
    from babelq.spark.session import get_session

    spark = get_session("babelq-bench-cluster-settle", master=master, **{"spark.cores.max": str(cores)})
    try:
        settle_queue(spark, *warmup, batch=batch, work=work)
        deadline = time.monotonic() + 60
        while spark.sparkContext._jsc.sc().getExecutorIds().size() < cores:  # both, before timing
            if time.monotonic() > deadline:
                raise SystemExit(f"{cores} executors did not register with {master}")
            time.sleep(0.2)
        return settle_queue(spark, payload, expected, batch=batch, work=work)
    finally:
        spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=20_000, help="max messages per micro-batch")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    from bench_settle import bodies
    from cluster import StandaloneCluster  # type: ignore[import-not-found]  # tests/cluster.py, on the path at run time

    payload, expected = bodies(args.rows)
    warmup = bodies(WARMUP_ROWS)
    work = Path(tempfile.mkdtemp(prefix="bench-cluster-settle-"))
    cluster = StandaloneCluster(work / "cluster", workers=2, cores=1, memory="1g")
    cluster.start()
    try:
        print(f"settle of {len(payload):,} messages ({args.rows:,} payments + copies), Redis broker, "
              f"PostgreSQL ledger, standalone cluster {cluster.master_url} (2 workers x 1 core, 1 GB; "
              f"started in {cluster.start_seconds:.1f} s), {PARTITIONS} partitions, micro-batches of "
              f"{args.batch:,}, {os.cpu_count()} CPUs on this machine; {args.rounds} alternated rounds",
              flush=True)
        results: dict[str, list[Run]] = {name: [] for name in SETUPS}
        for round_no in range(1, args.rounds + 1):
            for name, cores in SETUPS.items():
                run = one_app(cluster.master_url, cores, payload, expected, warmup, batch=args.batch,
                              work=work)
                results[name].append(run)
                work_line = ", ".join(f"{k} {v:.1f}" for k, v in run.phases.items())
                print(f"  round {round_no}  {name:<9}  {run.seconds:6.2f} s  {run.rate:8,.0f} msg/s  "
                      f"({run.batches} micro-batches, read by {run.readers} executor JVM(s); foreachBatch "
                      f"{run.in_batches:.2f} s, rest {run.seconds - run.in_batches:.2f} s; partitions' "
                      f"Python seconds summed over tasks: {work_line})", flush=True)
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("summary (median [min - max])")
    medians: dict[str, float] = {}
    for name, runs in results.items():
        rates = [r.rate for r in runs]
        medians[name] = statistics.median(rates)
        inside = [r.in_batches for r in runs]
        print(f"  {name:<9}  {medians[name]:8,.0f} msg/s [{min(rates):,.0f} - {max(rates):,.0f}]   "
              f"foreachBatch {statistics.median(inside):5.2f} s [{min(inside):.2f} - {max(inside):.2f}]")
    print(f"  2 workers / 1 worker: {medians['2 workers'] / medians['1 worker']:.2f}x")


if __name__ == "__main__":
    main()
