"""The typed envelope object.

An :class:`Envelope` wraps the decoded JSON document and reads fields from it lazily, so
decoding stays cheap and every key a newer SDK added (top-level or inside ``meta``) is kept
through decode -> change attempts -> encode. Treat ``data`` and ``meta`` as read-only: the
only field that legitimately changes in a message's life is ``attempts``, and
:meth:`Envelope.with_attempts` returns a new envelope for that.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from babelq.envelope import data_bytes, forbidden, verdict, wire
from babelq.envelope.constants import FORBIDDEN_META, FORBIDDEN_TOP_LEVEL, INT64_MAX, SCHEMA_VERSION
from babelq.envelope.limits import with_fresh_stack
from babelq.envelope.payload import NEEDS_STD_ENCODER, problem_flags, too_deep_error
from babelq.errors import EnvelopeError

_new = object.__new__
_URN_KEYS = frozenset({"job", "urn"})


class Envelope:
    """One BabelQueue message (schema_version 1).

    Build one with :func:`babelq.envelope.make` (producing) or
    :func:`babelq.envelope.decode` (consuming). Accessors return the typed value for an
    accepted envelope; on a rejected one they fall back to an empty value, and
    :meth:`rejection` says what is wrong.

    A decoded envelope is read by orjson, which widens integers beyond 64 bits to floats.
    The first read of a value (``data``, ``meta``, ``encode()``...) re-reads such a body
    exactly (see :func:`babelq.envelope.wire.exact_document`); the frame fields used for
    routing (``urn``, ``trace_id``, ``id``, ``accepts()``) never need to.
    """

    __slots__ = ("_body", "_canonical", "_doc", "_dumped", "_exact", "_floats", "_origin", "_raw")

    _doc: dict[str, Any]
    _raw: bytes | None
    _floats: bool | None
    _body: bytes | None
    _canonical: bool
    _exact: bool
    _dumped: bytes | None
    #: the received body whose ``data`` bytes this envelope still carries unchanged (written back
    #: verbatim on encode: :mod:`babelq.envelope.data_bytes`); None once ``data`` was replaced
    _origin: bytes | None

    def __init__(
        self,
        doc: dict[str, Any],
        *,
        raw: bytes | None = None,
        has_floats: bool | None = None,
    ) -> None:
        """Wrap ``doc``. ``has_floats`` True/False declares the document already checked and
        canonical (made here), saying whether it needs the standard encoder; ``None`` treats
        it as received (re-encoding canonicalises it)."""
        self._doc = doc
        self._raw = raw
        self._origin = raw
        self._floats = has_floats
        self._body = None
        self._canonical = has_floats is not None
        self._exact = True
        self._dumped = None

    @classmethod
    def _made(cls, doc: dict[str, Any], body: bytes, needs_std: bool) -> Envelope:
        env = _new(cls)
        env._doc = doc
        env._raw = None
        env._origin = None
        env._floats = needs_std
        env._body = body
        env._canonical = True
        env._exact = True
        env._dumped = None
        return env

    @classmethod
    def _decoded(cls, doc: dict[str, Any], raw: bytes, exact: bool, dumped: bytes | None = None) -> Envelope:
        """``dumped``: orjson's re-encoding of ``doc`` when decode made one (for the depth check),
        kept for the exact-integer check."""
        forbidden.check(doc)
        env = _new(cls)
        env._doc = doc
        env._raw = raw
        env._origin = raw
        env._floats = None
        env._body = None
        env._canonical = False
        env._exact = exact
        env._dumped = dumped
        return env

    def _settled(self) -> dict[str, Any]:
        """The document with every integer exact (re-read once if orjson may have widened one)."""
        if not self._exact:
            raw = self._raw
            if raw is not None:
                self._doc = wire.exact_document(raw, self._doc, self._dumped)
            self._exact = True
            self._dumped = None
        return self._doc

    # -- identity -------------------------------------------------------------------
    @property
    def urn(self) -> str:
        """The message URN (``job``; the inbound ``urn`` alias when ``job`` is absent; else ``""``)."""
        return verdict.urn_of(self._doc)

    @property
    def trace_id(self) -> str:
        value = self._doc.get("trace_id")
        return value if type(value) is str else ""

    @property
    def data(self) -> dict[str, Any]:
        """The business payload (read-only by contract)."""
        value = (self._doc if self._exact else self._settled()).get("data")
        return value if type(value) is dict else {}

    @property
    def meta(self) -> dict[str, Any]:
        """Producer metadata, including keys this library does not know (read-only)."""
        value = (self._doc if self._exact else self._settled()).get("meta")
        return value if type(value) is dict else {}

    @property
    def attempts(self) -> int:
        """The transport retry counter (0 when missing or not an integer)."""
        value = self._doc.get("attempts")
        if type(value) is float and not self._exact:
            value = self._settled().get("attempts")
        return value if type(value) is int else 0

    @property
    def dead_letter(self) -> dict[str, Any] | None:
        """The ``dead_letter`` block on a dead-letter queue message, else ``None``."""
        value = self._settled().get("dead_letter")
        return value if type(value) is dict else None

    # -- meta shortcuts -------------------------------------------------------------
    def _meta_str(self, key: str) -> str | None:
        meta = self._doc.get("meta")
        value = meta.get(key) if type(meta) is dict else None
        return value if type(value) is str else None

    def _meta_int(self, key: str) -> int | None:
        meta = self._doc.get("meta")
        value = meta.get(key) if type(meta) is dict else None
        if type(value) is float and not self._exact:
            return self._settled_meta_int(key)
        return value if type(value) is int else None

    def _settled_meta_int(self, key: str) -> int | None:
        meta = self._settled().get("meta")
        value = meta.get(key) if type(meta) is dict else None
        return value if type(value) is int else None

    @property
    def id(self) -> str:
        """``meta.id``: this message's own id (the idempotency key), ``""`` if absent."""
        return self._meta_str("id") or ""

    @property
    def queue(self) -> str:
        return self._meta_str("queue") or ""

    @property
    def lang(self) -> str:
        return self._meta_str("lang") or ""

    @property
    def schema_version(self) -> int | None:
        return self._meta_int("schema_version")

    @property
    def created_at(self) -> int | None:
        """``meta.created_at`` in Unix epoch milliseconds."""
        return self._meta_int("created_at")

    @property
    def correlation_id(self) -> str | None:
        return self._meta_str("correlation_id")

    @property
    def sharding_key(self) -> str | None:
        return self._meta_str("sharding_key")

    @property
    def deliver_at(self) -> int | None:
        return self._meta_int("deliver_at")

    @property
    def expire_at(self) -> int | None:
        return self._meta_int("expire_at")

    @property
    def priority(self) -> int:
        """``meta.priority`` (1..10); 5 when absent or out of range."""
        value = self._meta_int("priority")
        return value if value is not None and 1 <= value <= 10 else 5

    @property
    def transaction_id(self) -> str | None:
        return self._meta_str("transaction_id")

    def is_expired(self, now_ms: int) -> bool:
        """Whether ``meta.expire_at`` has passed at ``now_ms``."""
        expire_at = self.expire_at
        return expire_at is not None and now_ms >= expire_at

    # -- verdict --------------------------------------------------------------------
    def accepts(self) -> bool:
        """Whether a consumer should accept this envelope (docs/standard.md §2.6)."""
        # orjson widens only integers beyond 64 bits, which no rule accepts: the frame as read
        # gives the verdict without the exact re-read.
        return verdict.accepts(self._doc)

    def rejection(self) -> str | None:
        """Why a consumer must reject this envelope, or ``None`` when it is accepted."""
        reason = verdict.rejection(self._doc)
        if reason is None or self._exact:
            return reason
        # a float here may be a widened integer, which the reason names differently
        return verdict.rejection(self._settled())

    # -- bytes ----------------------------------------------------------------------
    @property
    def raw(self) -> bytes | None:
        """The exact bytes this envelope was decoded from (``None`` if it was made here)."""
        return self._raw

    def encode(self) -> bytes:
        """The canonical wire bytes (docs/standard.md §2).

        A decoded envelope is re-encoded canonically: the inbound ``urn`` alias becomes
        ``job`` (in its place), forbidden keys are left out, and every other key is kept in
        its order, values exact.
        """
        body = self._body
        if body is None:
            doc = self._settled()
            if not self._canonical:
                doc = _publishable(doc)
            if self._origin is not None and "data" in doc:
                body = self._with_received_data(doc)
                if body is not None:
                    self._body = body
                    return body
            try:
                body = wire.dumps_document(doc, self._floats)
            except wire.TooDeepError:  # an Envelope built by hand: never write what decode refuses
                raise too_deep_error(doc, "", level=1) from None
            except (TypeError, ValueError) as exc:  # a value changed after make
                problem_flags(doc, "", level=1)
                raise EnvelopeError("", f"cannot encode the envelope: {exc}") from None
            self._body = body
        return body

    def _with_received_data(self, doc: dict[str, Any]) -> bytes | None:
        """The frame encoded anew around ``data`` exactly as the producer wrote it (None: the
        received body's ``data`` could not be found, so it is encoded like the rest)."""
        origin = self._origin
        assert origin is not None
        frame = dict(doc)
        frame["data"] = data_bytes.PLACEHOLDER
        try:
            encoded = wire.dumps_document(frame, self._floats)
        except (wire.TooDeepError, TypeError, ValueError):
            return None
        return data_bytes.splice(encoded, origin)

    def to_dict(self) -> dict[str, Any]:
        """A deep copy of the document, safe to change (any depth decode accepts)."""
        return _copy_document(self._settled())

    def document(self) -> Mapping[str, Any]:
        """The underlying document, without copying (do not change it)."""
        return self._settled()

    # -- changes return new envelopes ----------------------------------------------------
    def _publishable_copy(self) -> dict[str, Any]:
        doc = self._settled()
        return dict(doc) if self._canonical else _publishable(doc)

    def _derive(self, doc: dict[str, Any], needs_std: bool | None, *, same_data: bool = True) -> Envelope:
        env = _new(Envelope)
        env._doc = doc
        env._raw = None
        env._origin = self._origin if same_data else None
        env._floats = needs_std
        env._body = None
        env._canonical = True
        env._exact = True
        env._dumped = None
        return env

    def with_attempts(self, attempts: int) -> Envelope:
        """A copy with ``attempts`` set (the only field a worker may change).

        Refuses a count beyond signed 64-bit, which consumers of the standard call poison.
        """
        if type(attempts) is not int or not 0 <= attempts <= INT64_MAX:
            raise EnvelopeError(
                "attempts", f"must be an integer from 0 to 2**63-1 (signed 64-bit), got {attempts!r}"
            )
        doc = self._publishable_copy()
        doc["attempts"] = attempts
        return self._derive(doc, self._floats)

    def with_dead_letter(self, block: Mapping[str, Any]) -> Envelope:
        """A copy carrying ``block`` as its ``dead_letter`` member (placed last).

        Raises :class:`EnvelopeError` (path ``dead_letter...``) if ``block`` is not pure JSON.
        """
        block = dict(block)
        block_flags = problem_flags(block, "dead_letter")
        doc = self._publishable_copy()
        doc.pop("dead_letter", None)
        doc["dead_letter"] = block
        needs_std = None if self._floats is None else self._floats or bool(block_flags & NEEDS_STD_ENCODER)
        return self._derive(doc, needs_std)

    def with_data(self, data: Mapping[str, Any]) -> Envelope:
        """A copy whose ``data`` is ``data`` (publish middleware: protected fields, a migration).

        Raises :class:`EnvelopeError` (path ``data...``) if ``data`` is not pure JSON.
        """
        data = dict(data)
        data_flags = problem_flags(data, "data")
        doc = self._publishable_copy()
        doc["data"] = data
        needs_std = None if self._floats is None else self._floats or bool(data_flags & NEEDS_STD_ENCODER)
        return self._derive(doc, needs_std, same_data=False)

    def without_dead_letter(self) -> Envelope:
        """A copy with the ``dead_letter`` member removed."""
        doc = self._publishable_copy()
        doc.pop("dead_letter", None)
        return self._derive(doc, self._floats)

    # -- dunder ---------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Envelope):
            return NotImplemented
        mine, theirs = self._settled(), other._settled()
        try:
            return mine == theirs
        except RecursionError:  # deep documents under a deep caller
            return with_fresh_stack(lambda: mine == theirs)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"Envelope(urn={self.urn!r}, id={self.id!r}, trace_id={self.trace_id!r}, "
            f"attempts={self._doc.get('attempts')!r})"
        )


def _copy_document(doc: dict[str, Any]) -> dict[str, Any]:
    """A copy of a JSON document: every dict and list copied (key order kept), without
    recursion, so any depth decode accepts copies under any caller. Other containers (only an
    Envelope built by hand holds them) go through ``copy.deepcopy``."""
    root: dict[str, Any] = {}
    stack: list[tuple[Any, Any]] = [(doc, root)]
    while stack:
        source, target = stack.pop()
        pairs = source.items() if type(source) is dict else enumerate(source)
        for key, value in pairs:
            kind = type(value)
            if kind is dict or kind is list:
                copied: Any = {} if kind is dict else []
                stack.append((value, copied))
            elif isinstance(value, str | int | float) or value is None:
                copied = value
            else:
                copied = copy.deepcopy(value)
            if type(target) is dict:
                target[key] = copied
            else:
                target.append(copied)
    return root


def _publishable(doc: dict[str, Any]) -> dict[str, Any]:
    """A shallow copy fit to re-publish.

    The URN is written as ``job`` where the document first named it (``job`` or the ``urn``
    alias), the alias itself is never re-emitted, and the forbidden top-level and ``meta``
    keys are dropped. Everything else keeps its place. A document without a usable URN
    keeps whatever ``job`` it had.
    """
    urn = verdict.urn_of(doc)
    out: dict[str, Any] = {}
    for key, item in doc.items():
        value = item
        if key in _URN_KEYS:
            if urn:
                if "job" not in out:
                    out["job"] = urn
            elif key == "job":
                out["job"] = value
            continue
        if key in FORBIDDEN_TOP_LEVEL:
            continue
        if key == "meta" and type(value) is dict and not FORBIDDEN_META.isdisjoint(value):
            value = {k: v for k, v in value.items() if k not in FORBIDDEN_META}
        out[key] = value
    return out


def supported_version(version: object) -> bool:
    """Whether ``version`` is a schema_version this library accepts."""
    return type(version) is int and version == SCHEMA_VERSION
