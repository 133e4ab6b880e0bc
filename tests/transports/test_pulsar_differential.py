"""babelq's Pulsar transport next to the ``babelqueue`` package's, through one fake client.

Fake-backed: no Pulsar broker runs here. Both transports import ``pulsar`` lazily, so
:func:`transports.fake_pulsar.install` hands both the same recording fake. Given the same
envelope they must ask the client for the same native message (topic, payload bytes,
properties, key, delay) and settle a delivery with the same client calls; and each must
consume what the other published.

Where the two deliberately differ, a test below pins the difference:

* ``meta.sharding_key`` is babelq's message key (docs/standard.md §6); the package sends no key.
* Delays: the package's Pulsar transport has no delayed publish (its runtime re-publishes a
  retry at once); babelq sends ``deliver_after``/``deliver_at`` with the ``bq-delay`` mirror.
* Subscriptions: the package's consumer subscribes at the latest position and its producer
  makes no subscription, so a message it sends before any subscription exists is lost; babelq
  makes the ``babelqueue`` subscription (earliest position) before its first send.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from babelqueue.codec import EnvelopeCodec
from babelqueue.pulsar_transport import PulsarTransport as PackagePulsarTransport

from babelq.envelope import make
from babelq.transports.pulsar import PulsarTransport
from transports import fake_pulsar
from transports.contract import TransportContract

URL = "pulsar://127.0.0.1:6650"
CONFORMANCE = Path(__file__).resolve().parents[1] / "conformance"


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> Iterator[fake_pulsar.FakeBroker]:
    fake = fake_pulsar.install(monkeypatch)
    yield fake
    fake.close()


@pytest.fixture
def ours(broker: fake_pulsar.FakeBroker) -> Iterator[PulsarTransport]:
    transport = PulsarTransport.from_url(URL, admin_url=broker.admin_url())
    yield transport
    transport.close()


@pytest.fixture
def theirs(broker: fake_pulsar.FakeBroker) -> Iterator[PackagePulsarTransport]:
    # builds its client from the (fake) pulsar module; the client's own nack delay is 60 s, too
    # long for a test, so it gets babelq's default (subscribe options pass through)
    transport = PackagePulsarTransport(URL, negative_ack_redelivery_delay_ms=100)
    yield transport
    for resource in (*transport._consumers.values(), *transport._producers.values()):
        with contextlib.suppress(fake_pulsar.AlreadyClosed):
            resource.close()


def _native(send: fake_pulsar.SendRecord) -> dict[str, Any]:
    """What the broker stores for one send, without the broker-assigned id."""
    return {
        "topic": send.topic,
        "content": send.content,
        "properties": send.properties,
        "partition_key": send.partition_key,
        "deliver_at": send.deliver_at,
        "deliver_after": send.deliver_after,
    }


def _envelopes() -> list[tuple[str, bytes]]:
    fixture = (CONFORMANCE / "fixtures" / "order-created.json").read_bytes()
    plain = make("urn:babel:orders:created", {"order_id": 7, "note": "ça/va 🚀"}, queue="orders")
    retried = make("urn:babel:billing:invoice.requested", {"cents": 1999}, queue="billing").with_attempts(3)
    annotated = json.loads(plain.encode())
    annotated["dead_letter"] = {
        "reason": "failed",
        "error": "boom",
        "original_queue": "orders",
        "attempts": 3,
    }
    dlq_body = json.dumps(annotated, ensure_ascii=False, separators=(",", ":")).encode()
    return [
        ("php-fixture-pretty-printed", fixture),
        ("python-non-ascii", plain.encode()),
        ("attempts-3", retried.encode()),
        ("dead-letter-block", dlq_body),
    ]


@pytest.mark.parametrize(("name", "body"), _envelopes(), ids=[n for n, _ in _envelopes()])
def test_pulsar_fake_same_envelope_same_native_message(
    broker: fake_pulsar.FakeBroker,
    ours: PulsarTransport,
    theirs: PackagePulsarTransport,
    name: str,
    body: bytes,
) -> None:
    ours.publish("orders", body)
    theirs.publish("orders", body.decode("utf-8"))
    mine, package = broker.sends
    assert _native(mine) == _native(package), name
    assert mine.topic == "persistent://public/default/orders"
    assert mine.content == body  # byte for byte, whitespace included
    assert set(mine.properties) == {
        "bq-job",
        "bq-trace-id",
        "bq-message-id",
        "bq-schema-version",
        "bq-source-lang",
        "bq-attempts",
    }


_WITHOUT_ATTEMPTS = (
    b'{"job":"urn:babel:orders:created","trace_id":"t-1","data":{},'
    b'"meta":{"id":"m-1","schema_version":1,"lang":"php","created_at":1749132727000}'
)


@pytest.mark.parametrize(
    "body", [_WITHOUT_ATTEMPTS + b"}", _WITHOUT_ATTEMPTS + b',"attempts":null}'], ids=["absent", "null"]
)
def test_pulsar_fake_a_body_without_a_count_projects_zero_attempts(
    broker: fake_pulsar.FakeBroker, ours: PulsarTransport, theirs: PackagePulsarTransport, body: bytes
) -> None:
    """The counter starts at 0 (seed 004): both write ``bq-attempts: 0`` for such a body."""
    ours.publish("orders", body)
    theirs.publish("orders", body.decode("utf-8"))
    mine, package = broker.sends
    assert _native(mine) == _native(package)
    assert mine.properties["bq-attempts"] == "0"


@pytest.mark.parametrize("attempts", [b'"abc"', b'"3"', b"2.0", b"true"])
def test_pulsar_fake_a_count_that_is_no_integer_is_not_projected(
    broker: fake_pulsar.FakeBroker, ours: PulsarTransport, attempts: bytes
) -> None:
    """As on every broker (tests/bindings/test_binding_attempts.py): no ``bq-attempts`` is made
    up for a body whose ``attempts`` is no integer; the body stays authoritative. (The package
    coerces digits and a float, and fails to publish the others.)"""
    ours.publish("orders", _WITHOUT_ATTEMPTS + b',"attempts":' + attempts + b"}")
    [mine] = broker.sends
    assert "bq-attempts" not in mine.properties
    assert mine.properties["bq-message-id"] == "m-1"


def test_pulsar_fake_same_envelope_same_settle_calls(
    broker: fake_pulsar.FakeBroker, ours: PulsarTransport, theirs: PackagePulsarTransport
) -> None:
    """ack -> acknowledge, release/rewind -> negative_acknowledge, on the same message."""
    env = make("urn:babel:orders:created", {"n": 1}, queue="settle")
    ours.publish("settle", env.encode())  # also makes the subscription both consume from

    def settle_calls() -> list[tuple[str, Any]]:
        return [(c[0], c[2]) for c in broker.calls_named("acknowledge", "negative_acknowledge")]

    # the package's consumer: rewind (nack), then ack the redelivery
    got = theirs.pop("settle", timeout=2)
    assert got is not None
    theirs.rewind(got)
    again = theirs.pop("settle", timeout=3)
    assert again is not None
    theirs.ack(again)
    package_calls = settle_calls()
    for resource in theirs._consumers.values():
        resource.close()  # leave the subscription to babelq's consumer

    ours.publish("settle", env.encode())
    [delivery] = ours.reserve("settle", timeout=2)
    ours.release(delivery)
    [redelivered] = ours.reserve("settle", timeout=3)
    ours.ack(redelivered)
    babelq_calls = settle_calls()[len(package_calls) :]

    assert [name for name, _ in package_calls] == ["negative_acknowledge", "acknowledge"]
    assert [name for name, _ in babelq_calls] == [name for name, _ in package_calls]
    for calls in (package_calls, babelq_calls):
        assert calls[0][1] == calls[1][1]  # the same message id, nacked then acked


def test_pulsar_fake_retry_and_dead_letter_sends_match_the_package_runtime(
    broker: fake_pulsar.FakeBroker, ours: PulsarTransport, theirs: PackagePulsarTransport
) -> None:
    """The package's runtime retries with publish_routed(queue, attempts+1 body, bq-job) then ack,
    and dead-letters with publish(<queue>.dlq, annotated) then ack; babelq's retry/dead_letter
    must put the same native messages on the wire."""
    env = make("urn:babel:orders:created", {"n": 2}, queue="rt")
    retried = env.with_attempts(1).encode()
    annotated = b'{"job":"urn:babel:orders:created","dead_letter":{"reason":"failed"}}'
    ours.publish("rt", env.encode())
    [delivery] = ours.reserve("rt", timeout=2)
    ours.retry(delivery, retried, delay_ms=0)
    [second] = ours.reserve("rt", timeout=2)
    ours.dead_letter(second, annotated, dlq="rt.dlq")
    mine = [_native(s) for s in broker.sends[1:]]

    before = len(broker.sends)
    theirs.publish_routed("rt", retried.decode(), "urn:babel:orders:created")
    theirs.publish("rt.dlq", annotated.decode())
    package = [_native(s) for s in broker.sends[before:]]
    assert mine == package
    assert [m["topic"] for m in mine] == [
        "persistent://public/default/rt",
        "persistent://public/default/rt.dlq",
    ]


def test_pulsar_fake_package_consumes_what_babelq_published(
    ours: PulsarTransport, theirs: PackagePulsarTransport
) -> None:
    env = make("urn:babel:orders:created", {"city": "Zürich"}, queue="cross").with_attempts(2)
    ours.publish("cross", env.encode(), envelope=env)
    got = theirs.pop("cross", timeout=2)  # subscribes at "latest": the subscription babelq made keeps it
    assert got is not None
    assert got.body.encode("utf-8") == env.encode()
    assert got.route_urn == "urn:babel:orders:created"
    assert got.native_attempts == 2
    decoded = EnvelopeCodec.decode(got.body)
    assert (decoded["meta"]["id"], decoded["attempts"]) == (env.id, 2)
    theirs.ack(got)


def test_pulsar_fake_babelq_consumes_what_the_package_published(
    broker: fake_pulsar.FakeBroker, ours: PulsarTransport, theirs: PackagePulsarTransport
) -> None:
    assert ours.reserve("back", timeout=0.1) == []  # babelq's consumer is there first
    doc = EnvelopeCodec.make("urn:babel:orders:shipped", {"parcel": "P-1"}, queue="back")
    text = EnvelopeCodec.encode(doc)
    theirs.publish("back", text)
    [delivery] = TransportContract._drain(ours, "back", 1, within=3)
    assert delivery.body == text.encode("utf-8")
    assert delivery.headers == broker.sends[-1].properties
    assert delivery.headers["bq-job"] == "urn:babel:orders:shipped"
    assert delivery.attempts(doc["attempts"]) == 0
    # a release (negative ack) raises the redelivery count that babelq reconciles with
    ours.release(delivery)
    [again] = TransportContract._drain(ours, "back", 1, within=3)
    assert (again.delivery_count, again.attempts(0)) == (2, 1)
    ours.ack(again)


@pytest.mark.parametrize(("body_attempts", "redeliveries"), [(0, 0), (0, 2), (3, 1), (1, 3)])
def test_pulsar_fake_both_reconcile_attempts_alike_after_redeliveries(
    ours: PulsarTransport, theirs: PackagePulsarTransport, body_attempts: int, redeliveries: int
) -> None:
    """Each SDK nacks the same message ``redeliveries`` times, then reads its attempts:
    max(body attempts, redelivery_count) on both sides."""
    env = make("urn:babel:orders:created", {"n": 5}).with_attempts(body_attempts)
    ours.publish("rc-package", env.encode())
    ours.publish("rc-babelq", env.encode())

    got = theirs.pop("rc-package", timeout=2)
    for _ in range(redeliveries):
        assert got is not None
        theirs.rewind(got)
        got = theirs.pop("rc-package", timeout=3)
    assert got is not None
    package_attempts = EnvelopeCodec.decode(got.body)["attempts"]
    theirs.ack(got)

    [delivery] = ours.reserve("rc-babelq", timeout=2)
    for _ in range(redeliveries):
        ours.release(delivery)
        [delivery] = ours.reserve("rc-babelq", timeout=3)
    babelq_attempts = delivery.attempts(env.attempts)
    ours.ack(delivery)

    assert package_attempts == babelq_attempts == max(body_attempts, redeliveries)
    assert delivery.body == env.encode()  # babelq never rewrites the body (the package does)


def test_pulsar_fake_deviation_sharding_key_is_babelqs_message_key(
    broker: fake_pulsar.FakeBroker, ours: PulsarTransport, theirs: PackagePulsarTransport
) -> None:
    env = make("urn:babel:orders:created", {"n": 1}, sharding_key="customer-7")
    ours.publish("keys", env.encode())
    theirs.publish("keys", env.encode().decode())
    mine, package = (_native(s) for s in broker.sends)
    assert (mine.pop("partition_key"), package.pop("partition_key")) == ("customer-7", None)
    assert mine == package  # everything else is the same


def test_pulsar_fake_deviation_only_babelq_delays_natively(
    broker: fake_pulsar.FakeBroker, ours: PulsarTransport, theirs: PackagePulsarTransport
) -> None:
    env = make("urn:babel:orders:created", {"n": 1})
    ours.publish("later", env.encode(), delay_ms=2_000)
    theirs.publish("later", env.encode().decode())
    assert not hasattr(theirs, "publish_delayed")  # the package's Pulsar transport cannot delay
    mine, package = (_native(s) for s in broker.sends)
    assert mine.pop("deliver_after") == timedelta(seconds=2) and package.pop("deliver_after") is None
    assert mine["properties"].pop("bq-delay") == "2000"
    assert mine == package


def test_pulsar_fake_deviation_package_loses_a_first_message_babelq_keeps(
    broker: fake_pulsar.FakeBroker, ours: PulsarTransport, theirs: PackagePulsarTransport
) -> None:
    """With no subscription the broker keeps nothing: the package's first send to a fresh topic
    is gone for every consumer; babelq's first send made the subscription first."""
    theirs.publish("fresh", make("urn:babel:a:b", {}).encode().decode())
    assert ours.reserve("fresh", timeout=0.5) == []
    ours.publish("fresh2", make("urn:babel:a:b", {}).encode())
    assert theirs.pop("fresh2", timeout=2) is not None
