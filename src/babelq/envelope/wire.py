"""Bytes in and out: the canonical wire form (SPEC section 2, "Wire encoding").

Canonical means what ``json.dumps(obj, ensure_ascii=False, separators=(",", ":"))`` writes,
UTF-8 encoded: compact, non-ASCII and ``/`` unescaped, Python's shortest float repr. The
reference encoders of the other SDKs produce the same bytes.

For speed we encode with orjson, whose output is byte-identical to that form for every
value except some floats (it writes ``1e-7`` where the canonical form is ``1e-07``), so a
document known to hold a float goes through the standard library instead. Decoding uses
orjson too, except where a 19+ digit run could be an integer orjson would turn into a
float; there the standard library re-parses for exact integers.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from babelq.errors import DecodeError

_LONG_DIGITS = re.compile(rb"\d{19}")
_std_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def dumps_std(value: Any) -> bytes:
    """Canonical bytes via the standard library (exact for every float)."""
    return _std_encoder.encode(value).encode("utf-8")


def dumps(value: Any, *, has_floats: bool = True) -> bytes:
    """Canonical bytes of an already-checked JSON value.

    ``has_floats=False`` (known from :func:`babelq.envelope.payload.check_json`) takes the
    fast path. Pass ``True`` when unsure: the result is the same, only slower.
    """
    if has_floats:
        return dumps_std(value)
    return orjson.dumps(value)


def _bad_utf8(body: bytes) -> str | None:
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"body is not valid UTF-8 (byte 0x{body[exc.start]:02x} at offset {exc.start})"
    return None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


def loads_document(body: bytes | bytearray | memoryview | str) -> dict[str, Any]:
    """Parse ``body`` into a JSON object, or raise :class:`DecodeError` saying why not.

    Never raises anything else: not UTF-8, not JSON, NaN/Infinity, nesting deeper than
    1024, and a JSON root that is not an object are all ``DecodeError``.
    """
    if isinstance(body, str):
        try:
            data = body.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise DecodeError(f"body holds a lone surrogate at index {exc.start}; not valid UTF-8") from None
    elif isinstance(body, bytes):
        data = body
    elif isinstance(body, bytearray | memoryview):
        data = bytes(body)
    else:
        raise DecodeError(f"body must be bytes or str, not {type(body).__name__}")
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(_bad_utf8(data) or f"body is not JSON: {exc}") from None
    if type(doc) is not dict:
        kind = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean"}
        raise DecodeError(f"body is JSON but {kind.get(type(doc), 'null')}, not an object")
    if _LONG_DIGITS.search(data):
        # orjson turns integers beyond 64 bits into floats; re-read them exactly.
        doc = dict(json.loads(data, parse_constant=_reject_constant))
    return doc


def is_json_object(body: bytes) -> bool:
    """Whether ``body`` is one well-formed JSON object (valid UTF-8, strict JSON)."""
    try:
        return type(orjson.loads(body)) is dict
    except orjson.JSONDecodeError:
        return False
