"""The transport seam: the only thing the runtime, the pipelines and Spark know about brokers.

A transport moves canonical envelope bytes between a process and one broker. It never
changes a body: what is published is what a consumer reserves, byte for byte. Native
metadata (AMQP properties, SQS attributes...) is the binding's projection of the body,
added on publish and exposed read-only on the :class:`Delivery`.

Delivery is at-least-once. ``reserve`` hands out messages that stay owned by the caller
until ``ack`` (done), ``release`` (put back as it was), ``retry`` (put back a new body,
usually attempts+1, after a delay) or ``dead_letter`` (move a body to ``<queue>.dlq``). A
reservation that is never settled (the worker was killed) comes back by itself: after the
visibility timeout, or when the broker sees the connection drop.

Which of the two a transport does is :attr:`BaseTransport.leased_reservations`. A *lease*
(SQLite, Redis, SQS, memory) lapses ``visibility_timeout`` seconds after it was taken unless
:meth:`~Transport.renew_many` pushes the deadline again, and it can be settled by any process
that holds the receipt until then. A *connection-bound* reservation (AMQP delivery tags)
lasts exactly as long as the channel that received it and can only be settled through it.

*Tagged reservations* (:attr:`BaseTransport.tagged_reservations`: SQLite, Redis, memory) let one
process reserve and another settle without passing receipts between them: ``reserve_tagged``
takes messages under a caller-chosen tag and records on the broker, in the same atomic step,
which messages the tag holds, so whoever knows the tag can renew, ack or release them all
(``renew_tagged``, ``ack_tagged``, ``release_tagged``). A tag is reserved once: asking again
returns the same messages, which makes a reader that is retried (a Spark task attempt) read
the same thing. The Spark data source's executors reserve this way and its driver acks.

*Waiting scans* (:meth:`BaseTransport.scan_waiting`: SQLite and both Redis layouts) read the
messages waiting on a queue (ready or delayed, never reserved ones) without reserving or
changing them, and :meth:`BaseTransport.dead_letter_waiting` moves chosen ones to a DLQ in one
atomic broker step that first checks each is still waiting exactly as read: a message a worker
reserved meanwhile is left to the worker. ``babelq expire`` and idle workers dead-letter expired
messages this way. Brokers that cannot show a message without delivering it (AMQP 0-9-1, SQS)
say why in :attr:`BaseTransport.scan_refusal`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Protocol, runtime_checkable

from babelq.envelope import Envelope
from babelq.errors import ConfigurationError

#: length of a reservation tag: lowercase hex characters (128 bits)
TAG_LENGTH = 32
_HEX = frozenset("0123456789abcdef")
#: the ``carried_headers`` of a delivery that carries none (shared, read-only)
NO_HEADERS: Mapping[str, str] = MappingProxyType({})


def check_tag(tag: str) -> str:
    """``tag`` unchanged when it is :data:`TAG_LENGTH` lowercase hex characters; else ValueError.

    Fixed-length hex keeps a tag usable inside broker key names (Redis) without escaping and
    without any tag being a prefix or suffix of a queue's other keys.
    """
    if len(tag) != TAG_LENGTH or not _HEX.issuperset(tag):
        raise ValueError(f"tag: must be {TAG_LENGTH} lowercase hex characters, got {tag!r}")
    return tag


@dataclass(slots=True)
class Delivery:
    """One reserved message and the broker's facts about it.

    ``body`` is exactly the published bytes. ``receipt`` is the transport's private handle
    for settling. ``delivery_count`` is how many times the broker has handed this body out,
    this time included (1 on first delivery), when the broker knows. ``headers`` are the
    native properties/attributes as the broker returned them. ``carried_headers`` are the
    string headers a publisher sent beside the body (``publish(..., headers=...)``, e.g. a W3C
    ``traceparent``) in the same plain ``{name: value}`` form on every transport, without the
    binding's own projection (AMQP ``x-*`` headers, SQS ``bq-*`` attributes...).
    """

    body: bytes
    queue: str
    receipt: Any = None
    delivery_count: int | None = None
    headers: Mapping[str, Any] = field(default_factory=dict)
    stored_at: int | None = None
    store_host: str | None = None
    reconcile: Callable[[int], int] | None = None
    carried_headers: Mapping[str, str] = field(default_factory=lambda: NO_HEADERS)
    #: why the broker's native schema-version property refuses the body
    #: (:mod:`babelq.bindings.schema_gate`): it is then poison, never decoded. None: decode it.
    refusal: str | None = None

    def attempts(self, body_attempts: int) -> int:
        """The message's attempts after the binding's reconciliation (docs/standard.md §4)."""
        return body_attempts if self.reconcile is None else self.reconcile(body_attempts)


@dataclass(slots=True, frozen=True)
class Outgoing:
    """A body to publish, with its envelope when the caller already has it (saves a parse)."""

    body: bytes
    envelope: Envelope | None = None
    delay_ms: int = 0


@runtime_checkable
class Transport(Protocol):
    """What every broker transport provides. Queues are logical names (``orders``)."""

    #: URL scheme(s) this transport is registered under, e.g. ``"redis"``.
    scheme: str
    #: True: reservations are leases (``visibility_timeout``, :meth:`renew_many`); False: they
    #: last as long as the transport's connection (module docstring).
    leased_reservations: ClassVar[bool]
    #: True: :meth:`reserve_tagged` and the ``*_tagged`` settle calls work (module docstring).
    tagged_reservations: ClassVar[bool]

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Transport:
        """Open the transport ``url`` names. ``options`` are the transport's options as keywords
        and win over the same options in the URL query; every transport parses both through
        :mod:`babelq.transports.url_options`, so an unknown or malformed option is a one-line
        :class:`~babelq.errors.ConfigurationError` naming it (docs/transports.md, "URL options")."""

    @classmethod
    def holder_options(cls, *, max_held: int, visibility_timeout: float, snapshot: bool) -> dict[str, Any]:
        """Keyword options for a consumer that holds up to ``max_held`` reservations at once
        (:meth:`BaseTransport.holder_options`)."""

    @classmethod
    def tagged_for(cls, url: str) -> bool:
        """Whether the transport :meth:`from_url` opens for ``url`` has tagged reservations,
        without opening it (:meth:`BaseTransport.tagged_for`)."""

    def publish(
        self,
        queue: str,
        body: bytes,
        *,
        envelope: Envelope | None = None,
        delay_ms: int = 0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Store ``body`` on ``queue`` durably before returning (after ``delay_ms`` it is visible).

        ``headers`` are string pairs carried beside the body in the broker's native slot (AMQP
        headers, SQS message attributes, a Redis header frame...) and returned on
        ``Delivery.headers``; the binding's own projection wins a name collision. They never
        enter the body: a W3C ``traceparent`` rides here.
        """

    def publish_many(self, queue: str, messages: Sequence[Outgoing]) -> None:
        """Publish a batch using the broker's pipelining/batch API (all or raise)."""

    def reserve(self, queue: str, *, max_messages: int = 1, timeout: float = 0.0) -> list[Delivery]:
        """Reserve up to ``max_messages`` ready messages, waiting up to ``timeout`` seconds for the first."""

    def ack(self, delivery: Delivery) -> None:
        """The message is done: remove it for good."""

    def ack_many(self, deliveries: Sequence[Delivery]) -> None:
        """Ack several reservations at once (batched where the broker allows)."""

    def release(self, delivery: Delivery, *, delay_ms: int = 0) -> None:
        """Give the reservation back unchanged (same bytes), visible again after ``delay_ms``."""

    def release_many(self, deliveries: Sequence[Delivery]) -> None:
        """Give several reservations back at once, visible again now (batched where the broker allows)."""

    def renew_many(self, deliveries: Sequence[Delivery]) -> int:
        """Keep holding: push each lease's deadline to now + ``visibility_timeout``.

        Returns how many of ``deliveries`` are still held by this caller. A reservation that was
        settled, or whose lease lapsed and was taken again, is not revived (and not counted).
        For connection-bound reservations there is no deadline: this only counts the held ones.
        """

    def lease_seconds(self, queue: str) -> float | None:
        """How long a reservation taken from ``queue`` is held before it lapses (and a renewal
        grants); ``None`` for connection-bound reservations, which never lapse."""

    def reserve_tagged(self, queue: str, tag: str, *, max_messages: int) -> list[Delivery]:
        """Reserve up to ``max_messages`` ready messages under ``tag`` (:func:`check_tag`), or
        return what the tag already holds.

        The first call for a tag reserves without waiting and records on the broker, in the
        same atomic step, that the tag was taken and which messages it holds (perhaps none).
        Every later call with that tag, from any process, reserves nothing new: it returns the
        recorded messages the tag still holds, in the same order, and renews their lease; one
        whose lease lapsed and that nobody else took since is held again, one that was taken,
        settled or purged is left out. So retried readers of one tag read the same messages,
        and nothing is ever added to a tag after its first call. The deliveries settle like any
        others (``ack``, ``release``...) or all at once by tag. A tag belongs to one queue.
        """

    def renew_tagged(self, queue: str, tags: Sequence[str]) -> int:
        """Push the lease of every message held under ``tags`` to now + the visibility timeout
        (a lapsed one nobody took since included); returns how many are held."""

    def ack_tagged(self, queue: str, tags: Sequence[str]) -> int:
        """Remove for good every message still held under ``tags`` and forget the tags; returns
        how many were removed. A message whose lease lapsed and was taken by another consumer is
        that consumer's now and is left alone."""

    def release_tagged(self, queue: str, tags: Sequence[str]) -> int:
        """Put every message still held under ``tags`` back (ready now, same bytes, delivery count
        kept) and forget the tags; returns how many."""

    def retry(self, delivery: Delivery, body: bytes, *, delay_ms: int) -> None:
        """Replace the reserved message by ``body`` (attempts+1), visible after ``delay_ms``."""

    def dead_letter(self, delivery: Delivery, body: bytes, *, dlq: str) -> None:
        """Publish ``body`` to queue ``dlq`` and remove the reserved message."""

    def size(self, queue: str) -> int:
        """Messages waiting on ``queue`` (ready plus delayed, not counting reserved ones)."""

    def ready(self, queue: str) -> int:
        """Messages a ``reserve`` of ``queue`` could take now: ready ones and reservations whose
        lease lapsed, not delayed ones (approximate where the broker only estimates: SQS, AMQP).
        A reader polls this to tell "nothing to do" without reserving."""

    def reserved(self, queue: str) -> int | None:
        """Messages of ``queue`` reserved by any consumer and not yet settled or lapsed (in flight),
        or ``None`` when the broker cannot tell (AMQP: unacked deliveries of other connections are
        invisible). With :meth:`size` it tells whether a queue is really empty: a killed
        consumer's reservations are neither waiting nor gone until their lease lapses."""

    def scan_waiting(self, queue: str, *, after: Any = None, limit: int = 500) -> tuple[list[Delivery], Any]:
        """A page of the messages waiting on ``queue``, read without taking them
        (:meth:`BaseTransport.scan_waiting`; ConfigurationError where the broker cannot)."""

    def dead_letter_waiting(self, moves: Sequence[tuple[Delivery, bytes]], *, dlq: str) -> int:
        """Move scanned messages still waiting as read to ``dlq`` in one atomic step
        (:meth:`BaseTransport.dead_letter_waiting`)."""

    def purge(self, queue: str) -> None:
        """Delete everything on ``queue`` (ready, delayed and reserved). For tests and demos."""

    def close(self) -> None:
        """Release connections. The transport is unusable afterwards."""


class BaseTransport:
    """Defaults built on the primitives; transports override what their broker does better."""

    scheme = ""
    leased_reservations: ClassVar[bool] = True
    tagged_reservations: ClassVar[bool] = False
    #: Why :meth:`scan_waiting` is impossible on this broker, in words for a one-line error;
    #: empty on transports that implement it.
    scan_refusal: ClassVar[str] = "it cannot list the messages waiting on a queue without delivering them"

    @classmethod
    def tagged_for(cls, url: str) -> bool:
        """Whether ``from_url(url)`` opens a transport with tagged reservations: this class's
        :attr:`tagged_reservations`, unless a URL option picks a layout of another class (Redis's
        ``laravel=1``), which that transport's override says. Nothing is opened."""
        return cls.tagged_reservations

    @classmethod
    def holder_options(cls, *, max_held: int, visibility_timeout: float, snapshot: bool) -> dict[str, Any]:
        """Constructor options for a consumer that holds up to ``max_held`` reservations at once.

        ``visibility_timeout`` is the lease it wants (leased transports only); ``snapshot`` asks
        that ``reserve(timeout=0)`` return whatever is ready on the broker, not merely what has
        already reached this process. The Spark data source opens its readers with these.
        """
        return {"visibility_timeout": visibility_timeout} if cls.leased_reservations else {}

    def publish(
        self,
        queue: str,
        body: bytes,
        *,
        envelope: Envelope | None = None,
        delay_ms: int = 0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        raise NotImplementedError

    def publish_many(self, queue: str, messages: Sequence[Outgoing]) -> None:
        for message in messages:
            self.publish(queue, message.body, envelope=message.envelope, delay_ms=message.delay_ms)

    def ack(self, delivery: Delivery) -> None:
        raise NotImplementedError

    def ack_many(self, deliveries: Sequence[Delivery]) -> None:
        for delivery in deliveries:
            self.ack(delivery)

    def release(self, delivery: Delivery, *, delay_ms: int = 0) -> None:
        raise NotImplementedError

    def release_many(self, deliveries: Sequence[Delivery]) -> None:
        for delivery in deliveries:
            self.release(delivery)

    def renew_many(self, deliveries: Sequence[Delivery]) -> int:
        raise NotImplementedError(f"{type(self).__name__} cannot renew its reservations")

    def lease_seconds(self, queue: str) -> float | None:
        if not self.leased_reservations:
            return None
        granted = getattr(self, "visibility_timeout", None)
        return float(granted) if granted else None

    def _untagged(self) -> ConfigurationError:
        return ConfigurationError(
            f"{type(self).__name__} has no tagged reservations (tagged_reservations is False): "
            "its receipts can only be settled by the process that reserved them"
        )

    def reserve_tagged(self, queue: str, tag: str, *, max_messages: int) -> list[Delivery]:
        raise self._untagged()

    def renew_tagged(self, queue: str, tags: Sequence[str]) -> int:
        raise self._untagged()

    def ack_tagged(self, queue: str, tags: Sequence[str]) -> int:
        raise self._untagged()

    def release_tagged(self, queue: str, tags: Sequence[str]) -> int:
        raise self._untagged()

    def ready(self, queue: str) -> int:
        raise NotImplementedError(f"{type(self).__name__} cannot count ready messages")

    def scan_waiting(self, queue: str, *, after: Any = None, limit: int = 500) -> tuple[list[Delivery], Any]:
        """Up to ``limit`` messages waiting on ``queue`` (ready or delayed; reserved ones are not
        waiting), read without reserving or changing anything, from where the cursor ``after``
        left off (``None``: the start). Returns the page and the cursor of the next one (``None``
        when the queue was read to its end). Each delivery's ``receipt`` names the stored
        message for :meth:`dead_letter_waiting` only; it cannot be acked or released.

        A pass is a snapshot of a moving queue: a message that moved while it was read may be
        missed (the next pass sees it), never handed out."""
        raise ConfigurationError(f"{type(self).__name__}: {self.scan_refusal}")

    def dead_letter_waiting(self, moves: Sequence[tuple[Delivery, bytes]], *, dlq: str) -> int:
        """For each ``(delivery, record)`` from :meth:`scan_waiting`, in one atomic broker step:
        if the message is still waiting exactly as read, remove it and publish ``record`` to
        ``dlq`` (keeping its headers); otherwise (a worker reserved it, it was retried or
        removed) change nothing for it. Returns how many were moved."""
        raise ConfigurationError(f"{type(self).__name__}: {self.scan_refusal}")

    def retry(self, delivery: Delivery, body: bytes, *, delay_ms: int) -> None:
        self.publish(delivery.queue, body, delay_ms=delay_ms)
        self.ack(delivery)

    def dead_letter(self, delivery: Delivery, body: bytes, *, dlq: str) -> None:
        self.publish(dlq, body)
        self.ack(delivery)

    def reserved(self, queue: str) -> int | None:
        return None

    def close(self) -> None:
        return None

    def __enter__(self) -> BaseTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
