"""RabbitMQ transport (``amqp://``, ``amqps://``) over AMQP 0-9-1 with pika.

Why it looks the way it does:

* **Contract.** Every publish carries the SPEC section 4 projection of the body (``type``,
  ``correlation_id``, ``message_id``, ``app_id``, ``content_type``, persistent delivery and the
  native-typed ``x-*`` headers) computed by :mod:`babelq.bindings.rabbitmq`. The body is never
  touched. Queues are durable and named after the logical queue, so any SDK of the standard that
  publishes to ``orders`` meets us there.
* **Durability.** Publishes use publisher confirms: a call returns only after the broker took
  responsibility for every message. A batch is pipelined (all ``basic.publish`` frames first,
  then one wait for the confirms). Messages are ``mandatory``: an unroutable one is an error.
* **At-least-once.** Reservations are manual-ack deliveries. By default a consumer with a
  bounded prefetch (``basic.qos``) streams messages into a local buffer (much faster than one
  ``basic.get`` round trip per message); ``reserve_mode=get`` switches to ``basic.get``. Either
  way a delivery that is never settled returns to the queue when the channel or connection
  closes (worker crash, heartbeat loss).
* **Delays** (``delay_ms``, retry backoff) use holding queues ``<queue>.delay.<ms>`` whose
  ``x-message-ttl`` dead-letters the message back to the work queue through the default
  exchange. Delays are rounded *up* to two significant digits (never early, at most ~10%
  late), which keeps the number of holding queues bounded.
* **Threads.** pika's ``BlockingConnection`` is not thread-safe. One transport owns one
  connection and serialises every call with a lock, so it may be shared by threads (they take
  turns); for parallel throughput open one transport per thread. A delivery must be settled
  through the transport that reserved it.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from babelq.bindings import rabbitmq as binding
from babelq.envelope import Envelope, decode
from babelq.errors import BabelqError, ConfigurationError, DecodeError
from babelq.transports.base import BaseTransport, Delivery, Outgoing

log = logging.getLogger(__name__)

DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
#: URL query keys this transport consumes itself; the rest go to pika.
_OWN_OPTIONS = ("prefetch", "reserve_mode", "max_priority", "queue_type", "confirm_timeout")
_RESERVE_MODES = ("consume", "get")
#: One blocking wait inside ``reserve`` holds the lock at most this long (other threads take turns).
_WAIT_SLICE = 0.2


class AMQPPublishError(BabelqError):
    """The broker refused (nack), returned (unroutable) or never confirmed a published message."""


def delay_bucket_ms(delay_ms: int) -> int:
    """``delay_ms`` rounded up to two significant digits (0 stays 0).

    Rounding up means a message is never delivered before its delay; two significant
    digits bound the lateness to about 10% and the number of holding queues to ~90 per
    decade of delay.
    """
    if delay_ms <= 0:
        return 0
    if delay_ms < 100:
        return delay_ms
    step = int(10 ** (len(str(delay_ms)) - 2))
    return -(-delay_ms // step) * step


def holding_queue_name(queue: str, bucket_ms: int) -> str:
    """The holding queue that delays messages for ``queue`` by ``bucket_ms``."""
    return f"{queue}.delay.{bucket_ms}"


@dataclass(slots=True, frozen=True)
class _Receipt:
    """Which channel incarnation a delivery came from, its tag, and its properties."""

    generation: int
    tag: int
    properties: Any


def _noop() -> None:
    return None


_PROPERTY_NAMES = (
    "type",
    "correlation_id",
    "message_id",
    "app_id",
    "content_type",
    "content_encoding",
    "delivery_mode",
    "priority",
    "timestamp",
    "expiration",
    "reply_to",
    "user_id",
    "cluster_id",
)


def _properties_dict(props: Any) -> dict[str, Any]:
    """The AMQP basic properties that are set, as a plain mapping (``headers`` is the table)."""
    out: dict[str, Any] = {}
    for name in _PROPERTY_NAMES:
        value = getattr(props, name, None)
        if value is not None:
            out[name] = value
    out["headers"] = dict(props.headers or {})
    return out


class _Properties(Mapping[str, Any]):
    """``Delivery.headers`` for AMQP: the properties mapping, built only when first read.

    Most consumers route on the body and never look, so the hot path skips the copy.
    """

    __slots__ = ("_props", "_view")

    def __init__(self, props: Any) -> None:
        self._props = props
        self._view: dict[str, Any] | None = None

    def _mapping(self) -> dict[str, Any]:
        view = self._view
        if view is None:
            view = self._view = _properties_dict(self._props)
        return view

    def __getitem__(self, key: str) -> Any:
        return self._mapping()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._mapping())

    def __len__(self) -> int:
        return len(self._mapping())

    def __eq__(self, other: object) -> bool:
        return self._mapping() == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._mapping())


def _delivery_count(redelivered: bool, native: object) -> int:
    """Quorum queues count returns in ``x-delivery-count``; classic ones only flag a redelivery."""
    if isinstance(native, int) and not isinstance(native, bool) and native >= 0:  # pika may decode a long
        return int(native) + 1
    return 2 if redelivered else 1


class AMQPTransport(BaseTransport):
    """RabbitMQ through one pika ``BlockingConnection`` (two channels: work and declarations)."""

    scheme = "amqp"

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        prefetch: int = 256,
        reserve_mode: str = "consume",
        max_priority: int | None = None,
        queue_type: str | None = None,
        confirm_timeout: float = 30.0,
    ) -> None:
        if prefetch < 1:
            raise ConfigurationError(f"prefetch: must be >= 1, got {prefetch}")
        if reserve_mode not in _RESERVE_MODES:
            raise ConfigurationError(f"reserve_mode: must be one of {_RESERVE_MODES}, got {reserve_mode!r}")
        if max_priority is not None and not 1 <= max_priority <= 255:
            raise ConfigurationError(f"max_priority: must be within 1..255, got {max_priority}")
        import pika  # lazy: the optional dependency is only needed when this transport is used

        self._pika = pika
        self._params = pika.URLParameters(url)
        self.url = url
        self.prefetch = prefetch
        self.reserve_mode = reserve_mode
        self.confirm_timeout = confirm_timeout
        self._queue_args: dict[str, Any] = {}
        if max_priority is not None:
            self._queue_args["x-max-priority"] = max_priority
        if queue_type is not None:
            self._queue_args["x-queue-type"] = queue_type
        self.store_host = f"{self._params.host}:{self._params.port}"
        self._lock = threading.RLock()
        self._connection: Any = None
        self._channel: Any = None  # deliveries, publishes (confirm mode), acks
        self._admin: Any = None  # declarations; a failed declare only closes this one
        self._generation = 0
        self._declared: set[str] = set()
        self._holding: dict[str, set[str]] = {}
        self._consumers: dict[str, str] = {}
        self._buffers: dict[str, deque[tuple[Any, Any, bytes]]] = {}
        self._outstanding: set[int] = set()
        self._next_seq = 1
        self._pending: set[int] = set()
        self._nacked = 0
        self._returned = 0
        self._closed = False

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AMQPTransport:
        """``amqp://user:pass@host:port/vhost?prefetch=256&heartbeat=30&reserve_mode=consume``.

        ``prefetch``, ``reserve_mode``, ``max_priority``, ``queue_type`` (e.g. ``quorum``) and
        ``confirm_timeout`` are read here; every other query key (``heartbeat``,
        ``connection_attempts``, ``ssl_options``...) is pika's.
        """
        parts = urlsplit(url)
        pika_query: list[tuple[str, str]] = []
        for key, value in parse_qsl(parts.query, keep_blank_values=True):
            if key in _OWN_OPTIONS:
                options.setdefault(key, value)
            else:
                pika_query.append((key, value))
        kwargs: dict[str, Any] = {}
        for key, value in options.items():
            if key in ("prefetch", "max_priority"):
                kwargs[key] = int(value)
            elif key == "confirm_timeout":
                kwargs[key] = float(value)
            elif key in ("reserve_mode", "queue_type"):
                kwargs[key] = str(value)
            else:
                raise ConfigurationError(f"{key}: not an option of the amqp transport")
        pika_url = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(pika_query), ""))
        return cls(pika_url, **kwargs)

    # -- connection -------------------------------------------------------------------
    def _open(self) -> Any:
        """The work channel, (re)connecting when needed. Caller holds the lock."""
        if self._closed:
            raise ConfigurationError("transport: this AMQP transport is closed")
        channel = self._channel
        if channel is not None and channel.is_open and self._connection.is_open:
            return channel
        self._reset()
        connection = self._pika.BlockingConnection(self._params)
        channel = connection.channel()
        channel.basic_qos(prefetch_count=self.prefetch)
        selected: list[bool] = []

        def on_select_ok(_frame: Any) -> None:
            selected.append(True)
            connection.call_later(0, _noop)

        channel._impl.confirm_delivery(ack_nack_callback=self._on_confirm, callback=on_select_ok)
        channel._impl.add_on_return_callback(self._on_return)
        deadline = time.monotonic() + self.confirm_timeout
        while not selected:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AMQPPublishError("broker did not acknowledge confirm.select")
            connection.process_data_events(time_limit=remaining)
        self._connection = connection
        self._channel = channel
        self._generation += 1
        return channel

    def _reset(self) -> None:
        """Forget a broken connection: its unacked deliveries are already back on their queues."""
        if self._connection is not None:
            try:
                if self._connection.is_open:
                    self._connection.close()
            except Exception:  # closing a broken connection may fail; nothing to recover
                log.debug("amqp: error while closing a broken connection", exc_info=True)
        self._connection = None
        self._channel = None
        self._admin = None
        self._consumers.clear()
        self._buffers.clear()
        self._outstanding.clear()
        self._pending.clear()
        self._next_seq = 1
        self._nacked = 0
        self._returned = 0

    def _admin_channel(self) -> Any:
        self._open()
        if self._admin is None or not self._admin.is_open:
            self._admin = self._connection.channel()
        return self._admin

    def _connection_errors(self) -> tuple[type[BaseException], ...]:
        exceptions = self._pika.exceptions
        return (exceptions.AMQPConnectionError, exceptions.ChannelWrongStateError, exceptions.StreamLostError)

    def _with_reconnect(self, operation: Callable[[], Any]) -> Any:
        """Run ``operation``; after a dropped connection, reconnect and run it once more."""
        try:
            return operation()
        except self._connection_errors():
            log.warning("amqp: connection to %s lost; reconnecting", self.store_host)
            self._reset()
            return operation()

    # -- declarations -----------------------------------------------------------------
    def _declare(self, queue: str, arguments: Mapping[str, Any] | None = None) -> None:
        """Declare a durable queue once per process; an existing queue with other arguments is used as is."""
        if queue in self._declared:
            return
        args = dict(self._queue_args if arguments is None else arguments)
        exceptions = self._pika.exceptions
        try:
            self._admin_channel().queue_declare(queue=queue, durable=True, arguments=args or None)
        except exceptions.ChannelClosedByBroker as exc:
            if exc.reply_code != 406:
                raise
            log.warning("amqp: queue %r exists with other arguments (%s); using it as is", queue, exc)
            self._admin_channel().queue_declare(queue=queue, passive=True)
        self._declared.add(queue)

    def _target(self, queue: str, delay_ms: int) -> str:
        """The queue to publish to: the work queue, or the holding queue for the delay's bucket."""
        self._declare(queue)
        bucket = delay_bucket_ms(delay_ms)
        if bucket == 0:
            return queue
        name = holding_queue_name(queue, bucket)
        self._declare(
            name,
            {"x-message-ttl": bucket, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": queue},
        )
        self._holding.setdefault(queue, set()).add(name)
        return name

    # -- publishing -------------------------------------------------------------------
    def _on_confirm(self, frame: Any) -> None:
        method = frame.method
        tag: int = method.delivery_tag
        done = {seq for seq in self._pending if seq <= tag} if method.multiple else {tag} & self._pending
        self._pending -= done
        if method.NAME == "Basic.Nack":
            self._nacked += len(done)
        if not self._pending and self._connection is not None:
            self._connection.call_later(0, _noop)  # wake the waiting process_data_events

    def _on_return(self, _channel: Any, method: Any, _props: Any, _body: bytes) -> None:
        log.error("amqp: message returned by broker: %s %s", method.reply_code, method.reply_text)
        self._returned += 1

    def properties(self, body: bytes, envelope: Envelope | None = None) -> Any:
        """The pika ``BasicProperties`` for ``body``: the binding's projection (SPEC section 4).

        A body that is not an envelope (a poison record on a DLQ) still gets the fixed part
        (content type, persistence, app id) so it is stored durably.
        """
        doc: Envelope | None = envelope
        if doc is None:
            try:
                doc = decode(body)
            except DecodeError:
                doc = None
        projected: dict[str, Any]
        try:
            projected = dict(binding.project(doc)) if doc is not None else {}
        except (BabelqError, ValueError, TypeError, KeyError):
            projected = {}
        if not projected:
            projected = {"app_id": "babelqueue", "content_type": "application/json", "delivery_mode": 2}
        return self._pika.BasicProperties(**projected)

    def _publish_confirmed(self, items: Sequence[tuple[str, bytes, Any]]) -> None:
        """Publish ``(routing_key, body, properties)`` items, then wait for every confirm."""
        channel = self._open()
        impl = channel._impl
        self._nacked = self._returned = 0
        for routing_key, body, props in items:
            impl.basic_publish(
                exchange="", routing_key=routing_key, body=body, properties=props, mandatory=True
            )
            self._pending.add(self._next_seq)
            self._next_seq += 1
        deadline = time.monotonic() + self.confirm_timeout
        while self._pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AMQPPublishError(
                    f"{len(self._pending)} message(s) not confirmed in {self.confirm_timeout}s"
                )
            self._connection.process_data_events(time_limit=remaining)
        if self._nacked or self._returned:
            raise AMQPPublishError(
                f"broker refused {self._nacked} and returned {self._returned} of {len(items)} message(s)"
            )

    def publish(
        self, queue: str, body: bytes, *, envelope: Envelope | None = None, delay_ms: int = 0
    ) -> None:
        props = self.properties(body, envelope)
        with self._lock:
            self._with_reconnect(
                lambda: self._publish_confirmed([(self._target(queue, delay_ms), body, props)])
            )

    def publish_many(self, queue: str, messages: Sequence[Outgoing]) -> None:
        if not messages:
            return
        prepared = [(m.delay_ms, m.body, self.properties(m.body, m.envelope)) for m in messages]
        with self._lock:

            def run() -> None:
                targets: dict[int, str] = {}
                items = []
                for delay_ms, body, props in prepared:
                    if delay_ms not in targets:
                        targets[delay_ms] = self._target(queue, delay_ms)
                    items.append((targets[delay_ms], body, props))
                self._publish_confirmed(items)

            self._with_reconnect(run)

    # -- reserving --------------------------------------------------------------------
    def _consume(self, queue: str) -> deque[tuple[Any, Any, bytes]]:
        """The local buffer of ``queue``'s consumer, starting the consumer on first use.

        The consumer is registered on pika's channel implementation, not the blocking
        wrapper: deliveries go straight into the buffer while frames are read (the wrapper's
        per-message event queue costs about a tenth of the consume throughput). The first
        message into an empty buffer schedules a no-op timer so a waiting
        ``process_data_events`` returns at once.
        """
        channel = self._open()
        buffer = self._buffers.get(queue)
        if buffer is None:
            self._declare(queue)
            buffer = self._buffers[queue] = deque()
            outstanding = self._outstanding
            connection = self._connection

            def on_message(_channel: Any, method: Any, props: Any, body: bytes) -> None:
                outstanding.add(method.delivery_tag)  # unsettled from now on, even before it is handed out
                buffer.append((method, props, body))
                if len(buffer) == 1:
                    connection.call_later(0, _noop)

            self._consumers[queue] = channel._impl.basic_consume(queue, on_message, auto_ack=False)
        return buffer

    def _delivery(self, queue: str, method: Any, props: Any, body: bytes) -> Delivery:
        table: Mapping[str, Any] = props.headers or {}
        native = table.get("x-delivery-count") if table else None
        return Delivery(
            body=body,
            queue=queue,
            receipt=_Receipt(self._generation, method.delivery_tag, props),
            delivery_count=_delivery_count(method.redelivered, native),
            headers=_Properties(props),
            store_host=self.store_host,
            reconcile=functools.partial(binding.reconcile_attempts, headers=table),
        )

    def _reserve_consume(self, queue: str, max_messages: int, deadline: float) -> list[Delivery]:
        buffer = self._consume(queue)
        if len(buffer) < max_messages:
            self._connection.process_data_events(time_limit=0)
        while not buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._connection.process_data_events(time_limit=min(remaining, _WAIT_SLICE))
        out: list[Delivery] = []
        while buffer and len(out) < max_messages:
            method, props, body = buffer.popleft()
            out.append(self._delivery(queue, method, props, body))
        return out

    def _reserve_get(self, queue: str, max_messages: int, deadline: float) -> list[Delivery]:
        channel = self._open()
        self._declare(queue)
        out: list[Delivery] = []
        pause = 0.01
        while len(out) < max_messages:
            method, props, body = channel.basic_get(queue, auto_ack=False)
            if method is not None:
                self._outstanding.add(method.delivery_tag)
                out.append(self._delivery(queue, method, props, body))
                continue
            remaining = deadline - time.monotonic()
            if out or remaining <= 0:
                break
            self._connection.sleep(min(pause, remaining))
            pause = min(pause * 2, _WAIT_SLICE)
        return out

    def reserve(self, queue: str, *, max_messages: int = 1, timeout: float = 0.0) -> list[Delivery]:
        deadline = time.monotonic() + timeout
        reserve_once = self._reserve_consume if self.reserve_mode == "consume" else self._reserve_get
        while True:
            with self._lock:
                slice_end = min(deadline, time.monotonic() + _WAIT_SLICE)
                out: list[Delivery] = self._with_reconnect(
                    functools.partial(reserve_once, queue, max_messages, slice_end)
                )
            if out or time.monotonic() >= deadline:
                return out

    # -- settling ---------------------------------------------------------------------
    def _live_tag(self, delivery: Delivery) -> int | None:
        """The delivery tag if the reservation is still held on the current channel."""
        receipt = delivery.receipt
        if not isinstance(receipt, _Receipt):
            raise ConfigurationError("delivery: not reserved through an AMQP transport")
        channel = self._channel
        if receipt.generation != self._generation or channel is None or not channel.is_open:
            log.warning(
                "amqp: delivery %s on %r belongs to a closed channel; the broker has already requeued it",
                receipt.tag,
                delivery.queue,
            )
            return None
        return receipt.tag

    def ack(self, delivery: Delivery) -> None:
        with self._lock:
            tag = self._live_tag(delivery)
            if tag is not None:
                self._channel.basic_ack(delivery_tag=tag)
                self._outstanding.discard(tag)

    def ack_many(self, deliveries: Sequence[Delivery]) -> None:
        with self._lock:
            tags = {tag for d in deliveries if (tag := self._live_tag(d)) is not None}
            if not tags:
                return
            self._ack_tags(tags)

    def _ack_tags(self, tags: set[int]) -> None:
        """Ack ``tags``; one ``multiple`` frame when they are every unsettled tag up to the highest."""
        top = max(tags)
        if sum(1 for t in self._outstanding if t <= top) == len(tags):
            self._channel.basic_ack(delivery_tag=top, multiple=True)
        else:
            for tag in sorted(tags):
                self._channel.basic_ack(delivery_tag=tag)
        self._outstanding -= tags

    def release(self, delivery: Delivery, *, delay_ms: int = 0) -> None:
        with self._lock:
            if delay_ms <= 0:
                tag = self._live_tag(delivery)
                if tag is not None:
                    self._channel.basic_nack(delivery_tag=tag, requeue=True)
                    self._outstanding.discard(tag)
                return
            receipt: _Receipt = delivery.receipt
            self._republish(delivery, delivery.queue, delivery.body, receipt.properties, delay_ms)

    def _republish(self, delivery: Delivery, queue: str, body: bytes, props: Any, delay_ms: int) -> None:
        """Publish (confirmed) then ack: a crash in between duplicates, never loses."""
        if self._live_tag(delivery) is None:
            return
        self._publish_confirmed([(self._target(queue, delay_ms), body, props)])
        self.ack(delivery)

    def retry(self, delivery: Delivery, body: bytes, *, delay_ms: int) -> None:
        props = self.properties(body)
        with self._lock:
            self._republish(delivery, delivery.queue, body, props, delay_ms)

    def dead_letter(self, delivery: Delivery, body: bytes, *, dlq: str) -> None:
        props = self.properties(body)
        with self._lock:
            self._republish(delivery, dlq, body, props, 0)

    # -- administration ---------------------------------------------------------------
    def _message_count(self, queue: str) -> int:
        exceptions = self._pika.exceptions
        try:
            frame = self._admin_channel().queue_declare(queue=queue, passive=True)
        except exceptions.ChannelClosedByBroker as exc:
            if exc.reply_code == 404:
                return 0
            raise
        count: int = frame.method.message_count
        return count

    def size(self, queue: str) -> int:
        """Messages waiting on ``queue``: ready on the broker, prefetched here but not yet handed
        out, and in the holding queues this process declared (delayed)."""
        with self._lock:
            names = [queue, *sorted(self._holding.get(queue, ()))]

            def count() -> int:
                total = sum(self._message_count(n) for n in names)
                if self._connection is not None:
                    self._connection.process_data_events(time_limit=0)  # dispatch what arrived meanwhile
                return total + len(self._buffers.get(queue, ()))

            return int(self._with_reconnect(count))

    def purge(self, queue: str) -> None:
        """Purge ``queue`` and its known holding queues, and drop what this process reserved from it."""
        with self._lock:

            def run() -> None:
                buffer = self._buffers.get(queue)
                if buffer:
                    self._ack_tags({method.delivery_tag for method, _, _ in buffer})
                    buffer.clear()
                exceptions = self._pika.exceptions
                for name in [queue, *sorted(self._holding.get(queue, ()))]:
                    try:
                        self._admin_channel().queue_purge(queue=name)
                    except exceptions.ChannelClosedByBroker as exc:
                        if exc.reply_code != 404:
                            raise

            self._with_reconnect(run)

    def delete_queues(self, queue: str) -> None:
        """Delete ``queue``, its ``.dlq`` and its known holding queues (test clean-up)."""
        with self._lock:
            exceptions = self._pika.exceptions
            if queue in self._consumers and self._channel is not None and self._channel.is_open:
                self._channel._impl.basic_cancel(self._consumers.pop(queue))
                self._buffers.pop(queue, None)
            for name in [queue, f"{queue}.dlq", *sorted(self._holding.pop(queue, ()))]:
                try:
                    self._admin_channel().queue_delete(queue=name)
                except exceptions.ChannelClosedByBroker as exc:
                    if exc.reply_code != 404:
                        raise
                self._declared.discard(name)

    def close(self) -> None:
        """Close the connection; the broker requeues every delivery that was not settled."""
        with self._lock:
            self._reset()
            self._closed = True
