"""The RabbitMQ transport against a live broker: the shared contract, then AMQP specifics.

AMQP has no visibility timeout: an unacked delivery stays with its channel until the channel
or connection closes (or the broker's ``consumer_timeout`` fires), then returns. The two
contract tests built on lease expiry are therefore overridden with that equivalent.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from babelq.bindings import rabbitmq as binding
from babelq.envelope import Envelope, decode, make
from babelq.errors import ConfigurationError
from babelq.transports import open_transport
from babelq.transports.amqp import AMQPTransport, delay_bucket_ms, holding_queue_name
from babelq.transports.base import Outgoing
from conftest import require_service
from transports.contract import MakeTransport, TransportContract, _body

URL = "amqp://guest:guest@127.0.0.1:5672/%2F"


def _envelope(queue: str, n: int = 0) -> Envelope:
    return make("urn:babel:orders:created", {"n": n}, queue=queue)


# -- pure parts (no broker) -------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=1, max_value=10**10))
def test_delay_bucket_is_never_early_and_at_most_ten_percent_late(delay_ms: int) -> None:
    bucket = delay_bucket_ms(delay_ms)
    assert bucket >= delay_ms
    assert bucket <= delay_ms * 1.1
    assert delay_bucket_ms(bucket) == bucket  # buckets are fixed points: one queue per bucket


def test_delay_buckets_are_bounded_per_decade() -> None:
    assert len({delay_bucket_ms(ms) for ms in range(1_001, 10_001)}) == 90  # 1100, 1200, ..., 10000
    assert delay_bucket_ms(0) == 0
    assert holding_queue_name("orders", 1300) == "orders.delay.1300.expiring"


def test_url_options_are_parsed_and_unknown_options_refused() -> None:
    transport = AMQPTransport.from_url(URL + "?prefetch=7&reserve_mode=get&heartbeat=30")
    assert (transport.prefetch, transport.reserve_mode) == (7, "get")
    assert transport._params.heartbeat == 30
    with pytest.raises(ConfigurationError, match="reserve_mode"):
        AMQPTransport.from_url(URL + "?reserve_mode=push")
    with pytest.raises(ConfigurationError, match="bogus"):
        AMQPTransport.from_url(URL, bogus=1)


# -- the shared transport contract, in both reserve modes ------------------------------------------
def _cleanup(opened: list[AMQPTransport], queue: str) -> None:
    cleaner = AMQPTransport(URL)
    for name in (queue, f"{queue}-other"):
        for transport in opened:
            cleaner._holding.setdefault(name, set()).update(transport._holding.get(name, ()))
        cleaner.delete_queues(name)
    cleaner.close()


@pytest.fixture
def make_transport(request: pytest.FixtureRequest, unique_queue: str) -> Iterator[MakeTransport]:
    require_service("rabbitmq")
    mode: str = getattr(request.cls, "reserve_mode", "consume")
    opened: list[AMQPTransport] = []

    def make(*, visibility_timeout: float | None = None) -> AMQPTransport:
        del visibility_timeout  # no leases in AMQP: a reservation lasts as long as its channel
        transport = AMQPTransport(URL, reserve_mode=mode, prefetch=50)
        opened.append(transport)
        return transport

    yield make
    for transport in opened:
        transport.close()
    _cleanup(opened, unique_queue)


class _AMQPContract(TransportContract):
    reserve_mode: ClassVar[str] = "get"
    supports_stored_at = False  # AMQP 0-9-1 has no broker store time
    supports_tagged = False  # delivery tags live on one channel: nobody else can settle them

    def test_unacked_reservation_comes_back(  # type: ignore[override]  # needs a second worker
        self, make_transport: MakeTransport, unique_queue: str
    ) -> None:
        holder, other = make_transport(), make_transport()
        holder.publish(unique_queue, _body("lease"))
        [first] = self._drain(holder, unique_queue, 1, within=3)
        assert other.reserve(unique_queue, timeout=0.3) == []  # held: nobody else gets it
        assert other.size(unique_queue) == 0
        holder.close()  # the channel goes away: the broker requeues
        [again] = self._drain(other, unique_queue, 1, within=3)
        assert again.body == first.body
        assert first.delivery_count == 1
        assert again.delivery_count == 2
        other.ack(again)

    def test_late_ack_leaves_the_new_reservation_alone(
        self, make_transport: MakeTransport, unique_queue: str
    ) -> None:
        slow, fast = make_transport(), make_transport()
        assert isinstance(slow, AMQPTransport)
        slow.publish(unique_queue, _body("late"))
        [stale] = self._drain(slow, unique_queue, 1, within=3)
        slow._connection.close()  # the link drops under the worker (network loss, missed heartbeats)
        [current] = self._drain(fast, unique_queue, 1, within=3)
        slow.publish(unique_queue, _body("other"))  # slow reconnects on its own
        slow.ack(stale)  # too late: ignored, the message belongs to ``fast`` now
        fast.release(current)
        got = self._drain(fast, unique_queue, 2, within=3)
        assert sorted(d.body for d in got) == sorted([_body("late"), _body("other")])
        fast.ack_many(got)


@pytest.mark.live
class TestAMQPContractBasicGet(_AMQPContract):
    """``reserve_mode=get``: one basic.get per message, exact batches."""

    reserve_mode = "get"


@pytest.mark.live
class TestAMQPContractConsumer(_AMQPContract):
    """``reserve_mode=consume`` (the default): a prefetching consumer; a batch is what has arrived."""

    reserve_mode = "consume"
    exact_batches = False


# -- live broker ------------------------------------------------------------------------------


@pytest.fixture
def make_amqp(unique_queue: str) -> Iterator[Callable[..., AMQPTransport]]:
    require_service("rabbitmq")
    opened: list[AMQPTransport] = []

    def factory(**options: object) -> AMQPTransport:
        transport = AMQPTransport.from_url(URL, **options)
        opened.append(transport)
        return transport

    yield factory
    for transport in opened:
        transport.close()
    cleaner = AMQPTransport(URL)
    for transport in opened:
        cleaner._holding.setdefault(unique_queue, set()).update(transport._holding.get(unique_queue, ()))
    cleaner.delete_queues(unique_queue)
    cleaner.close()


@pytest.fixture(params=["consume", "get"])
def amqp(request: pytest.FixtureRequest, make_amqp: Callable[..., AMQPTransport]) -> AMQPTransport:
    return make_amqp(reserve_mode=request.param, prefetch=50)


@pytest.mark.live
def test_open_transport_picks_the_amqp_class(make_amqp: Callable[..., AMQPTransport]) -> None:
    require_service("rabbitmq")
    transport = open_transport(URL)
    try:
        assert isinstance(transport, AMQPTransport)
    finally:
        transport.close()


@pytest.mark.live
def test_round_trip_keeps_bytes_and_exposes_the_projection(amqp: AMQPTransport, unique_queue: str) -> None:
    envelope = _envelope(unique_queue)
    amqp.publish(unique_queue, envelope.encode())

    [delivery] = amqp.reserve(unique_queue, max_messages=5, timeout=5)

    assert delivery.body == envelope.encode()
    assert delivery.queue == unique_queue
    assert delivery.delivery_count == 1
    assert delivery.headers == binding.project(envelope)
    assert delivery.attempts(0) == 0
    amqp.ack(delivery)
    assert amqp.reserve(unique_queue, timeout=0.2) == []
    assert amqp.size(unique_queue) == 0


@pytest.mark.live
def test_release_gives_the_same_bytes_back_marked_redelivered(amqp: AMQPTransport, unique_queue: str) -> None:
    envelope = _envelope(unique_queue)
    amqp.publish(unique_queue, envelope.encode(), envelope=envelope)
    [first] = amqp.reserve(unique_queue, timeout=5)

    amqp.release(first)
    [again] = amqp.reserve(unique_queue, timeout=5)

    assert again.body == first.body
    assert again.delivery_count == 2
    amqp.ack(again)


@pytest.mark.live
def test_unsettled_reservations_come_back_when_the_worker_goes_away(
    make_amqp: Callable[..., AMQPTransport], unique_queue: str
) -> None:
    crashed = make_amqp(prefetch=10)
    bodies = [_envelope(unique_queue, n).encode() for n in range(3)]
    crashed.publish_many(unique_queue, [Outgoing(b) for b in bodies])
    assert len(crashed.reserve(unique_queue, max_messages=3, timeout=5)) == 3
    crashed.close()  # no ack: the broker must requeue all three

    survivor = make_amqp()
    got: list[bytes] = []
    deadline = time.monotonic() + 5
    while len(got) < 3 and time.monotonic() < deadline:
        batch = survivor.reserve(unique_queue, max_messages=3, timeout=1)
        got.extend(d.body for d in batch)
        survivor.ack_many(batch)
    assert sorted(got) == sorted(bodies)


@pytest.mark.live
def test_ack_many_acks_exactly_the_given_deliveries(
    make_amqp: Callable[..., AMQPTransport], unique_queue: str
) -> None:
    first = make_amqp(prefetch=20)
    bodies = [_envelope(unique_queue, n).encode() for n in range(6)]
    first.publish_many(unique_queue, [Outgoing(b) for b in bodies])
    deliveries = first.reserve(unique_queue, max_messages=6, timeout=5)
    while len(deliveries) < 6:
        deliveries += first.reserve(unique_queue, max_messages=6 - len(deliveries), timeout=5)

    first.ack_many(deliveries[:3])  # a prefix: may be one multiple-ack frame
    first.ack_many([deliveries[4]])  # a hole: must not ack deliveries[3]
    first.close()

    second = make_amqp()
    left = second.reserve(unique_queue, max_messages=6, timeout=5)
    left += second.reserve(unique_queue, max_messages=6, timeout=0.5)
    assert sorted(d.body for d in left) == sorted([bodies[3], bodies[5]])
    second.ack_many(left)


@pytest.mark.live
def test_a_delay_is_never_early(amqp: AMQPTransport, unique_queue: str) -> None:
    envelope = _envelope(unique_queue)
    started = time.monotonic()
    amqp.publish(unique_queue, envelope.encode(), envelope=envelope, delay_ms=600)

    assert amqp.size(unique_queue) == 1  # counted while it waits in the holding queue
    early = amqp.reserve(unique_queue, timeout=0.3)
    later = early or amqp.reserve(unique_queue, timeout=5)

    assert early == []
    assert time.monotonic() - started >= 0.6
    assert [d.body for d in later] == [envelope.encode()]
    amqp.ack(later[0])


@pytest.mark.live
def test_retry_replaces_the_body_after_the_delay(amqp: AMQPTransport, unique_queue: str) -> None:
    envelope = _envelope(unique_queue)
    amqp.publish(unique_queue, envelope.encode(), envelope=envelope)
    [delivery] = amqp.reserve(unique_queue, timeout=5)

    amqp.retry(delivery, envelope.with_attempts(1).encode(), delay_ms=250)

    assert amqp.reserve(unique_queue, timeout=0.1) == []
    [retried] = amqp.reserve(unique_queue, timeout=5)
    assert decode(retried.body).attempts == 1
    assert retried.headers["headers"]["x-attempts"] == 1
    assert retried.delivery_count == 1  # a new message, not a redelivery
    amqp.ack(retried)
    assert amqp.reserve(unique_queue, timeout=0.3) == []


@pytest.mark.live
def test_release_with_delay_keeps_the_bytes(amqp: AMQPTransport, unique_queue: str) -> None:
    envelope = _envelope(unique_queue)
    amqp.publish(unique_queue, envelope.encode(), envelope=envelope)
    [delivery] = amqp.reserve(unique_queue, timeout=5)

    amqp.release(delivery, delay_ms=1000)  # long enough that a stall of a loaded machine cannot outlast it

    assert amqp.reserve(unique_queue, timeout=0.05) == []
    [back] = amqp.reserve(unique_queue, timeout=5)
    assert back.body == envelope.encode()
    assert back.headers["message_id"] == envelope.id
    amqp.ack(back)


@pytest.mark.live
def test_dead_letter_moves_the_body_to_the_dlq(amqp: AMQPTransport, unique_queue: str) -> None:
    envelope = _envelope(unique_queue)
    amqp.publish(unique_queue, envelope.encode(), envelope=envelope)
    [delivery] = amqp.reserve(unique_queue, timeout=5)
    poison = b'{"raw":"not an envelope","dead_letter":{"reason":"poison"}}'

    amqp.dead_letter(delivery, poison, dlq=f"{unique_queue}.dlq")

    assert amqp.size(unique_queue) == 0
    [dead] = amqp.reserve(f"{unique_queue}.dlq", timeout=5)
    assert dead.body == poison
    assert dead.headers["delivery_mode"] == 2
    amqp.ack(dead)


@pytest.mark.live
def test_publish_many_with_mixed_delays(amqp: AMQPTransport, unique_queue: str) -> None:
    now = [_envelope(unique_queue, n) for n in range(20)]
    later = _envelope(unique_queue, 99)
    amqp.publish_many(
        unique_queue,
        [Outgoing(e.encode(), e) for e in now] + [Outgoing(later.encode(), later, delay_ms=300)],
    )
    got: list[bytes] = []
    while len(got) < 21:
        batch = amqp.reserve(unique_queue, max_messages=50, timeout=5)
        assert batch, "messages went missing"
        got.extend(d.body for d in batch)
        amqp.ack_many(batch)
    assert got[:20] == [e.encode() for e in now]  # one queue, one publisher: order kept
    assert got[20] == later.encode()


@pytest.mark.live
def test_an_existing_queue_with_other_arguments_is_used_as_is(
    make_amqp: Callable[..., AMQPTransport], unique_queue: str
) -> None:
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(URL))
    connection.channel().queue_declare(unique_queue, durable=True, arguments={"x-max-length": 1000})
    connection.close()
    transport = make_amqp(max_priority=10)  # would declare x-max-priority: the broker says 406

    envelope = _envelope(unique_queue)
    transport.publish(unique_queue, envelope.encode(), envelope=envelope)
    [delivery] = transport.reserve(unique_queue, timeout=5)
    assert delivery.body == envelope.encode()
    transport.ack(delivery)


@pytest.mark.live
def test_threads_can_share_one_transport(make_amqp: Callable[..., AMQPTransport], unique_queue: str) -> None:
    shared = make_amqp()
    bodies = [[_envelope(unique_queue, 100 * t + n).encode() for n in range(25)] for t in range(4)]

    def produce(mine: list[bytes]) -> None:
        for body in mine:
            shared.publish(unique_queue, body)

    threads = [threading.Thread(target=produce, args=(mine,)) for mine in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    got: list[bytes] = []
    while len(got) < 100:
        batch = shared.reserve(unique_queue, max_messages=100, timeout=5)
        assert batch, "messages went missing"
        got.extend(d.body for d in batch)
        shared.ack_many(batch)
    assert sorted(got) == sorted(b for mine in bodies for b in mine)


@pytest.mark.live
def test_quorum_queue_counts_deliveries(make_amqp: Callable[..., AMQPTransport]) -> None:
    queue = f"t-quorum-{uuid.uuid4().hex[:8]}"
    transport = make_amqp(queue_type="quorum")
    try:
        envelope = _envelope(queue)
        transport.publish(queue, envelope.encode(), envelope=envelope)
        [first] = transport.reserve(queue, timeout=5)
        transport.release(first)
        [second] = transport.reserve(queue, timeout=5)
        transport.release(second)
        [third] = transport.reserve(queue, timeout=5)
        assert [first.delivery_count, second.delivery_count, third.delivery_count] == [1, 2, 3]
        transport.ack(third)
    finally:
        transport.delete_queues(queue)


@pytest.mark.live
def test_a_dropped_connection_is_replaced_and_stale_settles_are_ignored(
    make_amqp: Callable[..., AMQPTransport], unique_queue: str
) -> None:
    import socket

    transport = make_amqp()
    first, second = _envelope(unique_queue, 1), _envelope(unique_queue, 2)
    transport.publish(unique_queue, first.encode(), envelope=first)
    [held] = transport.reserve(unique_queue, timeout=5)
    transport._connection._sock.shutdown(socket.SHUT_RDWR)  # the network goes away

    transport.publish(unique_queue, second.encode(), envelope=second)  # reconnects, publishes
    transport.ack(held)  # belongs to the dead channel: a logged no-op, the broker requeued it

    got = transport.reserve(unique_queue, max_messages=5, timeout=5)
    got += transport.reserve(unique_queue, max_messages=5, timeout=0.5)
    assert sorted((d.body, d.delivery_count) for d in got) == sorted(
        [(first.encode(), 2), (second.encode(), 1)]
    )
    transport.ack_many(got)
    assert transport.size(unique_queue) == 0
