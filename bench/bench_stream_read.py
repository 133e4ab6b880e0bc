"""Streaming reads through the ``babelq`` data source: messages/s and the planner's memory.

What is measured, per broker (SQLite file, live Redis): N payment-sized envelopes (~780 bytes,
about what ingest publishes) are published, then one streaming query with
``Trigger.AvailableNow`` reads them all with ``maxMessagesPerBatch`` per micro-batch and
``numPartitions`` slots; its sink is one aggregate action per micro-batch (count and summed body
length, so every body crosses into Spark). The time is from ``start()`` to the query's end,
acks included (the last batch is acked by the flush batch, before the query ends).

The query's reader lives in Spark's streaming planner process
(``python_streaming_source_runner``); its peak resident set (``VmHWM``) is read from ``/proc``
just before the query ends. Where the planner reserves and ships every body (the design before
issue 11) that peak grows with the batch size; where executor tasks read the broker it does not.

The script uses only the data source's public options, so it runs unchanged against an older
source tree (``PYTHONPATH=/path/to/old/src``) for a before/after comparison in one machine state:

    .venv/bin/python bench/bench_stream_read.py                      # 100k messages, SQLite and Redis
    .venv/bin/python bench/bench_stream_read.py --messages 20000 --only sqlite --batch 2000 20000
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import babelq
from babelq.envelope import make
from babelq.transports import Outgoing, open_transport

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import BENCH_REDIS

REDIS_URL = BENCH_REDIS
RUNNER_MODULE = b"pyspark.sql.streaming.python_streaming_source_runner"


@dataclass
class Row:
    broker: str
    messages: int
    batch: int
    seconds: float
    planner_peak_mb: float

    @property
    def rate(self) -> float:
        return self.messages / self.seconds


def _payments(n: int, queue: str) -> list[Outgoing]:
    out = []
    for i in range(n):
        data = {
            "payment_reference": f"PAY-{i:012d}",
            "amount_cents": 1000 + i % 90_000,
            "currency": "AUD",
            "debtor_bsb": "062-000",
            "debtor_account": f"{10_000_000 + i}",
            "creditor_bsb": "083-004",
            "creditor_account": f"{20_000_000 + i}",
            "narrative": f"invoice {i} for services rendered in the period, Zoë & co / batch 42",
            "requested_at": 1_790_000_000_000 + i,
            "validation_result": {"valid": True, "rules": ["amount", "currency", "bsb", "account", "schema"]},
        }
        env = make(
            "urn:babel:payments:transfer.requested",
            data,
            queue=queue,
            correlation_id="bulk_0123456789abcdef",
            sharding_key=str(data["debtor_account"]),
        )
        out.append(Outgoing(env.encode()))
    return out


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        if int(stat[stat.rindex(b")") + 2 :].split()[1]) == pid:
            found.append(int(entry))
    return found


def _planners(root: int) -> set[int]:
    todo, out = [root], set()
    while todo:
        for child in _children(todo.pop()):
            todo.append(child)
            try:
                with open(f"/proc/{child}/cmdline", "rb") as fh:
                    if RUNNER_MODULE in fh.read():
                        out.add(child)
            except OSError:
                continue
    return out


def _peak_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def run_once(spark: Any, url: str, n: int, batch: int, partitions: int) -> tuple[float, float]:
    from pyspark.sql import functions as sf

    from babelq.spark.datasource import register

    register(spark)
    queue = f"bench-stream-{uuid.uuid4().hex[:8]}"
    transport = open_transport(url)
    try:
        messages = _payments(n, queue)
        for start in range(0, n, 5000):
            transport.publish_many(queue, messages[start : start + 5000])
        del messages
        jvm = int(spark.sparkContext._gateway.proc.pid)
        before = _planners(jvm)
        peak = [0.0]
        seen = [0]

        def sink(df: Any, _batch_id: int) -> None:
            row = df.agg(sf.count("*").alias("n"), sf.sum(sf.length("body")).alias("b")).collect()[0]
            seen[0] += int(row["n"])
            for pid in _planners(jvm) - before:
                peak[0] = max(peak[0], _peak_mb(pid))

        with tempfile.TemporaryDirectory() as ck:
            reader = (
                spark.readStream.format("babelq")
                .option("url", url)
                .option("queue", queue)
                .option("maxMessagesPerBatch", str(batch))
                .option("numPartitions", str(partitions))
                .load()
            )
            started = time.perf_counter()
            query = (
                reader.writeStream.foreachBatch(sink)
                .option("checkpointLocation", ck)
                .trigger(availableNow=True)
                .start()
            )
            stop = threading.Event()

            def watch() -> None:
                while not stop.wait(0.1):
                    for pid in _planners(jvm) - before:
                        peak[0] = max(peak[0], _peak_mb(pid))

            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            query.awaitTermination()
            seconds = time.perf_counter() - started
            stop.set()
            watcher.join()
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))
        if seen[0] != n:
            raise RuntimeError(f"read {seen[0]} of {n} messages")
        left = transport.size(queue)
        if left:
            raise RuntimeError(f"{left} messages were not acked")
        return seconds, peak[0]
    finally:
        transport.purge(queue)
        transport.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--batch", type=int, nargs="+", default=[20_000])
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2, help="best of this many runs per setting")
    parser.add_argument("--only", nargs="+", default=["sqlite", "redis"], choices=["sqlite", "redis"])
    args = parser.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench-stream-read")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    print(f"babelq from {Path(babelq.__file__).resolve().parent}", flush=True)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        for broker in args.only:
            url = f"sqlite://{tmp}/bench.db" if broker == "sqlite" else REDIS_URL
            run_once(spark, url, min(args.messages, 2000), 1000, args.partitions)  # warm-up
            for batch in args.batch:
                best: tuple[float, float] | None = None
                for _ in range(args.rounds):
                    seconds, peak = run_once(spark, url, args.messages, batch, args.partitions)
                    if best is None or seconds < best[0]:
                        best = (seconds, max(peak, best[1] if best else 0.0))
                    else:
                        best = (best[0], max(best[1], peak))
                assert best is not None
                rows.append(Row(broker, args.messages, batch, best[0], best[1]))
                r = rows[-1]
                print(
                    f"{r.broker:7} {r.messages:>8} msgs  batch {r.batch:>6}  {r.seconds:7.2f} s  "
                    f"{r.rate:>9,.0f} msg/s  planner peak RSS {r.planner_peak_mb:7.1f} MB",
                    flush=True,
                )
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
