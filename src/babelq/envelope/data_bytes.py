"""The producer's own bytes of ``data``, written back verbatim when a received envelope is re-emitted.

A retry, a dead letter, a redrive and a relay decode a message and encode it again with another
``attempts`` or a ``dead_letter`` block. JSON lets a producer spell one value many ways (``1e-7``
or ``1e-07``, ``0.000001``, ``"\\u00e9"`` or ``"é"``), and SDKs spell numbers differently: a
re-encode of ``data`` would rewrite another SDK's bytes even where the values are equal. So
``data`` is never re-encoded: :func:`data_span` finds the value's bytes in the received body and
the encoder puts them back in its place, every token as the producer spelled it. Only the frame
fields are written anew, and whitespace between tokens is left out, as the wire form is compact.
"""

from __future__ import annotations

import re
import uuid
from typing import Final

import orjson

# a JSON string: the unrolled form, linear on long strings
_STRING_TEXT: Final = rb'"[^"\\]*(?:\\.[^"\\]*)*"'
_STRING: Final = re.compile(_STRING_TEXT, re.DOTALL)
_NESTING: Final = re.compile(_STRING_TEXT + rb"|[\[\]{}]", re.DOTALL)
_SPACE: Final = re.compile(rb"[ \t\n\r]*")
_SCALAR_END: Final = re.compile(rb"[ \t\n\r,}\]]")
_DATA_KEY: Final = b'"data"'
#: a string (kept whole) or whitespace between tokens (dropped)
_STRING_OR_SPACE: Final = re.compile(b"(" + _STRING_TEXT + rb")|[ \t\n\r]+", re.DOTALL)

#: what stands in for ``data`` while the frame is encoded (a NUL cannot occur unescaped in JSON,
#: and the random part in no producer's data)
PLACEHOLDER: Final = f"\x00babelq-data-{uuid.uuid4().hex}\x00"
_PLACEHOLDER_JSON: Final = orjson.dumps(PLACEHOLDER)


def data_span(body: bytes) -> tuple[int, int] | None:
    """``(start, end)`` of the top-level ``data`` value in the JSON object ``body`` (the last one
    if the key repeats, as decoders read it); None when there is none or the body is not a JSON
    object this scanner can follow."""
    size = len(body)
    pos = _skip(body, 0)
    if pos >= size or body[pos] != 0x7B:  # "{"
        return None
    pos = _skip(body, pos + 1)
    if body[pos : pos + 1] == b"}":
        return None
    found: tuple[int, int] | None = None
    while True:
        key = _STRING.match(body, pos)
        if key is None:
            return None
        pos = _skip(body, key.end())
        if body[pos : pos + 1] != b":":
            return None
        start = _skip(body, pos + 1)
        end = _value_end(body, start)
        if end is None:
            return None
        token = key.group()
        if token == _DATA_KEY or (b"\\" in token and orjson.loads(token) == "data"):
            found = (start, end)
        pos = _skip(body, end)
        sep = body[pos : pos + 1]
        if sep == b"}":
            return found
        if sep != b",":
            return None
        pos = _skip(body, pos + 1)


def _skip(body: bytes, pos: int) -> int:
    match = _SPACE.match(body, pos)
    return pos if match is None else match.end()


def _value_end(body: bytes, start: int) -> int | None:
    first = body[start : start + 1]
    if first == b'"':
        string = _STRING.match(body, start)
        return None if string is None else string.end()
    if first in (b"{", b"["):
        depth = 0
        for token in _NESTING.finditer(body, start):
            mark = token.group()
            if mark in (b"{", b"["):
                depth += 1
            elif mark in (b"}", b"]"):
                depth -= 1
                if depth == 0:
                    return token.end()
        return None
    if not first:
        return None
    scalar = _SCALAR_END.search(body, start)
    end = len(body) if scalar is None else scalar.start()
    return end if end > start else None


def splice(frame: bytes, origin: bytes) -> bytes | None:
    """``frame`` (an encoding whose ``data`` is :data:`PLACEHOLDER`) with ``origin``'s own ``data``
    bytes in its place; None when ``origin`` has no ``data`` this module can find."""
    span = data_span(origin)
    if span is None or frame.count(_PLACEHOLDER_JSON) != 1:
        return None
    return frame.replace(_PLACEHOLDER_JSON, compact(origin[span[0] : span[1]]))


def compact(value: bytes) -> bytes:
    """``value`` (JSON text) without whitespace between its tokens; the tokens untouched."""
    if b" " not in value and b"\n" not in value and b"\t" not in value and b"\r" not in value:
        return value
    return _STRING_OR_SPACE.sub(lambda m: m.group(1) or b"", value)
