"""Consume throughput of babelq.runtime.App (and, for comparison, the babelqueue package).

    .venv/bin/python bench/bench_consume.py --url memory:// --n 50000
    .venv/bin/python bench/bench_consume.py --url redis://127.0.0.1:6379/15 --n 50000
    .venv/bin/python bench/bench_consume.py --url redis://127.0.0.1:6379/15 --n 10000 --baseline

Messages are published first (not timed), then a no-op handler consumes them all with the
runtime's full at-least-once path (decode, classify, middleware chain, batched acks).
Queues get unique names and are purged afterwards.

    .venv/bin/python bench/bench_consume.py --shapes --n 20000

``--shapes``: the two handler shapes of a Spark consume pipeline (``babelq.pipelines.consume``)
on the same messages, a no-op per-message handler against a no-op batch handler. Each round
runs one partition (``consume_partition``, what a Spark task runs) over ``--n`` valid messages
into a fresh SQLite sink: the per-message path (a savepoint, a claim and a ``Message`` per
message) against the batch path (the claims of the batch, one call). The rows are the
classified columns the JVM hands to the partition, built here in Python, so no JVM runs and the
figures are the Python side, where the shapes differ. Messages/s (wall) and CPU-µs/message are
the best of the interleaved rounds, printed beside the yardstick.
"""

from __future__ import annotations

import argparse
import time
import uuid

URN = "urn:babel:bench:tick"


def drop_amqp_queue(url: str, queue: str) -> None:
    """RabbitMQ keeps empty durable queues: delete the one this run created."""
    if not url.startswith("amqp"):
        return
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        connection.channel().queue_delete(queue, if_empty=True)
    finally:
        connection.close()


def bench_babelq(url: str, n: int, concurrency: int, prefetch: int) -> float:
    from babelq.runtime import App

    queue = f"bench-{uuid.uuid4().hex[:10]}"
    app = App(url, queue=queue, concurrency=concurrency, prefetch=prefetch)
    handled = [0]

    @app.handler(URN)
    def tick(message: object) -> None:
        handled[0] += 1

    try:
        for start in range(0, n, 1000):
            app.publish_many([(URN, {"i": i, "sku": "ABC-123"}) for i in range(start, min(n, start + 1000))])
        started = time.perf_counter()
        done = app.run_until_empty()
        elapsed = time.perf_counter() - started
        assert done == n == handled[0], (done, handled[0])
    finally:
        app.transport.purge(queue)
        app.close()
        drop_amqp_queue(url, queue)
    return n / elapsed


def bench_baseline(url: str, n: int) -> float:
    from babelqueue import BabelQueue

    queue = f"bench-bq-{uuid.uuid4().hex[:10]}"
    bq = BabelQueue(url, queue=queue)
    handled = [0]

    def tick(*_: object) -> None:
        handled[0] += 1

    bq.register(URN, tick)
    for i in range(n):
        bq.publish(URN, {"i": i, "sku": "ABC-123"})
    started = time.perf_counter()
    bq.consume(max_messages=n, timeout=0.1, handle_signals=False)
    elapsed = time.perf_counter() - started
    drop_amqp_queue(url, queue)
    assert handled[0] == n, handled[0]
    return n / elapsed


def _classified_rows(n: int) -> list[object]:
    """``n`` valid messages as the consume rules' classification hands them to a partition."""
    import orjson
    import pyarrow as pa

    from babelq.envelope import make, now_ms
    from babelq.pipelines.consume.classify import CLASSIFIED

    envelopes = [make(URN, {"i": i, "sku": "ABC-123"}, queue="bench") for i in range(n)]
    now = now_ms()
    nulls = pa.nulls(n)
    columns = {
        "body": pa.array([e.encode() for e in envelopes], pa.binary()),
        "rule": nulls.cast(pa.string()),
        "id": pa.array([e.id for e in envelopes], pa.string()),
        "urn": pa.array([URN] * n, pa.string()),
        "body_attempts": pa.array([0] * n, pa.int64()),
        "attempts": pa.array([0] * n, pa.int64()),
        "on_failure": pa.array(["retry"] * n, pa.string()),
        "delay_ms": nulls.cast(pa.int64()),
        "reject_reason": nulls.cast(pa.string()),
        "data_json": pa.array([orjson.dumps(e.data).decode() for e in envelopes], pa.string()),
        "trace_id": pa.array([e.trace_id for e in envelopes], pa.string()),
        "correlation_id": nulls.cast(pa.string()),
        "read_by": pa.array(["bench"] * n, pa.string()),
        "now": pa.array([now] * n, pa.int64()),
        "stored_at": nulls.cast(pa.int64()),
    }
    table = pa.table([columns[name] for name in CLASSIFIED], names=list(CLASSIFIED))
    return list(table.to_batches(max_chunksize=10_000))


def bench_shapes(n: int, rounds: int) -> None:
    """Per-message against batch no-op handlers, one partition of ``n`` messages a round."""
    import tempfile
    from pathlib import Path

    from _util import format_rate, print_table, yardstick
    from babelq.pipelines.consume import Pipeline
    from babelq.pipelines.consume.partition import ConsumeConfig, consume_partition

    per_message = Pipeline(queue="bench")
    per_message.handler(URN)(lambda message, tx: None)
    per_batch = Pipeline(queue="bench")
    per_batch.batch_handler(URN)(lambda batch, tx: None)
    batches = _classified_rows(n)
    shapes = {"per message": per_message, "per batch": per_batch}
    best: dict[str, tuple[float, float]] = {name: (float("inf"), float("inf")) for name in shapes}
    with tempfile.TemporaryDirectory() as scratch:
        for r in range(rounds + 1):  # round 0 warms up (imports, the sink's first file)
            for name, pipeline in shapes.items():
                where = Path(scratch) / f"{r}-{name.replace(' ', '-')}"
                where.mkdir()
                config = ConsumeConfig(url=f"sqlite://{where}/broker.db", queue="bench",
                                       sink=f"sqlite://{where}/sink.db", pipeline=pipeline)
                started, cpu = time.perf_counter(), time.process_time()
                [outcome] = list(consume_partition(iter(batches), config))
                wall, cpu = time.perf_counter() - started, time.process_time() - cpu
                handled = sum(row["n"] for row in outcome.to_pylist() if row["outcome"] == "handled")
                assert handled == n, (name, handled)
                if r:
                    best[name] = (min(best[name][0], wall), min(best[name][1], cpu))
    print(f"yardstick (10M-iteration loop): {yardstick():.3f} s")
    print(f"one partition of {n:,} valid messages into an SQLite sink, best of {rounds} interleaved rounds")
    base_wall = best["per message"][0]
    print_table(
        ["shape", "messages/s", "CPU-µs/message", "vs per message (wall)"],
        [[name, format_rate(n / wall), f"{cpu / n * 1e6:.1f}", f"{base_wall / wall:.2f}x"]
         for name, (wall, cpu) in best.items()],
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="memory://")
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--prefetch", type=int, default=256)
    parser.add_argument("--baseline", action="store_true", help="measure the babelqueue package instead")
    parser.add_argument("--shapes", action="store_true",
                        help="a Spark consume partition: per-message against batch handlers")
    parser.add_argument("--rounds", type=int, default=5, help="--shapes: interleaved rounds")
    args = parser.parse_args()
    if args.shapes:
        bench_shapes(args.n, args.rounds)
    elif args.baseline:
        rate = bench_baseline(args.url, args.n)
        print(f"babelqueue  {args.url}  n={args.n}: {rate:,.0f} msgs/s")
    else:
        rate = bench_babelq(args.url, args.n, args.concurrency, args.prefetch)
        print(
            f"babelq  {args.url}  n={args.n} concurrency={args.concurrency} prefetch={args.prefetch}: "
            f"{rate:,.0f} msgs/s"
        )


if __name__ == "__main__":
    main()
