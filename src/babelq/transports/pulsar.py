"""Apache Pulsar transport (``pulsar://``, ``pulsar+ssl://``) with pulsar-client.

Why it looks the way it does:

* **Contract.** The payload is the envelope bytes, untouched. Every send carries the docs/standard.md
  §4 string properties from :mod:`babelq.bindings.pulsar` (``bq-job``, ``bq-trace-id``,
  ``bq-message-id``, ``bq-schema-version``, ``bq-source-lang``, ``bq-attempts``), the message
  key is ``meta.sharding_key`` when there is one, and a delayed send mirrors its delay in ms
  on ``bq-delay`` (what the other SDKs' Pulsar publishers write). A queue is the topic
  ``persistent://public/default/<queue>`` (the full form of the short name the ``babelqueue``
  package passes, so both meet on one topic), read through the Shared subscription
  ``babelqueue``; the dead-letter queue ``<queue>.dlq`` is the topic of that name.
* **A subscription before the first message.** A topic keeps messages only for the
  subscriptions that exist when they arrive (the default retention keeps nothing else), and a
  consumer that creates a subscription starts at the end by default. So before the first send
  to a topic the transport makes sure the subscription exists (a consumer with no receive
  window, subscribed at the earliest position and closed at once: nothing is dispatched to it),
  and its own consumers subscribe at the earliest position. When that is refused (a
  produce-only role) the send goes ahead with a warning. Turn it off with
  ``ensure_subscription=false`` when subscriptions are managed by the operator.
* **At-least-once, connection-bound.** A received message stays with its consumer until it
  is acknowledged (``ack``), negatively acknowledged (``release``: the broker redelivers it,
  ``redelivery_count`` + 1) or the consumer goes away (crash, close: the broker hands it to
  another consumer). There is no per-message lease to renew, so ``leased_reservations`` is
  False; ``ack_timeout`` (the client's unacked-message timeout, at least 10 s) is an optional
  safety net that redelivers whatever a live consumer holds longer than that, and cannot be
  extended for a slow handler. Pulsar acknowledges by message id for the whole subscription
  and the client reconnects a dropped consumer by itself, so a late ack can settle a message
  that was meanwhile redelivered elsewhere: no gated settle, no tagged reservations.
* **Attempts.** ``Delivery.attempts`` is max(body attempts, ``redelivery_count``): the count
  is 0-based, so no -1 (docs/standard.md §4). ``delivery_count`` is ``redelivery_count + 1``. The
  broker keeps the count in memory only (it is lost when the last consumer leaves or the topic
  moves), which is why the body stays authoritative.
* **Delays.** Native: ``deliver_after`` for ``delay_ms``, ``deliver_at`` for an envelope whose
  ``meta.deliver_at`` is ahead (the broker holds them back on Shared subscriptions). A
  ``release`` with a delay no longer than ``nack_delay_ms`` is a negative acknowledgement;
  a longer one sends the same bytes and properties again with ``deliver_after`` and then
  acknowledges the original (the redelivery count starts over; the body's attempts do not).
* **Prefetch we can count.** The consumer feeds a local buffer through a message listener
  (at most ``prefetch`` messages, then the listener is paused), so the transport knows which
  dispatched messages are merely buffered here: ``size``/``ready`` count them as waiting, as
  the AMQP transport does with its prefetch. What other consumers prefetched is invisible to
  anybody but the broker, which counts it as unacknowledged, so ``reserved`` includes it.
* **Empty means empty.** A consumer only has what the broker has pushed so far, so before a
  ``reserve`` answers "nothing" it asks the admin stats whether messages are still waiting to
  be dispatched, and waits for them (``confirm_empty``; :meth:`PulsarTransport.reserve`).
* **Counting and purging.** pulsar-client has no admin calls, so ``size``, ``ready``,
  ``reserved`` and ``purge`` use the broker's admin REST API (``admin_url``, by default the
  service host on port 8080, or 8443 for ``pulsar+ssl``): the subscription's ``msgBacklog``,
  ``unackedMessages`` and ``msgDelayed`` from the topic stats, and ``skip_all``.
* **Batches.** ``publish_many`` pipelines: ``send_async`` per message (the producer waits for
  room in its queue rather than refusing), one ``flush``, then every broker answer is checked.
* **Threads.** pulsar-client's producers and consumers are thread-safe; the transport's own
  maps and buffers sit behind one condition variable, so a transport may be shared by threads.
"""

from __future__ import annotations

import functools
import json
import logging
import ssl
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar, NamedTuple
from urllib.error import HTTPError, URLError
from urllib.parse import quote, urlsplit, urlunsplit
from urllib.request import Request, urlopen

from babelq.bindings import pulsar as binding
from babelq.bindings import schema_gate
from babelq.envelope import Envelope, decode
from babelq.errors import ConfigurationError, DecodeError, PublishNotConfirmedError, PulsarUnavailableError
from babelq.errors import PulsarError as PulsarError
from babelq.extras import optional_import
from babelq.transports.base import BaseTransport, Delivery, Outgoing
from babelq.transports.url_options import TransportURL, URLOptions
from babelq.urls import one_line, redact, split_url

log = logging.getLogger(__name__)

DEFAULT_URL = "pulsar://127.0.0.1:6650"
#: the client refuses an unacked-message timeout below this (seconds)
MIN_ACK_TIMEOUT = 10.0
#: the client's negative-ack tracker never redelivers sooner than this (ms)
MIN_NACK_DELAY_MS = 100
_MAX_PREFETCH = 50_000
#: longest extra wait of a reserve that found its buffer empty while the broker still had
#: undispatched messages (seconds); see :meth:`PulsarTransport.reserve`
CONFIRM_LIMIT = 5.0
_CONFIRM_SLICE = 0.05
_DEFAULT_PORTS = {"pulsar": 6650, "pulsar+ssl": 6651}
_ADMIN_DEFAULTS = {"pulsar": ("http", 8080), "pulsar+ssl": ("https", 8443)}
#: the client's exceptions that say the broker is down, unreachable or too slow, not "no"
_OUTAGES = ("ConnectError", "Timeout", "ServiceUnitNotReady", "TooManyLookupRequestException", "NotConnected")


@dataclass(frozen=True, slots=True)
class PulsarOptions(URLOptions):
    """The options of ``pulsar://`` and ``pulsar+ssl://`` (query or keywords)."""

    transport: ClassVar[str] = "pulsar"

    tenant: str = "public"
    """Topics are ``persistent://<tenant>/<namespace>/<queue>``."""
    namespace: str = "default"
    """See ``tenant``."""
    subscription: str = binding.SUBSCRIPTION
    """The Shared subscription every SDK of the standard reads."""
    prefetch: int = 1000
    """The consumer's receive window and local buffer (1..50000)."""
    nack_delay_ms: int = MIN_NACK_DELAY_MS
    """How long after a ``release`` the client asks for redelivery (at least 100 ms)."""
    ack_timeout: float = 0.0
    """Seconds (0 off, else at least 10) after which the client redelivers what is not acked."""
    ensure_subscription: bool = True
    """Create the subscription before the first send to a topic."""
    confirm_empty: bool = True
    """Ask the admin API before a ``reserve`` answers "nothing"."""
    admin_url: str | None = None
    """The admin REST API (else the first host, port 8080, or https 8443 for ``pulsar+ssl``)."""
    admin_timeout: float = 10.0
    """Seconds per admin request."""
    token: str | None = None
    """JWT for the client and the admin API (secret)."""
    tls_trust_certs: str | None = None
    """``pulsar+ssl://``: CA file."""
    tls_allow_insecure: bool = False
    """``pulsar+ssl://``: accept any certificate."""
    tls_validate_hostname: bool = False
    """``pulsar+ssl://``: check the certificate's host name."""
    tls_cert: str | None = None
    """``pulsar+ssl://``: client certificate file (with ``tls_key``)."""
    tls_key: str | None = None
    """``pulsar+ssl://``: client key file (with ``tls_cert``)."""
    operation_timeout: int = 30
    """The client's operation timeout, seconds."""
    client: Any = None
    """A ready ``pulsar.Client`` (keyword only)."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(eq=False)
class _Feed:
    """One queue's consumer and the messages its listener put in the local buffer."""

    queue: str
    consumer: Any = None
    buffer: deque[Any] = field(default_factory=deque)
    #: handed out and not settled through this transport: str(message id) -> message
    unsettled: dict[str, Any] = field(default_factory=dict)
    paused: bool = False
    closed: bool = False


class _Receipt(NamedTuple):
    feed: _Feed
    consumer: Any
    message: Any
    key: str


class PulsarTransport(BaseTransport):
    """Pulsar through one pulsar-client ``Client``: a producer per topic, a consumer per queue."""

    scheme = "pulsar"
    leased_reservations = False
    tagged_reservations = False

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        client: Any = None,
        tenant: str = "public",
        namespace: str = "default",
        subscription: str = binding.SUBSCRIPTION,
        prefetch: int = 1000,
        nack_delay_ms: int = MIN_NACK_DELAY_MS,
        ack_timeout: float = 0.0,
        ensure_subscription: bool = True,
        confirm_empty: bool = True,
        admin_url: str | None = None,
        admin_timeout: float = 10.0,
        token: str | None = None,
        tls_trust_certs: str | None = None,
        tls_allow_insecure: bool = False,
        tls_validate_hostname: bool = False,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        operation_timeout: int = 30,
    ) -> None:
        where = redact(url)
        parts = split_url(url)
        scheme = parts.scheme.lower()
        if scheme not in _DEFAULT_PORTS:
            raise ConfigurationError(f"url: scheme must be pulsar:// or pulsar+ssl://, got {where!r}")
        if "@" in parts.netloc:
            raise ConfigurationError(
                f"url: Pulsar takes no credentials in the URL; pass token=... instead ({where})"
            )
        hosts = [h for h in parts.netloc.split(",") if h]
        if not hosts:
            raise ConfigurationError(f"url: no broker host in {where!r}")
        for key, value in (("tenant", tenant), ("namespace", namespace), ("subscription", subscription)):
            if not value or "/" in value:
                raise ConfigurationError(
                    f"{key}: must be a non-empty name without '/', got {value!r} ({where})"
                )
        if not 1 <= prefetch <= _MAX_PREFETCH:
            raise ConfigurationError(f"prefetch: must be within 1..{_MAX_PREFETCH}, got {prefetch} ({where})")
        if nack_delay_ms < 0:
            raise ConfigurationError(f"nack_delay_ms: must be >= 0, got {nack_delay_ms} ({where})")
        if ack_timeout and ack_timeout < MIN_ACK_TIMEOUT:
            raise ConfigurationError(
                f"ack_timeout: must be 0 (off) or at least {MIN_ACK_TIMEOUT:g} s, "
                f"got {ack_timeout:g} ({where})"
            )
        if admin_timeout <= 0:
            raise ConfigurationError(f"admin_timeout: must be > 0, got {admin_timeout:g} ({where})")
        if operation_timeout <= 0:
            raise ConfigurationError(f"operation_timeout: must be > 0, got {operation_timeout} ({where})")
        if bool(tls_cert) != bool(tls_key):
            raise ConfigurationError(f"tls_cert: tls_cert and tls_key go together ({where})")
        tls_given = tls_trust_certs or tls_cert or tls_allow_insecure or tls_validate_hostname
        if tls_given and scheme != "pulsar+ssl":
            raise ConfigurationError(f"tls_*: TLS options need a pulsar+ssl:// URL ({where})")
        if admin_url is None:
            admin_scheme, admin_port = _ADMIN_DEFAULTS[scheme]
            host = urlsplit(f"//{hosts[0]}").hostname or "127.0.0.1"
            admin_url = f"{admin_scheme}://{_bracketed(host)}:{admin_port}"
        elif urlsplit(admin_url).scheme not in ("http", "https"):
            raise ConfigurationError(
                f"admin_url: must be an http:// or https:// URL, got {redact(admin_url)!r}"
            )
        self.url = url
        self.service_url = urlunsplit((scheme, parts.netloc, "", "", ""))
        self.store_host = hosts[0]
        self.tenant = tenant
        self.namespace = namespace
        self.subscription = subscription
        self.prefetch = prefetch
        self.nack_delay_ms = max(nack_delay_ms, MIN_NACK_DELAY_MS)
        self.ack_timeout = ack_timeout
        self.ensure_subscription = ensure_subscription
        self.confirm_empty = confirm_empty
        self._admin_broken = False
        self.admin_url = admin_url.rstrip("/")
        self.admin_timeout = admin_timeout
        self._token = token
        self._tls = {
            "tls_trust_certs_file_path": tls_trust_certs,
            "tls_allow_insecure_connection": tls_allow_insecure,
            "tls_validate_hostname": tls_validate_hostname,
            "tls_certificate_file_path": tls_cert,
            "tls_private_key_file_path": tls_key,
        }
        self.operation_timeout = operation_timeout
        self._client = client
        self._own_client = client is None
        self._cond = threading.Condition(threading.RLock())
        self._producers: dict[str, Any] = {}
        self._feeds: dict[str, _Feed] = {}
        self._subscribed: set[str] = set()
        self._closed = False

    @classmethod
    def from_url(cls, url: str, **options: Any) -> PulsarTransport:
        """``pulsar://host:6650?prefetch=500&admin_url=http://host:8080`` (``pulsar+ssl://`` for TLS).

        The options are :class:`PulsarOptions` (keywords win over the query); ``client``
        (keyword only) is a ready ``pulsar.Client``. Anything else is refused, naming the key.
        """
        link = TransportURL.split(url)
        parsed = PulsarOptions.parse(link, options)
        return cls(link.with_query(()), **parsed.values())

    @classmethod
    def holder_options(cls, *, max_held: int, visibility_timeout: float, snapshot: bool) -> dict[str, Any]:
        """A local buffer that fits everything a holder keeps (no leases to ask for)."""
        return {"prefetch": min(max(max_held, 1), _MAX_PREFETCH)}

    # -- the client ------------------------------------------------------------------------
    @staticmethod
    def _module() -> Any:
        return optional_import("pulsar", needed_for="url: the 'pulsar' transport")

    def _pulsar_client(self) -> Any:
        """The client, built on first use (constructing it opens no connection yet)."""
        with self._cond:
            if self._closed:
                raise ConfigurationError("transport: this Pulsar transport is closed")
            if self._client is None:
                pulsar = self._module()
                kwargs: dict[str, Any] = {
                    "operation_timeout_seconds": self.operation_timeout,
                    **{k: v for k, v in self._tls.items() if v},
                }
                if self._token:
                    kwargs["authentication"] = pulsar.AuthenticationToken(self._token)
                try:
                    self._client = pulsar.Client(self.service_url, **kwargs)
                except Exception as exc:
                    raise PulsarError(
                        f"pulsar: cannot create a client for {redact(self.url)}: {one_line(exc)}"
                    ) from exc
            return self._client

    def topic(self, queue: str) -> str:
        """The topic of a logical queue (``persistent://<tenant>/<namespace>/<queue>``)."""
        if not queue or "/" in queue:
            raise ConfigurationError(f"queue: must be a non-empty name without '/', got {queue!r}")
        if (self.tenant, self.namespace) == ("public", "default"):
            return binding.topic(queue)
        return f"persistent://{self.tenant}/{self.namespace}/{queue}"

    def _fail(self, action: str, topic: str, exc: BaseException) -> PulsarError:
        """babelq's error for the client's ``exc``: unreachable or timed out is an outage."""
        pulsar = self._module()
        outage = tuple(getattr(pulsar, name) for name in _OUTAGES if hasattr(pulsar, name))
        kind = PulsarUnavailableError if isinstance(exc, outage) else PulsarError
        return kind(f"pulsar: cannot {action} {topic} at {redact(self.url)}: {one_line(exc)}")

    def _producer(self, queue: str) -> Any:
        with self._cond:
            producer = self._producers.get(queue)
            if producer is not None:
                return producer
            client = self._pulsar_client()
            topic = self.topic(queue)
            if self.ensure_subscription and queue not in self._subscribed:
                self._make_subscription(client, topic)
                self._subscribed.add(queue)
            try:
                # a batch waits for room in the client's send queue instead of failing
                producer = client.create_producer(topic, block_if_queue_full=True)
            except Exception as exc:
                raise self._fail("create a producer on", topic, exc) from exc
            self._producers[queue] = producer
            return producer

    def _make_subscription(self, client: Any, topic: str) -> None:
        """Create the Shared subscription at the earliest position if it does not exist yet.

        A consumer with a zero receive window gets no message dispatched, so subscribing and
        closing it at once leaves only the durable subscription behind. A producer may not be
        allowed to consume (a produce-only role) or the topic may be partitioned (no zero
        window there): then the send goes ahead with a warning instead of failing, since the
        subscription may well exist already.
        """
        pulsar = self._module()
        try:
            consumer = client.subscribe(
                topic,
                self.subscription,
                consumer_type=pulsar.ConsumerType.Shared,
                receiver_queue_size=0,
                initial_position=pulsar.InitialPosition.Earliest,
            )
        except Exception as exc:
            log.warning(
                "pulsar: could not make sure subscription %r exists on %s (%s); if it does not, "
                "the broker keeps nothing sent before a consumer subscribes "
                "(ensure_subscription=false skips this step)",
                self.subscription,
                topic,
                one_line(exc),
            )
            return
        try:
            consumer.close()
        except Exception as exc:  # the subscription exists; a failed close only leaks a consumer
            log.debug("pulsar: closing the subscribing consumer: %s", one_line(exc))

    def _feed(self, queue: str) -> _Feed:
        """The consumer of ``queue``, subscribed (with its listener) on first use."""
        with self._cond:
            feed = self._feeds.get(queue)
            if feed is not None:
                return feed
            client = self._pulsar_client()
            pulsar = self._module()
            topic = self.topic(queue)
            feed = _Feed(queue)
            try:
                feed.consumer = client.subscribe(
                    topic,
                    self.subscription,
                    consumer_type=pulsar.ConsumerType.Shared,
                    message_listener=functools.partial(self._arrived, feed),
                    receiver_queue_size=self.prefetch,
                    negative_ack_redelivery_delay_ms=self.nack_delay_ms,
                    unacked_messages_timeout_ms=int(self.ack_timeout * 1000) or None,
                    initial_position=pulsar.InitialPosition.Earliest,
                )
            except Exception as exc:
                raise self._fail(f"subscribe as {self.subscription!r} to", topic, exc) from exc
            self._feeds[queue] = feed
            self._subscribed.add(queue)
            return feed

    def _arrived(self, feed: _Feed, consumer: Any, message: Any) -> None:
        """The client's listener thread hands over one dispatched message.

        ``consumer`` is a fresh wrapper object on every call (pulsar-client builds one per
        message), so the feed's own consumer is the one paused.
        """
        del consumer
        pause = False
        with self._cond:
            if feed.closed:
                return  # the consumer is going away: the broker gives the message to another
            feed.buffer.append(message)
            if len(feed.buffer) >= self.prefetch and not feed.paused:
                feed.paused = pause = True
            self._cond.notify_all()
        if pause:
            feed.consumer.pause_message_listener()

    # -- publishing ------------------------------------------------------------------------
    def _send_arguments(
        self, body: bytes, envelope: Envelope | None, delay_ms: int, carried: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """The keyword arguments of ``Producer.send`` for ``body``: properties (the binding's,
        then a publisher's ``carried`` headers under names the binding left free), key, delay."""
        doc: Envelope | None = envelope
        if doc is None:
            try:
                doc = decode(body)
            except DecodeError:
                doc = None
        properties: dict[str, str] = {}
        if doc is not None:
            properties = binding.project(doc)
        for name, value in (carried or {}).items():
            if name and value:
                properties.setdefault(str(name), str(value))
        kwargs: dict[str, Any] = {"properties": properties}
        key = binding.partition_key(doc) if doc is not None else None
        if key:
            kwargs["partition_key"] = key
        if delay_ms > 0:
            kwargs["deliver_after"] = timedelta(milliseconds=delay_ms)
            properties.update(binding.delay_properties(delay_ms))
        elif doc is not None:
            deliver_at = doc.deliver_at
            now = _now_ms()
            if deliver_at is not None and deliver_at > now:
                kwargs["deliver_at"] = deliver_at
                properties.update(binding.delay_properties(deliver_at - now))
        return kwargs

    def _send(self, queue: str, body: bytes, kwargs: Mapping[str, Any]) -> None:
        producer = self._producer(queue)
        try:
            producer.send(bytes(body), **kwargs)
        except Exception as exc:
            raise self._fail("send to", self.topic(queue), exc) from exc

    def publish(
        self,
        queue: str,
        body: bytes,
        *,
        envelope: Envelope | None = None,
        delay_ms: int = 0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """``headers`` ride as string message properties beside the binding's ``bq-*`` ones."""
        self._send(queue, body, self._send_arguments(body, envelope, delay_ms, headers))

    def publish_many(self, queue: str, messages: Sequence[Outgoing]) -> None:
        """Pipelined: every message goes out with ``send_async``, then one ``flush`` waits until
        the broker has stored them all. Any refusal raises (the batch may then be partly
        stored: at-least-once)."""
        if len(messages) <= 1:
            for message in messages:
                self.publish(queue, message.body, envelope=message.envelope, delay_ms=message.delay_ms)
            return
        prepared = [(m.body, self._send_arguments(m.body, m.envelope, m.delay_ms)) for m in messages]
        producer = self._producer(queue)
        ok = self._module().Result.Ok
        topic = self.topic(queue)
        lock = threading.Lock()
        all_sent = threading.Event()
        failures: list[str] = []
        pending = [len(prepared)]

        def sent(result: Any, message_id: Any) -> None:
            # Runs on the client's thread; pulsar-client ends the process if a callback raises.
            with lock:
                if result != ok:
                    failures.append(str(result))
                pending[0] -= 1
                if pending[0] == 0:
                    all_sent.set()

        try:
            for body, kwargs in prepared:
                producer.send_async(bytes(body), sent, **kwargs)
            producer.flush()
        except Exception as exc:
            raise self._fail("send a batch to", topic, exc) from exc
        if not all_sent.wait(self.operation_timeout):
            raise PublishNotConfirmedError(
                f"pulsar: {pending[0]} of {len(prepared)} messages to {topic} were not confirmed "
                f"within {self.operation_timeout} s"
            )
        if failures:
            raise PublishNotConfirmedError(
                f"pulsar: the broker refused {len(failures)} of {len(prepared)} messages to {topic} "
                f"({failures[0]})"
            )

    # -- reserving -------------------------------------------------------------------------
    def _delivery(self, feed: _Feed, message: Any) -> Delivery:
        count = message.redelivery_count()
        key = str(message.message_id())
        feed.unsettled[key] = message
        published = message.publish_timestamp()
        return Delivery(
            body=message.data(),
            queue=feed.queue,
            receipt=_Receipt(feed, feed.consumer, message, key),
            delivery_count=count + 1,
            headers=(properties := dict(message.properties())),
            carried_headers={k: v for k, v in properties.items() if not k.startswith("bq-")},
            stored_at=published or None,
            store_host=self.store_host,
            reconcile=functools.partial(binding.reconcile_attempts, redelivery_count=count),
            refusal=schema_gate.refusal(properties.get(schema_gate.PROPERTY)),
        )

    def reserve(self, queue: str, *, max_messages: int = 1, timeout: float = 0.0) -> list[Delivery]:
        """Hand out up to ``max_messages`` buffered messages, waiting up to ``timeout`` for the first.

        An empty buffer does not mean an empty queue: the broker pushes messages a little after a
        consumer subscribes or asks for more, and a busy broker can take longer than a short wait
        (``App.drain`` polls with 0.1 s and stops on the first empty answer). So before answering
        "nothing", the admin stats are asked whether the subscription has messages nobody was
        given yet; while it has, the wait goes on (at most :data:`CONFIRM_LIMIT` seconds).
        """
        feed = self._feed(queue)
        out = self._take(feed, max_messages, time.monotonic() + timeout)
        if out or feed.closed or not self.confirm_empty:
            return out
        end = time.monotonic() + CONFIRM_LIMIT
        while time.monotonic() < end and self._undispatched(queue) > 0:
            out = self._take(feed, max_messages, min(end, time.monotonic() + _CONFIRM_SLICE))
            if out or feed.closed:
                break
        return out

    def _take(self, feed: _Feed, max_messages: int, deadline: float) -> list[Delivery]:
        resume = False
        with self._cond:
            while not feed.buffer and not feed.closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            out: list[Delivery] = []
            while feed.buffer and len(out) < max_messages:
                out.append(self._delivery(feed, feed.buffer.popleft()))
            if feed.paused and len(feed.buffer) < self.prefetch:
                feed.paused, resume = False, True
        if resume:
            feed.consumer.resume_message_listener()
        return out

    def _undispatched(self, queue: str) -> int:
        """Messages of the subscription that are due and that this transport has not handed out:
        not dispatched to any consumer, or dispatched to this transport's own consumer and on
        their way to its listener or in its buffer (the broker counts those as unacknowledged,
        so without this a loaded client read an empty buffer as an empty queue). 0 when the
        admin API cannot be asked: then an empty buffer is taken at its word."""
        if self._admin_broken:
            return 0
        try:
            sub = self._subscription_stats(queue)
        except PulsarError as exc:
            self._admin_broken = True
            log.warning(
                "pulsar: cannot confirm that %r is empty (%s); empty reserves are now taken at "
                "their word (set admin_url, or confirm_empty=false)",
                queue,
                exc,
            )
            return 0
        backlog, unacked, delayed = _counts_of(sub)
        return backlog - unacked - delayed + self._on_the_way(queue, sub)

    def _on_the_way(self, queue: str, sub: dict[str, Any] | None) -> int:
        """Dispatched to this transport's consumer of ``queue`` and not handed out by
        :meth:`reserve` yet: the consumer's unacknowledged count less what it handed out. The
        buffer counts as still on its way: a message can reach it after the wait for the first
        message ended and before the stats were read, and is then the reserve's to return."""
        with self._cond:
            feed = self._feeds.get(queue)
            if feed is None or feed.consumer is None or sub is None:
                return 0
            held = len(feed.unsettled)
            try:
                name = feed.consumer.consumer_name()
            except Exception:  # a closed consumer: nothing is on its way to it
                return 0
        for consumer in sub.get("consumers") or ():
            if isinstance(consumer, dict) and consumer.get("consumerName") == name:
                return max(int(consumer.get("unackedMessages", 0) or 0) - held, 0)
        return 0

    # -- settling --------------------------------------------------------------------------
    @staticmethod
    def _receipt(delivery: Delivery) -> _Receipt:
        receipt = delivery.receipt
        if not isinstance(receipt, _Receipt):
            raise ConfigurationError("delivery: not reserved through a Pulsar transport")
        return receipt

    def _settle_receipt(self, delivery: Delivery) -> _Receipt | None:
        """The receipt, removed from the unsettled ones, if this transport still holds it."""
        receipt = self._receipt(delivery)
        with self._cond:
            feed = receipt.feed
            if (
                feed.closed
                or feed.consumer is not receipt.consumer
                or feed.unsettled.pop(receipt.key, None) is None
            ):
                held = False
            else:
                held = True
        if not held:
            log.warning(
                "pulsar: message %s on %r is no longer held here (settled, or its consumer closed "
                "and the broker redelivers it); ignored",
                receipt.key,
                delivery.queue,
            )
            return None
        return receipt

    def ack(self, delivery: Delivery) -> None:
        receipt = self._settle_receipt(delivery)
        if receipt is not None:
            receipt.consumer.acknowledge(receipt.message)

    def release(self, delivery: Delivery, *, delay_ms: int = 0) -> None:
        """Redeliver ``delivery``: a negative ack (after ``nack_delay_ms``, redelivery count + 1)
        or, for a longer delay, the same bytes and properties sent again with ``deliver_after``
        and the original acknowledged."""
        if delay_ms <= self.nack_delay_ms:
            receipt = self._settle_receipt(delivery)
            if receipt is not None:
                receipt.consumer.negative_acknowledge(receipt.message)
            return
        held = self._receipt(delivery)
        if not self._holds(held):
            return
        properties = dict(held.message.properties())
        properties.update(binding.delay_properties(delay_ms))
        kwargs: dict[str, Any] = {"properties": properties, "deliver_after": timedelta(milliseconds=delay_ms)}
        key = held.message.partition_key()
        if key:
            kwargs["partition_key"] = key
        self._send(delivery.queue, delivery.body, kwargs)
        self.ack(delivery)

    def _holds(self, receipt: _Receipt) -> bool:
        with self._cond:
            feed = receipt.feed
            return not feed.closed and feed.consumer is receipt.consumer and receipt.key in feed.unsettled

    def renew_many(self, deliveries: Sequence[Delivery]) -> int:
        """Nothing to extend (a consumer holds what it received until it acks or goes away):
        counts the deliveries still held here."""
        return sum(1 for d in deliveries if self._holds(self._receipt(d)))

    def retry(self, delivery: Delivery, body: bytes, *, delay_ms: int) -> None:
        """Send the new body (delayed) first, then acknowledge the old one: never lost."""
        if not self._holds(self._receipt(delivery)):
            return
        self.publish(delivery.queue, body, delay_ms=delay_ms, headers=delivery.carried_headers)
        self.ack(delivery)

    def dead_letter(self, delivery: Delivery, body: bytes, *, dlq: str) -> None:
        if not self._holds(self._receipt(delivery)):
            return
        self.publish(dlq, body, headers=delivery.carried_headers)
        self.ack(delivery)

    # -- administration (REST) -------------------------------------------------------------
    def _admin(self, method: str, path: str) -> Any:
        """Call the admin API; returns the parsed JSON body, None for 404 or an empty reply."""
        request = Request(self.admin_url + path, method=method)
        if self._token:
            request.add_header("Authorization", f"Bearer {self._token}")
        context: ssl.SSLContext | None = None
        if self.admin_url.startswith("https:"):
            cafile = self._tls["tls_trust_certs_file_path"]
            context = ssl.create_default_context(cafile=cafile if isinstance(cafile, str) else None)
            if self._tls["tls_allow_insecure_connection"]:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
        try:
            with urlopen(request, timeout=self.admin_timeout, context=context) as reply:
                raw = reply.read()
        except HTTPError as exc:
            if exc.code == 404:
                return None
            raise PulsarError(
                f"admin: {method} {redact(self.admin_url)}{path} answered {exc.code} {exc.reason}"
            ) from None
        except (URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise PulsarUnavailableError(
                f"admin_url: cannot reach the Pulsar admin API at {redact(self.admin_url)} "
                f"({one_line(reason if isinstance(reason, BaseException) else Exception(reason))}); "
                "size/ready/reserved/purge need it"
            ) from None
        return json.loads(raw) if raw else None

    def _topic_path(self, queue: str) -> str:
        self.topic(queue)  # validates the name
        return "/admin/v2/persistent/" + "/".join(
            quote(part, safe="") for part in (self.tenant, self.namespace, queue)
        )

    def _subscription_stats(self, queue: str) -> dict[str, Any] | None:
        """The admin API's stats of this transport's subscription on ``queue`` (None: none)."""
        stats = self._admin("GET", self._topic_path(queue) + "/stats")
        sub = (
            (stats or {}).get("subscriptions", {}).get(self.subscription) if isinstance(stats, dict) else None
        )
        return sub if isinstance(sub, dict) else None

    def _counts(self, queue: str) -> tuple[int, int, int]:
        """(backlog, unacknowledged, delayed) of the subscription, zeros when there is none."""
        return _counts_of(self._subscription_stats(queue))

    def _buffered(self, queue: str) -> int:
        with self._cond:
            feed = self._feeds.get(queue)
            return len(feed.buffer) if feed is not None else 0

    def size(self, queue: str) -> int:
        """Waiting messages: the backlog minus what consumers hold, plus what this process has
        buffered but not handed out (delayed ones included)."""
        backlog, unacked, _ = self._counts(queue)
        return max(backlog - unacked, 0) + self._buffered(queue)

    def ready(self, queue: str) -> int:
        """:meth:`size` without the delayed messages."""
        backlog, unacked, delayed = self._counts(queue)
        return max(backlog - unacked - delayed, 0) + self._buffered(queue)

    def reserved(self, queue: str) -> int:
        """Dispatched and unacknowledged, minus this process's buffer: what consumers hold,
        including what other consumers have prefetched (the broker cannot tell those apart)."""
        _, unacked, _ = self._counts(queue)
        return max(unacked - self._buffered(queue), 0)

    def purge(self, queue: str) -> None:
        """Skip the subscription's whole backlog (delayed and unacknowledged messages included)
        and drop what this process buffered from it."""
        self._admin(
            "POST", f"{self._topic_path(queue)}/subscription/{quote(self.subscription, safe='')}/skip_all"
        )
        with self._cond:
            feed = self._feeds.get(queue)
            if feed is not None:
                feed.buffer.clear()
                feed.unsettled.clear()

    def close(self) -> None:
        """Close consumers, producers and the client; the broker redelivers what was not acked."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            feeds = list(self._feeds.values())
            for feed in feeds:
                feed.closed = True
                feed.buffer.clear()
                feed.unsettled.clear()
            producers = list(self._producers.values())
            self._cond.notify_all()
        for resource in [*(f.consumer for f in feeds), *producers]:
            try:
                resource.close()
            except Exception as exc:  # already closed, connection gone: nothing left to release
                log.debug("pulsar: close: %s", one_line(exc))
        if self._own_client and self._client is not None:
            try:
                self._client.close()
            except Exception as exc:
                log.debug("pulsar: client close: %s", one_line(exc))


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _counts_of(sub: dict[str, Any] | None) -> tuple[int, int, int]:
    """(backlog, unacknowledged, delayed) from a subscription's stats, zeros for none."""
    if sub is None:
        return 0, 0, 0
    return (
        int(sub.get("msgBacklog", 0) or 0),
        int(sub.get("unackedMessages", 0) or 0),
        int(sub.get("msgDelayed", 0) or 0),
    )
