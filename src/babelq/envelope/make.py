"""Producing envelopes: :func:`make` and :func:`decode` (SPEC section 2 producer rules)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from babelq.envelope import ids, wire
from babelq.envelope.constants import (
    CORE_META_KEYS,
    DEFAULT_QUEUE,
    EXTENSION_META_KEYS,
    FORBIDDEN_META,
    LANG,
    SCHEMA_VERSION,
)
from babelq.envelope.model import Envelope
from babelq.envelope.payload import check_json
from babelq.envelope.urn import check_urn
from babelq.errors import EnvelopeError, URNError

_RESERVED_META = frozenset(CORE_META_KEYS) | FORBIDDEN_META | frozenset(EXTENSION_META_KEYS)


def _need_str(path: str, value: object) -> str:
    if type(value) is not str or not value:
        raise EnvelopeError(path, f"must be a non-empty string, got {value!r}")
    return value


def _need_ms(path: str, value: object) -> int:
    if type(value) is not int or value < 0:
        raise EnvelopeError(path, f"must be Unix epoch milliseconds (int >= 0), got {value!r}")
    return value


def make(
    urn: str,
    data: Mapping[str, Any] | None = None,
    *,
    queue: str = DEFAULT_QUEUE,
    trace_id: str | None = None,
    correlation_id: str | None = None,
    sharding_key: str | None = None,
    deliver_at: int | None = None,
    expire_at: int | None = None,
    priority: int | None = None,
    transaction_id: str | None = None,
    meta: Mapping[str, Any] | None = None,
    message_id: str | None = None,
    created_at: int | None = None,
    strict: bool = False,
) -> Envelope:
    """Build a new envelope ready to encode and publish.

    ``trace_id`` continues an inbound trace; without it a new UUID v4 is minted. The
    keyword extensions are SPEC section 6's optional ``meta`` keys; ``meta`` adds further
    producer keys after them. ``message_id`` and ``created_at`` exist for replays, the outbox
    and tests; normally they are minted here. ``strict`` makes a badly formed URN raise
    instead of warn.

    Raises :class:`~babelq.errors.EnvelopeError` naming the path of any value that is not
    pure JSON (``data.items[3].price: NaN is not allowed``).
    """
    if type(urn) is not str or not urn.strip():
        raise URNError("job", f"the URN must be a non-empty string, got {urn!r}")
    check_urn(urn, strict=strict)
    if data is None:
        payload: dict[str, Any] = {}
    elif isinstance(data, Mapping):
        payload = dict(data)
    else:
        raise EnvelopeError("data", f"must be a JSON object (a dict), got {type(data).__name__}")
    floats = check_json(payload, "data")

    if trace_id is None or message_id is None:
        first, second = ids.uuid4_pair()
        if trace_id is None:
            trace_id = first
        if message_id is None:
            message_id = second
    block: dict[str, Any] = {
        "id": _need_str("meta.id", message_id),
        "queue": _need_str("meta.queue", queue),
        "lang": LANG,
        "schema_version": SCHEMA_VERSION,
        "created_at": ids.now_ms() if created_at is None else _need_ms("meta.created_at", created_at),
    }
    if correlation_id is not None:
        block["correlation_id"] = _need_str("meta.correlation_id", correlation_id)
    if sharding_key is not None:
        block["sharding_key"] = _need_str("meta.sharding_key", sharding_key)
    if deliver_at is not None:
        block["deliver_at"] = _need_ms("meta.deliver_at", deliver_at)
    if expire_at is not None:
        block["expire_at"] = _need_ms("meta.expire_at", expire_at)
    if priority is not None:
        if type(priority) is not int or not 1 <= priority <= 10:
            raise EnvelopeError("meta.priority", f"must be an integer from 1 to 10, got {priority!r}")
        block["priority"] = priority
    if transaction_id is not None:
        block["transaction_id"] = _need_str("meta.transaction_id", transaction_id)
    if meta:
        for key, value in meta.items():
            if type(key) is not str:
                raise EnvelopeError("meta", f"key {key!r} is not a string")
            if key in _RESERVED_META:
                raise EnvelopeError(
                    f"meta.{key}",
                    "is reserved (a core, forbidden or babelq extension key; use the keyword argument)",
                )
            if check_json(value, f"meta.{key}"):
                floats = True
            block[key] = value
    doc = {
        "job": urn,
        "trace_id": _need_str("trace_id", trace_id),
        "data": payload,
        "meta": block,
        "attempts": 0,
    }
    return Envelope(doc, has_floats=floats)


def decode(body: bytes | bytearray | memoryview | str) -> Envelope:
    """Read an envelope from wire bytes (or text).

    Raises :class:`~babelq.errors.DecodeError` (and nothing else) when the body is not valid
    UTF-8, not JSON, or not a JSON object: such a body is poison. A body that is an object
    but breaks the consumer rules decodes fine; check :meth:`Envelope.accepts`.
    """
    doc = wire.loads_document(body)
    raw = body if type(body) is bytes else (body.encode("utf-8") if isinstance(body, str) else bytes(body))
    return Envelope(doc, raw=raw)


def encode(envelope: Envelope) -> bytes:
    """The canonical wire bytes of ``envelope`` (same as ``envelope.encode()``)."""
    return envelope.encode()
