"""Transport throughput: publish/s and consume/s per broker, babelq next to babelqueue.

Both SDKs run against the same live broker in the same process run, interleaved per
broker, with unique queue names. What is measured:

* publish/s -- building, encoding and durably storing N envelopes: babelq through
  ``App.publish_many`` (batches of ``--batch``), babelqueue through ``BabelQueue.publish``
  (its only publish API: one message per call).
* consume/s -- draining those N messages with a no-op handler, at-least-once (every
  message acked after its handler ran): babelq through the runtime ``App.drain`` (reserve a
  batch -> decode -> accepts -> route -> handler -> ack_many), babelqueue through
  ``BabelQueue.consume``.

SQS runs on a local moto server with a small N: it checks the path end to end, its rates say
nothing about AWS ("semantics only"). SQLite has no babelqueue counterpart.

    .venv/bin/python bench/bench_transports.py               # 20k messages per broker
    .venv/bin/python bench/bench_transports.py --messages 5000 --only redis amqp
    .venv/bin/python bench/bench_transports.py --only artemis   # needs rabbitmq_amqp1_0 enabled
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import format_rate, print_table
from babelq.envelope import decode, make
from babelq.runtime import App
from babelq.transports import Outgoing, open_transport
from babelq.transports.sqs import SQSTransport

URN = "urn:babel:bench:noop"
REDIS_URL = "redis://127.0.0.1:6379/0"
AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
#: RabbitMQ's AMQP 1.0 plugin (no Artemis runs here): the artemis:// transport in its rabbitmq flavour
ARTEMIS_URL = "artemis://guest:guest@127.0.0.1:5672?broker=rabbitmq"


@dataclass
class Result:
    broker: str
    sdk: str
    messages: int
    publish_s: float
    consume_s: float
    note: str = ""

    @property
    def publish_rate(self) -> float:
        return self.messages / self.publish_s

    @property
    def consume_rate(self) -> float:
        return self.messages / self.consume_s


def _payload(n: int) -> dict[str, Any]:
    return {"order_id": n, "sku": "ABC-123", "amount_cents": 1999, "note": "ça/va"}


def _noop(*_args: Any) -> None:
    return None


# -- babelq -------------------------------------------------------------------------------------
def bench_babelq(broker: str, url: str, queue: str, n: int, *, batch: int, prefetch: int) -> Result:
    app = App(url, queue=queue, prefetch=prefetch, poll_timeout=0.2)
    app.register(URN, _noop)
    try:
        start = time.perf_counter()
        for first in range(0, n, batch):
            app.publish_many([(URN, _payload(i)) for i in range(first, min(first + batch, n))])
        published = time.perf_counter() - start
        start = time.perf_counter()
        done = app.drain(max_messages=n, timeout=600, wait_delayed=True)  # empty = size() is 0
        consumed = time.perf_counter() - start
        if done != n:
            raise RuntimeError(f"babelq on {broker}: consumed {done} of {n}")
        left = app.transport.size(queue)
        if left:
            raise RuntimeError(f"babelq on {broker}: {left} messages left after the drain")
        return Result(broker, "babelq", n, published, consumed, "runtime App.drain")
    finally:
        app.transport.purge(queue)
        app.close()


def bench_babelq_raw(broker: str, url: str, queue: str, n: int, *, batch: int, prefetch: int) -> Result:
    """The transport alone: publish_many, then reserve batch -> decode -> accepts -> ack_many."""
    transport = open_transport(url)
    try:
        start = time.perf_counter()
        for first in range(0, n, batch):
            outgoing = []
            for i in range(first, min(first + batch, n)):
                envelope = make(URN, _payload(i), queue=queue)
                outgoing.append(Outgoing(envelope.encode(), envelope))
            transport.publish_many(queue, outgoing)
        published = time.perf_counter() - start
        start = time.perf_counter()
        done = 0
        while done < n:
            deliveries = transport.reserve(queue, max_messages=prefetch, timeout=5)
            if not deliveries:
                raise RuntimeError(f"babelq (raw) on {broker}: consumed {done} of {n}")
            for delivery in deliveries:
                if not decode(delivery.body).accepts():
                    raise RuntimeError("a benchmark message was rejected")
            transport.ack_many(deliveries)
            done += len(deliveries)
        consumed = time.perf_counter() - start
        return Result(broker, "babelq-raw", n, published, consumed, "transport loop")
    finally:
        transport.purge(queue)
        transport.close()


# -- babelqueue ---------------------------------------------------------------------------------
def bench_babelqueue(broker: str, transport: Any, queue: str, n: int) -> Result:
    from babelqueue import BabelQueue

    app = BabelQueue(transport=transport, queue=queue)
    app.register(URN, _noop)
    start = time.perf_counter()
    for i in range(n):
        app.publish(URN, _payload(i), queue=queue)
    published = time.perf_counter() - start
    start = time.perf_counter()
    done = app.consume(queue, max_messages=n, timeout=2, handle_signals=False)
    consumed = time.perf_counter() - start
    if done != n:
        raise RuntimeError(f"babelqueue on {broker}: consumed {done} of {n}")
    return Result(broker, "babelqueue", n, published, consumed, "BabelQueue.consume")


# -- brokers ------------------------------------------------------------------------------------
def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def run_sqlite(n: int, batch: int, prefetch: int) -> list[Result]:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/bench.db"
        return [
            bench_babelq("sqlite", url, "bench", n, batch=batch, prefetch=prefetch),
            bench_babelq_raw("sqlite", url, "bench-raw", n, batch=batch, prefetch=prefetch),
        ]


def run_redis(n: int, batch: int, prefetch: int, baseline_n: int) -> list[Result]:
    import redis
    from babelqueue.redis_transport import RedisTransport

    ours_q, raw_q, theirs_q = (f"bench-{kind}-{uuid.uuid4().hex[:8]}" for kind in ("bq", "raw", "base"))
    try:
        ours = bench_babelq("redis", REDIS_URL, ours_q, n, batch=batch, prefetch=prefetch)
        theirs = bench_babelqueue("redis", RedisTransport(REDIS_URL), theirs_q, baseline_n)
        raw = bench_babelq_raw("redis", REDIS_URL, raw_q, n, batch=batch, prefetch=prefetch)
        return [ours, theirs, raw]
    finally:
        client = redis.Redis.from_url(REDIS_URL)
        for queue in (ours_q, raw_q, theirs_q):
            keys = list(client.scan_iter(match=f"*{queue}*"))
            if keys:
                client.delete(*keys)
        client.close()


def run_amqp(n: int, batch: int, prefetch: int, baseline_n: int) -> list[Result]:
    from babelqueue.pika_transport import PikaTransport

    from babelq.transports.amqp import AMQPTransport

    ours_q, raw_q, theirs_q = (f"bench-{kind}-{uuid.uuid4().hex[:8]}" for kind in ("bq", "raw", "base"))
    url = f"{AMQP_URL}?prefetch={4 * prefetch}"  # the broker keeps streaming while a batch is handled
    try:
        ours = bench_babelq("amqp", url, ours_q, n, batch=batch, prefetch=prefetch)
        their_transport = PikaTransport(AMQP_URL)
        try:
            theirs = bench_babelqueue("amqp", their_transport, theirs_q, baseline_n)
        finally:
            their_transport.close()
        raw = bench_babelq_raw("amqp", url, raw_q, n, batch=batch, prefetch=prefetch)
        return [ours, theirs, raw]
    finally:
        cleaner = AMQPTransport(AMQP_URL)
        for queue in (ours_q, raw_q, theirs_q):
            cleaner.delete_queues(queue)
        cleaner.close()


def run_artemis(n: int, batch: int, prefetch: int, baseline_n: int) -> list[Result]:
    """AMQP 1.0 on RabbitMQ 3.10's plugin: babelq's artemis:// next to babelqueue's ArtemisTransport
    (which receives with credit 1: one round trip per message)."""
    from babelqueue.artemis_transport import ArtemisTransport as TheirArtemis

    from babelq.transports.artemis import ArtemisTransport

    ours_q, raw_q, theirs_q = (f"bench-{kind}-{uuid.uuid4().hex[:8]}" for kind in ("bq", "raw", "base"))
    url = f"{ARTEMIS_URL}&prefetch={4 * prefetch}"  # credit keeps messages coming while a batch is handled
    try:
        ours = bench_babelq("artemis", url, ours_q, n, batch=batch, prefetch=prefetch)
        their_transport = TheirArtemis("artemis://guest:guest@127.0.0.1:5672")
        try:
            theirs = bench_babelqueue("artemis", their_transport, theirs_q, baseline_n)
        finally:
            their_transport.close()
        raw = bench_babelq_raw("artemis", url, raw_q, n, batch=batch, prefetch=prefetch)
        for result in (ours, theirs, raw):
            result.note += " (RabbitMQ AMQP 1.0)"
        return [ours, theirs, raw]
    finally:
        cleaner = ArtemisTransport.from_url(ARTEMIS_URL, heartbeat=0)
        for queue in (ours_q, raw_q, theirs_q):
            cleaner.delete_queue(queue)
        cleaner.close()


@contextmanager
def moto_server() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def run_sqs(n: int, batch: int, prefetch: int) -> list[Result]:
    from babelqueue.sqs_transport import SqsTransport

    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(key, "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with moto_server() as endpoint:
        url = f"sqs://?endpoint_url={endpoint}&region=us-east-1"
        ours = bench_babelq("sqs", url, f"bench-bq-{uuid.uuid4().hex[:8]}", n, batch=batch, prefetch=prefetch)
        theirs_q = f"bench-base-{uuid.uuid4().hex[:8]}"
        SQSTransport.from_url(url).queue_url(theirs_q)  # babelqueue does not create queues
        their_transport = SqsTransport(f"sqs://us-east-1?endpoint={endpoint}", wait_time=0)
        theirs = bench_babelqueue("sqs", their_transport, theirs_q, n)
    for result in (ours, theirs):
        result.note += " (moto: semantics only)"
    return [ours, theirs]


# -- report -------------------------------------------------------------------------------------
def report(results: list[Result]) -> None:
    rows = []
    by_broker: dict[str, dict[str, Result]] = {}
    for r in results:
        by_broker.setdefault(r.broker, {})[r.sdk] = r
        rows.append(
            [
                r.broker,
                r.sdk,
                str(r.messages),
                format_rate(r.publish_rate),
                format_rate(r.consume_rate),
                r.note,
            ]
        )
    print_table(["broker", "sdk", "messages", "publish/s", "consume/s", "how"], rows)
    print()
    ratio_rows = []
    for broker, sdks in by_broker.items():
        if "babelq" in sdks and "babelqueue" in sdks:
            theirs = sdks["babelqueue"]
            for label in ("babelq", "babelq-raw"):
                if label in sdks:
                    ours = sdks[label]
                    publish = f"{ours.publish_rate / theirs.publish_rate:.1f}x"
                    consume = f"{ours.consume_rate / theirs.consume_rate:.1f}x"
                    ratio_rows.append([f"{broker} ({label})", publish, consume])
        elif "babelq" in sdks:
            r = sdks["babelq"]
            both = 2 * r.messages / (r.publish_s + r.consume_s)
            ratio_rows.append([broker, "-", f"- (publish+consume {format_rate(both)} msgs/s)"])
    print_table(["broker (ours)", "publish ours/babelqueue", "consume ours/babelqueue"], ratio_rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=20_000, help="messages per broker (default 20000)")
    parser.add_argument(
        "--baseline-messages", type=int, default=None, help="messages for babelqueue (default: --messages)"
    )
    parser.add_argument("--sqs-messages", type=int, default=200, help="messages on moto SQS (default 200)")
    parser.add_argument("--batch", type=int, default=500, help="babelq publish batch size (default 500)")
    parser.add_argument("--prefetch", type=int, default=256, help="babelq App prefetch (default 256)")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=["sqlite", "redis", "amqp", "artemis", "sqs"],
        default=["sqlite", "redis", "amqp", "artemis", "sqs"],
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    n, baseline_n = args.messages, args.baseline_messages or args.messages
    runners: dict[str, Callable[[], list[Result]]] = {
        "sqlite": lambda: run_sqlite(n, args.batch, args.prefetch),
        "redis": lambda: run_redis(n, args.batch, args.prefetch, baseline_n),
        "amqp": lambda: run_amqp(n, args.batch, args.prefetch, baseline_n),
        "artemis": lambda: run_artemis(n, args.batch, args.prefetch, baseline_n),
        "sqs": lambda: run_sqs(args.sqs_messages, args.batch, args.prefetch),
    }
    needs = {"redis": ("127.0.0.1", 6379), "amqp": ("127.0.0.1", 5672), "artemis": ("127.0.0.1", 5672)}
    results: list[Result] = []
    for name in args.only:
        if name in needs and not _reachable(*needs[name]):
            print(f"skipping {name}: server not reachable", file=sys.stderr)
            continue
        print(f"running {name} ...", file=sys.stderr, flush=True)
        results += runners[name]()
    report(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
