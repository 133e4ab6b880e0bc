"""Differential test: babelq's ``sb://`` transport against the ``babelqueue`` SDK's ``AsbTransport``,
both driving the same recording fake of azure-servicebus (fake-backed: no Service Bus here).

For the same envelope both must hand the SDK identical native messages: body bytes, Subject,
CorrelationId, MessageId, ContentType, application properties (with the same AMQP typing) and
the same AMQP bytes on the wire; the same settle calls for the same outcome; and each must
consume what the other published. Where they differ on purpose the test says so explicitly:

* DeliveryCount: azure-servicebus reports the 0-based AMQP header (0 on a first receive).
  babelq adds one (docs/standard.md §4: DeliveryCount is 1-based, attempts = max(body, DeliveryCount - 1));
  babelqueue subtracts one from the SDK's value directly, so it reads one attempt fewer on every
  redelivery.
* ``meta.sharding_key`` becomes the SessionId in babelq (docs/standard.md §6); babelqueue sets none.
* Delays: babelqueue's ASB transport has none (its runtime re-publishes at once); babelq schedules.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from babelqueue import BabelQueue
from babelqueue.asb_transport import AsbTransport

from babelq.envelope import annotate, make
from babelq.runtime import App, Message
from babelq.runtime.backoff import Backoff
from babelq.transports.servicebus import ServiceBusTransport
from transports import fake_servicebus as fake

COMPARED = (
    "body",
    "subject",
    "correlation_id",
    "message_id",
    "content_type",
    "session_id",
    "application_properties",
    "scheduled_enqueue_time_utc",
    "wire",
)


@pytest.fixture
def namespace(monkeypatch: pytest.MonkeyPatch) -> fake.Namespace:
    fake.Namespace.registry.clear()
    ns = fake.Namespace()
    fake.install(monkeypatch)
    return ns


@pytest.fixture
def ours(namespace: fake.Namespace) -> Iterator[ServiceBusTransport]:
    transport = ServiceBusTransport.from_url(
        f"sb://{fake.HOST}", connection_string=fake.connection_string(), visibility_timeout=5
    )
    yield transport
    transport.close()


@pytest.fixture
def theirs(namespace: fake.Namespace) -> Iterator[AsbTransport]:
    transport = AsbTransport(f"sb://{fake.HOST}", connection_string=fake.connection_string())
    yield transport
    transport.close()


def _queues(*names: str) -> None:
    """babelqueue creates no queues: make them the way an operator would."""
    admin = fake.ServiceBusAdministrationClient.from_connection_string(fake.connection_string())
    for name in names:
        admin.create_queue(name, lock_duration=fake.MIN_LOCK)


def _last(namespace: fake.Namespace, queue: str, op: str = "send_messages") -> dict[str, Any]:
    call = namespace.calls_of(op, queue=queue)[-1]
    [message] = call.messages
    return message


def _ops(namespace: fake.Namespace, queue: str) -> list[str]:
    """The data-plane calls made on ``queue`` (the test's own queue creation left out)."""
    return [c.op for c in namespace.calls_of(queue=queue) if c.op != "create_queue"]


def _envelopes() -> list[tuple[str, bytes]]:
    plain = make("urn:babel:orders:created", {"order_id": 42, "amount_cents": 1999}, queue="orders")
    unicode = make(
        "urn:babel:crm:contact.updated", {"name": "Zoë", "city": "Zürich", "path": "a/b"}, queue="crm"
    )
    retried = make("urn:babel:orders:created", {"n": 3}, queue="orders").with_attempts(3)
    dead = annotate(plain, "failed", error="boom", original_queue="orders", attempts=3)
    return [
        ("plain", plain.encode()),
        ("unicode", unicode.encode()),
        ("retried", retried.encode()),
        ("dead-letter record", dead.encode()),
        ("not json", b"no envelope here"),
        ("no meta", b'{"job":"urn:babel:t:bare","data":{}}'),
    ]


@pytest.mark.parametrize(("case", "body"), _envelopes(), ids=[c for c, _ in _envelopes()])
def test_servicebus_fake_same_envelope_same_native_message(
    ours: ServiceBusTransport, theirs: AsbTransport, namespace: fake.Namespace, case: str, body: bytes
) -> None:
    _queues("q-ours", "q-theirs")
    ours.publish("q-ours", body)
    theirs.publish("q-theirs", body.decode("utf-8"))
    mine, other = _last(namespace, "q-ours"), _last(namespace, "q-theirs")
    compared = COMPARED
    if case in ("not json", "no meta"):
        # no meta.id to project: the SDK mints a random MessageId for each, so it (and the bytes
        # that carry it) cannot match; both must still have one
        assert mine["message_id"] and other["message_id"]
        compared = tuple(k for k in COMPARED if k not in ("message_id", "wire"))
    for key in compared:
        assert mine[key] == other[key], f"{case}: {key} differs: {mine[key]!r} != {other[key]!r}"
    assert _ops(namespace, "q-ours") == _ops(namespace, "q-theirs") == ["send_messages"]


def test_servicebus_fake_sharding_key_sets_no_session_unless_asked(
    ours: ServiceBusTransport, theirs: AsbTransport, namespace: fake.Namespace
) -> None:
    """By default babelq sends what the package sends (no SessionId: seed 000 makes it opt-in);
    ``session_by=sharding_key`` is babelq's explicit, documented difference."""
    _queues("q-ours", "q-theirs")
    body = make("urn:babel:orders:created", {"n": 1}, sharding_key="customer-7").encode()
    ours.publish("q-ours", body)
    theirs.publish("q-theirs", body.decode())
    mine, other = _last(namespace, "q-ours"), _last(namespace, "q-theirs")
    assert (mine["session_id"], other["session_id"]) == (None, None)
    for key in ("body", "subject", "correlation_id", "message_id", "application_properties"):
        assert mine[key] == other[key]
    keyed = ServiceBusTransport.from_url(
        f"sb://{fake.HOST}", connection_string=fake.connection_string(), session_by="sharding_key"
    )
    try:
        keyed.publish("q-ours", body)
    finally:
        keyed.close()
    assert _last(namespace, "q-ours")["session_id"] == "customer-7"


def test_servicebus_fake_each_consumes_what_the_other_published(
    ours: ServiceBusTransport, theirs: AsbTransport, namespace: fake.Namespace
) -> None:
    _queues("to-theirs", "to-ours")
    env = make("urn:babel:orders:created", {"name": "Zoë", "cents": 1999}, queue="to-theirs")
    ours.publish("to-theirs", env.encode(), envelope=env)
    received = theirs.pop("to-theirs", timeout=1)
    assert received is not None
    assert received.body.encode("utf-8") == env.encode()
    assert received.route_urn == ""  # our bq-schema-version passes their gate
    theirs.ack(received)

    their_body = make("urn:babel:billing:invoice.requested", {"id": 9}, queue="to-ours").encode()
    theirs.publish("to-ours", their_body.decode())
    [delivery] = ours.reserve("to-ours", timeout=1)
    assert delivery.body == their_body
    doc = json.loads(their_body)
    assert delivery.headers["subject"] == doc["job"]
    assert delivery.headers["correlation_id"] == doc["trace_id"]
    assert delivery.headers["application_properties"]["bq-created-at"] == doc["meta"]["created_at"]
    assert (delivery.delivery_count, delivery.attempts(0)) == (1, 0)
    ours.ack(delivery)

    assert (
        _ops(namespace, "to-theirs")
        == _ops(namespace, "to-ours")
        == [
            "send_messages",
            "receive_messages",
            "complete_message",
        ]
    )


def test_servicebus_fake_same_settle_calls_for_ack_and_abandon(
    ours: ServiceBusTransport, theirs: AsbTransport, namespace: fake.Namespace
) -> None:
    _queues("s-ours", "s-theirs")
    body = make("urn:babel:orders:created", {"n": 1}).encode()
    ours.publish("s-ours", body)
    theirs.publish("s-theirs", body.decode())

    [first] = ours.reserve("s-ours", timeout=1)
    ours.release(first)  # Abandon
    [second] = ours.reserve("s-ours", timeout=1)
    ours.ack(second)  # Complete

    received = theirs.pop("s-theirs", timeout=1)
    assert received is not None
    theirs.abandon(received)
    again = theirs.pop("s-theirs", timeout=1)
    assert again is not None
    theirs.ack(again)

    expected = [
        "send_messages",
        "receive_messages",
        "abandon_message",
        "receive_messages",
        "complete_message",
    ]
    assert _ops(namespace, "s-ours") == _ops(namespace, "s-theirs") == expected
    # the deliberate difference: the same redelivery, read by each SDK (docs/standard.md §4)
    assert (second.delivery_count, second.attempts(0)) == (2, 1)  # max(body, DeliveryCount - 1)
    assert json.loads(again.body)["attempts"] == 0  # babelqueue: SDK's 0-based count - 1


def test_servicebus_fake_a_delay_only_babelq_can_express_reaches_babelqueue_when_due(
    ours: ServiceBusTransport, theirs: AsbTransport, namespace: fake.Namespace
) -> None:
    _queues("later")
    body = make("urn:babel:orders:created", {"n": 1}).encode()
    ours.publish("later", body, delay_ms=800)
    assert namespace.calls_of("schedule_messages", queue="later")
    assert theirs.pop("later", timeout=0.3) is None
    received = theirs.pop("later", timeout=2)
    assert received is not None and received.body.encode() == body
    theirs.ack(received)


def test_servicebus_fake_retry_then_dead_letter_through_both_runtimes(
    ours: ServiceBusTransport, theirs: AsbTransport, namespace: fake.Namespace
) -> None:
    """A handler that always fails, max_attempts 2: one retry re-published, then the DLQ record to
    ``<queue>.dlq``, the original completed each time. Same calls, same retry message."""
    _queues("r-theirs", "r-theirs.dlq")
    urn = "urn:babel:orders:created"
    env = make(urn, {"n": 1}, queue="r-theirs", message_id="6f1c1b1e-0000-4000-8000-000000000001")

    app_theirs = BabelQueue(transport=theirs, queue="r-theirs", max_attempts=2, dead_letter=True)

    @app_theirs.handler(urn)
    def fail_theirs(data: Any, meta: Any) -> None:
        raise RuntimeError("always")

    theirs.publish("r-theirs", env.encode().decode())
    for _ in range(2):
        received = theirs.pop("r-theirs", timeout=1)
        assert received is not None
        app_theirs.dispatch(received)

    app_ours = App(ours, queue="r-ours", max_attempts=2, backoff=Backoff(base_ms=0, jitter=False))

    @app_ours.handler(urn)
    def fail_ours(message: Message) -> None:
        raise RuntimeError("always")

    ours.publish("r-ours", env.encode(), envelope=env)
    app_ours.drain(timeout=10)

    run = ["send_messages", "receive_messages", "send_messages", "complete_message", "receive_messages"]
    assert _ops(namespace, "r-theirs")[:5] == _ops(namespace, "r-ours")[:5] == run
    assert _ops(namespace, "r-theirs")[-1] == _ops(namespace, "r-ours")[-1] == "complete_message"
    # the retry: same bytes, same native message
    retry_theirs = namespace.calls_of("send_messages", queue="r-theirs")[1].messages[0]
    retry_ours = namespace.calls_of("send_messages", queue="r-ours")[1].messages[0]
    assert json.loads(retry_ours["body"])["attempts"] == 1
    for key in COMPARED:
        assert retry_ours[key] == retry_theirs[key], key
    # the dead letter: to <queue>.dlq, projected the same way (its dead_letter block differs in detail)
    dead_theirs, dead_ours = _last(namespace, "r-theirs.dlq"), _last(namespace, "r-ours.dlq")
    for key in ("subject", "correlation_id", "message_id", "content_type", "application_properties"):
        assert dead_ours[key] == dead_theirs[key], key
    block_theirs = json.loads(dead_theirs["body"])["dead_letter"]
    block_ours = json.loads(dead_ours["body"])["dead_letter"]
    assert (block_ours["reason"], block_ours["original_queue"]) == ("failed", "r-ours")
    assert (block_theirs["reason"], block_theirs["original_queue"]) == ("failed", "r-theirs")
