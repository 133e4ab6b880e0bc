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

from babelq.envelope import verdict, wire
from babelq.envelope.constants import FORBIDDEN_META, FORBIDDEN_TOP_LEVEL, SCHEMA_VERSION
from babelq.errors import EnvelopeError


class Envelope:
    """One BabelQueue message (schema_version 1).

    Build one with :func:`babelq.envelope.make` (producing) or
    :func:`babelq.envelope.decode` (consuming). Accessors return the typed value for an
    accepted envelope; on a rejected one they fall back to an empty value, and
    :meth:`rejection` says what is wrong.
    """

    __slots__ = ("_body", "_doc", "_floats", "_raw")

    def __init__(
        self,
        doc: dict[str, Any],
        *,
        raw: bytes | None = None,
        has_floats: bool | None = None,
    ) -> None:
        self._doc = doc
        self._raw = raw
        self._floats = has_floats
        self._body: bytes | None = None

    # -- identity -------------------------------------------------------------------
    @property
    def urn(self) -> str:
        """The message URN (``job``, else the inbound ``urn`` alias, else ``""``)."""
        return verdict.urn_of(self._doc)

    @property
    def trace_id(self) -> str:
        value = self._doc.get("trace_id")
        return value if type(value) is str else ""

    @property
    def data(self) -> dict[str, Any]:
        """The business payload (read-only by contract)."""
        value = self._doc.get("data")
        return value if type(value) is dict else {}

    @property
    def meta(self) -> dict[str, Any]:
        """Producer metadata, including keys this library does not know (read-only)."""
        value = self._doc.get("meta")
        return value if type(value) is dict else {}

    @property
    def attempts(self) -> int:
        value = self._doc.get("attempts")
        return value if type(value) is int else 0

    @property
    def dead_letter(self) -> dict[str, Any] | None:
        value = self._doc.get("dead_letter")
        return value if type(value) is dict else None

    # -- meta shortcuts -------------------------------------------------------------
    def _meta_str(self, key: str) -> str | None:
        value = self.meta.get(key)
        return value if type(value) is str else None

    def _meta_int(self, key: str) -> int | None:
        value = self.meta.get(key)
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
        """Whether a consumer should accept this envelope (SPEC consumer rules)."""
        return verdict.accepts(self._doc)

    def rejection(self) -> str | None:
        """Why a consumer must reject this envelope, or ``None`` when it is accepted."""
        return verdict.rejection(self._doc)

    # -- bytes ----------------------------------------------------------------------
    @property
    def raw(self) -> bytes | None:
        """The exact bytes this envelope was decoded from (``None`` if it was made here)."""
        return self._raw

    def encode(self) -> bytes:
        """The canonical wire bytes (SPEC section 2).

        A decoded envelope is re-encoded canonically: the inbound ``urn`` alias becomes
        ``job`` and forbidden keys are left out; every other key is kept in its order.
        """
        body = self._body
        if body is None:
            doc = self._doc if self._floats is not None else _publishable(self._doc)
            body = wire.dumps(doc, has_floats=self._floats is not False)
            self._body = body
        return body

    def to_dict(self) -> dict[str, Any]:
        """A deep copy of the document, safe to change."""
        return copy.deepcopy(self._doc)

    def document(self) -> Mapping[str, Any]:
        """The underlying document, without copying (do not change it)."""
        return self._doc

    # -- changes return new envelopes ----------------------------------------------------
    def _derive(self, doc: dict[str, Any]) -> Envelope:
        return Envelope(doc, has_floats=self._floats)

    def with_attempts(self, attempts: int) -> Envelope:
        """A copy with ``attempts`` set (the only field a worker may change)."""
        if type(attempts) is not int or attempts < 0:
            raise EnvelopeError("attempts", f"must be an integer >= 0, got {attempts!r}")
        doc = _publishable(self._doc) if self._floats is None else dict(self._doc)
        doc["attempts"] = attempts
        return self._derive(doc)

    def with_dead_letter(self, block: dict[str, Any]) -> Envelope:
        """A copy carrying ``block`` as its ``dead_letter`` member (placed last)."""
        doc = _publishable(self._doc) if self._floats is None else dict(self._doc)
        doc.pop("dead_letter", None)
        doc["dead_letter"] = block
        return self._derive(doc)

    def without_dead_letter(self) -> Envelope:
        """A copy with the ``dead_letter`` member removed."""
        doc = _publishable(self._doc) if self._floats is None else dict(self._doc)
        doc.pop("dead_letter", None)
        return self._derive(doc)

    # -- dunder ---------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Envelope):
            return NotImplemented
        return self._doc == other._doc

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"Envelope(urn={self.urn!r}, id={self.id!r}, trace_id={self.trace_id!r}, "
            f"attempts={self._doc.get('attempts')!r})"
        )


def _publishable(doc: dict[str, Any]) -> dict[str, Any]:
    """A shallow copy fit to re-publish: ``urn`` alias -> ``job``, forbidden keys dropped."""
    out: dict[str, Any] = {}
    if "job" not in doc or verdict.urn_of({"job": doc.get("job")}) == "":
        alias = verdict.urn_of(doc)
        if alias:
            out["job"] = alias
    for key, value in doc.items():
        if key in FORBIDDEN_TOP_LEVEL or (key == "urn" and "job" in out):
            continue
        if key == "job" and "job" in out:
            continue
        if key == "meta" and type(value) is dict and FORBIDDEN_META.intersection(value):
            out[key] = {k: v for k, v in value.items() if k not in FORBIDDEN_META}
        else:
            out[key] = value
    if "urn" in out and "job" in out:
        del out["urn"]
    return out


def supported_version(version: object) -> bool:
    """Whether ``version`` is a schema_version this library accepts."""
    return type(version) is int and version == SCHEMA_VERSION
