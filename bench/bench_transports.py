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

Redis and RabbitMQ run their contenders alternately for ``--rounds`` rounds (default 3), each
round on fresh queues and in the reverse order of the round before, so a burst of load from a
neighbour lands on every side; the table rows are the median round, and a summary after the
tables gives each round's rates, the median and range of the per-round ratios and the load
average around each round. Redis also measures its raw ceiling in every round: the same
reliable-queue layout (ready list -> processing list + deadline set) drained by redis-py alone,
a Lua script reserving a batch and a pipeline acking it, with no decode and no handler; babelq's
consume is then given as a fraction of it.

    .venv/bin/python bench/bench_transports.py               # 20k messages per broker
    .venv/bin/python bench/bench_transports.py --messages 5000 --only redis amqp --rounds 5
    .venv/bin/python bench/bench_transports.py --only artemis   # needs rabbitmq_amqp1_0 enabled

Artemis runs babelq and babelqueue alternately for ``--artemis-rounds`` rounds (default 3): its
table rows are the median round, and a summary after the tables gives each round's rates, the
median and range of the per-round ratios and the load average around each round.
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import socket
import statistics
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
from _util import BENCH_REDIS, format_rate, print_table
from babelq.bindings.redis import keys_for
from babelq.envelope import decode, make
from babelq.runtime import App
from babelq.transports import Outgoing, open_transport
from babelq.transports.sqs import SQSTransport

URN = "urn:babel:bench:noop"
REDIS_URL = BENCH_REDIS
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
    #: this process's CPU seconds during the consume (the client's own cost, less load-sensitive)
    consume_cpu_s: float = 0.0

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
        start, cpu = time.perf_counter(), time.process_time()
        done = app.drain(max_messages=n, timeout=600, wait_delayed=True)  # empty = size() is 0
        consumed, cpu = time.perf_counter() - start, time.process_time() - cpu
        if done != n:
            raise RuntimeError(f"babelq on {broker}: consumed {done} of {n}")
        left = app.transport.size(queue)
        if left:
            raise RuntimeError(f"babelq on {broker}: {left} messages left after the drain")
        return Result(broker, "babelq", n, published, consumed, "runtime App.drain", cpu)
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
    start, cpu = time.perf_counter(), time.process_time()
    done = app.consume(queue, max_messages=n, timeout=2, handle_signals=False)
    consumed, cpu = time.perf_counter() - start, time.process_time() - cpu
    if done != n:
        raise RuntimeError(f"babelqueue on {broker}: consumed {done} of {n}")
    return Result(broker, "babelqueue", n, published, consumed, "BabelQueue.consume", cpu)


# -- the Redis ceiling --------------------------------------------------------------------------
# KEYS: ready, processing, deadlines   ARGV: max messages, deadline, token prefix (24 hex)
# the reliable-queue move babelq's reserve makes, without its sweeps and delivery counts
_CEILING_RESERVE = """
local bodies = redis.call('LPOP', KEYS[1], tonumber(ARGV[1]))
if not bodies then return {} end
redis.call('RPUSH', KEYS[2], unpack(bodies))
local members = {}
for i, body in ipairs(bodies) do
  members[#members + 1] = ARGV[2]
  members[#members + 1] = ARGV[3] .. string.format('%08x', i) .. ':' .. body
end
redis.call('ZADD', KEYS[3], unpack(members))
return bodies
"""


def bench_redis_ceiling(queue: str, n: int, *, batch: int, prefetch: int) -> Result:
    """Redis's raw consume ceiling: Lua batch reserve + pipelined ack with redis-py, no handler.

    The messages are babelq envelopes published by babelq's transport (that publish is timed
    too, but it is babelq's, not a ceiling); the consume does only the broker work a reliable
    at-least-once consumer cannot skip: move a batch to the processing list with a deadline per
    message, then remove each from the processing list and the deadline set.
    """
    import redis

    transport = open_transport(REDIS_URL)
    client = redis.Redis.from_url(REDIS_URL)
    keys = keys_for(queue)
    try:
        start = time.perf_counter()
        for first in range(0, n, batch):
            outgoing = []
            for i in range(first, min(first + batch, n)):
                envelope = make(URN, _payload(i), queue=queue)
                outgoing.append(Outgoing(envelope.encode(), envelope))
            transport.publish_many(queue, outgoing)
        published = time.perf_counter() - start
        reserve = client.register_script(_CEILING_RESERVE)
        start, cpu = time.perf_counter(), time.process_time()
        done = 0
        while done < n:
            prefix = secrets.token_hex(12)
            bodies = reserve(keys=[keys.ready, keys.processing, keys.deadlines],
                             args=[prefetch, time.time() + 60, prefix])
            if not bodies:
                raise RuntimeError(f"redis ceiling: consumed {done} of {n}")
            pipe = client.pipeline(transaction=False)
            for body in bodies:
                pipe.lrem(keys.processing, 1, body)
            pipe.zrem(keys.deadlines, *(
                f"{prefix}{i:08x}".encode("ascii") + b":" + body for i, body in enumerate(bodies, 1)
            ))
            pipe.execute()
            done += len(bodies)
        consumed, cpu = time.perf_counter() - start, time.process_time() - cpu
        if client.zcard(keys.deadlines) or client.llen(keys.processing):
            raise RuntimeError("redis ceiling: reservations left after the acks")
        how = "redis-py: Lua reserve + pipelined ack"
        return Result("redis", "ceiling", n, published, consumed, how, cpu)
    finally:
        client.delete(*keys.all())
        client.close()
        transport.close()


# -- alternated rounds --------------------------------------------------------------------------
#: the alternated rounds' summary lines (redis, amqp), printed after the tables
SUMMARY: list[str] = []


def alternate(
    broker: str, contenders: dict[str, Callable[[], Result]], rounds: int
) -> dict[str, list[Result]]:
    """Run the contenders ``rounds`` times, each round in the reverse order of the one before,
    and add each round's rates, the median and range of the per-round ratios (babelq over
    babelqueue, babelq over the ceiling when there is one) and the load average to SUMMARY."""
    names = list(contenders)
    got: dict[str, list[Result]] = {name: [] for name in names}
    lines: list[str] = []
    for index in range(max(rounds, 1)):
        order = names if index % 2 == 0 else names[::-1]
        load_start = os.getloadavg()[0]
        for name in order:
            got[name].append(contenders[name]())
        load_end = os.getloadavg()[0]
        rates = ", ".join(f"{name} {format_rate(got[name][-1].consume_rate)}" for name in names)
        ours, theirs = got["babelq"][-1], got["babelqueue"][-1]
        extra = ""
        if "ceiling" in got:
            extra = f", {100 * ours.consume_rate / got['ceiling'][-1].consume_rate:.0f}% of the ceiling"
        lines.append(
            f"  round {index + 1} ({' -> '.join(order)}): consume/s {rates} = "
            f"{ours.consume_rate / theirs.consume_rate:.1f}x babelqueue{extra}; publish "
            f"{ours.publish_rate / theirs.publish_rate:.1f}x; load average {load_start:.2f} -> {load_end:.2f}"
        )
    pairs = list(zip(got["babelq"], got["babelqueue"], strict=True))
    SUMMARY.extend([
        f"{broker}: {len(pairs)} alternated rounds of {pairs[0][0].messages} (babelq) vs "
        f"{pairs[0][1].messages} (babelqueue) messages ({os.cpu_count()} CPUs):",
        *lines,
        f"  consume babelq/babelqueue: median {_spread([o.consume_rate / t.consume_rate for o, t in pairs])}",
        f"  publish babelq/babelqueue: median {_spread([o.publish_rate / t.publish_rate for o, t in pairs])}",
        f"  client CPU per consumed message, babelqueue/babelq: median "
        f"{_spread([(t.consume_cpu_s / t.messages) / (o.consume_cpu_s / o.messages) for o, t in pairs])}",
    ])
    if "ceiling" in got:
        fractions = sorted(
            100 * o.consume_rate / c.consume_rate for o, c in zip(got["babelq"], got["ceiling"], strict=True)
        )
        ceilings = sorted(c.consume_rate for c in got["ceiling"])
        SUMMARY.extend([
            f"  raw ceiling (Lua batch reserve + pipelined ack, no handler): {format_rate(ceilings[0])}-"
            f"{format_rate(ceilings[-1])} msgs/s",
            f"  babelq consume / ceiling: median {statistics.median(fractions):.0f}% "
            f"(range {fractions[0]:.0f}-{fractions[-1]:.0f}%)",
        ])
    return got


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


def run_redis(n: int, batch: int, prefetch: int, baseline_n: int, rounds: int = 3) -> list[Result]:
    import redis
    from babelqueue.redis_transport import RedisTransport

    queues: list[str] = []

    def fresh(kind: str) -> str:
        queues.append(f"bench-{kind}-{uuid.uuid4().hex[:8]}")
        return queues[-1]

    try:
        got = alternate("redis", {
            "babelq": lambda: bench_babelq(
                "redis", REDIS_URL, fresh("bq"), n, batch=batch, prefetch=prefetch
            ),
            "babelqueue": lambda: bench_babelqueue(
                "redis", RedisTransport(REDIS_URL), fresh("base"), baseline_n
            ),
            "ceiling": lambda: bench_redis_ceiling(fresh("ceil"), n, batch=batch, prefetch=prefetch),
        }, rounds)
        raw = bench_babelq_raw("redis", REDIS_URL, fresh("raw"), n, batch=batch, prefetch=prefetch)
        return [*(_median_result(got[name]) for name in got), raw]
    finally:
        client = redis.Redis.from_url(REDIS_URL)
        for queue in queues:
            keys = list(client.scan_iter(match=f"*{queue}*"))
            if keys:
                client.delete(*keys)
        client.close()


def run_amqp(n: int, batch: int, prefetch: int, baseline_n: int, rounds: int = 3) -> list[Result]:
    from babelqueue.pika_transport import PikaTransport

    from babelq.transports.amqp import AMQPTransport

    queues: list[str] = []

    def fresh(kind: str) -> str:
        queues.append(f"bench-{kind}-{uuid.uuid4().hex[:8]}")
        return queues[-1]

    def theirs() -> Result:
        their_transport = PikaTransport(AMQP_URL)
        try:
            return bench_babelqueue("amqp", their_transport, fresh("base"), baseline_n)
        finally:
            their_transport.close()

    url = f"{AMQP_URL}?prefetch={4 * prefetch}"  # the broker keeps streaming while a batch is handled
    try:
        got = alternate("amqp", {
            "babelq": lambda: bench_babelq("amqp", url, fresh("bq"), n, batch=batch, prefetch=prefetch),
            "babelqueue": theirs,
        }, rounds)
        raw = bench_babelq_raw("amqp", url, fresh("raw"), n, batch=batch, prefetch=prefetch)
        return [*(_median_result(got[name]) for name in got), raw]
    finally:
        cleaner = AMQPTransport(AMQP_URL)
        for queue in queues:
            cleaner.delete_queues(queue)
        cleaner.close()


#: the artemis rounds' summary lines, printed after the tables
ARTEMIS_SUMMARY: list[str] = []


def _median_result(rounds: list[Result]) -> Result:
    """One row for the table: the median of the rounds' publish and consume times."""
    first = rounds[0]
    note = f"{first.note}, median of {len(rounds)} rounds" if len(rounds) > 1 else first.note
    publish_s = statistics.median(r.publish_s for r in rounds)
    consume_s = statistics.median(r.consume_s for r in rounds)
    cpu_s = statistics.median(r.consume_cpu_s for r in rounds)
    return Result(first.broker, first.sdk, first.messages, publish_s, consume_s, note, cpu_s)


def _us(result: Result) -> str:
    return f"{1e6 * result.consume_cpu_s / result.messages:.0f} us"


def _spread(values: list[float]) -> str:
    ordered = sorted(values)
    median = statistics.median(ordered)
    return f"{median:.1f}x (range {ordered[0]:.1f}x-{ordered[-1]:.1f}x)"


def run_artemis(n: int, batch: int, prefetch: int, baseline_n: int, rounds: int = 3) -> list[Result]:
    """AMQP 1.0 on RabbitMQ 3.10's plugin: babelq's artemis:// next to babelqueue's ArtemisTransport
    (which receives with credit 1: one round trip per message).

    The two SDKs run alternately, ``rounds`` times (babelq first in even rounds, the package first
    in odd ones), each round on fresh queues, so a burst of load from a neighbour lands on both
    sides; the ratios are per round (ours over theirs in the same round) and summarised as the
    median and range, with the load average at the start and end of each round.
    """
    from babelqueue.artemis_transport import ArtemisTransport as TheirArtemis

    from babelq.transports.artemis import ArtemisTransport

    # credit=prefetch keeps 4 batches of credit outstanding: messages keep coming while a batch is
    # handled (as AMQP 0-9-1's prefetch does in the amqp run); every message is still acked only
    # after its handler ran
    url = f"{ARTEMIS_URL}&prefetch={4 * prefetch}&credit=prefetch"
    queues: list[str] = []

    def fresh(kind: str) -> str:
        queues.append(f"bench-{kind}-{uuid.uuid4().hex[:8]}")
        return queues[-1]

    def theirs_round() -> Result:
        their_transport = TheirArtemis("artemis://guest:guest@127.0.0.1:5672")
        try:
            return bench_babelqueue("artemis", their_transport, fresh("base"), baseline_n)
        finally:
            their_transport.close()

    ours_rounds: list[Result] = []
    theirs_rounds: list[Result] = []
    lines: list[str] = []
    try:
        for index in range(max(rounds, 1)):
            load_start = os.getloadavg()[0]
            if index % 2 == 0:
                ours = bench_babelq("artemis", url, fresh("bq"), n, batch=batch, prefetch=prefetch)
                theirs = theirs_round()
            else:
                theirs = theirs_round()
                ours = bench_babelq("artemis", url, fresh("bq"), n, batch=batch, prefetch=prefetch)
            load_end = os.getloadavg()[0]
            ours_rounds.append(ours)
            theirs_rounds.append(theirs)
            lines.append(
                f"  round {index + 1} ({'babelq' if index % 2 == 0 else 'babelqueue'} first): "
                f"consume {format_rate(ours.consume_rate)} vs {format_rate(theirs.consume_rate)} msgs/s "
                f"= {ours.consume_rate / theirs.consume_rate:.1f}x, publish "
                f"{format_rate(ours.publish_rate)} vs {format_rate(theirs.publish_rate)} msgs/s "
                f"= {ours.publish_rate / theirs.publish_rate:.1f}x; client CPU per consumed message "
                f"{_us(ours)} vs {_us(theirs)}; load average {load_start:.2f} -> {load_end:.2f}"
            )
        raw = bench_babelq_raw("artemis", url, fresh("raw"), n, batch=batch, prefetch=prefetch)
    finally:
        cleaner = ArtemisTransport.from_url(ARTEMIS_URL, heartbeat=0)
        for queue in queues:
            cleaner.delete_queue(queue)
        cleaner.close()
    consume = [o.consume_rate / t.consume_rate for o, t in zip(ours_rounds, theirs_rounds, strict=True)]
    cpu = [
        (t.consume_cpu_s / t.messages) / (o.consume_cpu_s / o.messages)
        for o, t in zip(ours_rounds, theirs_rounds, strict=True)
        if o.consume_cpu_s > 0
    ]
    publish = [o.publish_rate / t.publish_rate for o, t in zip(ours_rounds, theirs_rounds, strict=True)]
    cpus = os.cpu_count() or 1
    ARTEMIS_SUMMARY[:] = [
        f"artemis: babelq (App.drain) vs babelqueue, {len(consume)} alternating rounds of "
        f"{n} vs {baseline_n} messages ({cpus} CPUs):",
        *lines,
        f"  consume ours/babelqueue: median {_spread(consume)}",
        f"  publish ours/babelqueue: median {_spread(publish)}",
        f"  client CPU per consumed message, babelqueue/ours: median {_spread(cpu)}" if cpu else "",
    ]
    results = [_median_result(ours_rounds), _median_result(theirs_rounds), raw]
    for result in results:
        result.note += " (RabbitMQ AMQP 1.0)"
    return results


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
    if SUMMARY:
        print()
        print("\n".join(SUMMARY))
    if ARTEMIS_SUMMARY and "artemis" in by_broker:
        print()
        print("\n".join(line for line in ARTEMIS_SUMMARY if line))


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
        "--rounds", type=int, default=3, help="alternated rounds on redis and amqp (default 3)"
    )
    parser.add_argument(
        "--artemis-rounds",
        type=int,
        default=3,
        help="alternating babelq/babelqueue rounds on artemis (default 3)",
    )
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
        "redis": lambda: run_redis(n, args.batch, args.prefetch, baseline_n, args.rounds),
        "amqp": lambda: run_amqp(n, args.batch, args.prefetch, baseline_n, args.rounds),
        "artemis": lambda: run_artemis(n, args.batch, args.prefetch, baseline_n, args.artemis_rounds),
        "sqs": lambda: run_sqs(args.sqs_messages, args.batch, args.prefetch),
    }
    needs = {"redis": ("127.0.0.1", 6379), "amqp": ("127.0.0.1", 5672), "artemis": ("127.0.0.1", 5672)}
    results: list[Result] = []
    load_start = "/".join(f"{x:.2f}" for x in os.getloadavg())
    for name in args.only:
        if name in needs and not _reachable(*needs[name]):
            print(f"skipping {name}: server not reachable", file=sys.stderr)
            continue
        print(f"running {name} ...", file=sys.stderr, flush=True)
        results += runners[name]()
    report(results)
    load_end = "/".join(f"{x:.2f}" for x in os.getloadavg())
    cpus = os.cpu_count()
    print(f"\nload average (1/5/15 min) at the start {load_start}, at the end {load_end} ({cpus} CPUs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
