"""babelq and the ``babelqueue`` SDK on the same RabbitMQ queue, in both directions.

Where they meet: both declare a durable, argument-less queue named after the logical queue
on the default exchange, so the queue name alone is the meeting point (babelq's default
``AMQPTransport`` options; ``max_priority``/``queue_type`` would change the declaration, and
babelq then falls back to using the existing queue as is).

A consuming babelq transport prefetches, so each test lets the producing side finish before
the consuming side starts, and never leaves a babelq consumer open on a queue babelqueue pops.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from babelq.bindings import rabbitmq as binding
from babelq.envelope import decode, make
from babelq.transports.amqp import AMQPTransport
from babelq.transports.base import Outgoing
from conftest import require_service

babelqueue = pytest.importorskip("babelqueue")
pytest.importorskip("pika")
from babelqueue import BabelQueue, EnvelopeCodec  # noqa: E402
from babelqueue.pika_transport import PikaTransport  # noqa: E402

URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
URN = "urn:babel:orders:created"
pytestmark = pytest.mark.live


@pytest.fixture
def queue(unique_queue: str) -> Iterator[str]:
    require_service("rabbitmq")
    yield unique_queue
    cleaner = AMQPTransport(URL)
    cleaner.delete_queues(unique_queue)
    cleaner.close()


@pytest.fixture
def theirs() -> Iterator[Any]:
    transport = PikaTransport(URL)
    yield transport
    transport.close()


def _drain(transport: AMQPTransport, queue: str, want: int) -> list[Any]:
    got: list[Any] = []
    for _ in range(50):
        if len(got) >= want:
            break
        got += transport.reserve(queue, max_messages=want - len(got), timeout=0.5)
    return got


def test_babelqueue_app_publishes_babelq_consumes(queue: str, theirs: Any) -> None:
    app = BabelQueue(transport=theirs, queue=queue)
    ids = [app.publish(URN, {"order_id": n, "note": "ça/va"}, queue=queue) for n in range(5)]

    ours = AMQPTransport(URL)
    try:
        got = _drain(ours, queue, 5)
        envelopes = [decode(d.body) for d in got]
        assert [e.id for e in envelopes] == ids
        assert all(e.accepts() for e in envelopes)
        assert [e.data for e in envelopes] == [{"order_id": n, "note": "ça/va"} for n in range(5)]
        for delivery, envelope in zip(got, envelopes, strict=True):
            # The two SDKs project the same contract properties (they may add optional ones).
            ours_projected = binding.project(envelope)
            assert {k: delivery.headers[k] for k in ours_projected} == ours_projected
            assert delivery.attempts(envelope.attempts) == 0
        ours.ack_many(got)
    finally:
        ours.close()


def test_babelqueue_bytes_arrive_unchanged(queue: str, theirs: Any) -> None:
    bodies = [
        EnvelopeCodec.encode(EnvelopeCodec.make(URN, {"n": n, "emoji": "🚀"}, queue=queue)) for n in range(3)
    ]
    for body in bodies:
        theirs.publish(queue, body)

    ours = AMQPTransport(URL, reserve_mode="get")
    try:
        got = _drain(ours, queue, 3)
        assert [d.body for d in got] == [b.encode("utf-8") for b in bodies]
        ours.ack_many(got)
    finally:
        ours.close()


def test_babelq_publishes_babelqueue_pops_identical_bytes(queue: str, theirs: Any) -> None:
    envelopes = [make(URN, {"n": n, "path": "a/b"}, queue=queue) for n in range(3)]
    ours = AMQPTransport(URL)
    ours.publish_many(queue, [Outgoing(e.encode(), e) for e in envelopes])
    ours.close()

    popped = [theirs.pop(queue, timeout=2) for _ in envelopes]

    assert all(m is not None for m in popped)
    assert [m.body.encode("utf-8") for m in popped] == [e.encode() for e in envelopes]
    assert all(EnvelopeCodec.accepts(EnvelopeCodec.decode(m.body)) for m in popped)
    for message in popped:
        theirs.ack(message)


def test_babelq_publishes_babelqueue_app_handles(queue: str, theirs: Any) -> None:
    envelope = make(URN, {"order_id": 42}, queue=queue, trace_id="7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b")
    ours = AMQPTransport(URL)
    ours.publish(queue, envelope.encode(), envelope=envelope)
    ours.close()
    handled: list[tuple[Any, ...]] = []
    app = BabelQueue(transport=theirs, queue=queue)
    app.register(URN, lambda *args: handled.append(args))

    count = app.consume(queue, max_messages=1, timeout=3, handle_signals=False)

    assert count == 1
    [(data, *_)] = handled
    assert data == {"order_id": 42}
    assert theirs.pop(queue, timeout=0.2) is None  # acked by babelqueue: gone


def test_babelq_retry_is_read_by_babelqueue_with_attempts(queue: str, theirs: Any) -> None:
    envelope = make(URN, {"order_id": 7}, queue=queue)
    ours = AMQPTransport(URL, reserve_mode="get")
    try:
        ours.publish(queue, envelope.encode(), envelope=envelope)
        [delivery] = _drain(ours, queue, 1)
        ours.retry(delivery, envelope.with_attempts(1).encode(), delay_ms=0)
    finally:
        ours.close()

    message = theirs.pop(queue, timeout=2)

    assert message is not None
    assert json.loads(message.body)["attempts"] == 1
    assert message.body.encode("utf-8") == envelope.with_attempts(1).encode()
    theirs.ack(message)
