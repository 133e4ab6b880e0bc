"""babelq and the ``babelqueue`` SDK on the same Redis list, in both directions.

Where they meet (found by probing the keys each side writes):

* babelqueue's default (legacy) layout keeps queue ``q`` in the list ``q`` whatever its
  ``key_prefix`` (that option only applies to its Laravel layout): a stock babelq
  (no ``prefix``) meets it.
* babelqueue's Laravel-compatible layout (``laravel_compat=True``) keeps ``q`` in the list
  ``queues:q``: babelq with ``prefix=queues:`` (URL ``redis://host/0?prefix=queues:``) meets
  it for the ready list (each side then reserves into its own bookkeeping keys).

The list element is the envelope, byte for byte, in both SDKs (docs/standard.md §4).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from babelq.envelope import decode, make
from babelq.transports.base import Outgoing
from conftest import require_service

pytest.importorskip("babelqueue")
redis = pytest.importorskip("redis")
from babelqueue import BabelQueue, EnvelopeCodec  # noqa: E402
from babelqueue.redis_transport import RedisTransport as TheirRedis  # noqa: E402

from babelq.transports.redis import RedisTransport as OurRedis  # noqa: E402

URL = "redis://127.0.0.1:6379/15"
URN = "urn:babel:orders:created"
pytestmark = pytest.mark.live

#: (babelq prefix, babelqueue laravel_compat) pairs under which both SDKs use the same list.
MEETING_POINTS = [("", False), ("queues:", True)]


@pytest.fixture(params=MEETING_POINTS, ids=["legacy-layout", "laravel-layout"])
def pair(request: pytest.FixtureRequest, unique_queue: str) -> Iterator[tuple[OurRedis, Any, str]]:
    require_service("redis")
    ours_prefix, laravel = request.param
    ours = OurRedis.from_url(f"{URL}?prefix={ours_prefix}" if ours_prefix else URL)
    theirs = TheirRedis(URL, laravel_compat=laravel)
    yield ours, theirs, unique_queue
    ours.close()
    theirs.close()
    client = redis.Redis.from_url(URL)
    keys = list(client.scan_iter(match=f"*{unique_queue}*"))  # unique name: only this test's keys
    if keys:
        client.delete(*keys)
    client.close()


def _drain(transport: OurRedis, queue: str, want: int) -> list[Any]:
    got: list[Any] = []
    for _ in range(20):
        if len(got) >= want:
            break
        got += transport.reserve(queue, max_messages=want - len(got), timeout=0.5)
    return got


def test_babelqueue_app_publishes_babelq_consumes(pair: tuple[OurRedis, Any, str]) -> None:
    ours, theirs, queue = pair
    app = BabelQueue(transport=theirs, queue=queue)
    ids = [app.publish(URN, {"order_id": n, "note": "ça/va"}, queue=queue) for n in range(5)]

    got = _drain(ours, queue, 5)

    envelopes = [decode(d.body) for d in got]
    assert [e.id for e in envelopes] == ids
    assert all(e.accepts() for e in envelopes)
    assert [e.data["order_id"] for e in envelopes] == list(range(5))
    ours.ack_many(got)
    assert ours.size(queue) == 0


def test_babelqueue_bytes_arrive_unchanged(pair: tuple[OurRedis, Any, str]) -> None:
    ours, theirs, queue = pair
    bodies = [
        EnvelopeCodec.encode(EnvelopeCodec.make(URN, {"n": n, "e": "🚀"}, queue=queue)) for n in range(3)
    ]
    for body in bodies:
        theirs.publish(queue, body)

    got = _drain(ours, queue, 3)

    assert [d.body for d in got] == [b.encode("utf-8") for b in bodies]
    ours.ack_many(got)


def test_babelq_publishes_babelqueue_pops_identical_bytes(pair: tuple[OurRedis, Any, str]) -> None:
    ours, theirs, queue = pair
    envelopes = [make(URN, {"n": n, "path": "a/b"}, queue=queue) for n in range(3)]
    ours.publish_many(queue, [Outgoing(e.encode(), e) for e in envelopes])

    popped = [theirs.pop(queue, timeout=1) for _ in envelopes]

    assert all(m is not None for m in popped)
    assert [m.body.encode("utf-8") for m in popped] == [e.encode() for e in envelopes]
    for message in popped:
        theirs.ack(message)
    assert ours.size(queue) == 0


def test_babelq_publishes_babelqueue_app_handles(pair: tuple[OurRedis, Any, str]) -> None:
    ours, theirs, queue = pair
    envelope = make(URN, {"order_id": 42}, queue=queue)
    ours.publish(queue, envelope.encode(), envelope=envelope)
    handled: list[tuple[Any, ...]] = []
    app = BabelQueue(transport=theirs, queue=queue)
    app.register(URN, lambda *args: handled.append(args))

    count = app.consume(queue, max_messages=1, timeout=2, handle_signals=False)

    assert count == 1
    [(data, *_)] = handled
    assert data == {"order_id": 42}
    assert ours.size(queue) == 0
    assert ours.reserve(queue, timeout=0.2) == []
