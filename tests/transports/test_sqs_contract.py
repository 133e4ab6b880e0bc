"""The SQS transport against moto's server over HTTP: the shared contract, then SQS specifics.

SQS semantics the contract flags declare: standard queues do not promise order, a receive
returns "up to" n messages, bodies are text, and deleting with a stale receipt handle is not
guaranteed to be refused (so no gated settle).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from babelq.bindings import sqs as binding
from babelq.envelope import make
from babelq.errors import ConfigurationError
from babelq.transports import open_transport
from babelq.transports.base import Delivery, Outgoing, Transport
from babelq.transports.sqs import DELIVER_AT_ATTRIBUTE, SQSError, SQSTransport, physical_name
from transports.contract import MakeTransport, TransportContract, _body


@pytest.fixture
def make_transport(sqs_url: str, unique_queue: str) -> Iterator[MakeTransport]:
    made: list[SQSTransport] = []

    def make(*, visibility_timeout: float | None = None) -> SQSTransport:
        lease = TestSQSContract.visibility_timeout if visibility_timeout is None else visibility_timeout
        transport = SQSTransport.from_url(sqs_url, visibility_timeout=lease)
        made.append(transport)
        return transport

    yield make
    cleaner = SQSTransport.from_url(sqs_url)
    cleaner.delete_queues([unique_queue, f"{unique_queue}.dlq", f"{unique_queue}-other"])
    for transport in [*made, cleaner]:
        transport.close()


@pytest.mark.slow
class TestSQSContract(TransportContract):
    supports_fifo = False  # standard queues
    supports_binary_bodies = False  # SQS bodies are text
    exact_batches = False
    gated_settle = False
    # a receipt handle cannot be recorded on the queue: the data source reads SQS in the driver
    supports_tagged = False
    supports_empty_body = False  # SQS requires at least one character
    # SQS delays have 1 s granularity: a 700 ms delay becomes visible at 1 s, so a 1 s lease would
    # bring the first message back at the same moment and the delay tests could not tell them apart.
    visibility_timeout = 2.0

    def test_concurrent_consumers_never_share_a_reservation(
        self, make_transport: MakeTransport, unique_queue: str
    ) -> None:
        """Standard SQS is at-least-once and may hand a message out twice (moto does, under
        concurrent receives); what must hold is that nothing is lost and all is acked."""
        total = 100
        producer = make_transport(visibility_timeout=60)
        bodies = [_body("conc", i) for i in range(total)]
        producer.publish_many(unique_queue, [Outgoing(b) for b in bodies])
        consumers = [make_transport(visibility_timeout=60) for _ in range(3)]
        seen: list[bytes] = []
        lock = threading.Lock()

        def work(t: Transport) -> None:
            idle_until = time.monotonic() + 2
            while time.monotonic() < idle_until:
                got = t.reserve(unique_queue, max_messages=10, timeout=0.2)
                if got:
                    idle_until = time.monotonic() + 2
                    with lock:
                        seen.extend(d.body for d in got)
                    t.ack_many(got)

        threads = [threading.Thread(target=work, args=(c,)) for c in consumers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert set(seen) == set(bodies)
        assert producer.size(unique_queue) == 0

    def test_empty_and_binary_bodies_are_refused(self, transport: SQSTransport, unique_queue: str) -> None:
        with pytest.raises(SQSError, match="empty"):
            transport.publish(unique_queue, b"")
        with pytest.raises(SQSError, match="UTF-8"):
            transport.publish(unique_queue, b"\xff\xfe")


# -- SQS specifics ----------------------------------------------------------------------------
@pytest.fixture
def sqs(make_transport: MakeTransport) -> SQSTransport:
    transport = make_transport(visibility_timeout=1)
    assert isinstance(transport, SQSTransport)
    return transport


def test_url_options(sqs_endpoint: str) -> None:
    transport = open_transport(f"sqs://eu-west-1?endpoint_url={sqs_endpoint}&create_queues=false")
    assert isinstance(transport, SQSTransport)
    assert transport.create_queues is False
    assert transport._client.meta.region_name == "eu-west-1"
    with pytest.raises(ConfigurationError, match="does not exist"):
        transport.queue_url(f"missing-{uuid.uuid4().hex[:8]}")
    with pytest.raises(ConfigurationError, match="bogus"):
        SQSTransport.from_url("sqs://?bogus=1")
    transport.close()


def test_attempts_reconcile_with_the_receive_count(sqs: SQSTransport, unique_queue: str) -> None:
    envelope = make("urn:babel:orders:created", {"n": 1}, queue=unique_queue)
    sqs.publish(unique_queue, envelope.encode(), envelope=envelope)
    [first] = sqs.reserve(unique_queue, timeout=3)
    sqs.release(first)
    [second] = sqs.reserve(unique_queue, timeout=3)

    assert (first.delivery_count, second.delivery_count) == (1, 2)
    assert first.attempts(0) == 0
    assert second.attempts(0) == 1  # max(body 0, count 2 - 1)
    assert second.attempts(5) == 5  # a runtime-incremented count is never lowered
    sqs.ack(second)


def test_fifo_queue_groups_dedups_and_retries(sqs: SQSTransport, unique_queue: str) -> None:
    queue = f"{unique_queue}.fifo"
    try:
        envelope = make("urn:babel:orders:created", {"n": 1}, queue=queue)
        sqs.publish(queue, envelope.encode(), envelope=envelope)
        sqs.publish(queue, envelope.encode(), envelope=envelope)  # same meta.id: deduplicated
        [delivery] = sqs.reserve(queue, max_messages=10, timeout=3)
        assert sqs.reserve(queue, timeout=0.3) == []

        sqs.retry(delivery, envelope.with_attempts(1).encode(), delay_ms=0)  # not swallowed by dedup
        [retried] = sqs.reserve(queue, timeout=3)
        assert retried.body == envelope.with_attempts(1).encode()
        sqs.ack(retried)
        assert sqs.size(queue) == 0
    finally:
        sqs.delete_queues([queue])


def test_fifo_delay_is_held_back_until_due(sqs: SQSTransport, unique_queue: str) -> None:
    queue = f"{unique_queue}.fifo"
    try:
        # the delay runs from the message's making on; a slow publish may use up part of it, so
        # the check is "never before it is due", not "not there at the first look"
        due_ms = time.time_ns() // 1_000_000 + 1500  # in whole ms, as the envelope's clock
        envelope = make("urn:babel:orders:created", {"n": 2}, queue=queue)
        sqs.publish(queue, envelope.encode(), envelope=envelope, delay_ms=1500)
        got: list[bytes] = []
        got_at_ms = 0
        while not got and time.time_ns() // 1_000_000 < due_ms + 6000:
            batch = sqs.reserve(queue, timeout=0.5)
            got_at_ms = time.time_ns() // 1_000_000
            got = [d.body for d in batch]
            sqs.ack_many(batch)
        assert got == [envelope.encode()]
        assert got_at_ms >= due_ms
    finally:
        sqs.delete_queues([queue])


def test_a_delay_beyond_the_sqs_cap_is_carried_and_never_early(sqs: SQSTransport, unique_queue: str) -> None:
    envelope = make("urn:babel:orders:created", {"n": 3}, queue=unique_queue)
    sqs.publish(unique_queue, envelope.encode(), envelope=envelope, delay_ms=3_600_000)
    # Make it visible now behind the transport's back, as if SQS's 900 s had elapsed.
    url = sqs.queue_url(unique_queue)
    entry = sqs._entry(unique_queue, envelope.encode(), envelope, 0)
    attributes = dict(entry.attributes)
    attributes[DELIVER_AT_ATTRIBUTE] = {
        "DataType": "Number",
        "StringValue": str(int(time.time() * 1000) + 3_000),
    }
    sqs._client.send_message(QueueUrl=url, MessageBody=entry.body, MessageAttributes=attributes)

    assert sqs.reserve(unique_queue, max_messages=10, timeout=1) == []  # held back and re-delayed
    assert sqs.size(unique_queue) == 2  # both still there, delayed


def test_publish_many_uses_batches_of_ten(sqs: SQSTransport, unique_queue: str) -> None:
    bodies = [make("urn:babel:orders:created", {"n": n}).encode() for n in range(23)]
    sqs.publish_many(unique_queue, [Outgoing(b) for b in bodies])
    got: list[Delivery] = []
    while len(got) < 23:
        batch = sqs.reserve(unique_queue, max_messages=23, timeout=2)
        assert batch, "messages went missing"
        got += batch
    assert sorted(d.body for d in got) == sorted(bodies)
    assert all(d.headers == binding.project(make_from(d.body)) for d in got)
    sqs.ack_many(got)
    assert sqs.size(unique_queue) == 0


def make_from(body: bytes) -> dict[str, object]:
    import json

    doc: dict[str, object] = json.loads(body)
    return doc


@pytest.mark.parametrize(
    ("logical", "physical"),
    [
        ("orders", "orders"),
        ("orders.dlq", "orders-dlq"),
        ("orders.fifo", "orders.fifo"),
        ("orders.fifo.dlq", "orders-dlq.fifo"),
        ("billing.v2", "billing-v2"),
    ],
)
def test_physical_queue_names_are_valid_sqs_names(logical: str, physical: str) -> None:
    assert physical_name(logical) == physical


def test_dead_letters_land_on_the_sqs_dlq_name(sqs: SQSTransport, unique_queue: str) -> None:
    sqs.publish(unique_queue, b'{"job":"urn:babel:t:x"}')
    [delivery] = sqs.reserve(unique_queue, timeout=3)
    sqs.dead_letter(
        delivery, b'{"job":"urn:babel:t:x","dead_letter":{"reason":"failed"}}', dlq=f"{unique_queue}.dlq"
    )
    assert sqs.queue_url(f"{unique_queue}.dlq").endswith(f"/{unique_queue}-dlq")
    assert sqs.size(f"{unique_queue}.dlq") == 1
