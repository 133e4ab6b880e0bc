"""The lean AMQP client against the live RabbitMQ: handshake, channels, errors, confirms, content, heartbeats.

Every test uses its own queue names and deletes them. The heartbeat test puts a small TCP
relay between the client and the broker and freezes it, so the broker "goes silent" without
anyone touching the broker.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from babelq.errors import ConfigurationError
from babelq.transports import amqp_protocol as wire
from babelq.transports.amqp_client import (
    AMQPAccessRefusedError,
    AMQPConnectionError,
    Channel,
    ChannelClosedByBrokerError,
    ChannelStateError,
    Connection,
    ConnectionParameters,
    Message,
)
from conftest import require_service

URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
PROPS = wire.BasicProperties(content_type="application/json", delivery_mode=2).encode()


# -- URL parsing (no broker) --------------------------------------------------------------------
def test_url_parameters() -> None:
    params = ConnectionParameters.from_url("amqp://u%40x:p%2Fw@rabbit:5673/%2F?heartbeat=30&frame_max=8192")
    assert (params.host, params.port, params.username, params.password) == ("rabbit", 5673, "u@x", "p/w")
    assert (params.virtual_host, params.heartbeat, params.frame_max, params.tls) == ("/", 30, 8192, False)
    assert ConnectionParameters.from_url("amqp://h/orders").virtual_host == "orders"
    assert ConnectionParameters.from_url("amqp://h").virtual_host == "/"
    tls = ConnectionParameters.from_url("amqps://h")
    assert (tls.port, tls.tls, tls.heartbeat) == (5671, True, None)  # None: the broker's proposal


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("amqp://h/?bogus=1", "bogus"),
        ("amqp://h/?heartbeat=soon", "heartbeat"),
        ("amqp://h/?frame_max=100", "frame_max"),
        ("http://h/", "amqp"),
    ],
)
def test_bad_urls_are_refused(url: str, problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem):
        ConnectionParameters.from_url(url)


# -- live broker --------------------------------------------------------------------------------
@pytest.fixture
def connect() -> Iterator[Callable[..., Connection]]:
    require_service("rabbitmq")
    opened: list[Connection] = []

    def factory(url: str = URL) -> Connection:
        connection = Connection(ConnectionParameters.from_url(url))
        opened.append(connection)
        return connection

    yield factory
    for connection in opened:
        connection.close()


@pytest.fixture
def queue(connect: Callable[..., Connection]) -> Iterator[str]:
    name = f"t-client-{uuid.uuid4().hex[:10]}"
    yield name
    connection = connect()
    connection.channel().queue_delete(name)
    connection.close()


def _consume(connection: Connection, channel: Channel, queue: str, want: int) -> list[Message]:
    _, buffer = channel.basic_consume(queue)
    deadline = time.monotonic() + 5
    while len(buffer) < want and time.monotonic() < deadline:
        connection.process(0.2)
    return list(buffer)


@pytest.mark.live
def test_publish_confirm_and_consume_keep_bytes_and_properties(
    connect: Callable[..., Connection], queue: str
) -> None:
    connection = connect()
    channel = connection.channel()
    channel.confirm_select()
    channel.qos(10)
    assert channel.queue_declare(queue) == (queue, 0, 0)
    headers = {"x-attempts": 3, "x-big": 2**40, "x-lang": "python", "x-flag": True}
    props = wire.BasicProperties(type="urn:babel:t:x", headers=headers, delivery_mode=2, priority=4).encode()
    bodies = [b'{"n":1}', b"", "Zoë 🚀".encode()]

    assert channel.publish_many([(queue, body, props) for body in bodies], mandatory=True) == 3
    assert channel.wait_for_confirms(5) == (0, 0)

    got = _consume(connection, channel, queue, 3)
    assert [m.body for m in got] == bodies
    assert [m.routing_key for m in got] == [queue] * 3
    decoded = got[0].decoded_properties()
    assert (decoded.type, decoded.priority, decoded.headers) == ("urn:babel:t:x", 4, headers)
    assert channel.unsettled == {m.delivery_tag for m in got}
    channel.ack(got[-1].delivery_tag, multiple=True)
    assert channel.unsettled == set()


@pytest.mark.live
def test_bodies_larger_than_frame_max_are_split_and_joined(
    connect: Callable[..., Connection], queue: str
) -> None:
    connection = connect(URL + "?frame_max=4096")
    assert connection.frame_max == 4096
    channel = connection.channel()
    channel.confirm_select()
    channel.queue_declare(queue)
    big = bytes(range(256)) * 400  # 102400 bytes: 26 body frames
    channel.publish_many([(queue, big, PROPS), (queue, b"small", PROPS)])
    assert channel.wait_for_confirms(5) == (0, 0)

    first = channel.basic_get(queue)
    assert first is not None
    assert first.body == big
    [second] = _consume(connection, channel, queue, 1)
    assert second.body == b"small"
    channel.ack_each([first.delivery_tag, second.delivery_tag])
    assert channel.basic_get(queue) is None


@pytest.mark.live
def test_unroutable_mandatory_publish_is_returned(connect: Callable[..., Connection], queue: str) -> None:
    channel = connect().channel()
    channel.confirm_select()
    channel.publish_many([(f"{queue}-nobody", b"x", PROPS)], mandatory=True)
    assert channel.wait_for_confirms(5) == (0, 1)
    channel.publish_many([(f"{queue}-nobody", b"x", PROPS)])  # not mandatory: silently dropped
    assert channel.wait_for_confirms(5) == (0, 0)


@pytest.mark.live
def test_broker_nacks_are_counted(connect: Callable[..., Connection], queue: str) -> None:
    channel = connect().channel()
    channel.confirm_select()
    channel.queue_declare(queue, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    channel.publish_many([(queue, bytes([n]), PROPS) for n in range(3)])
    assert channel.wait_for_confirms(5) == (2, 0)  # the queue is full after the first
    assert channel.basic_get(queue) is not None


@pytest.mark.live
def test_redeclare_with_other_arguments_is_a_406_that_closes_only_the_channel(
    connect: Callable[..., Connection], queue: str
) -> None:
    connection = connect()
    channel = connection.channel()
    channel.queue_declare(queue, arguments={"x-max-length": 10})

    with pytest.raises(ChannelClosedByBrokerError) as caught:
        channel.queue_declare(queue, arguments={"x-max-length": 20})

    assert caught.value.reply_code == 406
    assert "PRECONDITION_FAILED" in caught.value.reply_text
    assert not channel.is_open
    with pytest.raises(ChannelStateError):
        channel.queue_declare(queue, passive=True)
    assert connection.is_open
    assert connection.channel().queue_declare(queue, passive=True)[0] == queue


@pytest.mark.live
def test_passive_declare_of_a_missing_queue_is_a_404(connect: Callable[..., Connection], queue: str) -> None:
    with pytest.raises(ChannelClosedByBrokerError) as caught:
        connect().channel().queue_declare(f"{queue}-missing", passive=True)
    assert caught.value.reply_code == 404
    assert "NOT_FOUND" in caught.value.reply_text


@pytest.mark.live
@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("amqp://guest:wrong@127.0.0.1:5672/%2F", 403),
        (f"amqp://guest:guest@127.0.0.1:5672/no-such-vhost-{uuid.uuid4().hex[:6]}", 530),
    ],
    ids=["bad-password", "unknown-vhost"],
)
def test_connection_refusals_carry_the_reply_code(url: str, code: int) -> None:
    require_service("rabbitmq")
    with pytest.raises(AMQPAccessRefusedError) as caught:  # a ConfigurationError: retrying cannot help
        Connection(ConnectionParameters.from_url(url + "?connection_attempts=3&retry_delay=5"))
    assert caught.value.reply_code == code
    assert isinstance(caught.value, ConfigurationError)


@pytest.mark.live
def test_nack_requeues_marked_redelivered_and_reject_drops(
    connect: Callable[..., Connection], queue: str
) -> None:
    connection = connect()
    channel = connection.channel()
    channel.confirm_select()
    channel.queue_declare(queue)
    channel.publish_many([(queue, b"a", PROPS), (queue, b"b", PROPS)])
    channel.wait_for_confirms(5)

    first = channel.basic_get(queue)
    assert first is not None
    assert not first.redelivered
    channel.nack(first.delivery_tag, requeue=True)
    again = channel.basic_get(queue)
    second = channel.basic_get(queue)
    assert again is not None
    assert second is not None
    assert {again.body, second.body} == {b"a", b"b"}
    assert [m.redelivered for m in (again, second) if m.body == b"a"] == [True]
    channel.reject(again.delivery_tag, requeue=False)
    channel.reject(second.delivery_tag, requeue=False)
    assert channel.basic_get(queue) is None
    assert channel.unsettled == set()


@pytest.mark.live
def test_unacked_deliveries_return_when_the_connection_closes(
    connect: Callable[..., Connection], queue: str
) -> None:
    connection = connect()
    channel = connection.channel()
    channel.confirm_select()
    channel.queue_declare(queue)
    channel.publish_many([(queue, bytes([n]), PROPS) for n in range(5)])
    channel.wait_for_confirms(5)
    got = _consume(connection, channel, queue, 5)
    channel.ack(got[1].delivery_tag, multiple=True)  # the first two
    connection.close()
    assert not connection.is_open

    other = connect().channel()
    assert other.queue_declare(queue, passive=True)[1] == 3
    assert other.queue_purge(queue) == 3


@pytest.mark.live
def test_broker_cancel_of_a_consumer_is_handled(connect: Callable[..., Connection], queue: str) -> None:
    connection = connect()
    channel = connection.channel()
    channel.queue_declare(queue)
    tag, _ = channel.basic_consume(queue)
    connection.channel().queue_delete(queue)  # the broker cancels our consumer
    deadline = time.monotonic() + 5
    while tag in channel.consumers and time.monotonic() < deadline:
        connection.process(0.1)
    assert tag not in channel.consumers
    assert channel.is_open
    channel.queue_declare(queue)  # the channel still works


@pytest.mark.live
def test_cancel_stops_deliveries(connect: Callable[..., Connection], queue: str) -> None:
    connection = connect()
    channel = connection.channel()
    channel.confirm_select()
    channel.queue_declare(queue)
    tag, buffer = channel.basic_consume(queue)
    channel.basic_cancel(tag)
    channel.publish_many([(queue, b"later", PROPS)])
    channel.wait_for_confirms(5)
    connection.sleep(0.2)
    assert not buffer
    assert channel.queue_declare(queue, passive=True)[1] == 1


# -- heartbeats -----------------------------------------------------------------------------------
class _Relay:
    """A TCP relay to the broker that can be frozen (stops passing broker -> client bytes)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.frozen = threading.Event()
        self.stopped = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        try:
            client, _ = self.listener.accept()
        except OSError:
            return
        upstream = socket.create_connection(self.target)
        self.sockets += [client, upstream]
        threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
        threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, from_broker: bool) -> None:
        try:
            while not self.stopped.is_set():
                data = source.recv(65536)
                if not data:
                    return
                if from_broker and self.frozen.is_set():
                    continue  # swallowed: the client hears nothing
                sink.sendall(data)
        except OSError:
            return

    def close(self) -> None:
        self.stopped.set()
        for sock in self.sockets:
            sock.close()


@pytest.mark.live
def test_heartbeats_keep_an_idle_connection_and_silence_kills_it() -> None:
    require_service("rabbitmq")
    relay = _Relay(("127.0.0.1", 5672))
    try:
        connection = Connection(
            ConnectionParameters.from_url(f"amqp://guest:guest@127.0.0.1:{relay.port}/?heartbeat=1")
        )
        assert connection.heartbeat == 1
        connection.sleep(3.5)  # idle longer than two intervals: our heartbeats keep the broker happy
        assert connection.is_open
        connection.channel().close()

        relay.frozen.set()
        started = time.monotonic()
        with pytest.raises(AMQPConnectionError, match="heartbeat"):
            connection.sleep(10)
        assert time.monotonic() - started < 4  # two missed intervals (+ the last read's age)
        assert not connection.is_open
    finally:
        relay.close()


@pytest.mark.live
def test_heartbeat_zero_turns_heartbeats_off(connect: Callable[..., Connection]) -> None:
    connection = connect(URL + "?heartbeat=0")
    assert connection.heartbeat == 0
    assert connection.frame_max == 131072
