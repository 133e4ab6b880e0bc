"""Expired messages nobody consumes reach the DLQ: the sweep (``babelq expire``) and idle workers.

Real brokers: SQLite, Redis in its default layout and in the Laravel layout. Each test checks
the invariants the sweep promises -- an expired message ends in exactly one place, with the
record a worker writes; everything else stays on its queue byte for byte, in order -- and the
refusal of the brokers that cannot be read without consuming (RabbitMQ, SQS).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from babelq.envelope import make
from babelq.errors import ConfigurationError
from babelq.runtime import App, Message
from babelq.runtime.expiry_sweep import ExpirySweep
from babelq.transports import open_transport
from babelq.transports.base import Transport
from expiry_support import drain, ids

URN = "urn:babel:payments:transfer"
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def transport(sweep_broker_url: str) -> Iterator[Transport]:
    opened = open_transport(sweep_broker_url)
    yield opened
    opened.close()


def now_ms() -> int:
    return int(time.time() * 1000)


def test_a_pass_moves_exactly_the_expired_and_leaves_the_rest_byte_identical_in_order(
    transport: Transport, unique_queue: str
) -> None:
    """Seed 001: "ttl_seconds: ... Unconsumed messages expire to DLQ"."""
    past, future = now_ms() - 1_000, now_ms() + 3_600_000
    kept: list[bytes] = []
    expired: list[bytes] = []
    for n in range(23):  # more than a page (page=4 below): the cursor must miss nothing
        if n % 3 == 0:
            body = make(URN, {"n": n}, queue=unique_queue, expire_at=past).encode()
            expired.append(body)
        elif n % 3 == 1:
            body = make(URN, {"n": n, "x": 1e-7}, queue=unique_queue, expire_at=future).encode()
            kept.append(body)
        else:
            body = make(URN, {"n": n}, queue=unique_queue).encode()  # no expire_at at all
            kept.append(body)
        transport.publish(unique_queue, body)
    # judged before expiry by the consume rules: a worker dead-letters these as poison, not expired
    unsupported = (b'{"job":"urn:babel:payments:transfer","trace_id":"t","data":{},"attempts":0,'
                   b'"meta":{"id":"u1","schema_version":2,"expire_at":1}}')  # fmt: skip
    for body in (b"{not json", unsupported, b'{"job":"x","data":{},"meta":{"expire_at":"soon"}}'):
        transport.publish(unique_queue, body)
        kept.append(body)
    delayed_expired = make(URN, {"n": "delayed"}, queue=unique_queue, expire_at=past).encode()
    transport.publish(unique_queue, delayed_expired, delay_ms=3_600_000)
    expired.append(delayed_expired)

    result = ExpirySweep(transport, page=4).sweep(unique_queue)

    assert (result.expired, result.moved) == (len(expired), len(expired))
    assert drain(transport, unique_queue) == kept  # every byte, same order
    records = drain(transport, f"{unique_queue}.dlq")
    assert ids(records) == ids(expired)
    for record in records:
        letter = orjson.loads(record)["dead_letter"]
        shown = (letter["reason"], letter["cause"], letter["original_queue"])
        assert shown == ("failed", "expired", unique_queue)
    assert ExpirySweep(transport).sweep(unique_queue).moved == 0  # nothing left to do


def _normalized(record: bytes) -> dict[str, Any]:
    """A dead letter without what depends on the moment it was written."""
    doc: dict[str, Any] = orjson.loads(record)
    letter = doc["dead_letter"]
    letter.pop("failed_at")
    letter["error"] = letter["error"].rsplit(" passed ", 1)[0]
    return doc


def test_the_record_is_the_one_a_worker_writes(transport: Transport, unique_queue: str) -> None:
    envelope = make(URN, {"amount_cents": 150000, "x": 1e-7}, queue=unique_queue, expire_at=now_ms() - 5)
    body = envelope.with_attempts(2).encode().replace(b'"x":1e-07', b'"x":1e-7')  # as the Node SDK spells it
    assert b'"x":1e-7' in body
    transport.publish(unique_queue, body)
    ExpirySweep(transport).sweep(unique_queue)
    [swept] = drain(transport, f"{unique_queue}.dlq")

    transport.publish(unique_queue, body)
    handled: list[str] = []
    app = App(transport, queue=unique_queue, expire_every=0)
    app.handler(URN)(lambda message: handled.append(message.id))
    app.drain()
    [by_worker] = drain(transport, f"{unique_queue}.dlq")

    assert handled == []
    assert _normalized(swept) == _normalized(by_worker)
    assert b'"x":1e-7' in swept  # the data's bytes as the producer wrote them


def test_a_worker_racing_the_sweep_leaves_every_message_in_exactly_one_place(
    sweep_broker_url: str, unique_queue: str
) -> None:
    past = now_ms() - 1_000
    publisher = open_transport(sweep_broker_url)
    expired = [make(URN, {"n": n}, queue=unique_queue, expire_at=past).encode() for n in range(300)]
    live = [make(URN, {"n": n}, queue=unique_queue).encode() for n in range(300)]
    mixed = [b for pair in zip(expired, live, strict=True) for b in pair]
    for start in range(0, len(mixed), 100):
        for body in mixed[start : start + 100]:
            publisher.publish(unique_queue, body)
    handled: list[str] = []
    lock = threading.Lock()

    def handle(message: Message) -> None:
        with lock:
            handled.append(message.id)

    worker_transport = open_transport(sweep_broker_url)
    app = App(worker_transport, queue=unique_queue, concurrency=2, prefetch=8, expire_every=0)
    app.handler(URN)(handle)
    sweeper = open_transport(sweep_broker_url)
    sweep = ExpirySweep(sweeper, page=7)
    moved = []
    worker = threading.Thread(target=app.drain)
    worker.start()
    while worker.is_alive():  # sweep as often as possible while the worker takes messages
        moved.append(sweep.sweep(unique_queue).moved)
    worker.join()
    moved.append(sweep.sweep(unique_queue).moved)
    app.drain()  # anything put back meanwhile
    stats = app.stats()
    app.close()

    dlq = ids(drain(publisher, f"{unique_queue}.dlq"))
    assert dlq == ids(expired)  # each expired message once, whoever moved it
    assert Counter(handled) == ids(live)  # each live message handled once, no expired one
    assert sum(moved) + stats["expired"] == len(expired)
    assert drain(publisher, unique_queue) == []
    for opened in (publisher, worker_transport, sweeper):
        opened.close()


def test_an_idle_worker_dead_letters_expired_messages_waiting_in_a_delay(
    transport: Transport, unique_queue: str
) -> None:
    """Seed 001: "Unconsumed messages expire to DLQ" -- also one whose delivery is still ahead."""
    past = now_ms() - 1_000
    stale = make(URN, {"n": 1}, queue=unique_queue, expire_at=past).encode()
    later = make(URN, {"n": 2}, queue=unique_queue, expire_at=now_ms() + 3_600_000).encode()
    transport.publish(unique_queue, stale, delay_ms=3_600_000)
    transport.publish(unique_queue, later, delay_ms=3_600_000)

    off = App(transport, queue=unique_queue, expire_every=0)
    off.drain()
    assert drain(transport, f"{unique_queue}.dlq") == []  # switched off: nothing moved

    app = App(transport, queue=unique_queue)
    app.handler(URN)(lambda message: None)
    app.drain()  # finds nothing ready: idle, so it sweeps
    assert app.stats()["expired"] == 1
    assert app.stats()["dead_lettered.failed"] == 1
    assert ids(drain(transport, f"{unique_queue}.dlq")) == ids([stale])
    assert transport.size(unique_queue) == 1  # the one still valid waits out its delay


def test_the_record_keeps_the_published_headers(sweep_broker_url: str, unique_queue: str) -> None:
    transport = open_transport(sweep_broker_url)
    if sweep_broker_url.endswith("laravel=1"):
        pytest.skip("the Laravel layout stores no headers")
    body = make(URN, {"n": 1}, queue=unique_queue, expire_at=now_ms() - 1).encode()
    transport.publish(unique_queue, body, headers={"traceparent": TRACEPARENT})
    ExpirySweep(transport).sweep(unique_queue)
    [record] = transport.reserve(f"{unique_queue}.dlq")
    assert record.carried_headers == {"traceparent": TRACEPARENT}
    transport.close()


def test_expire_every_is_checked() -> None:
    with pytest.raises(ConfigurationError, match="expire_every"):
        App(expire_every=-1)
    with pytest.raises(ConfigurationError, match="expire_every"):
        App().tune(expire_every=-0.5)
    assert App().tune(expire_every=0).tuning.expire_every is None  # 0: never


# -- brokers that cannot be read without consuming ------------------------------------------------


@pytest.mark.live
def test_rabbitmq_is_refused_with_the_reason_and_its_idle_workers_do_not_sweep(unique_queue: str) -> None:
    from conftest import require_service

    require_service("rabbitmq")
    transport = open_transport("amqp://guest:guest@127.0.0.1:5672/")
    try:
        with pytest.raises(ConfigurationError, match="cannot show a queued message without delivering it"):
            ExpirySweep(transport)
        app = App(transport, queue=unique_queue)
        app.drain()
        assert app.stats().get("expiry_sweep_errors", 0) == 0
        transport.purge(unique_queue)
    finally:
        transport.close()


def test_sqs_is_refused_with_the_reason(sqs_url: str) -> None:
    transport = open_transport(sqs_url)
    try:
        with pytest.raises(ConfigurationError, match="cannot show a queued message without receiving it"):
            ExpirySweep(transport)
    finally:
        transport.close()
