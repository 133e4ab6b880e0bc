"""babelq's ``artemis://`` transport next to the ``babelqueue`` SDK's ``ArtemisTransport``.

Two halves:

* **LIVE over RabbitMQ 3.10's AMQP 1.0 plugin**: each SDK consumes what the other published on
  the same queue; bodies, application properties, message annotations and correlation ids are
  compared as the other side received them.
* **Fake-backed** (names say so): what RabbitMQ does not do and Artemis does (scheduled delivery
  annotations honoured, ``modified`` counting a delivery in the header ``delivery-count``, the
  ``activemq.management`` address) runs against :class:`FakeProtonConnection`, a small recording
  fake of python-qpid-proton's blocking API (``BlockingConnection.create_sender`` /
  ``create_receiver`` / ``wait``, ``BlockingSender.send``, ``BlockingReceiver.receive`` /
  ``accept``, a link's ``send`` / ``flow`` / ``recv`` / ``advance``, ``Delivery.update`` /
  ``settle``). Messages are real ``proton.Message`` objects, encoded on send and decoded on
  receive, so what is compared is what would cross the wire. Both transports are driven through
  the same fake (the SDK's ``connection=``, babelq's ``connect=``) for the differential tests.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

proton = pytest.importorskip("proton")
babelqueue_artemis = pytest.importorskip("babelqueue.artemis_transport")

from babelq.bindings import artemis as binding  # noqa: E402
from babelq.envelope import Envelope, make  # noqa: E402
from babelq.errors import ConfigurationError, UnavailableError  # noqa: E402
from babelq.transports.artemis import (  # noqa: E402
    DELIVERY_DELAY_ANNOTATION,
    DELIVERY_TIME_ANNOTATION,
    ArtemisTransport,
    body_bytes,
    message_headers,
)
from transports.test_artemis_contract import URL, require_amqp10  # noqa: E402

PackageTransport = babelqueue_artemis.ArtemisTransport
PACKAGE_URL = "artemis://guest:guest@127.0.0.1:5672"


def _envelope(queue: str) -> Envelope:
    return make("urn:babel:orders:created", {"order_id": 1042, "city": "Zürich", "path": "a/b"}, queue=queue)


def _sections(message: Any) -> dict[str, Any]:
    """Everything a proton message puts on the wire, as plain values (body as bytes)."""
    decoded = proton.Message()
    decoded.decode(message.encode())
    out = message_headers(decoded)
    out["body"] = body_bytes(decoded.body)
    out["body_is_string"] = isinstance(decoded.body, str)
    out["inferred"] = decoded.inferred
    out.pop("delivery_count")
    out.pop("first_acquirer")
    return out


# ====================================================================================================
# LIVE: RabbitMQ 3.10 AMQP 1.0
# ====================================================================================================


@pytest.fixture
def live_queue(unique_queue: str) -> Iterator[str]:
    require_amqp10()
    yield unique_queue
    cleaner = ArtemisTransport.from_url(URL, heartbeat=0)
    try:
        cleaner.delete_queue(unique_queue)
    finally:
        cleaner.close()


@pytest.mark.live
def test_live_babelq_consumes_what_the_babelqueue_sdk_published(
    live_queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The SDK addresses the bare name (RabbitMQ then declares a NON-durable queue, since the SDK's
    link asks for no durability); babelq finds it through 0-9-1, uses it as it is (warning) and
    reads it over ``/amq/queue/``."""
    env = _envelope(live_queue)
    body = env.encode()
    sdk = PackageTransport(PACKAGE_URL)
    ours = ArtemisTransport.from_url(URL)
    try:
        sdk.publish(live_queue, body.decode("utf-8"))
        with caplog.at_level(logging.WARNING, logger="babelq.transports.artemis"):
            [delivery] = ours.reserve(live_queue, timeout=5)
        assert any("exists with other arguments" in r.getMessage() for r in caplog.records)
        assert delivery.body == body
        sent = _sections(sdk._message(body.decode("utf-8")))
        got = delivery.headers
        assert got["message_annotations"] == sent["message_annotations"] == {"x-opt-jms-type": env.urn}
        assert got["application_properties"] == sent["application_properties"]
        assert got["application_properties"] == binding.project(env)["application_properties"]
        assert got["correlation_id"] == env.trace_id
        assert got["creation_time"] == env.created_at
        assert "message_id" not in got and got["durable"] is False  # the SDK sets neither
        assert delivery.attempts(0) == 0
        ours.ack(delivery)
        assert ours.size(live_queue) == 0
    finally:
        sdk.close()
        ours.close()


@pytest.mark.live
def test_live_the_babelqueue_sdk_consumes_what_babelq_published(live_queue: str) -> None:
    """babelq declares the durable queue; the SDK reads it by passing ``/amq/queue/<name>`` as its
    queue (its bare name would ask RabbitMQ for a non-durable queue and the attach would fail)."""
    env = _envelope(live_queue)
    body = env.encode()
    ours = ArtemisTransport.from_url(URL)
    sdk = PackageTransport(PACKAGE_URL)
    try:
        ours.publish(live_queue, body, envelope=env)
        address = ours.address(live_queue)
        assert address == f"/amq/queue/{live_queue}"
        raw = sdk._receiver(address).receive(timeout=5)  # the SDK's own link, to see every section
        sdk._receiver(address).release(delivered=False)  # give it back (released), then pop it
        assert body_bytes(raw.body) == body and isinstance(raw.body, str)
        assert dict(raw.properties) == binding.project(env)["application_properties"]
        assert {str(k): v for k, v in raw.annotations.items()} == {"x-opt-jms-type": env.urn}
        assert raw.correlation_id == env.trace_id and raw.id == env.id and raw.durable is True
        received = sdk.pop(address, timeout=5)
        assert received is not None
        assert received.body.encode("utf-8") == body  # attempts 0: the SDK left the body alone
        assert received.route_urn == ""
        sdk.ack(received)
        assert ours.size(live_queue) == 0
    finally:
        sdk.close()
        ours.close()


# ====================================================================================================
# Fake-backed: a recording fake of python-qpid-proton's blocking API, with Artemis semantics
# ====================================================================================================


@dataclass
class _Stored:
    encoded: bytes
    delivery_count: int = 0
    due_ms: int = 0


@dataclass
class FakeArtemis:
    """The broker behind :class:`FakeProtonConnection`: anycast queues by address, Artemis rules.

    * ``x-opt-delivery-time`` (epoch ms) / ``x-opt-delivery-delay`` (ms) hold a message back;
    * ``accepted`` removes, ``released`` requeues as it was, ``modified`` with delivery-failed
      requeues with the header ``delivery-count`` one higher (Artemis counts a failed delivery);
    * ``activemq.management`` answers ``getMessageCount`` / ``getDeliveringCount`` /
      ``getScheduledCount`` / ``removeAllMessages`` for ``queue.<name>``.
    """

    queues: dict[str, deque[_Stored]] = field(default_factory=dict)
    delivering: dict[str, int] = field(default_factory=dict)
    sent: list[tuple[str, Any]] = field(default_factory=list)  # (address, decoded message) in order
    settles: list[tuple[str, int, bool]] = field(default_factory=list)  # (address, outcome, failed)
    links: list[tuple[str, str, tuple[str, ...]]] = field(default_factory=list)  # (role, address, caps)
    management: list[dict[str, Any]] = field(default_factory=list)
    now_ms: Callable[[], int] = field(default=lambda: int(time.time() * 1000))
    refuse_management: bool = False  # the user lacks the manage permission: requests are rejected
    fail_sends: bool = False  # the connection dies under the next send

    def store(self, address: str, message: Any) -> None:
        copy = proton.Message()
        copy.decode(message.encode())
        self.sent.append((address, copy))
        if address == "activemq.management":
            self._manage(copy)
            return
        annotations = {str(k): v for k, v in dict(copy.annotations or {}).items()}
        due = 0
        if DELIVERY_TIME_ANNOTATION in annotations:
            due = int(annotations[DELIVERY_TIME_ANNOTATION])
        elif DELIVERY_DELAY_ANNOTATION in annotations:
            due = self.now_ms() + int(annotations[DELIVERY_DELAY_ANNOTATION])
        self.queues.setdefault(address, deque()).append(_Stored(message.encode(), 0, due))

    def take(self, address: str) -> _Stored | None:
        queue = self.queues.get(address, deque())
        now = self.now_ms()
        for stored in list(queue):
            if stored.due_ms <= now:
                queue.remove(stored)
                self.delivering[address] = self.delivering.get(address, 0) + 1
                return stored
        return None

    def settle(self, address: str, stored: _Stored, outcome: int, failed: bool) -> None:
        self.settles.append((address, outcome, failed))
        self.delivering[address] -= 1
        if outcome == proton.Delivery.ACCEPTED:
            return
        count = stored.delivery_count + (1 if outcome == proton.Delivery.MODIFIED and failed else 0)
        self.queues.setdefault(address, deque()).appendleft(_Stored(stored.encoded, count, 0))

    def _manage(self, request: Any) -> None:
        props = dict(request.properties or {})
        self.management.append(props)
        name = str(props["_AMQ_ResourceName"]).removeprefix("queue.")
        queue = self.queues.get(name, deque())
        operation = props["_AMQ_OperationName"]
        delivering = self.delivering.get(name, 0)
        scheduled = sum(1 for s in queue if s.due_ms > self.now_ms())
        result: Any = {
            "getMessageCount": len(queue) + delivering,
            "getDeliveringCount": delivering,
            "getScheduledCount": scheduled,
        }.get(operation)
        if operation == "removeAllMessages":
            result = len(queue)
            queue.clear()
        reply = proton.Message(body=json.dumps([result]), properties={"_AMQ_OperationSucceeded": True})
        self.queues.setdefault(str(request.reply_to), deque()).append(_Stored(reply.encode()))


class _Terminus:
    def __init__(self, address: str | None) -> None:
        self.address = address
        self.capabilities = proton.Data()


class FakeDelivery:
    """``proton.Delivery``: a sent one is settled by the broker at once (ACCEPTED); a received one
    records ``update``/``settle`` (with ``local.failed``) into the broker."""

    def __init__(self, link: FakeLink, stored: _Stored | None = None) -> None:
        self.link = link
        self.stored = stored
        self.local = type("Disposition", (), {"failed": False, "undeliverable": False})()
        self.remote_state = proton.Delivery.ACCEPTED if stored is None else 0
        self.settled = stored is None
        self.readable = stored is not None
        self.partial = False
        self._state = 0
        self.pending = len(self._wire()) if stored is not None else 0

    def _wire(self) -> bytes:
        assert self.stored is not None
        message = proton.Message()
        message.decode(self.stored.encoded)
        message.delivery_count = self.stored.delivery_count
        return bytes(message.encode())

    def update(self, state: int) -> None:
        self._state = state

    def settle(self) -> None:
        if self.stored is not None and not self.settled:
            self.link.broker.settle(self.link.address, self.stored, self._state, bool(self.local.failed))
        self.settled = True


class FakeLink:
    """``proton.Sender`` / ``proton.Receiver`` (the parts the transports touch)."""

    def __init__(self, broker: FakeArtemis, address: str, is_sender: bool, handler: Any = None) -> None:
        self.broker = broker
        self.address = address
        self.is_sender = is_sender
        self.handler = handler
        self.credit = 0
        self.state = proton.Endpoint.LOCAL_ACTIVE | proton.Endpoint.REMOTE_ACTIVE
        self.target = _Terminus(address if is_sender else None)
        self.source = _Terminus(None if is_sender else address)
        self.remote_source = _Terminus(address)
        self._incoming: deque[FakeDelivery] = deque()

    def send(self, message: Any) -> FakeDelivery:
        if self.broker.fail_sends:
            raise proton.ConnectionException("Connection fake disconnected: Condition('proton:io')")
        if self.broker.refuse_management and self.address == "activemq.management":
            refused = FakeDelivery(self)
            refused.remote_state = proton.Delivery.REJECTED
            return refused
        self.broker.store(self.address, message)
        return FakeDelivery(self)

    def flow(self, n: int) -> None:
        self.credit += n

    def drained(self) -> int:
        credit, self.credit = self.credit, 0
        return credit

    def recv(self, n: int) -> bytes:
        return self._incoming[0]._wire()[:n]

    def advance(self) -> None:
        self._incoming.popleft()

    def close(self) -> None:
        self.state = proton.Endpoint.LOCAL_CLOSED | proton.Endpoint.REMOTE_CLOSED

    def pump(self) -> None:
        while self.credit > 0 and not self.is_sender:
            stored = self.broker.take(self.address)
            if stored is None:
                return
            self.credit -= 1
            delivery = FakeDelivery(self, stored)
            self._incoming.append(delivery)
            # proton's Event carries the delivery and its link (the transport reads the link from it)
            self.handler.on_delivery(type("Event", (), {"delivery": delivery, "link": self})())


class FakeBlockingSender:
    """``proton.utils.BlockingSender``: ``send`` blocks until settled (here: at once)."""

    def __init__(self, link: FakeLink) -> None:
        self.link = link

    def send(self, message: Any, timeout: Any = False, error_states: Any = None) -> FakeDelivery:
        delivery = self.link.send(message)
        if delivery.remote_state in (error_states or [proton.Delivery.REJECTED, proton.Delivery.RELEASED]):
            raise proton.utils.SendException(delivery.remote_state)
        return delivery

    def close(self) -> None:
        self.link.close()


class _Fetcher:
    """``proton.utils.Fetcher``: what a handler-less BlockingReceiver collects."""

    def __init__(self) -> None:
        self.incoming: deque[tuple[Any, Any]] = deque()
        self.unsettled: deque[Any] = deque()

    def on_delivery(self, event: Any) -> None:
        delivery = event.delivery
        message = proton.Message()
        message.decode(delivery.link.recv(delivery.pending))
        delivery.link.advance()
        self.incoming.append((message, delivery))


class FakeBlockingReceiver:
    """``proton.utils.BlockingReceiver``: ``receive``/``accept``/``release`` (the SDK), ``link`` (babelq)."""

    def __init__(self, connection: FakeProtonConnection, link: FakeLink, fetcher: _Fetcher | None) -> None:
        self.connection = connection
        self.link = link
        self.fetcher = fetcher

    def receive(self, timeout: Any = False) -> Any:
        assert self.fetcher is not None
        if not self.link.credit:
            self.link.flow(1)
        self.connection.wait(lambda: bool(self.fetcher and self.fetcher.incoming), timeout=timeout)
        message, delivery = self.fetcher.incoming.popleft()
        self.fetcher.unsettled.append(delivery)
        return message

    def accept(self) -> None:
        assert self.fetcher is not None
        delivery = self.fetcher.unsettled.popleft()
        delivery.update(proton.Delivery.ACCEPTED)
        delivery.settle()

    def close(self) -> None:
        self.link.close()


class FakeProtonConnection:
    """``proton.utils.BlockingConnection`` over a :class:`FakeArtemis`; records every link."""

    def __init__(self, broker: FakeArtemis) -> None:
        self.broker = broker
        self.receivers: list[FakeLink] = []
        self.closed = False

    def create_sender(self, address: str, handler: Any = None, name: Any = None, options: Any = None) -> Any:
        link = FakeLink(self.broker, address, True)
        if options is not None:
            options.apply(link)
        self.broker.links.append(("sender", address, _caps(link.target)))
        return FakeBlockingSender(link)

    def create_receiver(  # noqa: PLR0917  # proton's BlockingConnection.create_receiver signature
        self,
        address: str | None = None,
        credit: int | None = None,
        dynamic: bool = False,
        handler: Any = None,
        name: Any = None,
        options: Any = None,
    ) -> FakeBlockingReceiver:
        if dynamic:
            address = f"reply-{uuid.uuid4().hex[:8]}"
        assert address is not None
        fetcher = None if handler is not None else _Fetcher()
        link = FakeLink(self.broker, address, False, handler or fetcher)
        if options is not None:
            options.apply(link)
        if credit:
            link.flow(credit)
        self.receivers.append(link)
        self.broker.links.append(("receiver", address, _caps(link.source)))
        return FakeBlockingReceiver(self, link, fetcher)

    def wait(self, condition: Callable[[], bool], timeout: Any = False, msg: str | None = None) -> None:
        for link in self.receivers:
            link.pump()
        if not condition():
            raise proton.Timeout(f"Connection fake timed out: {msg or ''}")

    def close(self) -> None:
        self.closed = True


def _caps(terminus: _Terminus) -> tuple[str, ...]:
    data = terminus.capabilities
    data.rewind()
    if not data.next():
        return ()
    array = data.get_object()
    return tuple(str(s) for s in array.elements)


@pytest.fixture
def fake() -> FakeArtemis:
    return FakeArtemis()


@pytest.fixture
def ours_on(fake: FakeArtemis) -> Iterator[Callable[..., ArtemisTransport]]:
    opened: list[ArtemisTransport] = []

    def factory(**options: Any) -> ArtemisTransport:
        transport = ArtemisTransport(
            "artemis://guest:guest@broker:5672", connect=lambda _t: FakeProtonConnection(fake), **options
        )
        opened.append(transport)
        return transport

    yield factory
    for transport in opened:
        transport.close()


def _sdk_on(fake: FakeArtemis) -> Any:
    return PackageTransport("artemis://broker:5672", connection=FakeProtonConnection(fake))


# -- differential: the same envelope through both SDKs ------------------------------------------------


@pytest.mark.parametrize("attempts", [0, 3])
def test_fake_differential_both_sdks_put_the_same_message_on_the_wire(
    fake: FakeArtemis, ours_on: Callable[..., ArtemisTransport], attempts: int
) -> None:
    env = make("urn:babel:orders:created", {"order_id": 7, "name": "Zoë", "path": "a/b"}, queue="orders")
    body = env.encode()
    if attempts:
        body = json.dumps(dict(env.document()) | {"attempts": attempts}, ensure_ascii=False,
                          separators=(",", ":")).encode()  # fmt: skip
    _sdk_on(fake).publish("orders", body.decode("utf-8"))
    ours_on().publish("orders", body)
    [(sdk_address, sdk_msg), (our_address, our_msg)] = fake.sent
    assert sdk_address == our_address == "orders"  # broker=artemis: the bare name, like the SDK
    theirs, mine = _sections(sdk_msg), _sections(our_msg)
    # the deliberate differences: babelq marks the message durable and fills message-id (JMSMessageID)
    assert (theirs.pop("durable"), mine.pop("durable")) == (False, True)
    assert mine.pop("message_id") == env.id and "message_id" not in theirs
    assert mine == theirs
    assert mine["body"] == body and mine["body_is_string"] is True
    assert mine["application_properties"]["bq_attempts"] == str(attempts)
    assert mine["creation_time"] == env.created_at
    # both links ask for the same node; babelq adds the ``queue`` capability (anycast, as a JMS queue)
    assert [(role, address) for role, address, _ in fake.links] == [
        ("sender", "orders"),
        ("sender", "orders"),
    ]
    assert [caps for _, _, caps in fake.links] == [(), ("queue",)]


def test_fake_differential_each_sdk_consumes_what_the_other_published(
    fake: FakeArtemis, ours_on: Callable[..., ArtemisTransport]
) -> None:
    env = _envelope("orders")
    body = env.encode()
    ours, sdk = ours_on(), _sdk_on(fake)
    ours.publish("orders", body, envelope=env)
    received = sdk.pop("orders", timeout=0.1)
    assert received is not None and received.body.encode("utf-8") == body
    sdk.ack(received)
    sdk.publish("orders", body.decode("utf-8"))
    [delivery] = ours.reserve("orders", timeout=0.1)
    assert delivery.body == body
    assert delivery.headers["message_annotations"] == {"x-opt-jms-type": env.urn}
    ours.ack(delivery)
    # both settle a processed message the same way: accepted, not failed
    assert fake.settles == [("orders", proton.Delivery.ACCEPTED, False)] * 2
    assert fake.queues["orders"] == deque()


def test_fake_differential_delivery_count_reconciliation(
    fake: FakeArtemis, ours_on: Callable[..., ArtemisTransport]
) -> None:
    """Artemis redelivers after two failed deliveries with header delivery-count 2: both SDKs
    reconcile attempts = max(body, 2). The SDK rewrites the body with the new count; babelq keeps
    the bytes and reports it through ``Delivery.attempts`` (the runtime writes it on retry)."""
    env = _envelope("orders")
    body = env.encode()
    ours = ours_on()
    ours.publish("orders", body, envelope=env)
    for _ in range(2):
        [held] = ours.reserve("orders", timeout=0.1)
        ours.release(held)  # modified, delivery-failed: Artemis counts it
    assert fake.settles == [("orders", proton.Delivery.MODIFIED, True)] * 2
    [third] = ours.reserve("orders", timeout=0.1)
    assert third.headers["delivery_count"] == 2
    assert (third.delivery_count, third.attempts(0), third.attempts(5)) == (3, 2, 5)
    assert third.body == body
    ours.release(third)
    received = _sdk_on(fake).pop("orders", timeout=0.1)
    assert received is not None
    assert json.loads(received.body)["attempts"] == 3  # the SDK's body rewrite: max(0, 3)
    assert json.loads(received.body)["meta"] == json.loads(body)["meta"]


def test_fake_release_many_is_released_and_not_counted(
    fake: FakeArtemis, ours_on: Callable[..., ArtemisTransport]
) -> None:
    ours = ours_on()
    ours.publish_many(
        "orders", [_outgoing(b'{"job":"urn:babel:t:a"}'), _outgoing(b'{"job":"urn:babel:t:b"}')]
    )
    held = ours.reserve("orders", max_messages=2, timeout=0.1)
    ours.release_many(held)
    assert fake.settles == [("orders", proton.Delivery.RELEASED, False)] * 2
    again = ours.reserve("orders", max_messages=2, timeout=0.1)
    assert [d.headers["delivery_count"] for d in again] == [0, 0]


def _outgoing(body: bytes) -> Any:
    from babelq.transports import Outgoing

    return Outgoing(body)


# -- scheduled delivery (Artemis honours it; RabbitMQ does not) ---------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.ms = 1_800_000_000_000

    def __call__(self) -> int:
        return self.ms


def test_fake_delayed_publish_carries_the_delivery_time_and_waits_for_it(
    fake: FakeArtemis, ours_on: Callable[..., ArtemisTransport], monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = _Clock()
    fake.now_ms = clock
    monkeypatch.setattr(time, "time", lambda: clock.ms / 1000)
    ours = ours_on()
    ours.publish("orders", b'{"job":"urn:babel:t:later"}', delay_ms=5_000)
    [(_, sent)] = fake.sent
    assert _sections(sent)["message_annotations"][DELIVERY_TIME_ANNOTATION] == clock.ms + 5_000
    assert ours.reserve("orders", timeout=0) == []
    assert (ours.size("orders"), ours.ready("orders")) == (1, 0)  # scheduled: waiting, not ready
    clock.ms += 5_000
    [delivery] = ours.reserve("orders", timeout=0)
    assert delivery.body == b'{"job":"urn:babel:t:later"}'
    ours.ack(delivery)


def test_fake_delivery_delay_mode_writes_the_relative_annotation(
    fake: FakeArtemis, ours_on: Callable[..., ArtemisTransport]
) -> None:
    ours = ours_on(delays="delivery-delay")
    ours.publish("orders", b"{}", delay_ms=750)
    [(_, sent)] = fake.sent
    annotations = _sections(sent)["message_annotations"]
    assert annotations == {DELIVERY_DELAY_ANNOTATION: 750}


def test_fake_retry_and_release_with_delay_republish_scheduled_then_accept(
    fake: FakeArtemis, ours_on: Callable[..., ArtemisTransport], monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = _Clock()
    fake.now_ms = clock
    monkeypatch.setattr(time, "time", lambda: clock.ms / 1000)
    env = _envelope("orders")
    ours = ours_on()
    ours.publish("orders", env.encode(), envelope=env)
    [held] = ours.reserve("orders", timeout=0)
    ours.release(held, delay_ms=2_000)  # a scheduled copy of the same message, then the original accepted
    _, copy = fake.sent[-1]
    sections = _sections(copy)
    assert sections["body"] == env.encode()
    assert sections["message_annotations"] == {
        "x-opt-jms-type": env.urn,
        DELIVERY_TIME_ANNOTATION: clock.ms + 2_000,
    }
    assert sections["message_id"] == env.id and sections["durable"] is True
    assert fake.settles[-1] == ("orders", proton.Delivery.ACCEPTED, False)
    assert ours.reserve("orders", timeout=0) == []
    clock.ms += 2_000
    [back] = ours.reserve("orders", timeout=0)
    retried = json.dumps(dict(env.document()) | {"attempts": 1}, ensure_ascii=False, separators=(",", ":"))
    ours.retry(back, retried.encode(), delay_ms=1_000)
    _, sent = fake.sent[-1]
    assert _sections(sent)["application_properties"]["bq_attempts"] == "1"
    assert _sections(sent)["message_annotations"][DELIVERY_TIME_ANNOTATION] == clock.ms + 1_000
    clock.ms += 1_000
    [last] = ours.reserve("orders", timeout=0)
    assert last.body == retried.encode()
    ours.dead_letter(last, last.body, dlq="orders.dlq")
    assert fake.sent[-1][0] == "orders.dlq"
    assert DELIVERY_TIME_ANNOTATION not in _sections(fake.sent[-1][1])["message_annotations"]
    assert [d.body for d in ours.reserve("orders.dlq", timeout=0)] == [retried.encode()]


# -- the management address (size, ready, purge on Artemis) -------------------------------------------


def test_fake_counts_and_purge_go_through_the_management_address(
    fake: FakeArtemis, ours_on: Callable[..., ArtemisTransport]
) -> None:
    ours = ours_on()
    for i in range(3):
        ours.publish("orders", f'{{"n":{i}}}'.encode())
    [held] = ours.reserve("orders", timeout=0)
    assert ours.size("orders") == 2  # waiting: count minus delivering
    assert {(p["_AMQ_ResourceName"], p["_AMQ_OperationName"]) for p in fake.management} == {
        ("queue.orders", "getMessageCount"), ("queue.orders", "getDeliveringCount"),
    }  # fmt: skip
    request = next(m for a, m in fake.sent if a == "activemq.management")
    assert request.reply_to.startswith("reply-") and request.body == "[]"
    ours.purge("orders")
    assert fake.queues["orders"] == deque()
    assert ours.renew_many([held]) == 0  # purge settled what this transport held
    assert ours.size("orders") == 0


def test_fake_without_the_manage_permission_counts_refuse_and_an_empty_reserve_still_answers(
    fake: FakeArtemis, ours_on: Callable[..., ArtemisTransport], caplog: pytest.LogCaptureFixture
) -> None:
    fake.refuse_management = True
    ours = ours_on()
    with pytest.raises(ConfigurationError, match="manage permission") as caught:
        ours.size("orders")
    assert "\n" not in str(caught.value) and "guest:***@" in str(caught.value)
    with caplog.at_level(logging.WARNING, logger="babelq.transports.artemis"):
        assert ours.reserve("orders", timeout=0) == []
        assert ours.reserve("orders", timeout=0) == []
    assert sum("not double-checked" in r.getMessage() for r in caplog.records) == 1
    ours.publish("orders", b"{}")
    assert [d.body for d in ours.reserve("orders", timeout=0)] == [b"{}"]


def test_fake_a_connection_lost_during_a_retry_is_unavailable_and_the_message_stays(
    fake: FakeArtemis, ours_on: Callable[..., ArtemisTransport]
) -> None:
    ours = ours_on()
    ours.publish("orders", b'{"job":"urn:babel:t:x"}')
    [held] = ours.reserve("orders", timeout=0)
    fake.fail_sends = True
    with pytest.raises(UnavailableError, match="went back to the broker") as caught:
        ours.retry(held, b'{"job":"urn:babel:t:x","attempts":1}', delay_ms=0)
    assert "\n" not in str(caught.value)
    assert fake.settles == []  # the original was neither accepted nor dead-lettered
    fake.fail_sends = False
    ours.ack(held)  # stale (its connection was dropped): ignored
    assert fake.settles == []
