"""An in-memory stand-in for the ``pulsar`` module (pulsar-client), for tests without a broker.

No Pulsar broker runs here, so the Pulsar transports (babelq's and the ``babelqueue``
package's) are exercised against this recording fake of the client library's API surface both
of them call: :class:`Client` (``create_producer``, ``subscribe``, ``close``),
:class:`Producer` (``send``/``send_async`` with ``properties``/``partition_key``/
``deliver_at``/``deliver_after``, ``flush``), ``Result``, :class:`Consumer` (``receive``, ``acknowledge``,
``negative_acknowledge``, ``pause_message_listener``/``resume_message_listener``, ``close``),
:class:`Message` (``data``, ``properties``, ``message_id``, ``redelivery_count``,
``publish_timestamp``, ``partition_key``), ``ConsumerType``, ``InitialPosition``,
``AuthenticationToken`` and the exception classes (``Timeout``...). Install it with
:func:`install` (it replaces ``sys.modules["pulsar"]``, which both transports import lazily).

The broker behind it models what the transports depend on, after the broker's own rules
(read from its dispatcher and consumer code, not measured against a running broker):

* Topic names: a short name ``orders`` is ``persistent://public/default/orders``.
* Subscriptions: created by the first ``subscribe``; ``InitialPosition.Latest`` (the client's
  default) starts after the last stored message, ``Earliest`` at the first retained one. A
  message sent while a topic has no subscription at all is not retained (the default
  retention policy), so no later subscription sees it.
* Dispatch: the broker pushes messages to consumers with permits (``receiver_queue_size``),
  round-robin over a Shared subscription's consumers, into each consumer's local receiver
  queue; a pushed message is unacknowledged (dispatched) from that moment, whether the
  application has received it yet or not. Taking one out of the local queue gives a permit
  back. ``receive(timeout_millis)`` on a zero-size queue is refused (as the client does).
* Delays: ``deliver_at`` (epoch ms) / ``deliver_after`` (timedelta) hold a message back on
  Shared subscriptions only (other subscription types get it at once).
* Redelivery: ``negative_acknowledge`` redelivers after the consumer's
  ``negative_ack_redelivery_delay_ms`` (at least 100 ms); a consumer that closes gives its
  unacknowledged messages back. Either way the redelivered message's ``redelivery_count`` is
  one higher. When the last consumer of a subscription leaves, the broker forgets the counts
  (they live in broker memory only).
* An acknowledgement acks the message for the subscription whichever consumer it was
  dispatched to (Pulsar acks by message id); a closed consumer refuses with ``AlreadyClosed``.
* Not modelled: ``unacked_messages_timeout_ms`` redelivery (recorded only), partitioned
  topics, batching, retention beyond the above, dead-letter policies, broker restarts.

The admin REST API (topic stats and ``skip_all``), which pulsar-client does not cover, is
served over HTTP by :meth:`FakeBroker.admin_url` with the broker's JSON field names.

Every client call is recorded on :attr:`FakeBroker.calls` as ``(name, args...)`` so tests can
compare what two SDKs asked of the client.
"""

from __future__ import annotations

import enum
import itertools
import json
import re
import sys
import threading
import time
import types
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

import pytest

MIN_NACK_DELAY_MS = 100
_TICK = 0.005


# -- the module's public names -----------------------------------------------------------------
class PulsarException(Exception):  # noqa: N818 - the client library's name
    """Base of the client's errors (``_pulsar.PulsarException``)."""


class Timeout(PulsarException):
    pass


class AlreadyClosed(PulsarException):
    pass


class InvalidConfiguration(PulsarException):
    pass


class ConsumerBusy(PulsarException):
    pass


class ConnectError(PulsarException):
    pass


class InvalidTopicName(PulsarException):
    pass


class ConsumerType(enum.Enum):
    Exclusive = 0
    Shared = 1
    Failover = 2
    KeyShared = 3


class Result(enum.Enum):
    Ok = 0
    UnknownError = 1
    Timeout = 5
    ProducerQueueIsFull = 15


class InitialPosition(enum.Enum):
    Latest = 0
    Earliest = 1


class AuthenticationToken:
    def __init__(self, token: str | Callable[[], str]) -> None:
        self.token = token

    def __repr__(self) -> str:
        return "AuthenticationToken(***)"


@dataclass(frozen=True, order=True)
class MessageId:
    ledger_id: int
    entry_id: int

    def __str__(self) -> str:
        return f"({self.ledger_id},{self.entry_id},-1,-1)"


def full_topic_name(topic: str) -> str:
    """The broker's name for ``topic`` (``orders`` -> ``persistent://public/default/orders``)."""
    if "://" in topic:
        domain, _, rest = topic.partition("://")
        if domain not in ("persistent", "non-persistent") or rest.count("/") < 2:
            raise InvalidTopicName(f"invalid topic name {topic!r}")
        return topic
    parts = topic.split("/")
    if len(parts) == 1 and topic:
        return f"persistent://public/default/{topic}"
    if len(parts) == 3 and all(parts):
        return f"persistent://{topic}"
    raise InvalidTopicName(f"invalid topic name {topic!r}")


# -- broker state ------------------------------------------------------------------------------
@dataclass
class _Entry:
    id: MessageId
    data: bytes
    properties: dict[str, str]
    partition_key: str
    publish_ms: int
    deliver_at_ms: int | None
    event_ms: int


@dataclass
class SendRecord:
    """One ``Producer.send`` as the fake client received it (for differential tests)."""

    topic: str
    content: bytes
    properties: dict[str, str]
    partition_key: str | None
    deliver_at: int | None
    deliver_after: timedelta | None
    message_id: MessageId


@dataclass
class _Subscription:
    name: str
    type: ConsumerType
    start: int  # first entry index that belongs to the subscription
    acked: set[int] = field(default_factory=set)
    pending: dict[int, _ConsumerCore] = field(default_factory=dict)  # entry index -> consumer holding it
    redeliveries: dict[int, int] = field(default_factory=dict)
    consumers: list[_ConsumerCore] = field(default_factory=list)
    turn: int = 0


@dataclass
class _Topic:
    name: str
    ledger: int
    entries: list[_Entry] = field(default_factory=list)
    subscriptions: dict[str, _Subscription] = field(default_factory=dict)


class FakeBroker:
    """One in-memory Pulsar cluster: topics, subscriptions, a dispatcher thread, an admin API."""

    def __init__(self) -> None:
        self.cond = threading.Condition(threading.RLock())
        self.topics: dict[str, _Topic] = {}
        self.calls: list[tuple[Any, ...]] = []
        self.sends: list[SendRecord] = []
        self.clients: list[Client] = []
        self.admin_requests: list[tuple[str, str, dict[str, str]]] = []
        self._ledgers = itertools.count(100)
        self._pump: threading.Thread | None = None
        self._stopped = False
        self._server: ThreadingHTTPServer | None = None
        #: True: the broker pushes nothing to consumers (a busy broker, a cold ledger read)
        self.hold_dispatch = False
        #: how many of the next ``send_async`` calls the broker refuses
        self.fail_sends = 0
        #: seconds between dispatching a message and the client's listener getting it (a
        #: loaded client: the message is "unacked" on the broker and not in the buffer yet)
        self.listener_delay = 0.0
        #: called (no arguments, without the broker's lock) before the admin API reads a topic's
        #: stats: a slow admin reply, during which dispatch and listeners go on
        self.before_stats: Callable[[], None] | None = None

    # -- recording --
    def record(self, *call: Any) -> None:
        with self.cond:
            self.calls.append(call)

    def calls_named(self, *names: str) -> list[tuple[Any, ...]]:
        with self.cond:
            return [c for c in self.calls if c[0] in names]

    # -- topics --
    def topic(self, name: str) -> _Topic:
        full = full_topic_name(name)
        found = self.topics.get(full)
        if found is None:
            found = self.topics[full] = _Topic(full, next(self._ledgers))
        return found

    def store(self, topic: str, record: dict[str, Any]) -> MessageId:
        with self.cond:
            t = self.topic(topic)
            now = _now_ms()
            mid = MessageId(t.ledger, len(t.entries))
            deliver = record["deliver_at"]
            if record["deliver_after"] is not None:
                deliver = now + int(record["deliver_after"] / timedelta(milliseconds=1))
            t.entries.append(
                _Entry(
                    mid,
                    record["content"],
                    dict(record["properties"] or {}),
                    record["partition_key"] or "",
                    now,
                    deliver,
                    record["event_timestamp"] or 0,
                )
            )
            if not t.subscriptions:  # nobody subscribed: not retained (default retention policy)
                t.entries[-1] = _dropped(t.entries[-1])
            self.sends.append(
                SendRecord(
                    t.name,
                    record["content"],
                    dict(record["properties"] or {}),
                    record["partition_key"],
                    record["deliver_at"],
                    record["deliver_after"],
                    mid,
                )
            )
            self.cond.notify_all()
            return mid

    # -- dispatch (called with the lock held) --
    def _eligible(self, t: _Topic, sub: _Subscription, now: int) -> Iterator[int]:
        for index in range(sub.start, len(t.entries)):
            entry = t.entries[index]
            if entry.data is _DROPPED or index in sub.acked or index in sub.pending:
                continue
            if (
                sub.type is ConsumerType.Shared
                and entry.deliver_at_ms is not None
                and entry.deliver_at_ms > now
            ):
                continue
            yield index

    def dispatch(self) -> None:
        if self.hold_dispatch:
            return
        now = _now_ms()
        for t in self.topics.values():
            for sub in t.subscriptions.values():
                for consumer in list(sub.consumers):
                    consumer._process_nacks(now)
                if not sub.consumers:
                    continue
                for index in list(self._eligible(t, sub, now)):
                    target = self._next_consumer(sub)
                    if target is None:
                        break
                    sub.pending[index] = target
                    entry = t.entries[index]
                    target._local.append(Message._of(entry, t.name, sub.redeliveries.get(index, 0)))
                    target._permits -= 1
        self.cond.notify_all()

    @staticmethod
    def _next_consumer(sub: _Subscription) -> _ConsumerCore | None:
        candidates = sub.consumers
        if sub.type is not ConsumerType.Shared:
            candidates = sub.consumers[:1]  # Exclusive/Failover: the active consumer only
        for step in range(len(candidates)):
            consumer = candidates[(sub.turn + step) % len(candidates)]
            if consumer._permits > 0:
                sub.turn = (sub.turn + step + 1) % max(len(candidates), 1)
                return consumer
        return None

    def release(self, sub: _Subscription, indexes: list[int]) -> None:
        """Give ``indexes`` back to the subscription for redelivery (count + 1)."""
        for index in indexes:
            if sub.pending.pop(index, None) is not None and index not in sub.acked:
                sub.redeliveries[index] = sub.redeliveries.get(index, 0) + 1

    def start_pump(self) -> None:
        with self.cond:
            if self._pump is None and not self._stopped:
                self._pump = threading.Thread(target=self._run, name="fake-pulsar-dispatcher", daemon=True)
                self._pump.start()

    def _run(self) -> None:
        while True:
            calls: list[tuple[Callable[..., Any], Consumer, Message]] = []
            with self.cond:
                if self._stopped:
                    return
                self.dispatch()
                for t in self.topics.values():
                    for sub in t.subscriptions.values():
                        for consumer in sub.consumers:
                            calls += consumer._listener_batch()
                if not calls:
                    self.cond.wait(_TICK)
            for listener, consumer, message in calls:  # outside the lock, like the listener thread
                if self.listener_delay:
                    time.sleep(self.listener_delay)
                listener(consumer, message)

    # -- admin --
    def stats(self, topic: str) -> dict[str, Any] | None:
        with self.cond:
            t = self.topics.get(full_topic_name(topic))
            if t is None:
                return None
            now = _now_ms()
            subs: dict[str, Any] = {}
            for name, sub in t.subscriptions.items():
                live = [
                    i
                    for i in range(sub.start, len(t.entries))
                    if t.entries[i].data is not _DROPPED and i not in sub.acked
                ]
                delayed = sum(
                    1
                    for i in live
                    if i not in sub.pending
                    and sub.type is ConsumerType.Shared
                    and (t.entries[i].deliver_at_ms or 0) > now
                )
                subs[name] = {
                    "msgBacklog": len(live),
                    "unackedMessages": len(sub.pending),
                    "msgDelayed": delayed,
                    "type": sub.type.name,
                    "consumers": [
                        {
                            "consumerName": c.consumer_name(),
                            "unackedMessages": sum(1 for h in sub.pending.values() if h is c),
                            "availablePermits": c._permits,
                        }
                        for c in sub.consumers
                    ],
                }
            return {"msgInCounter": len(t.entries), "subscriptions": subs}

    def skip_all(self, topic: str, subscription: str) -> bool:
        with self.cond:
            t = self.topics.get(full_topic_name(topic))
            if t is None or subscription not in t.subscriptions:
                return False
            sub = t.subscriptions[subscription]
            sub.acked.update(range(sub.start, len(t.entries)))
            sub.pending.clear()
            sub.redeliveries.clear()
            return True

    def admin_url(self) -> str:
        """Start (once) and return the base URL of the fake admin REST API."""
        with self.cond:
            if self._server is None:
                broker = self

                class Handler(_AdminHandler):
                    owner = broker

                self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
                threading.Thread(
                    target=self._server.serve_forever, args=(0.05,), name="fake-pulsar-admin", daemon=True
                ).start()
            host, port = self._server.server_address[:2]
            return f"http://{host!s}:{port}"

    def close(self) -> None:
        with self.cond:
            self._stopped = True
            self.cond.notify_all()
        if self._pump is not None:
            self._pump.join(timeout=5)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


class _Dropped(bytes):
    pass


_DROPPED = _Dropped(b"")


def _dropped(entry: _Entry) -> _Entry:
    entry.data = _DROPPED
    return entry


_STATS = re.compile(r"^/admin/v2/persistent/([^/]+)/([^/]+)/([^/]+)/stats$")
_SKIP_ALL = re.compile(r"^/admin/v2/persistent/([^/]+)/([^/]+)/([^/]+)/subscription/([^/]+)/skip_all$")


class _AdminHandler(BaseHTTPRequestHandler):
    owner: FakeBroker

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _reply(self, status: int, payload: Any = None) -> None:
        body = b"" if payload is None else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _note(self) -> None:
        with self.owner.cond:
            self.owner.admin_requests.append((self.command, self.path, dict(self.headers.items())))

    def do_GET(self) -> None:
        self._note()
        match = _STATS.match(self.path)
        if not match:
            self._reply(404, {"reason": "Not found"})
            return
        tenant, ns, local = (unquote(g) for g in match.groups())
        if self.owner.before_stats is not None:
            self.owner.before_stats()
        stats = self.owner.stats(f"persistent://{tenant}/{ns}/{local}")
        if stats is None:
            self._reply(404, {"reason": "Topic not found"})
        else:
            self._reply(200, stats)

    def do_POST(self) -> None:
        self._note()
        match = _SKIP_ALL.match(self.path)
        if not match:
            self._reply(404, {"reason": "Not found"})
            return
        tenant, ns, local, sub = (unquote(g) for g in match.groups())
        if self.owner.skip_all(f"persistent://{tenant}/{ns}/{local}", sub):
            self._reply(204)
        else:
            self._reply(404, {"reason": "Subscription not found"})


# -- client objects ----------------------------------------------------------------------------
class Message:
    """A received message (``pulsar.Message``)."""

    _entry: _Entry
    _topic: str
    _redelivery: int

    @classmethod
    def _of(cls, entry: _Entry, topic: str, redelivery: int) -> Message:
        m = cls()
        m._entry, m._topic, m._redelivery = entry, topic, redelivery
        return m

    def data(self) -> bytes:
        return bytes(self._entry.data)

    def value(self) -> bytes:
        return self.data()

    def properties(self) -> dict[str, str]:
        return dict(self._entry.properties)

    def partition_key(self) -> str:
        return self._entry.partition_key

    def publish_timestamp(self) -> int:
        return self._entry.publish_ms

    def event_timestamp(self) -> int:
        return self._entry.event_ms

    def message_id(self) -> MessageId:
        return self._entry.id

    def topic_name(self) -> str:
        return self._topic

    def redelivery_count(self) -> int:
        return self._redelivery

    def __repr__(self) -> str:
        return f"Message({self._entry.id}, redelivery={self._redelivery})"


def _check(kind: type | tuple[type, ...], value: Any, name: str, optional: bool = True) -> None:
    if value is None and optional:
        return
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"Argument {name} is expected to be of type '{kind}' and not '{type(value)}'")


class Producer:
    def __init__(self, client: Client, topic: str) -> None:
        self._client = client
        self._topic = full_topic_name(topic)
        self._closed = False

    def topic(self) -> str:
        return self._topic

    def send(  # noqa: PLR0917 - the client's signature, positional arguments included
        self,
        content: bytes,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: str | None = None,
        sequence_id: int | None = None,
        replication_clusters: list[str] | None = None,
        disable_replication: bool = False,
        event_timestamp: int | None = None,
        deliver_at: int | None = None,
        deliver_after: timedelta | None = None,
    ) -> MessageId:
        if self._closed:
            raise AlreadyClosed("producer closed")
        _check(bytes, content, "data", optional=False)
        _check(dict, properties, "properties")
        _check(str, partition_key, "partition_key")
        _check(int, event_timestamp, "event_timestamp")
        _check(int, deliver_at, "deliver_at")
        _check(timedelta, deliver_after, "deliver_after")
        for key, value in (properties or {}).items():
            if not isinstance(key, str) or not isinstance(value, str):  # pybind11 std::string
                raise TypeError(f"property {key!r}: keys and values must be str, got {type(value).__name__}")
        record = {
            "content": bytes(content),
            "properties": properties,
            "partition_key": partition_key or None,
            "deliver_at": deliver_at or None,  # the client ignores 0 / an empty timedelta
            "deliver_after": deliver_after or None,
            "event_timestamp": event_timestamp,
        }
        broker = self._client._broker
        broker.record("send", self._topic, record)
        return broker.store(self._topic, record)

    def send_async(  # noqa: PLR0917 - the client's signature, positional arguments included
        self,
        content: bytes,
        callback: Callable[[Result, MessageId | None], None],
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: str | None = None,
        sequence_id: int | None = None,
        replication_clusters: list[str] | None = None,
        disable_replication: bool = False,
        event_timestamp: int | None = None,
        deliver_at: int | None = None,
        deliver_after: timedelta | None = None,
    ) -> None:
        """Stores the message and answers ``callback`` at once (the real client answers later,
        on its own thread). ``fail_sends`` on the broker makes it answer with an error."""
        broker = self._client._broker
        if broker.fail_sends:
            broker.fail_sends -= 1
            callback(Result.UnknownError, None)
            return
        message_id = self.send(
            content,
            properties,
            partition_key,
            ordering_key,
            sequence_id,
            replication_clusters,
            disable_replication,
            event_timestamp,
            deliver_at,
            deliver_after,
        )
        callback(Result.Ok, message_id)

    def flush(self) -> None:
        self._client._broker.record("flush", self._topic)

    def close(self) -> None:
        self._closed = True


class _ConsumerCore:
    _names = itertools.count(1)

    def __init__(
        self,
        client: Client,
        topic: _Topic,
        sub: _Subscription,
        *,
        listener: Callable[[Consumer, Message], None] | None,
        queue_size: int,
        nack_delay_ms: int,
    ) -> None:
        self._client = client
        self._topic = topic
        self._sub = sub
        self._listener = listener
        self._permits = queue_size
        self._queue_size = queue_size
        self._nack_delay_ms = max(nack_delay_ms, MIN_NACK_DELAY_MS)
        self._local: deque[Message] = deque()
        self._nacks: list[tuple[int, int]] = []  # (due ms, entry index)
        self._paused = False
        self._closed = False
        self._name = f"fake-consumer-{next(self._names)}"

    @property
    def _broker(self) -> FakeBroker:
        return self._client._broker

    def consumer_name(self) -> str:
        return self._name

    def topic(self) -> str:
        return self._topic.name

    def subscription_name(self) -> str:
        return self._sub.name

    def _take(self) -> Message:
        message = self._local.popleft()
        if self._queue_size > 0:
            self._permits += 1
        return message

    def _listener_batch(self) -> list[tuple[Callable[..., Any], Consumer, Message]]:
        if self._listener is None or self._paused or self._closed:
            return []
        out = []
        while self._local:  # like pulsar-client: a new Python wrapper for every call
            out.append((self._listener, Consumer._wrap(self), self._take()))
        return out

    def receive(self, timeout_millis: int | None = None) -> Message:
        _check(int, timeout_millis, "timeout_millis")
        broker = self._broker
        self._broker.record("receive", self._name, timeout_millis)
        if self._listener is not None:
            raise InvalidConfiguration("Can not receive when a listener has been set")
        if timeout_millis is not None and self._queue_size == 0:
            raise InvalidConfiguration("Can't use receive with timeout, if the queue size is 0")
        deadline = None if timeout_millis is None else time.monotonic() + timeout_millis / 1000
        with broker.cond:
            while True:
                if self._closed:
                    raise AlreadyClosed("consumer closed")
                if self._queue_size == 0 and self._permits == 0:
                    self._permits = 1  # a zero-queue consumer asks for one message per receive
                if self._local:
                    message = self._take()
                    broker.cond.notify_all()
                    return message
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise Timeout("Pulsar error: TimeOut")
                broker.cond.wait(_TICK if left is None else min(left, _TICK))

    def acknowledge(self, message: Message | MessageId) -> None:
        mid = message.message_id() if isinstance(message, Message) else message
        self._broker.record("acknowledge", self._name, mid)
        with self._broker.cond:
            if self._closed:
                raise AlreadyClosed("consumer closed")
            index = mid.entry_id
            self._sub.acked.add(index)  # by message id, whoever holds it
            self._sub.pending.pop(index, None)
            self._sub.redeliveries.pop(index, None)
            self._broker.cond.notify_all()

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        mid = message.message_id() if isinstance(message, Message) else message
        self._broker.record("negative_acknowledge", self._name, mid)
        with self._broker.cond:
            if self._closed:
                raise AlreadyClosed("consumer closed")
            self._nacks.append((_now_ms() + self._nack_delay_ms, mid.entry_id))

    def _process_nacks(self, now: int) -> None:
        due = [index for when, index in self._nacks if when <= now]
        if due:
            self._nacks = [(when, index) for when, index in self._nacks if when > now]
            self._broker.release(self._sub, [i for i in due if self._sub.pending.get(i) is self])

    def redeliver_unacknowledged_messages(self) -> None:
        with self._broker.cond:
            self._local.clear()
            self._permits = self._queue_size
            self._broker.release(self._sub, [i for i, c in self._sub.pending.items() if c is self])

    def pause_message_listener(self) -> None:
        self._broker.record("pause_message_listener", self._name)
        self._paused = True

    def resume_message_listener(self) -> None:
        self._broker.record("resume_message_listener", self._name)
        with self._broker.cond:
            self._paused = False
            self._broker.cond.notify_all()

    def is_connected(self) -> bool:
        return not self._closed

    def close(self) -> None:
        broker = self._broker
        with broker.cond:
            if self._closed:
                raise AlreadyClosed("consumer already closed")
            broker.record("close_consumer", self._name)
            self._closed = True
            sub = self._sub
            sub.consumers.remove(self)
            held = [i for i, c in sub.pending.items() if c is self]
            if sub.consumers:
                broker.release(sub, held)
            else:  # the last consumer left: the in-memory redelivery tracker is cleared
                for index in held:
                    sub.pending.pop(index, None)
                sub.redeliveries.clear()
            self._local.clear()
            broker.cond.notify_all()

    def unsubscribe(self) -> None:
        with self._broker.cond:
            self.close()
            self._topic.subscriptions.pop(self._sub.name, None)


class Consumer:
    """pulsar-client's Python consumer: a thin wrapper over the native one (``_consumer``).

    As in the real client, ``subscribe`` returns one wrapper and the message listener gets a new
    wrapper object with every message, so a listener cannot recognise its consumer by identity.
    """

    _consumer: _ConsumerCore

    @classmethod
    def _wrap(cls, core: _ConsumerCore) -> Consumer:
        wrapper = cls()
        wrapper._consumer = core
        return wrapper

    def consumer_name(self) -> str:
        return self._consumer.consumer_name()

    def topic(self) -> str:
        return self._consumer.topic()

    def subscription_name(self) -> str:
        return self._consumer.subscription_name()

    def receive(self, timeout_millis: int | None = None) -> Message:
        return self._consumer.receive(timeout_millis)

    def acknowledge(self, message: Message | MessageId) -> None:
        self._consumer.acknowledge(message)

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        self._consumer.negative_acknowledge(message)

    def redeliver_unacknowledged_messages(self) -> None:
        self._consumer.redeliver_unacknowledged_messages()

    def pause_message_listener(self) -> None:
        self._consumer.pause_message_listener()

    def resume_message_listener(self) -> None:
        self._consumer.resume_message_listener()

    def is_connected(self) -> bool:
        return self._consumer.is_connected()

    def close(self) -> None:
        self._consumer.close()

    def unsubscribe(self) -> None:
        self._consumer.unsubscribe()


class Client:
    def __init__(self, service_url: str, authentication: Any = None, **options: Any) -> None:
        broker = _current()
        if not isinstance(service_url, str) or not re.match(r"^pulsar(\+ssl)?://", service_url):
            raise InvalidConfiguration(f"invalid service URL {service_url!r}")
        self._broker = broker
        self.service_url = service_url
        self.authentication = authentication
        self.options = options
        self._producers: list[Producer] = []
        self._consumers: list[_ConsumerCore] = []
        self._closed = False
        broker.clients.append(self)
        broker.record("Client", service_url, authentication, options)

    def create_producer(self, topic: str, **options: Any) -> Producer:
        if self._closed:
            raise AlreadyClosed("client closed")
        producer = Producer(self, topic)
        self._broker.record("create_producer", producer.topic(), options)
        with self._broker.cond:
            self._broker.topic(topic)
        self._producers.append(producer)
        return producer

    def subscribe(  # noqa: PLR0917 - the client's signature, positional arguments included
        self,
        topic: str,
        subscription_name: str,
        consumer_type: ConsumerType = ConsumerType.Exclusive,
        message_listener: Callable[[Consumer, Message], None] | None = None,
        receiver_queue_size: int = 1000,
        unacked_messages_timeout_ms: int | None = None,
        negative_ack_redelivery_delay_ms: int = 60000,
        initial_position: InitialPosition = InitialPosition.Latest,
        **options: Any,
    ) -> Consumer:
        if self._closed:
            raise AlreadyClosed("client closed")
        if not isinstance(consumer_type, ConsumerType):
            raise ValueError(f"consumer_type must be a ConsumerType, got {consumer_type!r}")
        if not isinstance(initial_position, InitialPosition):
            raise ValueError(f"initial_position must be an InitialPosition, got {initial_position!r}")
        _check(int, receiver_queue_size, "receiver_queue_size", optional=False)
        _check(int, unacked_messages_timeout_ms, "unacked_messages_timeout_ms")
        if unacked_messages_timeout_ms and unacked_messages_timeout_ms < 10_000:
            raise ValueError("unacked_messages_timeout_ms must be at least 10000")
        broker = self._broker
        broker.record(
            "subscribe",
            full_topic_name(topic),
            subscription_name,
            {
                "consumer_type": consumer_type,
                "listener": message_listener is not None,
                "receiver_queue_size": receiver_queue_size,
                "unacked_messages_timeout_ms": unacked_messages_timeout_ms,
                "negative_ack_redelivery_delay_ms": negative_ack_redelivery_delay_ms,
                "initial_position": initial_position,
                **options,
            },
        )
        with broker.cond:
            t = broker.topic(topic)
            sub = t.subscriptions.get(subscription_name)
            if sub is None:
                start = len(t.entries) if initial_position is InitialPosition.Latest else 0
                sub = t.subscriptions[subscription_name] = _Subscription(
                    subscription_name, consumer_type, start
                )
            elif sub.type is not consumer_type and sub.consumers:
                raise ConsumerBusy(f"subscription {subscription_name!r} is {sub.type.name}")
            elif sub.type is ConsumerType.Exclusive and sub.consumers:
                raise ConsumerBusy(f"exclusive subscription {subscription_name!r} already has a consumer")
            sub.type = consumer_type
            consumer = _ConsumerCore(
                self,
                t,
                sub,
                listener=message_listener,
                queue_size=receiver_queue_size,
                nack_delay_ms=negative_ack_redelivery_delay_ms,
            )
            sub.consumers.append(consumer)
            self._consumers.append(consumer)
            broker.cond.notify_all()
        broker.start_pump()
        return Consumer._wrap(consumer)

    def close(self) -> None:
        self._broker.record("close_client")
        for consumer in self._consumers:
            if not consumer._closed:
                consumer.close()
        for producer in self._producers:
            producer.close()
        self._closed = True


# -- installing --------------------------------------------------------------------------------
_BROKER: FakeBroker | None = None


def _current() -> FakeBroker:
    if _BROKER is None:
        raise ConnectError("no fake Pulsar broker is installed (use fake_pulsar.install)")
    return _BROKER


def module() -> types.ModuleType:
    """A module object exposing the fake under the ``pulsar`` module's names."""
    mod = types.ModuleType("pulsar")
    for name in (
        "Client",
        "Producer",
        "Consumer",
        "Message",
        "MessageId",
        "ConsumerType",
        "InitialPosition",
        "Result",
        "AuthenticationToken",
        "PulsarException",
        "Timeout",
        "AlreadyClosed",
        "InvalidConfiguration",
        "ConsumerBusy",
        "ConnectError",
        "InvalidTopicName",
    ):
        setattr(mod, name, globals()[name])
    mod.__dict__["__fake__"] = True
    return mod


def install(monkeypatch: pytest.MonkeyPatch) -> FakeBroker:
    """Replace ``pulsar`` by the fake for this test; returns the broker every new Client talks to."""
    broker = FakeBroker()
    monkeypatch.setitem(sys.modules, "pulsar", module())
    monkeypatch.setattr(sys.modules[__name__], "_BROKER", broker)
    return broker


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
