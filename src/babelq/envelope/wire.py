"""Bytes in and out: the canonical wire form (docs/standard.md §2.3).

Canonical means what ``json.dumps(obj, ensure_ascii=False, separators=(",", ":"))`` writes,
UTF-8 encoded: compact, non-ASCII and ``/`` unescaped, Python's shortest float repr. The
reference encoders of the other SDKs produce the same bytes.

Encoding uses orjson, whose output is byte-identical to that form for every JSON value
except floats with a magnitude in ``[1e-9, 1e-4)`` (orjson writes ``0.00001``, the canonical
form is ``1e-05``); a document holding one goes through the standard library instead
(:mod:`babelq.envelope.payload` tells which).

Decoding uses orjson too. orjson refuses numbers beyond a double's range and reads integers
beyond 64 bits as floats; the standard library reads both exactly, so:

* when orjson refuses a body, the standard library gets a second look, under the same
  strictness (no NaN/Infinity, no lone surrogates, no number that only fits as infinity);
* when orjson accepts a body, an integer beyond 64 bits comes back widened to a float. Two
  cheap filters find the bodies that may hold one (the document re-encodes with an exponent,
  and the bytes hold a run of 19+ digits); only those are re-read by the standard library.
  :class:`~babelq.envelope.model.Envelope` runs this lazily, the first time a value is
  read, so routing on the frame stays cheap.

Nesting is limited to :data:`~babelq.envelope.constants.MAX_DEPTH` levels on both sides
(:mod:`babelq.envelope.limits`): decode calls a deeper body poison, and the encoders write
anything within the limit whatever the caller's stack depth (the standard library's encoder
recurses, so a deep document under a deep caller is written by :func:`dumps_iterative`).
orjson's encoder stops at 254 levels, so its output never needs the depth check.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import orjson

from babelq.envelope.limits import SHALLOW_JSON_BYTES, TOO_DEEP_REASON, too_deep, with_fresh_stack
from babelq.envelope.payload import NEEDS_STD_ENCODER, fast_flags
from babelq.errors import DecodeError
from babelq.errors import TooDeepError as TooDeepError

_std_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)

#: Maps every ASCII digit to "0" and every other byte to ".": a run of 19 digits becomes 19 zeros.
_DIGITS_TO_ZERO = bytes(0x30 if 0x30 <= i <= 0x39 else 0x2E for i in range(256))
_NINETEEN_DIGITS = b"0" * 19


class _UnreadableError(ValueError):
    """Internal: the standard-library parser met a value the wire form does not allow."""


def _no_constant(name: str) -> Any:
    raise _UnreadableError(f"{name} is not allowed in JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if value - value:  # only infinity survives float() here (NaN has no JSON spelling)
        raise _UnreadableError(f"number {text[:40]} is outside the range of a 64-bit float")
    return value


def _finite_int(text: str) -> int:
    value = int(text)
    # a double's largest finite value has 309 digits: a shorter integer always fits one
    if len(text) >= 309:
        try:
            float(value)
        except OverflowError:
            raise _UnreadableError(f"number {text[:40]}... is outside the range of a 64-bit float") from None
    return value


# An integer only infinity could hold is poison as 1e400 is: every SDK reads JSON numbers as
# doubles somewhere, and the babelqueue package calls such a body poison.
_std_decoder = json.JSONDecoder(parse_float=_finite_float, parse_int=_finite_int, parse_constant=_no_constant)


# -- encoding ----------------------------------------------------------------------------------

#: The standard library's string encoder for ``ensure_ascii=False`` (its C version when built).
_encode_string = json.encoder.encode_basestring
_int_repr = int.__repr__
_float_repr = float.__repr__


def _float_text(value: float) -> str:
    if not math.isfinite(value):
        raise ValueError(f"Out of range float values are not JSON compliant: {value!r}")
    return _float_repr(value)


def _key_text(key: Any) -> str:
    """An object key as the standard library writes it (it converts scalar keys to strings)."""
    if isinstance(key, str):
        return key
    if isinstance(key, float):
        return _float_text(key)
    if key is True or key is False or key is None:
        return "true" if key is True else "false" if key is False else "null"
    if isinstance(key, int):
        return _int_repr(key)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def dumps_iterative(value: Any) -> bytes:
    """Canonical bytes of ``value`` at any depth: ``json.dumps(value, ensure_ascii=False,
    separators=(",", ":"), allow_nan=False)`` byte for byte, without recursion.

    The fallback of :func:`dumps_std` when the standard encoder runs out of stack. It refuses
    what that encoder refuses, with the same exception types: NaN/Infinity and a value that
    contains itself (``ValueError``), a non-JSON type (``TypeError``).
    """
    out: list[str] = []
    write = out.append
    stack: list[tuple[Iterator[Any], bool]] = []  # (items, is an object) of each open container
    open_ids: list[int] = []
    seen: set[int] = set()
    item, pending, first = value, True, False
    while True:
        if pending:
            if isinstance(item, str):
                write(_encode_string(item))
            elif item is None or item is True or item is False:
                write("null" if item is None else "true" if item is True else "false")
            elif isinstance(item, int):
                write(_int_repr(item))
            elif isinstance(item, float):
                write(_float_text(item))
            elif isinstance(item, list | tuple | dict):
                ident = id(item)
                if ident in seen:
                    raise ValueError("Circular reference detected")
                seen.add(ident)
                open_ids.append(ident)
                if isinstance(item, dict):
                    write("{")
                    stack.append((iter(item.items()), True))
                else:
                    write("[")
                    stack.append((iter(item), False))
                first = True
            else:
                raise TypeError(f"Object of type {type(item).__name__} is not JSON serializable")
            pending = False
        if not stack:
            return "".join(out).encode("utf-8")
        items, is_object = stack[-1]
        for entry in items:
            if not first:
                write(",")
            first = False
            if is_object:
                key, item = entry
                write(_encode_string(_key_text(key)))
                write(":")
            else:
                item = entry
            pending = True
            break
        else:
            write("}" if is_object else "]")
            stack.pop()
            seen.discard(open_ids.pop())
            first = False


def dumps_std(value: Any) -> bytes:
    """Canonical bytes via the standard library (exact for every float and integer), any depth."""
    try:
        return _std_encoder.encode(value).encode("utf-8")
    except RecursionError:
        return dumps_iterative(value)


def dumps(value: Any, *, has_floats: bool = True) -> bytes:
    """Canonical bytes of an already-checked JSON value.

    ``has_floats=False`` (known from :func:`babelq.envelope.payload.check_json`, which
    returns whether a float needs the standard encoder) takes the fast path. Pass ``True``
    when unsure: the result is the same, only slower. Raises :class:`TooDeepError` (a
    ``ValueError``) rather than write a document decode would call poison.
    """
    if not has_floats:
        try:
            return orjson.dumps(value)  # stops at 254 levels: its output is always within the limit
        except TypeError:
            pass
    body = dumps_std(value)
    if len(body) > SHALLOW_JSON_BYTES and too_deep(body):
        raise TooDeepError(TOO_DEEP_REASON)
    return body


def dumps_document(doc: dict[str, Any], needs_std: bool | None = None) -> bytes:
    """Canonical bytes of a document of JSON values, deciding the encoder when ``needs_std`` is None.

    Used for decoded documents, which may hold integers beyond 64 bits (read exactly) and any
    float: the fast walk decides, and orjson refusing something sends it to the standard
    library, which writes every JSON value canonically.
    """
    if needs_std is None:
        flags = fast_flags(doc)
        needs_std = flags is None or bool(flags & NEEDS_STD_ENCODER)
    return dumps(doc, has_floats=needs_std)


# -- decoding ----------------------------------------------------------------------------------


def _bad_utf8(body: bytes) -> str | None:
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"body is not valid UTF-8 (byte 0x{body[exc.start]:02x} at offset {exc.start})"
    return None


def _lone_surrogate(value: Any) -> str | None:
    """The first string (key or value) holding a lone surrogate, or None. Iterative."""
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        t = type(item)
        if t is str:
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    return str(item)
        elif t is dict:
            stack.extend(item.keys())
            stack.extend(item.values())
        elif t is list:
            stack.extend(item)
    return None


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list):
        return "an array"
    return "a string" if isinstance(value, str) else "null"


def not_object(value: Any) -> DecodeError:
    """The DecodeError for a body that is JSON but not an object."""
    return DecodeError(f"body is JSON but {_kind(value)}, not an object")


def _parse_std(text: str) -> Any:
    """The standard library's parse of ``text``, already known to be within the depth limit.

    Within the limit the parser's recursion fits the interpreter's budget, unless the caller
    is itself hundreds of frames deep: then the parse is retried on a fresh stack.
    """
    try:
        return _std_decoder.decode(text)
    except RecursionError:
        return with_fresh_stack(lambda: _std_decoder.decode(text))


def _std_loads(data: bytes, orjson_error: str | None) -> Any:
    """Parse with the standard library under the wire form's rules; DecodeError on failure.

    The order of the checks is the reason's order: not UTF-8, then nested too deep, then
    whatever the parser finds.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise DecodeError(_bad_utf8(data) or "body is not valid UTF-8") from None
    if too_deep(data):
        raise DecodeError(TOO_DEEP_REASON)
    try:
        value = _parse_std(text)
    except _UnreadableError as exc:
        raise DecodeError(f"body is not usable JSON: {exc}") from None
    except ValueError as exc:  # json.JSONDecodeError and int()'s digit limit
        raise DecodeError(f"body is not JSON: {orjson_error or exc}") from None
    if orjson_error is not None:
        bad = _lone_surrogate(value)
        if bad is not None:
            raise DecodeError("body is not JSON: a string holds a lone surrogate (\\ud800-\\udfff)")
    return value


def may_hold_wide_integer(data: bytes) -> bool:
    """Whether ``data`` has a run of 19+ digits, the only way to spell an integer beyond 64 bits."""
    return _NINETEEN_DIGITS in data.translate(_DIGITS_TO_ZERO)


def as_bytes(body: bytes | bytearray | memoryview | str) -> bytes:
    """The body as ``bytes``; a ``str`` must be encodable as UTF-8 (DecodeError otherwise)."""
    if type(body) is bytes:
        return body
    if isinstance(body, str):
        try:
            return body.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise DecodeError(f"body holds a lone surrogate at index {exc.start}; not valid UTF-8") from None
    if isinstance(body, bytes | bytearray | memoryview):
        return bytes(body)
    raise DecodeError(f"body must be bytes or str, not {type(body).__name__}")


def loads_fast(data: bytes) -> tuple[dict[str, Any], bool]:
    """Parse ``data`` into a JSON object: ``(document, exact)``.

    ``exact`` is False when orjson read the body and an integer beyond 64 bits may have been
    widened to a float; :func:`exact_document` settles that. Raises :class:`DecodeError` only.
    """
    try:
        doc = orjson.loads(data)
        exact = False
    except orjson.JSONDecodeError as exc:
        doc = _std_loads(data, str(exc))
        exact = True
    else:
        if len(data) > SHALLOW_JSON_BYTES:
            depth_checked_dump(data, doc)
    if type(doc) is not dict:
        raise not_object(doc)
    return doc, exact


def depth_checked_dump(data: bytes, doc: Any) -> bytes | None:
    """Raise :class:`DecodeError` if ``data`` (which orjson read as ``doc``) nests deeper than
    the limit; else return orjson's re-encoding of ``doc`` when it made one.

    orjson writes at most 254 levels, so its re-encoding succeeding settles the depth; that is
    cheaper than counting the brackets of a long body, and :func:`exact_document` needs the
    re-encoding anyway when the payload is read, so the decoded envelope keeps it. Only a
    document deeper than 254 levels is measured on its bytes.
    """
    try:
        return orjson.dumps(doc)
    except orjson.JSONEncodeError:
        if too_deep(data):
            raise DecodeError(TOO_DEEP_REASON) from None
        return None


def exact_document(data: bytes, doc: dict[str, Any], dumped: bytes | None = None) -> dict[str, Any]:
    """``doc`` (parsed from ``data`` by orjson) with every integer read exactly.

    ``dumped`` is orjson's re-encoding of ``doc`` when decode already made one. Never raises:
    ``data`` was read once already, within the depth limit, so the standard library reads it
    too; should it not, orjson's reading stands.
    """
    try:
        # A widened integer is a float of magnitude >= 2**63, which orjson writes with an
        # exponent ("1.8446744073709552e+19"). Re-encoding and looking for a "+" (one memchr;
        # rare in JSON text) is the cheapest first filter.
        suspicious = b"+" in (dumped if dumped is not None else orjson.dumps(doc))
    except orjson.JSONEncodeError:  # nesting beyond orjson's encoding depth (254)
        suspicious = True
    if not suspicious or not may_hold_wide_integer(data):
        return doc
    try:
        value = _std_loads(data, None)
    except DecodeError:  # not expected: the body was read once already
        return doc
    return value if type(value) is dict else doc


def loads_document(body: bytes | bytearray | memoryview | str) -> dict[str, Any]:
    """Parse ``body`` into a JSON object, integers exact, or raise :class:`DecodeError` saying why.

    Never raises anything else: not UTF-8, not JSON, NaN/Infinity, numbers beyond a double,
    nesting deeper than the limit, and a JSON root that is not an object are all ``DecodeError``.
    """
    data = as_bytes(body)
    doc, exact = loads_fast(data)
    return doc if exact else exact_document(data, doc)


def is_json_object(body: bytes) -> bool:
    """Whether ``body`` is one well-formed JSON object (valid UTF-8, strict JSON)."""
    try:
        loads_fast(body)
    except DecodeError:
        return False
    return True
