"""RabbitMQ transport (``amqp://``, ``amqps://``) over AMQP 0-9-1 with babelq's own lean client.

Why it looks the way it does:

* **Contract.** Every publish carries the docs/standard.md §4 projection of the body (``type``,
  ``correlation_id``, ``message_id``, ``app_id``, ``content_type``, ``content_encoding``,
  persistent delivery and the native-typed ``x-*`` headers) computed by
  :mod:`babelq.bindings.rabbitmq`. The body is never
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
* **Delays** (``delay_ms``, retry backoff) use holding queues ``<queue>.delay.<ms>.expiring``
  whose ``x-message-ttl`` dead-letters the message back to the work queue through the default
  exchange. Delays are rounded *up* to two significant digits (never early, at most ~10%
  late), which keeps the number of holding queues bounded, and ``x-expires`` removes a holding
  queue once it has been unused for its delay plus ten minutes; the transport declares it
  again before a publish whenever that could otherwise happen with a message still inside.
* **Dead peers.** Heartbeats are on by default (the broker's proposed interval, 60 s on
  RabbitMQ): two silent intervals mean a dead connection even when no FIN or RST ever comes,
  and the transport reconnects while the broker requeues what the old connection held. A
  small thread per transport keeps heartbeats going while the caller is busy elsewhere (a
  long handler), so a slow handler does not lose its connection.
* **Empty means empty.** A consumer's buffer only holds what the broker pushed so far, so
  ``reserve`` confirms with ``basic.get`` before it answers "nothing" (``App.drain`` relies on
  an empty answer meaning an empty queue).
* **Speed.** The client (:mod:`babelq.transports.amqp_client`) parses whole socket reads,
  keeps each delivery's properties as raw bytes (decoded on first read of
  ``Delivery.headers``) and writes a batch of publishes or acks with one ``sendall``: decoding
  frames is where a general-purpose client spends most of a consumer's CPU.
* **Reservations are connection-bound.** A delivery tag only means something on the channel
  that received it: it cannot be acked from another connection or process, and it needs no
  lease (``leased_reservations`` is False): the broker holds it until the channel closes. A
  process that wants to ack later (the Spark data source's reader) keeps this transport open
  for as long as it holds deliveries; a crash closes the connection and the broker requeues
  them at once. RabbitMQ's ``consumer_timeout`` (30 min by default) still bounds how long one
  delivery may stay unacked.
* **Threads.** The client connection is not thread-safe. One transport owns one
  connection and serialises every call with a lock, so it may be shared by threads (they take
  turns); for parallel throughput open one transport per thread. A delivery must be settled
  through the transport that reserved it.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, get_args

from babelq.bindings import rabbitmq as binding
from babelq.envelope import Envelope, decode
from babelq.errors import BabelqError, ConfigurationError, DecodeError, PublishNotConfirmedError
from babelq.transports.amqp_client import (
    AMQPConnectionError,
    AMQPConnectionOptions,
    AMQPError,
    BrokerUnreachableError,
    Channel,
    ChannelClosedByBrokerError,
    ChannelStateError,
    Connection,
    ConnectionParameters,
    Message,
)
from babelq.transports.amqp_protocol import BasicProperties, ProtocolError
from babelq.transports.base import BaseTransport, Delivery, Outgoing
from babelq.transports.keepalive import start_keepalive
from babelq.transports.url_options import TransportURL
from babelq.urls import redact

log = logging.getLogger(__name__)

DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
ReserveMode = Literal["consume", "get"]
_RESERVE_MODES: tuple[str, ...] = get_args(ReserveMode)
#: basic.qos prefetch-count is a 16-bit field
_MAX_PREFETCH = 65535
#: One blocking wait inside ``reserve`` holds the lock at most this long (other threads take turns).
_WAIT_SLICE = 0.2
#: How long a holding queue outlives the due time of the last message put into it, at least
#: half of it (see :func:`holding_queue_arguments`). Fixed, not an option: every process must
#: declare a holding queue with the same arguments, or the broker refuses the declaration.
HOLDING_MARGIN_MS = 600_000


@dataclass(frozen=True, slots=True)
class AMQPOptions(AMQPConnectionOptions):
    """The options of ``amqp://`` and ``amqps://``: the connection's, and the transport's own."""

    prefetch: int = 256
    """Most unacked deliveries the broker pushes to one consumer (``basic.qos``, 1..65535)."""
    reserve_mode: ReserveMode = "consume"
    """``consume`` streams deliveries into a local buffer; ``get`` asks one ``basic.get`` a message."""
    max_priority: int | None = None
    """``x-max-priority`` of the queues this transport declares (1..255); off by default."""
    queue_type: str | None = None
    """``x-queue-type`` of the queues this transport declares (e.g. ``quorum``)."""
    confirm_timeout: float = 30.0
    """Seconds a publish waits for the broker's confirm."""


#: The broker refused (nack), returned (unroutable) or never confirmed a published message;
#: the name the AMQP docs use for the one class every transport raises.
AMQPPublishError = PublishNotConfirmedError


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
    """The holding queue that delays messages for ``queue`` by ``bucket_ms``.

    The ``.expiring`` suffix marks the layout with ``x-expires``: earlier babelq versions declared
    ``<queue>.delay.<ms>`` without it, and a broker refuses (406) to redeclare an existing queue
    with other arguments. A new name lets both layouts live side by side (both dead-letter into
    the same work queue); an old process never feeds a queue that may expire under it.
    """
    return f"{queue}.delay.{bucket_ms}.expiring"


def holding_queue_arguments(queue: str, bucket_ms: int, margin_ms: int = HOLDING_MARGIN_MS) -> dict[str, Any]:
    """The arguments of ``queue``'s holding queue for ``bucket_ms``.

    ``x-message-ttl`` delays every message by the bucket and dead-letters it into ``queue``
    through the default exchange. ``x-expires`` deletes the queue once it has been unused for
    ``bucket_ms + margin_ms``. RabbitMQ counts that from the last declaration (a publish does
    not count), so the transport declares the queue again before putting a message into it
    whenever its last declaration is ``margin_ms / 2`` old: the queue then outlives the last
    message's due time by at least ``margin_ms / 2``.
    """
    return {
        "x-message-ttl": bucket_ms,
        "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": queue,
        "x-expires": bucket_ms + margin_ms,
    }


class _Receipt(NamedTuple):
    """Which channel incarnation a delivery came from, its tag, and its encoded properties.

    A named tuple, not a dataclass: one is built per delivery and a tuple is the cheapest.
    """

    generation: int
    tag: int
    properties: bytes


#: builds a _Receipt from a tuple without the named tuple's generated ``__new__`` (a Python call)
_new_receipt = tuple.__new__

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


def _properties_dict(props: BasicProperties) -> dict[str, Any]:
    """The AMQP basic properties that are set, as a plain mapping (``headers`` is the table)."""
    out: dict[str, Any] = {}
    for name in _PROPERTY_NAMES:
        value = getattr(props, name, None)
        if value is not None:
            out[name] = value
    out["headers"] = dict(props.headers or {})
    return out


class _Properties(Mapping[str, Any]):
    """``Delivery.headers`` for AMQP: the properties mapping, decoded only when first read.

    Most consumers route on the body and never look, so the hot path skips the decoding.
    """

    __slots__ = ("_raw", "_view")

    def __init__(self, raw: bytes, decoded: BasicProperties | None = None) -> None:
        self._raw = raw
        self._view: dict[str, Any] | None = None if decoded is None else _properties_dict(decoded)

    def _mapping(self) -> dict[str, Any]:
        view = self._view
        if view is None:
            view = self._view = _properties_dict(BasicProperties.decode(self._raw))
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

    def reconcile(self, body_attempts: int) -> int:
        """``Delivery.reconcile``: the binding's rule, given the header table (decoded only if read)."""
        return binding.reconcile_attempts(body_attempts, headers=_HeaderTable(self))


#: header-table keys that are the binding's projection, not headers a publisher carried
_PROJECTED = frozenset({"x-schema-version", "x-source-lang", "x-attempts", "x-delivery-count"})


def _with_carried(props: BasicProperties, headers: Mapping[str, str] | None) -> BasicProperties:
    """``props`` with the publisher's ``headers`` added to the AMQP header table as long strings;
    the binding's own ``x-*`` keys win a collision (as the babelqueue package's do)."""
    clean = {str(k): str(v) for k, v in (headers or {}).items() if k and v is not None and v != ""}
    if not clean:
        return props
    return dataclasses.replace(props, headers={**clean, **(props.headers or {})})


class _Carried(Mapping[str, str]):
    """``Delivery.carried_headers`` for AMQP: the string entries of the header table that are
    not the binding's projection, decoded only when first read (like :class:`_Properties`)."""

    __slots__ = ("_properties", "_view")

    def __init__(self, properties: _Properties) -> None:
        self._properties = properties
        self._view: dict[str, str] | None = None

    def _mapping(self) -> dict[str, str]:
        view = self._view
        if view is None:
            table: Mapping[str, Any] = self._properties["headers"]
            view = self._view = {
                k: v for k, v in table.items() if isinstance(v, str) and k not in _PROJECTED
            }
        return view

    def __getitem__(self, key: str) -> str:
        return self._mapping()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._mapping())

    def __len__(self) -> int:
        return len(self._mapping())

    def __repr__(self) -> str:
        return repr(self._mapping())


class _HeaderTable(Mapping[str, Any]):
    """The ``headers`` table of a :class:`_Properties`, decoded on first read (for ``reconcile``)."""

    __slots__ = ("_properties",)

    def __init__(self, properties: _Properties) -> None:
        self._properties = properties

    def _table(self) -> Mapping[str, Any]:
        table: Mapping[str, Any] = self._properties["headers"]
        return table

    def __getitem__(self, key: str) -> Any:
        return self._table()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())


#: how the key ``x-delivery-count`` looks inside an encoded header table (length octet + name)
_DELIVERY_COUNT_KEY = b"\x10x-delivery-count"


def _delivery_count(redelivered: bool, native: object) -> int:
    """Quorum queues count returns in ``x-delivery-count``; classic ones only flag a redelivery."""
    if isinstance(native, int) and not isinstance(native, bool) and native >= 0:
        return int(native) + 1
    return 2 if redelivered else 1



class AMQPTransport(BaseTransport):
    """RabbitMQ through one client :class:`~babelq.transports.amqp_client.Connection` (two channels:
    work and declarations)."""

    scheme = "amqp"
    leased_reservations = False
    scan_refusal = (
        "AMQP 0-9-1 cannot show a queued message without delivering it (basic.get takes it, a requeue "
        "marks it redelivered); give the queue a per-message TTL and a dead-letter exchange instead"
    )

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
        where = redact(url)
        if not 1 <= prefetch <= _MAX_PREFETCH:
            raise ConfigurationError(f"prefetch: must be within 1..{_MAX_PREFETCH}, got {prefetch} ({where})")
        if reserve_mode not in _RESERVE_MODES:
            raise ConfigurationError(
                f"reserve_mode: must be one of {_RESERVE_MODES}, got {reserve_mode!r} ({where})"
            )
        if max_priority is not None and not 1 <= max_priority <= 255:
            raise ConfigurationError(f"max_priority: must be within 1..255, got {max_priority} ({where})")
        if confirm_timeout <= 0:
            raise ConfigurationError(f"confirm_timeout: must be > 0, got {confirm_timeout} ({where})")
        self._params = ConnectionParameters.from_url(url)
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
        self._connection: Connection | None = None
        self._channel: Channel | None = None  # deliveries, publishes (confirm mode), acks
        self._admin: Channel | None = None  # declarations; a failed declare only closes this one
        self._generation = 0
        self._declared: set[str] = set()
        self._holding: dict[str, set[str]] = {}
        #: holding queue -> time.monotonic() just before this process last declared it
        self._holding_declared: dict[str, float] = {}
        self._holding_margin_ms = HOLDING_MARGIN_MS
        self._keepalive: threading.Thread | None = None
        self._keepalive_stop = threading.Event()
        self._consumers: dict[str, str] = {}
        self._buffers: dict[str, deque[Message]] = {}
        self._closed = False

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AMQPTransport:
        """``amqp://user:pass@host:port/vhost?prefetch=256&heartbeat=30&reserve_mode=consume``.

        The options are :class:`AMQPOptions`: the transport's own are read here, the connection's
        (``heartbeat``, ``frame_max``...) stay in the URL given to
        :class:`~babelq.transports.amqp_client.ConnectionParameters`; anything else is refused.
        """
        link = TransportURL.split(url)
        parsed = AMQPOptions.parse(link, options)
        connection = AMQPConnectionOptions.names()
        return cls(link.forwarded(connection, options), **parsed.values(without=connection))

    @classmethod
    def holder_options(cls, *, max_held: int, visibility_timeout: float, snapshot: bool) -> dict[str, Any]:
        """A prefetch window that fits everything held (AMQP's limit is 65535); ``basic.get`` for a
        snapshot, so that an empty answer means the queue has nothing ready (a consumer's buffer
        only holds what has arrived so far)."""
        return {
            "prefetch": min(max(max_held, 1), _MAX_PREFETCH),
            "reserve_mode": "get" if snapshot else "consume",
        }

    # -- connection -------------------------------------------------------------------
    def _open(self) -> Channel:
        """The work channel, (re)connecting when needed. Caller holds the lock."""
        if self._closed:
            raise ConfigurationError("transport: this AMQP transport is closed")
        channel = self._channel
        if (
            channel is not None
            and channel.is_open
            and self._connection is not None
            and self._connection.is_open
        ):
            return channel
        self._reset()
        connection = Connection(self._params)
        try:
            channel = connection.channel()
            channel.qos(self.prefetch)
            channel.confirm_select()
        except BaseException:
            connection.abort()
            raise
        self._connection = connection
        self._channel = channel
        self._generation += 1
        if connection.heartbeat and (self._keepalive is None or not self._keepalive.is_alive()):
            self._keepalive = start_keepalive(
                self, self._keepalive_stop, name=f"babelq-amqp-heartbeat-{self.store_host}", first_wait=0.0
            )
        return channel

    def _heartbeat_tick(self) -> float:
        """One turn of the heartbeat thread; returns how long to sleep before the next.

        The client only reads and writes while it is called, and the runtime calls the transport
        between handlers: a handler that runs longer than two heartbeat intervals would make the
        broker drop the connection and redeliver the handler's message. This turn, run every
        quarter interval, sends a heartbeat when one is due and notices a broker that has gone
        silent (the connection is aborted; the next call reconnects). It never waits for the
        lock: whoever holds it is talking to the broker already.
        """
        connection = self._connection
        interval = connection.heartbeat / 4 if connection is not None and connection.heartbeat else 1.0
        if not self._lock.acquire(blocking=False):
            return interval
        try:
            connection = self._connection
            if connection is not None and connection.is_open and connection.heartbeat:
                connection.process(0)
        except (AMQPError, ProtocolError) as exc:
            log.warning("amqp: %s: %s; reconnecting on the next call", self.store_host, exc)
        finally:
            self._lock.release()
        return interval

    def _reset(self) -> None:
        """Forget a broken connection: its unacked deliveries are already back on their queues."""
        if self._connection is not None:
            self._connection.close()  # never raises: a broken connection is just dropped
        self._connection = None
        self._channel = None
        self._admin = None
        self._consumers.clear()
        self._buffers.clear()

    def _admin_channel(self) -> Channel:
        self._open()
        assert self._connection is not None
        if self._admin is None or not self._admin.is_open:
            self._admin = self._connection.channel()
        return self._admin

    def _live_connection(self) -> Connection:
        connection = self._connection
        if connection is None:
            raise AMQPConnectionError("not connected")
        return connection

    @staticmethod
    def _connection_errors() -> tuple[type[BaseException], ...]:
        return (AMQPConnectionError, ChannelStateError)

    def _with_reconnect(self, operation: Callable[[], Any]) -> Any:
        """Run ``operation``; after a dropped connection, reconnect and run it once more.

        A broker that cannot be reached at all is not tried twice here (``connection_attempts``
        and ``retry_delay`` say how hard to try): its :class:`BrokerUnreachableError` is raised.
        """
        try:
            return operation()
        except BrokerUnreachableError:
            raise
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
        try:
            self._admin_channel().queue_declare(queue, durable=True, arguments=args or None)
        except ChannelClosedByBrokerError as exc:
            if exc.reply_code != 406:
                raise
            log.warning("amqp: queue %r exists with other arguments (%s); using it as is", queue, exc)
            self._admin_channel().queue_declare(queue, passive=True)
        self._declared.add(queue)

    def _target(self, queue: str, delay_ms: int) -> str:
        """The queue to publish to: the work queue, or the holding queue for the delay's bucket."""
        self._declare(queue)
        bucket = delay_bucket_ms(delay_ms)
        if bucket == 0:
            return queue
        name = holding_queue_name(queue, bucket)
        now = time.monotonic()
        declared = self._holding_declared.get(name)
        if declared is None or (now - declared) * 1000 >= self._holding_margin_ms / 2:
            arguments = holding_queue_arguments(queue, bucket, self._holding_margin_ms)
            try:
                self._admin_channel().queue_declare(name, durable=True, arguments=arguments)
            except ChannelClosedByBrokerError as exc:
                if exc.reply_code != 406:
                    raise
                raise ConfigurationError(
                    f"delay: holding queue {name!r} exists with other arguments ({exc}); delete it, "
                    "the transport declares it again when needed"
                ) from None
            self._holding_declared[name] = now  # the broker's expiry clock started after ``now``
        self._holding.setdefault(queue, set()).add(name)
        return name

    # -- publishing -------------------------------------------------------------------
    def properties(self, body: bytes, envelope: Envelope | None = None) -> BasicProperties:
        """The AMQP basic properties for ``body``: the binding's projection (docs/standard.md §4).

        A body that is not an envelope (a poison record on a DLQ) still gets the fixed part
        (content type, persistence, app id) so it is stored durably, but no content encoding: it
        may hold any bytes.
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
        return BasicProperties(**projected)

    def _publish_confirmed(self, items: Sequence[tuple[str, bytes, bytes]]) -> None:
        """Publish ``(routing_key, body, encoded properties)`` items in one write, then await the confirms."""
        channel = self._open()
        channel.nacked = channel.returned = 0  # counts left by an earlier batch that timed out
        channel.publish_many(items, mandatory=True)
        try:
            nacked, returned = channel.wait_for_confirms(self.confirm_timeout)
        except TimeoutError as exc:
            raise PublishNotConfirmedError(str(exc)) from exc
        if nacked or returned:
            raise PublishNotConfirmedError(
                f"broker refused {nacked} and returned {returned} of {len(items)} message(s)"
            )

    def publish(
        self,
        queue: str,
        body: bytes,
        *,
        envelope: Envelope | None = None,
        delay_ms: int = 0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """``headers`` ride in the AMQP header table beside the binding's ``x-*`` headers."""
        props = _with_carried(self.properties(body, envelope), headers).encode()
        with self._lock:
            self._with_reconnect(
                lambda: self._publish_confirmed([(self._target(queue, delay_ms), body, props)])
            )

    def publish_many(self, queue: str, messages: Sequence[Outgoing]) -> None:
        if not messages:
            return
        prepared = [(m.delay_ms, m.body, self.properties(m.body, m.envelope).encode()) for m in messages]
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
    def _consume(self, queue: str) -> deque[Message]:
        """The local buffer of ``queue``'s consumer, starting the consumer on first use.

        The client appends each delivery to this deque while it parses a socket read; a tag is
        unsettled on the channel from the moment it arrives, handed out or not. A consumer the
        broker cancelled (its queue was deleted) is started again once its buffer is empty, on a
        queue declared again, so ``basic.get`` never asks for a queue that is gone.
        """
        channel = self._open()
        buffer = self._buffers.get(queue)
        if buffer is not None and not buffer and self._consumers.get(queue) not in channel.consumers:
            self._declared.discard(queue)
            buffer = None
        if buffer is None:
            self._declare(queue)
            tag, buffer = channel.basic_consume(queue)
            self._consumers[queue] = tag
            self._buffers[queue] = buffer
        return buffer

    def _delivery(self, queue: str, message: Message) -> Delivery:
        raw = message.properties
        decoded: BasicProperties | None = None
        if _DELIVERY_COUNT_KEY in raw:  # only quorum queues add it; the scan is cheap, a decode is not
            decoded = BasicProperties.decode(raw)
            count = _delivery_count(message.redelivered, (decoded.headers or {}).get("x-delivery-count"))
        else:  # what _delivery_count says without a native count, without the call
            count = 2 if message.redelivered else 1
        properties = _Properties(raw, decoded)
        return Delivery(
            body=message.body,
            queue=queue,
            receipt=_new_receipt(_Receipt, (self._generation, message.delivery_tag, raw)),
            delivery_count=count,
            headers=properties,
            store_host=self.store_host,
            reconcile=properties.reconcile,
            carried_headers=_Carried(properties),
        )

    def _reserve_consume(self, queue: str, max_messages: int, deadline: float) -> list[Delivery]:
        buffer = self._consume(queue)
        connection = self._live_connection()
        if len(buffer) < max_messages:
            connection.process(0)
        while not buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            connection.process(min(remaining, _WAIT_SLICE))
        take = min(len(buffer), max_messages)
        pop = buffer.popleft
        return [self._delivery(queue, pop()) for _ in range(take)]

    def _reserve_confirmed(self, queue: str, max_messages: int) -> list[Delivery]:
        """The consumer's buffer stayed empty for the whole wait: ask the broker before saying "none".

        A consumer only sees what the broker has pushed so far, and a busy broker (or a slow
        network) can take longer than a short wait to push the next window, so an empty buffer
        does not mean an empty queue (``App.drain`` would stop with thousands of messages ready).
        ``basic.get`` takes a ready message if there is one. If it finds none, a second one
        is sent: RabbitMQ may write deliveries it dispatched to our consumer *before* the first
        get after that get's reply, but never after the reply to the next method, so once both
        came back empty every delivery dispatched to us is in the buffer. An empty answer
        therefore means that nothing was ready for this channel.
        """
        buffer = self._consume(queue)
        channel = self._open()
        for _ in range(2):
            if buffer:
                break
            message = channel.basic_get(queue)
            if message is not None:
                out = [self._delivery(queue, message)]
                pop = buffer.popleft
                out += [self._delivery(queue, pop()) for _ in range(min(len(buffer), max_messages - 1))]
                return out
        pop = buffer.popleft
        return [self._delivery(queue, pop()) for _ in range(min(len(buffer), max_messages))]

    def _reserve_get(self, queue: str, max_messages: int, deadline: float) -> list[Delivery]:
        channel = self._open()
        self._declare(queue)
        out: list[Delivery] = []
        pause = 0.01
        while len(out) < max_messages:
            message = channel.basic_get(queue)
            if message is not None:
                out.append(self._delivery(queue, message))
                continue
            remaining = deadline - time.monotonic()
            if out or remaining <= 0:
                break
            self._live_connection().sleep(min(pause, remaining))
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
                break
        if not out and self.reserve_mode == "consume":
            with self._lock:
                out = self._with_reconnect(functools.partial(self._reserve_confirmed, queue, max_messages))
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
            if tag is not None and self._channel is not None:
                self._channel.ack(tag)

    def ack_many(self, deliveries: Sequence[Delivery]) -> None:
        with self._lock:
            tags = {tag for d in deliveries if (tag := self._live_tag(d)) is not None}
            if not tags:
                return
            self._ack_tags(tags)

    def _ack_tags(self, tags: set[int]) -> None:
        """Ack ``tags``; one ``multiple`` frame when they are every unsettled tag up to the highest.

        Tags the channel no longer holds (already settled) are skipped: acking one twice would
        make the broker close the channel.
        """
        channel = self._channel
        if channel is None:
            return
        unsettled = channel.unsettled
        tags = tags & unsettled
        if not tags:
            return
        top = max(tags)
        low = min(tags)
        # one multiple ack when no other unsettled tag is at or below the highest: the usual case,
        # tags low..top with nothing older unsettled, is told by two C-speed scans
        if (top - low + 1 == len(tags) and min(unsettled) == low) or sum(
            1 for t in unsettled if t <= top
        ) == len(tags):
            channel.ack(top, multiple=True)
        else:
            channel.ack_each(sorted(tags))

    def renew_many(self, deliveries: Sequence[Delivery]) -> int:
        """Nothing to extend (the broker holds a delivery until its channel closes): counts the
        deliveries still unsettled on the live channel."""
        with self._lock:
            channel = self._channel
            if channel is None or not channel.is_open:
                return 0
            unsettled = channel.unsettled
            return sum(
                1
                for d in deliveries
                if isinstance(d.receipt, _Receipt)
                and d.receipt.generation == self._generation
                and d.receipt.tag in unsettled
            )

    def release(self, delivery: Delivery, *, delay_ms: int = 0) -> None:
        with self._lock:
            if delay_ms <= 0:
                tag = self._live_tag(delivery)
                if tag is not None and self._channel is not None:
                    self._channel.nack(tag, requeue=True)
                return
            receipt: _Receipt = delivery.receipt
            self._republish(delivery, delivery.queue, delivery.body, receipt.properties, delay_ms)

    def _republish(self, delivery: Delivery, queue: str, body: bytes, props: bytes, delay_ms: int) -> None:
        """Publish (confirmed) then ack: a crash in between duplicates, never loses."""
        if self._live_tag(delivery) is None:
            return
        self._publish_confirmed([(self._target(queue, delay_ms), body, props)])
        self.ack(delivery)

    def retry(self, delivery: Delivery, body: bytes, *, delay_ms: int) -> None:
        props = _with_carried(self.properties(body), delivery.carried_headers).encode()
        with self._lock:
            self._republish(delivery, delivery.queue, body, props, delay_ms)

    def dead_letter(self, delivery: Delivery, body: bytes, *, dlq: str) -> None:
        props = _with_carried(self.properties(body), delivery.carried_headers).encode()
        with self._lock:
            self._republish(delivery, dlq, body, props, 0)

    # -- administration ---------------------------------------------------------------
    def _message_count(self, queue: str) -> int:
        try:
            _, count, _ = self._admin_channel().queue_declare(queue, passive=True)
        except ChannelClosedByBrokerError as exc:
            if exc.reply_code == 404:
                return 0
            raise
        return count

    def size(self, queue: str) -> int:
        """Messages waiting on ``queue``: ready on the broker, prefetched here but not yet handed
        out, and in the holding queues this process declared (delayed)."""
        with self._lock:
            names = [queue, *sorted(self._holding.get(queue, ()))]

            def count() -> int:
                total = sum(self._message_count(n) for n in names)
                if self._connection is not None:
                    self._connection.process(0)  # dispatch what arrived meanwhile
                return total + len(self._buffers.get(queue, ()))

            return int(self._with_reconnect(count))

    def ready(self, queue: str) -> int:
        """Messages ``reserve`` could take now: ready on the broker plus prefetched here but not
        yet handed out (not the holding queues' delayed ones)."""
        with self._lock:

            def count() -> int:
                total = self._message_count(queue)
                if self._connection is not None:
                    self._connection.process(0)
                return total + len(self._buffers.get(queue, ()))

            return int(self._with_reconnect(count))

    def purge(self, queue: str) -> None:
        """Purge ``queue`` and its known holding queues, and drop what this process reserved from it."""
        with self._lock:

            def run() -> None:
                buffer = self._buffers.get(queue)
                if buffer:
                    self._ack_tags({message.delivery_tag for message in buffer})
                    buffer.clear()
                for name in [queue, *sorted(self._holding.get(queue, ()))]:
                    try:
                        self._admin_channel().queue_purge(name)
                    except ChannelClosedByBrokerError as exc:
                        if exc.reply_code != 404:
                            raise

            self._with_reconnect(run)

    def delete_queues(self, queue: str) -> None:
        """Delete ``queue``, its ``.dlq`` and its known holding queues (test clean-up)."""
        with self._lock:
            if queue in self._consumers and self._channel is not None and self._channel.is_open:
                self._channel.basic_cancel(self._consumers.pop(queue))
                self._buffers.pop(queue, None)
            for name in [queue, f"{queue}.dlq", *sorted(self._holding.pop(queue, ()))]:
                try:
                    self._admin_channel().queue_delete(name)
                except ChannelClosedByBrokerError as exc:
                    if exc.reply_code != 404:
                        raise
                self._declared.discard(name)
                self._holding_declared.pop(name, None)

    def close(self) -> None:
        """Close the connection; the broker requeues every delivery that was not settled."""
        self._keepalive_stop.set()
        with self._lock:
            self._reset()
            self._closed = True
