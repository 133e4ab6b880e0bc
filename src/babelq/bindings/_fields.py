"""Reading envelope fields for projections, shared by every binding.

Projections run on the publish hot path, so these helpers read the document directly
(no copy, no validation) and return ``None`` for a field that is absent or mistyped; each
binding then leaves that field out of its native metadata.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from babelq.envelope import Envelope, urn_of

Doc = Envelope | Mapping[str, Any]


def document(doc: Doc) -> Mapping[str, Any]:
    """The JSON document of an envelope or of a mapping."""
    return doc.document() if isinstance(doc, Envelope) else doc


def meta_of(body: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = body.get("meta")
    return meta if isinstance(meta, Mapping) else {}


def text(mapping: Mapping[str, Any], key: str) -> str | None:
    """``mapping[key]`` when it is a non-empty string."""
    value = mapping.get(key)
    return value if type(value) is str and value else None


def integer(mapping: Mapping[str, Any], key: str) -> int | None:
    """``mapping[key]`` when it is an integer (a bool is not)."""
    value = mapping.get(key)
    return value if type(value) is int else None


def attempts(body: Mapping[str, Any]) -> int | None:
    """The attempts every binding projects (``bq-attempts``, ``bq_attempts``, ``x-attempts``): the
    body's integer ``attempts``, 0 when it is absent or null (the counter starts at 0, and the
    babelqueue package projects 0 then on every broker), ``None`` (left out: the body stays
    authoritative) for anything else, which is no count: a string, a float, a bool."""
    value = body.get("attempts")
    if value is None:
        return 0
    return value if type(value) is int else None


def urn(body: Mapping[str, Any]) -> str | None:
    return urn_of(body) or None


def non_negative(value: object) -> int | None:
    """A broker counter as a non-negative int: ints and digit strings count, anything else is None."""
    if type(value) is int:
        return value if value >= 0 else None
    if isinstance(value, bytes | bytearray):
        try:
            value = bytes(value).decode("ascii")
        except UnicodeDecodeError:
            return None
    if type(value) is str:
        stripped = value.strip()
        if stripped.isascii() and stripped.isdigit():
            return int(stripped)
    return None


def put(target: dict[str, Any], key: str, value: object) -> None:
    """Set ``target[key]`` unless ``value`` is None."""
    if value is not None:
        target[key] = value
