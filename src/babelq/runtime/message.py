"""The one object a handler receives: the decoded envelope plus the broker's facts.

A handler takes exactly one argument, a :class:`Message`. It reads the envelope fields
(``urn``, ``data``, ``meta``, ``trace_id``, ``id``), the reconciled ``attempts`` (docs/standard.md
§4: the binding may take a max with the broker's own counter), the raw ``body``
bytes and what the broker said about the delivery (``stored_at``, ``delivery_count``,
``headers``). ``data`` is a read-only view: retries re-publish the envelope as received, so
a handler that changed it in place would otherwise change what the next attempt sees.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from babelq.envelope import Envelope, make
from babelq.runtime.replay_mark import marked
from babelq.transports.base import Delivery


class Message:
    """One delivered, accepted message on its way to a handler (read-only)."""

    # A plain slotted class with read-only properties: a frozen dataclass costs a
    # microsecond per construction, and one is built for every message.
    __slots__ = ("_attempts", "_data", "_delivery", "_envelope")

    def __init__(
        self, envelope: Envelope, delivery: Delivery, attempts: int, data: Mapping[str, Any] | None = None
    ) -> None:
        self._envelope = envelope
        self._delivery = delivery
        self._attempts = attempts
        #: the handler's ``data``; ``None`` until first read (see :attr:`data`)
        self._data = data

    @classmethod
    def of(cls, envelope: Envelope, delivery: Delivery) -> Message:
        """Build the handler's view of ``envelope`` as delivered by ``delivery``.

        ``data`` is not read here: reading it settles the payload's integers exactly (a second
        look at the body, see :attr:`Envelope.data <babelq.envelope.model.Envelope.data>`), which
        a message that is routed, skipped, deferred or expired without its payload never needs.
        """
        return cls(envelope, delivery, delivery.attempts(envelope.attempts))

    @property
    def envelope(self) -> Envelope:
        """The decoded envelope as received."""
        return self._envelope

    @property
    def delivery(self) -> Delivery:
        """The transport's delivery (receipt, native metadata)."""
        return self._delivery

    @property
    def attempts(self) -> int:
        """The envelope's attempts reconciled with the broker's own counter (docs/standard.md §4)."""
        return self._attempts

    @property
    def data(self) -> Mapping[str, Any]:
        """The business payload, read-only (possibly replaced by middleware, see :meth:`with_data`).

        Read on first use and kept: every read returns the same mapping."""
        data = self._data
        if data is None:
            data = self._data = MappingProxyType(self._envelope.data)
        return data

    # -- envelope fields -------------------------------------------------------------
    @property
    def urn(self) -> str:
        return self._envelope.urn

    @property
    def trace_id(self) -> str:
        return self._envelope.trace_id

    @property
    def id(self) -> str:
        """``meta.id``, the idempotency key (``""`` when the producer left it out)."""
        return self._envelope.id

    @property
    def meta(self) -> Mapping[str, Any]:
        return MappingProxyType(self._envelope.meta)

    @property
    def correlation_id(self) -> str | None:
        return self._envelope.correlation_id

    @property
    def created_at(self) -> int | None:
        return self._envelope.created_at

    # -- delivery facts ----------------------------------------------------------------
    @property
    def body(self) -> bytes:
        """The exact bytes the broker delivered."""
        return self._delivery.body

    @property
    def queue(self) -> str:
        """The queue this delivery was reserved from."""
        return self._delivery.queue

    @property
    def stored_at(self) -> int | None:
        """When the broker stored the message (epoch ms), if it says."""
        return self._delivery.stored_at

    @property
    def delivery_count(self) -> int | None:
        """How many times the broker has handed this body out, this time included, if it knows."""
        return self._delivery.delivery_count

    @property
    def headers(self) -> Mapping[str, Any]:
        """The broker's native properties/attributes for this delivery."""
        return self._delivery.headers

    def is_replay(self) -> bool:
        """Whether this message was put back on purpose by a redrive (``babelq dlq redrive``, or the
        babelqueue package's ``redrive(bypass=True)``): skip external effects that already fired.
        See :mod:`babelq.runtime.replay`."""
        return marked(self._delivery.carried_headers)

    # -- derived messages ----------------------------------------------------------------
    def with_data(self, data: Mapping[str, Any]) -> Message:
        """A copy whose handler-visible ``data`` is ``data`` (for decrypting/upcasting middleware).

        The envelope is unchanged, so a retry still re-publishes what was received.
        """
        return Message(self._envelope, self._delivery, self._attempts, MappingProxyType(dict(data)))

    def child(
        self, urn: str, data: Mapping[str, Any] | None = None, *, queue: str | None = None, **extensions: Any
    ) -> Envelope:
        """A downstream envelope in the same trace: copies ``trace_id``, gets a new ``meta.id``.

        ``queue`` defaults to this message's queue; ``extensions`` are
        :func:`babelq.envelope.make`'s keyword arguments (``correlation_id``, ``expire_at``...).
        """
        return make(urn, data, queue=queue or self._envelope.queue or self.queue, trace_id=self.trace_id,
                    **extensions)

    def __repr__(self) -> str:
        return (
            f"Message(urn={self.urn!r}, id={self.id!r}, trace_id={self.trace_id!r}, "
            f"attempts={self.attempts}, queue={self.queue!r})"
        )
