"""Holding queues (``<queue>.delay.<ms>.expiring``) expire, but never under a waiting message.

RabbitMQ's ``x-expires`` counts from the queue's last declaration (a publish does not count;
a passive declaration, which ``size()`` makes, does), so the transport declares a holding
queue again before putting a message into it whenever the last declaration is half a margin
old. The live tests shrink the margin (10 min in production) to one second on their own
transport so that expiry can be watched.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from babelq.transports.amqp import AMQPTransport
from babelq.transports.amqp_client import (
    ChannelClosedByBrokerError,
    Connection,
    ConnectionParameters,
)
from conftest import require_service

URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
TEN_MINUTES_MS = 600_000


@pytest.fixture
def transport(unique_queue: str) -> Iterator[AMQPTransport]:
    require_service("rabbitmq")
    opened = AMQPTransport(URL)
    yield opened
    opened.delete_queues(unique_queue)
    opened.close()


@pytest.fixture
def admin() -> Iterator[Connection]:
    """A plain client connection, to look at queues the way another program would."""
    require_service("rabbitmq")
    connection = Connection(ConnectionParameters.from_url(URL))
    yield connection
    connection.close()


def _exists(admin: Connection, name: str) -> bool:
    try:
        admin.channel().queue_declare(name, passive=True)
    except ChannelClosedByBrokerError as exc:
        assert exc.reply_code == 404
        return False
    return True


def _bodies(transport: AMQPTransport, queue: str, want: int, within: float) -> list[bytes]:
    out: list[bytes] = []
    deadline = time.monotonic() + within
    while len(out) < want and time.monotonic() < deadline:
        batch = transport.reserve(queue, max_messages=want, timeout=0.2)
        transport.ack_many(batch)
        out += [d.body for d in batch]
    return out


@pytest.mark.live
def test_a_holding_queue_is_declared_with_an_expiry_after_its_delay(
    transport: AMQPTransport, admin: Connection, unique_queue: str
) -> None:
    transport.publish(unique_queue, b"later", delay_ms=500)
    [name] = transport._holding[unique_queue]
    expected = {
        "x-message-ttl": 500,
        "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": unique_queue,
        "x-expires": 500 + TEN_MINUTES_MS,
    }
    # A declaration with the same arguments is accepted; with any other it is a 406.
    admin.channel().queue_declare(name, arguments=expected)
    assert _bodies(transport, unique_queue, 1, within=3) == [b"later"]


@pytest.mark.live
@pytest.mark.slow
def test_an_unused_holding_queue_goes_away_once_its_messages_are_due(
    transport: AMQPTransport, admin: Connection, unique_queue: str
) -> None:
    transport._holding_margin_ms = 1000
    transport.publish(unique_queue, b"soon", delay_ms=300)
    [name] = transport._holding[unique_queue]
    published = time.monotonic()
    assert _bodies(transport, unique_queue, 1, within=3) == [b"soon"]
    # Look only once: a passive declaration counts as use on RabbitMQ and restarts the clock.
    time.sleep(max(0.0, published + 2.5 - time.monotonic()))  # x-expires is 1.3 s
    assert not _exists(admin, name), "the holding queue is still there 2.5 s after its only use"


@pytest.mark.live
@pytest.mark.slow
def test_a_holding_queue_is_declared_again_so_it_never_expires_under_a_waiting_message(
    transport: AMQPTransport, unique_queue: str
) -> None:
    # Margin 1 s, delay 1.5 s: declared at t0 the queue would expire at t0 + 2.5 s. The second
    # message, put there at t0 + 1.2 s, is due at t0 + 2.7 s: only a fresh declaration keeps it.
    transport._holding_margin_ms = 1000
    transport.publish(unique_queue, b"first", delay_ms=1500)
    time.sleep(1.2)
    transport.publish(unique_queue, b"second", delay_ms=1500)
    assert sorted(_bodies(transport, unique_queue, 2, within=6)) == [b"first", b"second"]


@pytest.mark.live
def test_an_old_layout_holding_queue_on_the_broker_does_not_break_delays(
    transport: AMQPTransport, admin: Connection, unique_queue: str
) -> None:
    # What earlier versions left behind: <queue>.delay.<ms> without x-expires. Redeclaring that
    # name with x-expires would be a 406 PRECONDITION_FAILED; the new layout has its own name.
    old = f"{unique_queue}.delay.500"
    channel = admin.channel()
    channel.queue_declare(
        old,
        arguments={
            "x-message-ttl": 500,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": unique_queue,
        },
    )
    try:
        transport.publish(unique_queue, b"delayed", delay_ms=500)
        assert _bodies(transport, unique_queue, 1, within=3) == [b"delayed"]
        assert _exists(admin, old)  # left alone: it drains itself, an operator may delete it
    finally:
        admin.channel().queue_delete(old)
