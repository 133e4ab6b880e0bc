"""Producing envelopes: :func:`make` and :func:`encode` (docs/standard.md §2); reading them is
:mod:`babelq.envelope.read`.

``make`` checks everything a producer must refuse, mints the ids and encodes the envelope
once, so an error surfaces where the message is built, not later on a publish path. The
payload walk is the hot part: a fast walk covers the common case, and only a refusal or an
odd value costs the full check that names the offending path.

Both sides (``make`` here, ``decode`` in :mod:`babelq.envelope.read`) keep the envelope within
:data:`~babelq.envelope.constants.MAX_DEPTH` levels of nesting: ``make`` refuses a deeper payload
naming the path, ``decode`` calls a deeper body poison. A body shorter than
:data:`~babelq.envelope.limits.SHALLOW_JSON_BYTES` cannot be that deep, so the usual message pays
one length comparison for the check; a longer one is re-encoded by orjson
(:func:`~babelq.envelope.wire.depth_checked_dump`), which the envelope keeps for the exact-integer
check the first read of its payload needs anyway.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import orjson

from babelq.envelope import ids, wire
from babelq.envelope.constants import (
    ASCII_WHITESPACE,
    CORE_META_KEYS,
    DEFAULT_QUEUE,
    EXTENSION_META_KEYS,
    FORBIDDEN_META,
    INT64_MAX,
    LANG,
    SCHEMA_VERSION,
)
from babelq.envelope.limits import SHALLOW_JSON_BYTES, too_deep
from babelq.envelope.model import Envelope
from babelq.envelope.payload import (
    NEEDS_STD_ENCODER,
    UNSAFE_INTEGER,
    fast_flags,
    problem_flags,
    too_deep_error,
    warn_unsafe_integer,
)
from babelq.envelope.typed_data import as_dict
from babelq.envelope.urn import KNOWN_GOOD, check_urn
from babelq.errors import EnvelopeError, URNError

_RESERVED_META = frozenset(CORE_META_KEYS) | FORBIDDEN_META | frozenset(EXTENSION_META_KEYS)
_now_ns = time.time_ns


def _need_str(path: str, value: object) -> str:
    if type(value) is not str or not value:
        raise EnvelopeError(path, f"must be a non-empty string, got {value!r}")
    return value


def _need_ms(path: str, value: object) -> int:
    # a consumer reads these as signed 64-bit integers; a larger one would make the body poison
    if type(value) is not int or not 0 <= value <= INT64_MAX:
        raise EnvelopeError(path, f"must be Unix epoch milliseconds (int from 0 to 2**63-1), got {value!r}")
    return value


def _ms_at(created_at: object) -> int:
    return _need_ms("meta.created_at", created_at)


def _check_urn_slow(urn: object, strict: bool) -> str:
    """The URN to write: ASCII whitespace trimmed (as the babelqueue package does), checked.

    Only ASCII whitespace counts, on both sides: a URN of U+00A0 is not blank to a consumer
    (:func:`babelq.envelope.verdict.urn_of`), so the producer writes it too, warning that it
    breaks the naming rules (refused in strict mode).
    """
    if type(urn) is not str:
        raise URNError("job", f"the URN must be a non-empty string, got {urn!r}")
    trimmed = urn.strip(ASCII_WHITESPACE)
    if not trimmed:
        raise URNError("job", f"the URN must be a non-empty string, got {urn!r}")
    try:
        trimmed.encode("utf-8")
    except UnicodeEncodeError:
        raise URNError("job", f"the URN holds a lone surrogate: {urn!r}") from None
    check_urn(trimmed, strict=strict, stacklevel=3)  # -> make -> make's caller
    return trimmed


def _trace(trace_id: object) -> str:
    """The trace id to continue, ASCII whitespace trimmed as the babelqueue package does.

    Unlike that package, a blank one is refused instead of silently starting a new trace: the
    caller meant to continue one (pass ``None`` to start a trace).
    """
    if type(trace_id) is not str:
        raise EnvelopeError("trace_id", f"must be a non-empty string, got {trace_id!r}")
    trimmed = trace_id.strip(ASCII_WHITESPACE)
    if not trimmed:
        raise EnvelopeError(
            "trace_id", f"must be a non-empty string, got {trace_id!r} (pass None to start a new trace)"
        )
    return trimmed


def _add_extensions(
    block: dict[str, Any],
    *,
    correlation_id: str | None,
    sharding_key: str | None,
    deliver_at: int | None,
    expire_at: int | None,
    priority: int | None,
    transaction_id: str | None,
) -> None:
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


def _add_meta(block: dict[str, Any], meta: Mapping[str, Any]) -> None:
    for key, value in meta.items():
        if type(key) is not str:
            raise EnvelopeError("meta", f"key {key!r} ({type(key).__name__}) is not a string")
        if key in _RESERVED_META:
            raise EnvelopeError(
                f"meta.{key}",
                "is reserved (a core, forbidden or babelq extension key; use the keyword argument)",
            )
        block[key] = value


def _encode_new(doc: dict[str, Any], flags: int | None, stacklevel: int) -> tuple[bytes, bool]:
    """Bytes of a freshly made document, and whether it needs the standard encoder.

    ``flags`` is the fast walk's verdict on ``data`` and the extra meta values (None when
    it declined to judge). A refusal anywhere re-checks with the full walk, which raises
    :class:`EnvelopeError` naming the path. orjson stops at 254 levels, so only a document
    the standard library wrote can be deeper than the limit; that one is measured.
    """
    if flags is None or flags & NEEDS_STD_ENCODER:
        # The standard encoder would coerce non-str keys and trip on lone surrogates; the
        # fast walk leaves both to orjson, so the full check must look first.
        flags = _full_check(doc)
    body: bytes | None = None
    if not flags & NEEDS_STD_ENCODER:
        try:
            body = orjson.dumps(doc)
        except TypeError:  # a non-str key, a lone surrogate, nesting beyond orjson's limit
            _full_check(doc)
    needs_std = body is None
    if body is None:
        body = wire.dumps_std(doc)
        if len(body) > SHALLOW_JSON_BYTES and too_deep(body):
            raise too_deep_error(doc, "", level=1)
    if flags & UNSAFE_INTEGER:
        warn_unsafe_integer(doc["data"], "data", stacklevel=stacklevel + 1)
        warn_unsafe_integer(doc["meta"], "meta", stacklevel=stacklevel + 1)
    return body, needs_std


def _full_check(doc: dict[str, Any]) -> int:
    flags = 0
    for key, value in doc.items():
        flags |= problem_flags(value, key)
    return flags


def make(
    urn: str,
    data: Mapping[str, Any] | object | None = None,
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
    keyword extensions are docs/standard.md §6's optional ``meta`` keys; ``meta`` adds further
    producer keys after them. ``message_id`` and ``created_at`` exist for replays, the outbox
    and tests; normally they are minted here. ``strict`` makes a badly formed URN raise
    instead of warn.

    ASCII whitespace around ``urn`` and ``trace_id`` is trimmed, as the babelqueue package
    trims it, so the same call routes the same through both SDKs.

    Raises :class:`~babelq.errors.EnvelopeError` naming the path of any value that is not
    pure JSON (``data.items[3].price: NaN is not allowed``) or that nests deeper than
    :data:`~babelq.envelope.constants.MAX_DEPTH` levels; :class:`~babelq.errors.URNError`
    for an empty or blank URN.
    """
    if urn.__class__ is not str or urn not in KNOWN_GOOD:
        urn = _check_urn_slow(urn, strict)
    if data.__class__ is dict:
        payload: dict[str, Any] = data.copy()
    elif data is None:
        payload = {}
    elif isinstance(data, Mapping):
        payload = dict(data)
    elif (typed := as_dict(data)) is not None:
        payload = typed
    else:
        raise EnvelopeError(
            "data",
            f"must be a JSON object (a dict, a pydantic model, a msgspec Struct or a dataclass), "
            f"got {type(data).__name__}",
        )
    flags = fast_flags(payload)

    if trace_id is None:
        trace_id, minted_id = ids.uuid4_pair()
        if message_id is None:
            message_id = minted_id
    else:
        trace_id = _trace(trace_id)
        if message_id is None:
            message_id = ids.uuid4()
    if queue.__class__ is not str or not queue:
        _need_str("meta.queue", queue)
    if message_id.__class__ is not str or not message_id:
        _need_str("meta.id", message_id)
    block: dict[str, Any] = {
        "id": message_id,
        "queue": queue,
        "lang": LANG,
        "schema_version": SCHEMA_VERSION,
        "created_at": _now_ns() // 1_000_000 if created_at is None else _ms_at(created_at),
    }
    if (
        correlation_id is not None or sharding_key is not None or deliver_at is not None
        or expire_at is not None or priority is not None or transaction_id is not None
    ):
        _add_extensions(
            block,
            correlation_id=correlation_id,
            sharding_key=sharding_key,
            deliver_at=deliver_at,
            expire_at=expire_at,
            priority=priority,
            transaction_id=transaction_id,
        )
    if meta:
        _add_meta(block, meta)
        if flags is not None:
            extra = fast_flags({key: block[key] for key in meta})
            flags = None if extra is None else flags | extra
    doc = {"job": urn, "trace_id": trace_id, "data": payload, "meta": block, "attempts": 0}
    body, needs_std = _encode_new(doc, flags, stacklevel=2)
    return Envelope._made(doc, body, needs_std)


def encode(envelope: Envelope) -> bytes:
    """The canonical wire bytes of ``envelope`` (same as ``envelope.encode()``)."""
    return envelope.encode()
