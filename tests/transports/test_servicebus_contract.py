"""The ``sb://`` transport against a recording fake of azure-servicebus: the shared contract, then
Service Bus specifics.

There is no Service Bus namespace (nor emulator) here: every test is fake-backed
(``tests/transports/fake_servicebus.py``). The fake keeps the real SDK's message classes and AMQP
encoder/decoder in the path, so what is proven is the transport's use of the SDK and of the
broker semantics the fake models (PeekLock, lock expiry, DeliveryCount, scheduling), not a live
namespace.

Capabilities declared: Service Bus does not promise order without sessions (``supports_fifo``),
a receive returns "up to" n messages (``exact_batches``), and a lock belongs to the receiver
link that took it (no tagged reservations). Its lock duration is at least 5 s, so the contract's
lease is 5 s here.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus._pyamqp.types import TYPE, VALUE, AMQPTypes

from babelq.envelope import make
from babelq.errors import ConfigurationError, UnavailableError
from babelq.transports import open_transport
from babelq.transports.base import Outgoing, Transport
from babelq.transports.servicebus import ServiceBusTransport, display_url, redact_servicebus
from transports import fake_servicebus as fake
from transports.contract import MakeTransport, TransportContract, _body

LEASE = 5.0  # the shortest lock duration Service Bus allows


@pytest.fixture
def namespace(monkeypatch: pytest.MonkeyPatch) -> Namespace:
    fake.Namespace.registry.clear()
    ns = fake.Namespace()
    fake.install(monkeypatch)
    monkeypatch.delenv("AZURE_SERVICEBUS_CONNECTION_STRING", raising=False)
    return ns


Namespace = fake.Namespace


def _open(**options: object) -> ServiceBusTransport:
    options.setdefault("connection_string", fake.connection_string())
    options.setdefault("visibility_timeout", LEASE)
    return ServiceBusTransport.from_url(f"sb://{fake.HOST}", **options)


@pytest.fixture
def make_transport(namespace: Namespace) -> Iterator[MakeTransport]:
    made: list[ServiceBusTransport] = []

    def make_one(*, visibility_timeout: float | None = None) -> ServiceBusTransport:
        transport = _open(visibility_timeout=LEASE if visibility_timeout is None else visibility_timeout)
        made.append(transport)
        return transport

    yield make_one
    for transport in made:
        transport.close()


@pytest.mark.slow  # the lease is Service Bus's shortest lock, 5 s: expiry tests wait for it
class TestServiceBusContractFakeBacked(TransportContract):
    visibility_timeout = LEASE
    supports_fifo = False  # Service Bus orders only within a session
    exact_batches = False  # a receive returns as soon as some messages arrived
    supports_tagged = False  # a lock is settled through the receiver link that took it

    def test_reserved_counts_what_a_crashed_consumer_still_holds(
        self, make_transport: MakeTransport, unique_queue: str
    ) -> None:
        """Service Bus counts locked messages as active and reports no lock count: ``reserved``
        is honestly ``None``, and another process's locks are counted as waiting by ``size``."""
        producer = make_transport()
        producer.publish_many(unique_queue, [Outgoing(_body("held", i)) for i in range(3)])
        crashed = make_transport()
        held = self._drain(crashed, unique_queue, 2, within=3, batch=2)
        assert len(held) == 2
        assert producer.reserved(unique_queue) is None
        assert crashed.reserved(unique_queue) is None
        self._assert_size(producer, unique_queue, 3)  # the crashed one's locks look like waiting messages
        self._assert_size(crashed, unique_queue, 1)  # its own locks it knows
        crashed.close()
        free = self._drain(producer, unique_queue, 1, within=3, batch=1)
        producer.ack_many(free)
        lapsed = self._drain(producer, unique_queue, 2, within=self._expiry_wait() + 2, batch=2)
        producer.ack_many(lapsed)
        assert sorted(d.body for d in free + lapsed) == sorted(_body("held", i) for i in range(3))
        self._assert_size(producer, unique_queue, 0)

    def test_ready_counts_what_a_reserve_could_take_now(
        self, make_transport: MakeTransport, unique_queue: str
    ) -> None:
        """Not delayed messages, not this transport's locks; other receivers' locks are invisible
        to Service Bus's counts, so they count as ready until they are settled."""
        t = make_transport()
        t.publish_many(unique_queue, [Outgoing(_body("ready", i)) for i in range(3)])
        t.publish(unique_queue, _body("ready", 9), delay_ms=60_000)
        self._assert_ready(t, unique_queue, 3)
        held = self._drain(t, unique_queue, 1, within=3, batch=1)
        self._assert_ready(t, unique_queue, 2)
        other = make_transport()
        self._assert_ready(other, unique_queue, 3)  # the lock ``t`` holds is not visible here
        t.release(held[0])
        self._assert_ready(t, unique_queue, 3)
        t.purge(unique_queue)
        self._assert_ready(t, unique_queue, 0)


# -- Service Bus specifics ----------------------------------------------------------------------
@pytest.fixture
def sb(namespace: Namespace) -> Iterator[ServiceBusTransport]:
    transport = _open()
    yield transport
    transport.close()


def _sent(namespace: Namespace, queue: str, op: str = "send_messages") -> dict[str, object]:
    [call] = namespace.calls_of(op, queue=queue)[-1:]
    [message] = call.messages
    return message


def test_servicebus_fake_projection_is_the_binding(sb: ServiceBusTransport, namespace: Namespace) -> None:
    env = make("urn:babel:orders:created", {"order_id": 7}, queue="orders")
    doc = env.document()
    sb.publish("orders", env.encode(), envelope=env)
    sent = _sent(namespace, "orders")
    assert sent["body"] == env.encode()
    assert sent["subject"] == "urn:babel:orders:created"
    assert sent["correlation_id"] == doc["trace_id"]
    assert sent["message_id"] == doc["meta"]["id"]
    assert sent["content_type"] == "application/json"
    assert sent["session_id"] is None
    assert sent["scheduled_enqueue_time_utc"] is None
    # epoch ms does not fit an AMQP int32: pinned to long, as babelqueue pins it
    assert sent["application_properties"] == {
        "bq-schema-version": 1,
        "bq-source-lang": "python",
        "bq-created-at": {TYPE: AMQPTypes.long, VALUE: doc["meta"]["created_at"]},
    }
    [delivery] = sb.reserve("orders", timeout=1)
    assert delivery.headers["application_properties"] == {
        "bq-schema-version": 1,
        "bq-source-lang": "python",
        "bq-created-at": doc["meta"]["created_at"],
    }
    assert delivery.headers["subject"] == "urn:babel:orders:created"
    assert delivery.headers["message_id"] == doc["meta"]["id"]
    assert delivery.store_host == fake.HOST
    sb.ack(delivery)


def test_servicebus_fake_a_bare_epoch_ms_property_cannot_be_sent(namespace: Namespace) -> None:
    """Why the projection pins longs: the SDK's own encoder refuses an int beyond int32."""
    client = fake.ServiceBusClient.from_connection_string(fake.connection_string())
    _open().create_queue("raw")
    message = ServiceBusMessage(b"{}", application_properties={"bq-created-at": 1_732_380_000_000})
    with pytest.raises(ValueError, match="int invalid"):
        client.get_queue_sender("raw").send_messages(message)


def test_servicebus_fake_a_session_is_opt_in(sb: ServiceBusTransport, namespace: Namespace) -> None:
    """Seed 000: "An optional SessionId (FIFO) is opt-in and not a contract field": by default no
    SessionId, whatever ``meta.sharding_key`` says; ``session_by=sharding_key`` sets it from the
    key (a message without one gets none)."""
    env = make("urn:babel:orders:created", {"n": 1}, queue="orders", sharding_key="customer-42")
    sb.publish("orders", env.encode())
    assert _sent(namespace, "orders")["session_id"] is None
    assert sb.session_by == "none"
    keyed = _open(session_by="sharding_key")
    try:
        keyed.publish("orders", env.encode(), envelope=env)
        assert _sent(namespace, "orders")["session_id"] == "customer-42"
        keyed.publish("orders", make("urn:babel:orders:created", {"n": 2}, queue="orders").encode())
        assert _sent(namespace, "orders")["session_id"] is None
    finally:
        keyed.close()


def test_servicebus_fake_session_by_is_checked(namespace: Namespace) -> None:
    with pytest.raises(ConfigurationError, match="session_by"):
        _open(session_by="customer")


def test_servicebus_fake_bodies_that_are_not_envelopes_get_no_invented_fields(
    sb: ServiceBusTransport, namespace: Namespace
) -> None:
    sb.publish("orders", b"\xff not json")
    sent = _sent(namespace, "orders")
    assert (sent["subject"], sent["correlation_id"], sent["application_properties"]) == (None, None, None)
    assert sent["content_type"] == "application/json"
    [delivery] = sb.reserve("orders", timeout=1)
    assert delivery.body == b"\xff not json"
    sb.ack(delivery)


def test_servicebus_fake_delivery_count_is_one_based_and_reconciles(
    sb: ServiceBusTransport, namespace: Namespace
) -> None:
    """The SDK reports the 0-based AMQP header; DeliveryCount is that + 1; attempts = max(body, DC - 1)."""
    env = make("urn:babel:orders:created", {"n": 1}, queue="orders")
    sb.publish("orders", env.encode(), envelope=env)
    [first] = sb.reserve("orders", timeout=1)
    assert first.receipt.message.delivery_count == 0  # what azure-servicebus says on a first receive
    assert (first.delivery_count, first.attempts(0)) == (1, 0)
    sb.release(first)  # Abandon: the broker counts it
    [second] = sb.reserve("orders", timeout=1)
    assert (second.delivery_count, second.attempts(0), second.attempts(5)) == (2, 1, 5)
    sb.release(second)
    [third] = sb.reserve("orders", timeout=1)
    assert (third.delivery_count, third.attempts(0)) == (3, 2)
    sb.ack(third)
    assert [c.op for c in namespace.calls_of(queue="orders")][-3:] == [
        "abandon_message",
        "receive_messages",
        "complete_message",
    ]


def test_servicebus_fake_created_queues_carry_lock_and_max_delivery_count(namespace: Namespace) -> None:
    transport = _open(max_delivery_count=2, visibility_timeout=30)
    transport.publish("orders", b"x")
    [created] = namespace.calls_of("create_queue")
    assert created.detail == {"lock_duration": timedelta(seconds=30), "max_delivery_count": 2}
    assert transport.lease_seconds("orders") == 30
    for _ in range(2):
        [delivery] = transport.reserve("orders", timeout=1)
        transport.release(delivery)
    assert transport.reserve("orders", timeout=0.3) == []  # past MaxDeliveryCount: the broker's DLQ
    assert [s.dead_letter for s in namespace.dead_lettered("orders")] == [
        {"DeadLetterReason": "MaxDeliveryCountExceeded"}
    ]
    transport.close()


def test_servicebus_fake_lease_is_the_queue_lock_duration(namespace: Namespace) -> None:
    fake.ServiceBusAdministrationClient.from_connection_string(fake.connection_string()).create_queue(
        "slow", lock_duration=timedelta(seconds=45)
    )
    transport = _open(visibility_timeout=5)
    assert transport.lease_seconds("slow") == 45  # the broker's setting wins over the option
    transport.close()


def test_servicebus_fake_delay_is_a_scheduled_enqueue_time(
    sb: ServiceBusTransport, namespace: Namespace
) -> None:
    before = datetime.now(UTC)
    sb.publish("orders", b'{"job":"urn:babel:t:later"}', delay_ms=1200)
    call = namespace.calls_of("schedule_messages", queue="orders")[-1]
    due = call.detail["schedule_time_utc"]
    assert timedelta(milliseconds=1150) <= due - before <= timedelta(milliseconds=1500)
    assert call.messages[0]["scheduled_enqueue_time_utc"] == due
    assert sb.size("orders") == 1
    assert sb.reserve("orders", timeout=0.5) == []
    [delivery] = sb.reserve("orders", timeout=2)
    assert datetime.now(UTC) >= due
    sb.ack(delivery)


def test_servicebus_fake_publish_many_batches_and_schedules(
    sb: ServiceBusTransport, namespace: Namespace
) -> None:
    messages = [Outgoing(_body("b", i)) for i in range(5)] + [
        Outgoing(_body("d", i), delay_ms=60_000) for i in range(2)
    ]
    sb.publish_many("orders", messages)
    [batch] = namespace.calls_of("send_messages", queue="orders")
    assert batch.detail == {"batch": True}
    assert [m["body"] for m in batch.messages] == [_body("b", i) for i in range(5)]
    [scheduled] = namespace.calls_of("schedule_messages", queue="orders")
    assert len(scheduled.messages) == 2  # one schedule call per due time
    assert sb.size("orders") == 7


def test_servicebus_fake_retry_sends_then_completes(sb: ServiceBusTransport, namespace: Namespace) -> None:
    env = make("urn:babel:orders:created", {"n": 1}, queue="orders")
    sb.publish("orders", env.encode(), envelope=env)
    [delivery] = sb.reserve("orders", timeout=1)
    retried = env.with_attempts(1)
    sb.retry(delivery, retried.encode(), delay_ms=800)
    ops = [c.op for c in namespace.calls_of(queue="orders")]
    assert ops[-2:] == ["schedule_messages", "complete_message"]
    sent = _sent(namespace, "orders", "schedule_messages")
    assert sent["body"] == retried.encode()
    assert sent["message_id"] == env.id
    [again] = sb.reserve("orders", timeout=2)
    assert again.body == retried.encode()
    assert again.delivery_count == 1  # a new message: the body carries the attempts
    sb.ack(again)


def test_servicebus_fake_delayed_release_schedules_a_faithful_copy(
    sb: ServiceBusTransport, namespace: Namespace
) -> None:
    env = make("urn:babel:orders:created", {"n": 1}, queue="orders")
    sb.publish("orders", env.encode(), envelope=env)
    original = _sent(namespace, "orders")
    [delivery] = sb.reserve("orders", timeout=1)
    sb.release(delivery, delay_ms=600)
    copy = _sent(namespace, "orders", "schedule_messages")
    for key in ("body", "subject", "correlation_id", "message_id", "content_type", "application_properties"):
        assert copy[key] == original[key], key
    assert [c.op for c in namespace.calls_of(queue="orders")][-2:] == [
        "schedule_messages",
        "complete_message",
    ]
    assert sb.reserve("orders", timeout=0.3) == []
    [again] = sb.reserve("orders", timeout=2)
    assert again.body == env.encode()
    sb.ack(again)


def test_servicebus_fake_dead_letter_goes_to_the_dlq_queue(
    sb: ServiceBusTransport, namespace: Namespace
) -> None:
    sb.publish("orders", b'{"job":"urn:babel:t:x"}')
    [delivery] = sb.reserve("orders", timeout=1)
    record = b'{"job":"urn:babel:t:x","dead_letter":{"reason":"failed"}}'
    sb.dead_letter(delivery, record, dlq="orders.dlq")
    assert [(c.op, c.queue) for c in namespace.calls][-2:] == [
        ("send_messages", "orders.dlq"),
        ("complete_message", "orders"),
    ]
    assert namespace.dead_lettered("orders") == []  # not the broker's $DeadLetterQueue
    [dead] = sb.reserve("orders.dlq", timeout=1)
    assert dead.body == record
    sb.ack(dead)


def test_servicebus_fake_a_late_retry_is_gated(
    make_transport: MakeTransport, unique_queue: str, namespace: Namespace, caplog: pytest.LogCaptureFixture
) -> None:
    """A retry whose lock lapsed sends nothing: the message already belongs to someone else."""
    slow, fast = make_transport(), make_transport()
    slow.publish(unique_queue, _body("late"))
    [stale] = slow.reserve(unique_queue, timeout=1)
    [current] = fast.reserve(unique_queue, timeout=LEASE + 2)
    with caplog.at_level(logging.WARNING):
        slow.retry(stale, _body("late", 1), delay_ms=0)
    assert "lapsed" in caplog.text
    assert namespace.calls_of("send_messages", "schedule_messages", queue=unique_queue)[-1].messages[0][
        "body"
    ] == _body("late")
    fast.ack(current)
    assert fast.size(unique_queue) == 0


def test_servicebus_fake_renewal_moves_the_lock(sb: ServiceBusTransport, namespace: Namespace) -> None:
    sb.publish("orders", b"x")
    [delivery] = sb.reserve("orders", timeout=1)
    first = delivery.receipt.message.locked_until_utc
    time.sleep(0.05)
    assert sb.renew_many([delivery]) == 1
    assert delivery.receipt.message.locked_until_utc > first
    assert namespace.calls_of("renew_message_lock")
    sb.ack(delivery)
    assert sb.renew_many([delivery]) == 0  # settled: not revived


def test_servicebus_fake_purge_clears_ready_scheduled_and_held(
    sb: ServiceBusTransport, namespace: Namespace
) -> None:
    sb.publish_many("orders", [Outgoing(b"a"), Outgoing(b"b"), Outgoing(b"c", delay_ms=60_000)])
    held = sb.reserve("orders", timeout=1)
    assert held
    sb.purge("orders")
    assert sb.size("orders") == 0
    assert namespace.calls_of("cancel_scheduled_messages", queue="orders")
    runtime = fake.ServiceBusAdministrationClient.from_connection_string(fake.connection_string())
    assert runtime.get_queue_runtime_properties("orders").total_message_count == 0
    sb.purge("never-created")  # nothing to purge


# -- URLs, options, errors, secrets --------------------------------------------------------------
def test_servicebus_fake_schemes_and_credentials(
    namespace: Namespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    for url in (
        f"sb://{fake.HOST}?shared_access_key_name={fake.KEY_NAME}&shared_access_key={fake.KEY}",
        f"servicebus://{fake.HOST}?shared_access_key_name={fake.KEY_NAME}&shared_access_key={fake.KEY}",
        f"sb://{fake.KEY_NAME}:{fake.KEY.replace('=', '%3D')}@{fake.HOST}",
    ):
        transport = open_transport(url, visibility_timeout=LEASE)
        assert isinstance(transport, ServiceBusTransport)
        transport.publish("orders", b"x")
        transport.close()
    monkeypatch.setenv("AZURE_SERVICEBUS_CONNECTION_STRING", fake.connection_string())
    from_env = open_transport("sb://", visibility_timeout=LEASE)
    [delivery] = from_env.reserve("orders", timeout=1)
    from_env.ack(delivery)
    from_env.close()
    namespace.sas_tokens.add("SharedAccessSignature sr=x&sig=abc&se=1&skn=k")
    with_sas = ServiceBusTransport.from_url(
        f"sb://{fake.HOST}",
        sas_token="SharedAccessSignature sr=x&sig=abc&se=1&skn=k",
        visibility_timeout=LEASE,
    )
    with_sas.publish("orders", b"y")
    with_sas.close()


@pytest.mark.parametrize(
    ("url", "options", "named"),
    [
        (f"sb://{fake.HOST}?bogus=1", {}, "bogus: not an option of the sb transport"),
        (f"sb://{fake.HOST}?visibility_timeout=soon", {}, "visibility_timeout: not a number"),
        (f"sb://{fake.HOST}?visibility_timeout=0", {}, "visibility_timeout: must be positive"),
        (f"sb://{fake.HOST}?create_queues=maybe", {}, "create_queues: not a boolean"),
        (f"sb://{fake.HOST}?max_delivery_count=0", {}, "max_delivery_count: must be at least 1"),
        (f"sb://{fake.HOST}?shared_access_key={fake.KEY}", {}, "shared_access_key_name / shared_access_key"),
        ("sb://", {}, "url: the sb transport needs a namespace host"),
        (f"sb://{fake.HOST}", {}, "credential:"),
        (
            "sb://",
            {"connection_string": f"SharedAccessKey={fake.KEY}"},
            "connection_string: not a Service Bus",
        ),
    ],
)
def test_servicebus_fake_option_errors_are_one_line(
    namespace: Namespace, url: str, options: dict[str, object], named: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        open_transport(url, **options)
    text = str(caught.value)
    assert named in text
    assert "\n" not in text
    assert fake.KEY not in text


def test_servicebus_fake_broker_refusals_are_one_line_without_secrets(namespace: Namespace) -> None:
    wrong = "d3Jvbmcta2V5"
    transport = ServiceBusTransport.from_url(
        f"sb://{fake.HOST}?shared_access_key_name={fake.KEY_NAME}&shared_access_key={wrong}"
    )
    with pytest.raises(ConfigurationError) as refused:
        transport.publish("orders", b"x")
    text = str(refused.value)
    assert text.startswith("credential: Service Bus refused send to 'orders'")
    assert "shared_access_key=***" in text and wrong not in text and "\n" not in text

    no_create = _open(create_queues="false")
    with pytest.raises(ConfigurationError, match=r"^queue: receive from 'missing': the queue does not exist"):
        no_create.reserve("missing", timeout=0.2)

    nowhere = ServiceBusTransport.from_url(
        "sb://nowhere.servicebus.windows.net",
        connection_string=fake.connection_string("nowhere.servicebus.windows.net"),
    )
    with pytest.raises(UnavailableError, match="Service Bus is unavailable") as down:
        nowhere.publish("orders", b"x")
    assert fake.KEY not in str(down.value)


def test_servicebus_fake_a_send_listen_key_works_without_the_administration_api(namespace: Namespace) -> None:
    """No Manage right: queues must exist, the lease falls back to visibility_timeout, counts refuse."""
    namespace.keys["app"] = "YXBwLWtleQ=="
    _open().create_queue("orders")
    url = f"sb://{fake.HOST}?shared_access_key_name=app&shared_access_key=YXBwLWtleQ%3D%3D"
    transport = ServiceBusTransport.from_url(url, visibility_timeout=20)
    transport.publish("orders", b"x")
    [delivery] = transport.reserve("orders", timeout=1)
    transport.ack(delivery)
    assert transport.lease_seconds("orders") == 20
    with pytest.raises(
        ConfigurationError, match=r"^credential: Service Bus refused count queue 'orders'"
    ) as refused:
        transport.size("orders")
    assert "YXBwLWtleQ" not in str(refused.value)
    with pytest.raises(ConfigurationError, match="refused create queue 'other'"):
        transport.publish("other", b"x")
    without_lease = ServiceBusTransport.from_url(url)
    with pytest.raises(ConfigurationError, match="credential:"):
        without_lease.lease_seconds("orders")
    for t in (transport, without_lease):
        t.close()


def test_servicebus_fake_secrets_are_redacted_wherever_shown(namespace: Namespace) -> None:
    conn = fake.connection_string()
    url = (
        f"sb://{fake.KEY_NAME}:{fake.KEY.replace('=', '%3D')}@{fake.HOST}?shared_access_key=abc"
        f"&sas_token=sig123&connection_string={conn.replace('=', '%3D').replace(';', '%3B')}"
        "&visibility_timeout=5"
    )
    shown = display_url(url)
    for secret in (fake.KEY.replace("=", "%3D"), "abc", "sig123", "SharedAccessKey%3D"):
        assert secret not in shown
    assert fake.HOST in shown and "visibility_timeout=5" in shown
    assert fake.KEY not in redact_servicebus(f"failed: {conn}")
    assert "sig=***" in redact_servicebus("SharedAccessSignature sr=a&sig=zzz&se=1")
    transport = ServiceBusTransport.from_url(url.replace("&shared_access_key=abc", ""))
    assert fake.KEY not in repr(transport) and "sig123" not in repr(transport)
    transport.close()


def test_servicebus_client_library_is_imported_lazily() -> None:
    code = "import sys, babelq.transports; print(json.dumps('azure.servicebus' in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", "import json; " + code], capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out) is False


def test_servicebus_fake_another_sdks_transport_sees_our_projection(
    make_transport: MakeTransport, namespace: Namespace
) -> None:
    """What a peer that routes on Subject and correlates on CorrelationId receives."""
    producer: Transport = make_transport()
    env = make("urn:babel:billing:invoice.requested", {"id": 1}, queue="billing")
    producer.publish("billing", env.encode(), envelope=env)
    client = fake.ServiceBusClient.from_connection_string(fake.connection_string())
    [message] = client.get_queue_receiver("billing").receive_messages(max_message_count=1, max_wait_time=1)
    assert message.subject == "urn:babel:billing:invoice.requested"
    assert message.correlation_id == env.trace_id
    assert message.application_properties[b"bq-source-lang"] == b"python"
    assert message.application_properties[b"bq-created-at"] == env.created_at


CONFORMANCE = Path(__file__).resolve().parent.parent / "conformance"


def test_servicebus_fake_conformance_asb_block_end_to_end(
    sb: ServiceBusTransport, namespace: Namespace
) -> None:
    """The standard's ``asb`` block through the transport: projection on the wire, and the
    reconciliation cases from a broker-side DeliveryCount (the SDK's header is DeliveryCount - 1)."""
    block = json.loads((CONFORMANCE / "manifest.json").read_text())["asb"]
    projection = block["property_projection"]
    body = (CONFORMANCE / projection["envelope_file"]).read_bytes()
    sb.publish("conf", body)
    sent = _sent(namespace, "conf")
    assert {k: sent[k] for k in projection["message"]} == projection["message"]
    [delivery] = sb.reserve("conf", timeout=1)
    assert delivery.body == body
    assert delivery.headers["application_properties"] == projection["application_properties"]
    sb.ack(delivery)
    for case in block["attempts_reconciliation"]["cases"]:
        if case["delivery_count"] < 1:
            continue  # a broker never hands out a message with DeliveryCount 0
        sb.publish("conf", body)
        with namespace.cond:
            [stored] = namespace.queues["conf"].messages.values()
            stored.delivery_count = case["delivery_count"] - 1
        [delivery] = sb.reserve("conf", timeout=1)
        assert delivery.delivery_count == case["delivery_count"], case["name"]
        assert delivery.attempts(case["body_attempts"]) == case["expected_attempts"], case["name"]
        sb.ack(delivery)
