"""Both SDKs on one Redis queue at once, in both of the babelqueue SDK's layouts (live Redis).

babelq workers (:class:`babelq.runtime.App`) and babelqueue workers (``BabelQueue.consume``) run
side by side while both SDKs publish: plain messages, delayed ones, ones whose handler fails a
few times first (retries with each SDK's backoff) and ones with out-of-band headers. Every
message must be handled successfully exactly once, by either side, delays must be honoured,
and at the end nothing may be left in any key of the queue: a message stranded in a set the
other SDK never reads would stay there and fail the test.

Both layouts run with babelq's default settings. Default layout: ``delays=lease`` (a delayed body
waits as a reservation due at its time, which the babelqueue SDK's sweep also brings back); the
tests below also show what ``delays=own`` and ``delays=ready`` do with a fleet of babelqueue
consumers only, and that bodies ``delays=own`` left behind are drained after an upgrade.
Laravel layout (``?laravel=1``): both SDKs share ``:delayed``.

Header frames both ways: each SDK's frame is read by the other (envelope handled, headers
exposed), babelq writes the same bytes as the babelqueue SDK, and a retry keeps the headers.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from babelq.envelope import make
from babelq.runtime import App
from babelq.runtime.backoff import Backoff
from babelq.transports import open_transport
from babelq.transports.redis import RedisTransport
from babelq.transports.redis_laravel import RedisLaravelTransport
from conftest import require_service

pytest.importorskip("babelqueue")

from babelqueue import BabelQueue, EnvelopeCodec
from babelqueue.headers import headers_from_context
from babelqueue.redis_transport import RedisTransport as TheirRedis

pytestmark = pytest.mark.live

URN = "urn:babel:mixed:job"
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def url() -> str:
    host, port = require_service("redis")
    return f"redis://{host}:{port}/15"


@pytest.fixture
def raw(url: str, unique_queue: str) -> Iterator[Any]:
    import redis

    client = redis.Redis.from_url(url)
    yield client
    leftovers = list(client.scan_iter(match=f"*{unique_queue}*"))
    if leftovers:
        client.delete(*leftovers)
    client.close()


# -- the shared ledger of handler runs ------------------------------------------------------------


@dataclass
class Ledger:
    """Every handler run of either SDK, keyed by the message's ``data.k``."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    runs: dict[str, list[str]] = field(default_factory=dict)  # k -> SDK of every run
    done: dict[str, list[tuple[str, float]]] = field(default_factory=dict)  # k -> (SDK, when) per success
    headers: dict[str, dict[str, str]] = field(default_factory=dict)  # k -> headers seen at success

    def handle(self, sdk: str, data: Any, headers: Any) -> None:
        k, fail = str(data["k"]), int(data["fail"])
        time.sleep(0.02)  # some work: no worker can take everything, so both SDKs get a share
        with self.lock:
            runs = self.runs.setdefault(k, [])
            runs.append(sdk)
            if len(runs) <= fail:
                raise RuntimeError(f"planned failure {len(runs)} of {fail} for {k}")
            self.done.setdefault(k, []).append((sdk, time.time()))
            self.headers[k] = dict(headers)

    def finished(self, keys: set[str]) -> bool:
        with self.lock:
            return keys <= set(self.done)


def babelq_worker(url: str, queue: str, ledger: Ledger, backoff: Backoff | None = None) -> App:
    app = App(
        url, queue=queue, prefetch=1, max_attempts=5, backoff=backoff, poll_timeout=0.2, grace_period=5
    )

    @app.handler(URN)
    def handle(message: Any) -> None:
        ledger.handle("babelq", message.data, message.headers)

    return app


def babelqueue_worker(transport: Any, queue: str, ledger: Ledger, backoff: float) -> BabelQueue:
    bq = BabelQueue(transport=transport, queue=queue, max_attempts=5, retry_backoff=backoff)

    @bq.handler(URN)
    def handle(data: Any, meta: Any) -> None:
        ledger.handle("babelqueue", data, headers_from_context())

    return bq


@dataclass
class Sent:
    k: str
    by: str
    at: float
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


def run_fleet(
    queue: str,
    *,
    babelq_url: str,
    their_transport: Callable[[], Any],
    produce_babelq: Callable[[list[Sent]], None],
    produce_babelqueue: Callable[[list[Sent]], None],
    within: float = 60.0,
) -> tuple[Ledger, list[Sent]]:
    """Two babelq workers and two babelqueue workers consume while both SDKs publish."""
    ledger = Ledger()
    ours = [babelq_worker(babelq_url, queue, ledger) for _ in range(2)]
    theirs = [babelqueue_worker(their_transport(), queue, ledger, backoff=0.5) for _ in range(2)]
    threads = [threading.Thread(target=a.run, kwargs={"handle_signals": False}) for a in ours]
    threads += [
        threading.Thread(target=b.consume, kwargs={"timeout": 0.2, "handle_signals": False}) for b in theirs
    ]
    for thread in threads:
        thread.start()
    sent_a: list[Sent] = []
    sent_b: list[Sent] = []
    producers = [
        threading.Thread(target=produce_babelq, args=(sent_a,)),
        threading.Thread(target=produce_babelqueue, args=(sent_b,)),
    ]
    try:
        for p in producers:
            p.start()
        for p in producers:
            p.join(timeout=30)
        sent = sent_a + sent_b
        keys = {s.k for s in sent}
        end = time.monotonic() + within
        while not ledger.finished(keys) and time.monotonic() < end:
            time.sleep(0.1)
        time.sleep(1.5)  # a message handled twice would show up in this time
    finally:
        for a in ours:
            a.stop()
        for b in theirs:
            b.stop()
        for thread in threads:
            thread.join(timeout=15)
        for a in ours:
            a.close()
    assert not any(t.is_alive() for t in threads), "a worker did not stop"
    return ledger, sent


def plan(i: int) -> tuple[int, float]:
    """(planned failures, delay in seconds) of the i-th message of a producer."""
    fail = 2 if i % 7 == 3 else 1 if i % 3 == 0 else 0
    delay = 0.3 + (i % 4) * 0.4 if i % 5 == 1 else 0.0
    return fail, delay


def assert_every_message_handled_once(ledger: Ledger, sent: list[Sent]) -> None:
    for s in sent:
        assert s.k in ledger.done, f"{s.k} (sent by {s.by}) was never handled: stranded"
        assert len(ledger.done[s.k]) == 1, f"{s.k} was handled {len(ledger.done[s.k])} times"
        first_run_at = ledger.done[s.k][0][1] if len(ledger.runs[s.k]) == 1 else None
        if s.delay and first_run_at is not None:
            # the babelqueue SDK rounds its own delays to whole seconds (floor(now) + ceil(d))
            early = 1.0 if s.by == "babelqueue" else 0.05
            assert first_run_at >= s.at + s.delay - early, f"{s.k} was handled before its delay"
    assert set(ledger.done) == {s.k for s in sent}
    handled_by = {(s.by, ledger.done[s.k][0][0]) for s in sent}
    # both SDKs handled messages of both producers: they really shared the queue
    assert handled_by == {(p, c) for p in ("babelq", "babelqueue") for c in ("babelq", "babelqueue")}
    retried = [k for k, runs in ledger.runs.items() if len(runs) > 1]
    assert retried and {sdk for k in retried for sdk in ledger.runs[k][:-1]} == {"babelq", "babelqueue"}


def assert_empty(raw: Any, keys: list[str]) -> None:
    left = {key: raw.type(key).decode() for key in keys if raw.exists(key)}
    assert not left, f"keys still holding something at the end: {left}"


# -- the default layout --------------------------------------------------------------------------


def test_mixed_fleet_default_layout(url: str, unique_queue: str, raw: Any) -> None:
    queue = unique_queue
    babelq_url = url  # babelq's default settings: the fleet must work as shipped
    producer = open_transport(babelq_url)
    assert isinstance(producer, RedisTransport) and producer.delays == "lease"
    their_producer = TheirRedis(url)
    n = 60

    def produce_babelq(sent: list[Sent]) -> None:
        for i in range(n):
            fail, delay = plan(i)
            env = make(URN, {"k": f"a{i}", "fail": fail}, queue=queue)
            headers = {"traceparent": TRACEPARENT, "n": str(i)} if i % 4 == 2 else {}
            sent.append(Sent(f"a{i}", "babelq", time.time(), delay, headers))
            producer.publish(queue, env.encode(), envelope=env, delay_ms=int(delay * 1000), headers=headers)
            time.sleep(random.uniform(0, 0.02))

    def produce_babelqueue(sent: list[Sent]) -> None:
        bq = BabelQueue(transport=their_producer, queue=queue)
        for i in range(n):
            fail, _ = plan(i)  # their default layout has no delayed publish
            headers = {"traceparent": TRACEPARENT, "n": str(i)} if i % 4 == 2 else {}
            sent.append(Sent(f"b{i}", "babelqueue", time.time(), 0.0, headers))
            if headers:
                bq.publish_with_headers(URN, {"k": f"b{i}", "fail": fail}, headers)
            else:
                bq.publish(URN, {"k": f"b{i}", "fail": fail})
            time.sleep(random.uniform(0, 0.02))

    try:
        ledger, sent = run_fleet(
            queue,
            babelq_url=babelq_url,
            their_transport=lambda: TheirRedis(url),
            produce_babelq=produce_babelq,
            produce_babelqueue=produce_babelqueue,
        )
        assert_every_message_handled_once(ledger, sent)
        for s in sent:  # header frames both ways, also after retries by either SDK
            assert ledger.headers[s.k] == s.headers, s.k
        suffixes = ("", ":processing", ":processing:deadlines", ":delayed", ".dlq")
        assert_empty(raw, [f"{queue}{suffix}" for suffix in suffixes])
    finally:
        producer.close()


@pytest.mark.parametrize("layout", ["default", "laravel"])
def test_babelqueue_only_fleet_gets_babelq_delays_and_retries_with_default_settings(
    url: str, unique_queue: str, raw: Any, layout: str
) -> None:
    """babelq publishes a delayed message and retries one with its default backoff, then only
    babelqueue workers are left. With babelq's default settings they get both, the delayed one
    not before its time, in either layout: nothing waits where the package never looks."""
    queue = unique_queue
    laravel = layout == "laravel"
    babelq_url = f"{url}?laravel=1" if laravel else url
    ledger = Ledger()
    app = babelq_worker(babelq_url, queue, ledger, Backoff(base_ms=800, cap_ms=800))
    try:
        app.publish(URN, {"k": "retried", "fail": 1})
        assert app.drain(max_messages=1, timeout=5) == 1  # fails once: the retry is in backoff
        published = time.time()
        app.publish(URN, {"k": "delayed", "fail": 0}, delay_ms=1200)
        if not laravel:
            assert raw.exists(f"{queue}:delayed") == 0  # nothing in a set babelqueue never reads
    finally:
        app.close()
    bq = babelqueue_worker(TheirRedis(url, laravel_compat=laravel), queue, ledger, backoff=0)
    end = time.monotonic() + 10
    while len(ledger.done) < 2 and time.monotonic() < end:
        bq.consume(max_messages=1, timeout=0.2, handle_signals=False)
    assert ledger.runs == {"retried": ["babelq", "babelqueue"], "delayed": ["babelqueue"]}
    # the package writes whole-second scores in the Laravel layout and may round a due time up
    assert ledger.done["delayed"][0][1] >= published + 1.2
    if laravel:
        base = f"queues:{queue}"
        assert_empty(raw, [base, f"{base}:reserved", f"{base}:delayed", f"{base}:notify"])
    else:
        assert_empty(raw, [queue, f"{queue}:processing", f"{queue}:processing:deadlines", f"{queue}:delayed"])


def test_delays_left_in_the_delayed_set_by_delays_own_are_drained_by_a_default_worker(
    url: str, unique_queue: str, raw: Any
) -> None:
    """Bodies that ``delays=own`` left in ``<queue>:delayed`` are promoted and handled by a babelq
    worker on the default settings: a change of mode strands nothing."""
    queue = unique_queue
    with open_transport(f"{url}?delays=own") as old:
        for k in ("due", "later"):
            env = make(URN, {"k": k, "fail": 0}, queue=queue)
            old.publish(queue, env.encode(), delay_ms=1 if k == "due" else 700)
    assert raw.zcard(f"{queue}:delayed") == 2
    ledger = Ledger()
    app = babelq_worker(url, queue, ledger)
    try:
        assert isinstance(app.transport, RedisTransport) and app.transport.delays == "lease"
        assert app.transport.size(queue) == 2  # still counted as waiting
        assert app.drain(timeout=10, wait_delayed=True) == 2
    finally:
        app.close()
    assert set(ledger.done) == {"due", "later"}
    assert_empty(raw, [queue, f"{queue}:processing", f"{queue}:processing:deadlines", f"{queue}:delayed"])


def test_delays_own_waits_for_a_babelq_consumer_and_delays_ready_does_not_wait(
    url: str, unique_queue: str, raw: Any
) -> None:
    """``delays=own`` keeps a delayed body in babelq's own ``:delayed`` set, which
    the babelqueue SDK's default layout never reads: a fleet of babelqueue workers only does not
    see it (it is not lost: the first babelq consumer promotes it). ``delays=ready`` puts it
    straight on the list instead (delay not honoured)."""
    queue = unique_queue
    theirs = TheirRedis(url)
    with open_transport(f"{url}?delays=own") as own:
        assert isinstance(own, RedisTransport) and own.delays == "own"
        env = make(URN, {"k": "own", "fail": 0}, queue=queue)
        own.publish(queue, env.encode(), delay_ms=200)
        time.sleep(0.4)
        assert theirs.pop(queue, timeout=0.5) is None  # due, but invisible to babelqueue alone
        assert raw.zcard(f"{queue}:delayed") == 1
        [d] = own.reserve(queue, timeout=1)  # a babelq consumer promotes and takes it
        assert d.body == env.encode()
        own.ack(d)
    with open_transport(f"{url}?delays=ready") as ready:
        env = make(URN, {"k": "ready", "fail": 0}, queue=queue)
        ready.publish(queue, env.encode(), delay_ms=60_000)
        got = theirs.pop(queue, timeout=1)
        assert got is not None and got.body == env.encode().decode()
        theirs.ack(got)
    assert_empty(raw, [queue, f"{queue}:processing", f"{queue}:processing:deadlines", f"{queue}:delayed"])


@pytest.mark.parametrize("mode", ["lease", "own", "ready"])
def test_a_consumer_that_only_moves_from_the_list_gets_delays_only_through_a_sweep(
    url: str, unique_queue: str, raw: Any, mode: str
) -> None:
    """The standard's bare reserve (an atomic move from ``<queue>`` into ``<queue>:processing``,
    no sweep, no delayed set), which is all the Node, Go, Java and .NET Redis consumers do: a
    delayed body reaches it at once with ``ready``, and with ``lease``/``own`` only after another
    worker's sweep has moved it to the list (here a babelqueue sweep, or a babelq reserve)."""
    queue = unique_queue
    processing = f"{queue}:processing"
    with open_transport(f"{url}?delays={mode}") as ours:
        env = make(URN, {"k": mode, "fail": 0}, queue=queue)
        ours.publish(queue, env.encode(), delay_ms=1 if mode != "ready" else 60_000)
        stored = env.encode()
        moved = raw.lmove(queue, processing, "LEFT", "RIGHT")
        if mode == "ready":
            assert moved == stored
        else:
            assert moved is None  # not on the list: whether due or not, nobody has swept yet
            end = time.monotonic() + 10
            while moved is None and time.monotonic() < end:
                if mode == "lease":
                    TheirRedis(url)._sweep(queue)  # what every babelqueue reserve runs first
                else:
                    for taken in ours.reserve(queue, timeout=0.5):  # only babelq promotes :delayed
                        ours.release(taken)
                moved = raw.lmove(queue, processing, "LEFT", "RIGHT")
            assert moved == stored
        assert raw.lrem(processing, 1, stored) == 1  # the bare consumer's ack
    assert_empty(raw, [queue, processing, f"{queue}:processing:deadlines", f"{queue}:delayed"])


def test_delays_option_is_checked(url: str) -> None:
    from babelq.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="delays"):
        open_transport(f"{url}?delays=later")


# -- header frames --------------------------------------------------------------------------------


def test_babelq_writes_the_babelqueue_frame_byte_for_byte(url: str, unique_queue: str, raw: Any) -> None:
    body = make(URN, {"k": "f", "fail": 0, "text": "héllo"}, queue=unique_queue).encode()
    headers = {"traceparent": TRACEPARENT, "tenant": "ünï", "blank": ""}
    theirs = TheirRedis(url)
    with open_transport(url) as ours:
        ours.publish(unique_queue, body, headers=headers)
        theirs.publish_with_headers(f"{unique_queue}-theirs", body.decode(), headers)
        [mine] = raw.lrange(unique_queue, 0, -1)
        [their] = raw.lrange(f"{unique_queue}-theirs", 0, -1)
        assert mine == their
        assert json.loads(mine)["__bq_frame"] == 1
        ours.publish(unique_queue, body, headers={})  # no usable header: the bare envelope
        assert raw.lrange(unique_queue, 1, 1) == [body]
        got = theirs.pop(unique_queue, timeout=1)  # babelqueue reads babelq's frame
        assert got is not None
        assert (got.body, got.headers) == (body.decode(), {"traceparent": TRACEPARENT, "tenant": "ünï"})
        theirs.ack(got)
        [bare] = ours.reserve(unique_queue, timeout=1)
        assert (bare.body, dict(bare.headers)) == (body, {})
        ours.ack(bare)
        ours.purge(f"{unique_queue}-theirs")


def test_a_babelqueue_frame_is_handled_and_a_retry_keeps_its_headers(
    url: str, unique_queue: str, raw: Any
) -> None:
    theirs = TheirRedis(url)
    bq = BabelQueue(transport=theirs, queue=unique_queue)
    bq.publish_with_headers(URN, {"k": "h", "fail": 1}, {"traceparent": TRACEPARENT})
    ledger = Ledger()
    app = babelq_worker(url, unique_queue, ledger, Backoff(base_ms=0))
    try:
        assert app.drain(max_messages=1, timeout=5) == 1  # handled (failed once), not poison
        assert app.stats().get("poison", 0) == 0
        [stored] = raw.lrange(unique_queue, 0, -1)  # the retry: a frame with the same headers
        frame = json.loads(stored)
        assert frame["headers"] == {"traceparent": TRACEPARENT}
        assert json.loads(frame["body"])["attempts"] == 1
    finally:
        app.close()
    worker = babelqueue_worker(theirs, unique_queue, ledger, backoff=0)
    worker.consume(max_messages=1, timeout=1, handle_signals=False)
    assert ledger.runs["h"] == ["babelq", "babelqueue"]
    assert ledger.headers["h"] == {"traceparent": TRACEPARENT}
    assert_empty(raw, [unique_queue, f"{unique_queue}:processing", f"{unique_queue}.dlq"])


def test_a_frame_around_poison_is_dead_lettered_with_its_headers(
    url: str, unique_queue: str, raw: Any
) -> None:
    TheirRedis(url).publish_with_headers(unique_queue, "not json", {"traceparent": TRACEPARENT})
    app = App(url, queue=unique_queue, poll_timeout=0.2)
    try:
        assert app.drain(max_messages=1, timeout=5) == 1
        [dead] = raw.lrange(f"{unique_queue}.dlq", 0, -1)
        frame = json.loads(dead)
        assert frame["headers"] == {"traceparent": TRACEPARENT}
        record = json.loads(frame["body"])
        assert record["raw"] == "not json" and record["dead_letter"]["reason"] == "poison"
    finally:
        app.close()


# -- the Laravel-compatible layout ----------------------------------------------------------------


def test_mixed_fleet_laravel_layout(url: str, unique_queue: str, raw: Any) -> None:
    queue = unique_queue
    babelq_url = f"{url}?laravel=1"  # the layout, and otherwise babelq's default settings
    producer = open_transport(babelq_url)
    assert isinstance(producer, RedisLaravelTransport)
    their_producer = TheirRedis(url, laravel_compat=True)
    n = 60

    def produce_babelq(sent: list[Sent]) -> None:
        for i in range(n):
            fail, delay = plan(i)
            env = make(URN, {"k": f"a{i}", "fail": fail}, queue=queue)
            sent.append(Sent(f"a{i}", "babelq", time.time(), delay))
            producer.publish(queue, env.encode(), envelope=env, delay_ms=int(delay * 1000))
            time.sleep(random.uniform(0, 0.02))

    def produce_babelqueue(sent: list[Sent]) -> None:
        bq = BabelQueue(transport=their_producer, queue=queue)
        for i in range(n):
            fail, delay = plan(i + 2)
            data = {"k": f"b{i}", "fail": fail}
            sent.append(Sent(f"b{i}", "babelqueue", time.time(), delay))
            if delay:
                body = EnvelopeCodec.encode(EnvelopeCodec.make(URN, data, queue=queue))
                their_producer.publish_delayed(queue, body, delay)
            else:
                bq.publish(URN, data)
            time.sleep(random.uniform(0, 0.02))

    try:
        ledger, sent = run_fleet(
            queue,
            babelq_url=babelq_url,
            their_transport=lambda: TheirRedis(url, laravel_compat=True),
            produce_babelq=produce_babelq,
            produce_babelqueue=produce_babelqueue,
        )
        assert_every_message_handled_once(ledger, sent)
        base = f"queues:{queue}"
        assert_empty(raw, [base, f"{base}:reserved", f"{base}:delayed", f"{base}:notify", f"{base}.dlq"])
    finally:
        producer.close()


def test_laravel_layout_both_sdks_write_the_same_keys_and_bytes(
    url: str, unique_queue: str, raw: Any
) -> None:
    """Differential: the same envelope through both SDKs lands on the same keys as the same
    bytes; a delayed one as the same member; each SDK's reservation is a member the other one
    settles; headers are dropped by both (the layout stores bare envelopes)."""
    base = f"queues:{unique_queue}"
    theirs = TheirRedis(url, laravel_compat=True)
    body = make(URN, {"k": "d", "fail": 0}, queue=unique_queue).encode()
    with open_transport(f"{url}?laravel=1") as ours:
        ours.publish(unique_queue, body, headers={"traceparent": TRACEPARENT})
        theirs.publish_with_headers(unique_queue, body.decode(), {"traceparent": TRACEPARENT})
        assert raw.lrange(base, 0, -1) == [body, body]
        assert raw.lrange(f"{base}:notify", 0, -1) == [b"1", b"1"]
        # each SDK reserves one and the other acks it
        mine = ours.reserve(unique_queue, timeout=1)[0]
        their = theirs.pop(unique_queue, timeout=1)
        assert their is not None and mine.body == body and their.body == body.decode()
        reserved = raw.zrange(f"{base}:reserved", 0, -1)
        assert len(reserved) == 1  # identical jobs share a member, as in Laravel
        assert json.loads(reserved[0])["attempts"] == 1
        assert raw.llen(f"{base}:notify") == 0
        theirs.ack(their)  # their ack removes the member both reservations share
        assert raw.zcard(f"{base}:reserved") == 0
        # delayed: the same member in the same set
        delayed = make(URN, {"k": "later", "fail": 0}, queue=unique_queue).encode()
        ours.publish(unique_queue, delayed, delay_ms=5000)
        theirs.publish_delayed(f"{unique_queue}-theirs", delayed.decode(), 5)
        [(member_a, due_a)] = raw.zrange(f"{base}:delayed", 0, -1, withscores=True)
        [(member_b, due_b)] = raw.zrange(f"queues:{unique_queue}-theirs:delayed", 0, -1, withscores=True)
        assert member_a == member_b == delayed
        assert abs(due_a - due_b) <= 1.0
        # a retry by either SDK: the new body in :delayed, the reservation gone
        ours.purge(unique_queue)
        ours.purge(f"{unique_queue}-theirs")
        ours.publish(unique_queue, body)
        [d] = ours.reserve(unique_queue, timeout=1)
        retried = json.dumps({**json.loads(body), "attempts": 1}, separators=(",", ":")).encode()
        ours.retry(d, retried, delay_ms=0)
        assert raw.zcard(f"{base}:reserved") == 0
        assert raw.zrange(f"{base}:delayed", 0, -1) == [retried]
        got = theirs.pop(unique_queue, timeout=1)
        assert got is not None and got.body == retried.decode()
        theirs.redeliver(got, retried.decode().replace('"attempts":1', '"attempts":2'), 0)
        [again] = ours.reserve(unique_queue, timeout=2)
        assert json.loads(again.body)["attempts"] == 2
        ours.ack(again)
        assert_empty(raw, [base, f"{base}:reserved", f"{base}:delayed", f"{base}:notify"])


def test_frame_and_unframe_are_pure_and_match_babelqueue() -> None:
    """The binding's frame functions against the babelqueue SDK's, without a broker."""
    from babelqueue import redis_transport as theirs

    from babelq.bindings.redis import frame, unframe

    body = make(URN, {"k": "p", "fail": 0, "text": "ü/\\\""}, queue="q").encode()
    for headers in ({"traceparent": TRACEPARENT}, {"a": "ü", "": "x", "b": ""}, {}, None):
        framed = frame(body, headers)
        assert framed == theirs._frame_value(body.decode(), headers).encode()
        assert unframe(framed) == (body, {k: v for k, v in (headers or {}).items() if k and v})
    not_frames = (b"", b"not json", b"[1]", b'{"__bq_frame":0,"body":"x"}', b'{"__bq_frame":1,"body":5}')
    for stored in (*not_frames, body):
        assert unframe(stored) == (stored, {})
    with pytest.raises(ValueError, match="UTF-8"):
        frame(b"\xff", {"a": "b"})


def test_laravel_layout_a_crashed_reservation_comes_back_to_the_other_sdk_one_attempt_on(
    url: str, unique_queue: str, raw: Any
) -> None:
    """Laravel's recovery, across SDKs: a reservation that lapses returns as the reserved member
    (``attempts`` + 1), whichever SDK took it and whichever SDK's reserve moves it back."""
    theirs = TheirRedis(url, laravel_compat=True, retry_after=1)
    body = make(URN, {"k": "crash", "fail": 0}, queue=unique_queue).encode()
    with open_transport(f"{url}?laravel=1&visibility_timeout=1") as ours:
        ours.publish(unique_queue, body)
        [taken] = ours.reserve(unique_queue, timeout=1)  # babelq "crashes": never settled
        assert json.loads(taken.body)["attempts"] == 0
        got = None
        end = time.monotonic() + 5
        while got is None and time.monotonic() < end:
            got = theirs.pop(unique_queue, timeout=0.5)
        assert got is not None and json.loads(got.body)["attempts"] == 1  # babelqueue recovered it
        # babelqueue "crashes" too; babelq recovers it in turn
        [again] = ours.reserve(unique_queue, timeout=5)
        assert json.loads(again.body)["attempts"] == 2
        assert json.loads(again.body)["meta"] == json.loads(body)["meta"]
        ours.ack(again)
        base = f"queues:{unique_queue}"
        assert_empty(raw, [base, f"{base}:reserved", f"{base}:delayed", f"{base}:notify"])


def test_laravel_layout_poison_from_babelqueue_is_dead_lettered_by_babelq(
    url: str, unique_queue: str, raw: Any
) -> None:
    TheirRedis(url, laravel_compat=True).publish(unique_queue, "not json")
    app = App(f"{url}?laravel=1", queue=unique_queue, poll_timeout=0.2)
    try:
        assert app.drain(max_messages=1, timeout=5) == 1
        base = f"queues:{unique_queue}"
        [dead] = raw.lrange(f"{base}.dlq", 0, -1)
        record = json.loads(dead)
        assert record["raw"] == "not json" and record["dead_letter"]["reason"] == "poison"
        assert raw.lrange(f"{base}.dlq:notify", 0, -1) == [b"1"]
        assert_empty(raw, [base, f"{base}:reserved", f"{base}:delayed", f"{base}:notify"])
    finally:
        app.close()
