"""Consume throughput of babelq.runtime.App (and, for comparison, the babelqueue package).

    .venv/bin/python bench/bench_consume.py --url memory:// --n 50000
    .venv/bin/python bench/bench_consume.py --url redis://127.0.0.1:6379/15 --n 50000
    .venv/bin/python bench/bench_consume.py --url redis://127.0.0.1:6379/15 --n 10000 --baseline

Messages are published first (not timed), then a no-op handler consumes them all with the
runtime's full at-least-once path (decode, classify, middleware chain, batched acks).
Queues get unique names and are purged afterwards.
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="memory://")
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--prefetch", type=int, default=256)
    parser.add_argument("--baseline", action="store_true", help="measure the babelqueue package instead")
    args = parser.parse_args()
    if args.baseline:
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
