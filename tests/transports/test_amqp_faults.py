"""RabbitMQ under network faults: a silent partition, a slow link, a handler that outlasts heartbeats.

Every test talks to the real broker on 127.0.0.1:5672, through :class:`FaultProxy` when the
network has to misbehave: a TCP proxy in this process (threads on 127.0.0.1) that forwards
bytes both ways and can

* go *silent* on the connections it carries (``black_hole``): it stops forwarding in both
  directions and keeps every socket open, so neither side gets a FIN or RST -- what a dead
  switch, a dropped VPN or a firewall that forgets a flow looks like. Connections made
  afterwards are forwarded normally, like a client that reaches the broker again on a new flow;
* deliver every broker -> client byte ``delay`` seconds late (a slow or congested link; a
  broker too busy to push deliveries promptly looks the same to the client).

Nobody touches the broker itself.
"""

from __future__ import annotations

import select
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from queue import Empty, SimpleQueue

import pytest

from babelq.runtime import App, Message
from babelq.transports.amqp import AMQPTransport
from babelq.transports.amqp_client import Connection, ConnectionParameters
from conftest import require_service

BROKER = ("127.0.0.1", 5672)
URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
URN = "urn:babel:faults:tick"


class _Link:
    """One proxied connection: a pump thread per direction (plus a sender when delayed)."""

    def __init__(self, client: socket.socket, upstream: socket.socket, delay: float) -> None:
        self.client = client
        self.upstream = upstream
        self.silent = threading.Event()
        self.closed = threading.Event()
        self.delay = delay
        self._late: SimpleQueue[tuple[float, bytes]] = SimpleQueue()
        for target, args in (
            (self._pump, (client, upstream, False)),
            (self._pump, (upstream, client, delay > 0)),
            (self._send_late, ()),
        ):
            threading.Thread(target=target, args=args, daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, late: bool) -> None:
        try:
            while not self.closed.is_set():
                if self.silent.is_set():  # read nothing, send nothing, close nothing
                    time.sleep(0.05)
                    continue
                if not select.select([source], [], [], 0.05)[0]:
                    continue
                data = source.recv(1 << 16)
                if not data:
                    break
                if late:
                    self._late.put((time.monotonic() + self.delay, data))
                else:
                    sink.sendall(data)
        except OSError:
            pass
        if not self.silent.is_set():
            self.close()

    def _send_late(self) -> None:
        while not self.closed.is_set():
            try:
                due, data = self._late.get(timeout=0.05)
            except Empty:
                continue
            if (wait := due - time.monotonic()) > 0:
                time.sleep(wait)
            if self.silent.is_set():
                continue
            try:
                self.client.sendall(data)
            except OSError:
                self.close()
                return

    def close(self) -> None:
        self.closed.set()
        for sock in (self.client, self.upstream):
            sock.close()


class FaultProxy:
    """A TCP proxy to RabbitMQ whose connections can be silenced or slowed (module docstring)."""

    def __init__(self, target: tuple[str, int] = BROKER, *, delay: float = 0.0) -> None:
        self.target = target
        self.delay = delay
        self.links: list[_Link] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, query: str = "") -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F" + (f"?{query}" if query else "")

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self.links.append(_Link(client, upstream, self.delay))

    def black_hole(self) -> None:
        """Silence every connection carried so far; later connections are forwarded."""
        for link in self.links:
            link.silent.set()

    def close(self) -> None:
        self.listener.close()
        for link in self.links:
            link.close()


@pytest.fixture
def proxies() -> Iterator[list[FaultProxy]]:
    require_service("rabbitmq")
    made: list[FaultProxy] = []
    yield made
    for proxy in made:
        proxy.close()


@pytest.fixture
def direct(unique_queue: str) -> Iterator[AMQPTransport]:
    """A transport straight to the broker (no proxy): publishes the work, checks, cleans up."""
    require_service("rabbitmq")
    transport = AMQPTransport(URL)
    yield transport
    transport.delete_queues(unique_queue)
    transport.close()


def _publish(transport: AMQPTransport, queue: str, count: int) -> None:
    app = App(transport, queue=queue)
    for start in range(0, count, 1000):
        app.publish_many([(URN, {"n": n}) for n in range(start, min(count, start + 1000))])


# -- heartbeats: negotiated by default ---------------------------------------------------------------
@pytest.mark.live
def test_heartbeat_takes_the_brokers_proposal_unless_the_url_sets_one() -> None:
    require_service("rabbitmq")
    connections = {
        query: Connection(ConnectionParameters.from_url(f"{URL}{query}"))
        for query in ("", "?heartbeat=0", "?heartbeat=7")
    }
    try:
        default = connections[""]
        assert default.heartbeat > 0, "heartbeats are off unless asked for: a silent partition goes unnoticed"
        assert default.heartbeat == default.broker_heartbeat  # RabbitMQ proposes 60 s by default
        assert connections["?heartbeat=0"].heartbeat == 0
        assert connections["?heartbeat=7"].heartbeat == 7
    finally:
        for connection in connections.values():
            connection.close()


# -- a silent partition --------------------------------------------------------------------------------
@pytest.mark.live
@pytest.mark.slow
def test_a_silent_partition_is_noticed_and_the_app_consumes_on_through_a_new_connection(
    proxies: list[FaultProxy], direct: AMQPTransport, unique_queue: str
) -> None:
    proxy = FaultProxy()
    proxies.append(proxy)
    total, cut_after = 300, 40
    _publish(direct, unique_queue, total)
    app = App(proxy.url("heartbeat=1&prefetch=20"), queue=unique_queue, prefetch=10)
    handled: Counter[int] = Counter()
    moments: dict[str, float] = {}

    @app.handler(URN)
    def tick(message: Message) -> None:
        if len(handled) == cut_after and "cut" not in moments:
            proxy.black_hole()  # mid-batch: acks of this batch and the rest of the prefetch are lost
            moments["cut"] = time.monotonic()
            moments["links"] = len(proxy.links)
        elif "cut" in moments and "resumed" not in moments and len(proxy.links) > moments["links"]:
            moments["resumed"] = time.monotonic()  # handled after a new connection was made
        handled[message.data["n"]] += 1
        time.sleep(0.002)

    worker = threading.Thread(target=app.run, kwargs={"handle_signals": False}, daemon=True)
    worker.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        # Done when every message was handled and the broker has dropped the silent connection
        # (its consumer is gone, so what it held unacked is back and taken by the new one).
        _, ready, consumers = direct._admin_channel().queue_declare(unique_queue, passive=True)
        if len(handled) == total and ready == 0 and consumers == 1:
            moments.setdefault("broker_dropped", time.monotonic())
            time.sleep(1.0)  # let the redelivered ones be handled and acked
            break
        time.sleep(0.1)
    app.stop()
    worker.join(10)
    app.close()

    assert "cut" in moments, "the partition never started"
    assert "resumed" in moments, f"consuming never resumed: {len(handled)} of {total} handled"
    noticed = moments["resumed"] - moments["cut"]
    print(
        f"partition noticed and a new connection consuming after {noticed:.2f} s; the broker dropped "
        f"the silent connection after {moments.get('broker_dropped', 0) - moments['cut']:.2f} s "
        f"(heartbeat 1 s); {sum(handled.values()) - total} redelivered"
    )
    assert noticed < 6
    assert set(handled) == set(range(total)), f"lost: {sorted(set(range(total)) - set(handled))[:10]}"
    assert direct.size(unique_queue) == 0
    assert direct.reserve(unique_queue, timeout=0.5) == []  # nothing came back later either


# -- a handler that runs longer than two heartbeat intervals ------------------------------------------
@pytest.mark.live
@pytest.mark.slow
def test_a_handler_longer_than_two_heartbeats_keeps_its_connection_and_its_message(
    direct: AMQPTransport, unique_queue: str
) -> None:
    _publish(direct, unique_queue, 2)
    app = App(f"{URL}?heartbeat=1", queue=unique_queue)
    handled: Counter[int] = Counter()

    @app.handler(URN)
    def slow(message: Message) -> None:
        handled[message.data["n"]] += 1
        if message.data["n"] == 0:
            time.sleep(4.5)  # the runtime does not call the transport meanwhile

    with app:
        app.drain(timeout=20)
    assert handled == Counter({0: 1, 1: 1}), "a message was delivered again: the broker dropped us"
    assert direct.size(unique_queue) == 0


# -- drain while the broker is slow to push deliveries --------------------------------------------------
@pytest.mark.live
@pytest.mark.slow
@pytest.mark.parametrize("concurrency", [1, 4])
def test_drain_stops_only_when_the_queue_is_empty_even_when_deliveries_arrive_late(
    proxies: list[FaultProxy], direct: AMQPTransport, unique_queue: str, concurrency: int
) -> None:
    # Every byte from the broker arrives 250 ms late, longer than drain's idle wait (0.1 s): the
    # consumer's buffer runs dry between prefetch windows while thousands of messages are ready.
    proxy = FaultProxy(delay=0.25)
    proxies.append(proxy)
    total = 2000
    _publish(direct, unique_queue, total)
    with App(proxy.url("prefetch=500"), queue=unique_queue, concurrency=concurrency) as app:
        app.register(URN, lambda message: None)
        started = time.monotonic()
        done = app.drain(timeout=30)
        took = time.monotonic() - started
    left = direct.size(unique_queue)
    print(f"drained {done} of {total} through a 250 ms link in {took:.2f} s, {left} left")
    assert (done, left) == (total, 0)


@pytest.mark.live
@pytest.mark.slow
def test_drain_empties_the_queue_run_after_run() -> None:
    # The fault run's shape without injected faults: a few runs of a few thousand messages,
    # prefetch 256 and 1024. It did not trigger the early stop on this machine by itself (the
    # broker pushed fast enough); the slow-link test above makes the same cause deterministic.
    require_service("rabbitmq")
    for run, prefetch in enumerate((256, 1024, 256)):
        queue = f"t-drain-loop-{uuid.uuid4().hex[:8]}"
        transport = AMQPTransport.from_url(f"{URL}?prefetch={prefetch}")
        try:
            _publish(transport, queue, 5000)
            with App(transport, queue=queue) as app:
                app.register(URN, lambda message: None)
                done = app.drain(timeout=60)
            assert (run, done, transport.size(queue)) == (run, 5000, 0)
        finally:
            transport.delete_queues(queue)
            transport.close()
