"""Checks that a value is pure JSON before it goes on the wire (SPEC section 2).

The walk refuses what other SDKs cannot read or what a JSON encoder would silently
change: NaN/Infinity, integers outside signed 64-bit, bytes, datetimes, Decimals, sets,
arbitrary objects, non-string keys and strings that are not valid Unicode. It never
converts anything. The error names the path of the offending value, built only when a
problem is found so the happy path stays cheap.

It also reports whether the value holds any float, because the fast encoder formats
some floats differently from the canonical (Python ``repr``) form.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import math
import re
import warnings
from collections.abc import Iterable
from typing import Any

from babelq.envelope.constants import INT64_MAX, INT64_MIN, JS_SAFE_MAX
from babelq.errors import EnvelopeError, UnsafeIntegerWarning

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*\Z")


class _ProblemError(Exception):
    """Internal: carries a problem up the recursion while the path is collected."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.trail: list[str | int] = []


def format_path(root: str, trail: Iterable[str | int]) -> str:
    """``root`` followed by ``.key``, ``["odd key"]`` and ``[index]`` segments."""
    out = [root]
    for seg in trail:
        if isinstance(seg, int):
            out.append(f"[{seg}]")
        elif _PLAIN_KEY.match(seg):
            out.append(f".{seg}" if out != [""] else seg)
        else:
            escaped = seg.replace("\\", "\\\\").replace('"', '\\"')
            out.append(f'["{escaped}"]')
    return "".join(out)


def _describe(value: object) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        return "bytes are not allowed in JSON; base64-encode them into a string"
    if isinstance(value, _dt.datetime | _dt.date | _dt.time):
        return (
            f"{type(value).__name__} is not allowed; use Unix epoch milliseconds (int) "
            "or an RFC 3339 UTC string"
        )
    if isinstance(value, decimal.Decimal):
        return "Decimal is not allowed; use integer minor units (cents) or a string"
    if isinstance(value, set | frozenset):
        return f"{type(value).__name__} is not allowed; use a list"
    if isinstance(value, str | int | float):
        return (
            f"{type(value).__name__} (a subclass of {type(value).__mro__[1].__name__}) is not a "
            "plain JSON value; pass its plain value (for an Enum, .value)"
        )
    return f"{type(value).__module__}.{type(value).__qualname__} is not a JSON type"


def _scan(value: Any) -> bool:
    """Raise :class:`_ProblemError` for a non-JSON value; return True when a float is inside."""
    t = type(value)
    if t is str:
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise _ProblemError(
                    f"string holds a lone surrogate {value[exc.start]!r} at index {exc.start}, "
                    "which is not valid UTF-8"
                ) from None
        return False
    if t is int:
        if value > JS_SAFE_MAX or value < -JS_SAFE_MAX:
            if value > INT64_MAX or value < INT64_MIN:
                raise _ProblemError(f"integer {value} is outside signed 64-bit; send it as a string")
            warnings.warn(
                f"integer {value} exceeds 2**53-1 and loses precision in JavaScript consumers; "
                "consider sending it as a string",
                UnsafeIntegerWarning,
                stacklevel=4,
            )
        return False
    if t is float:
        if not math.isfinite(value):
            raise _ProblemError(
                "NaN is not allowed" if math.isnan(value) else f"{'-' if value < 0 else ''}Infinity is not allowed"
            )
        return True
    if value is None or t is bool:
        return False
    if t is dict or isinstance(value, dict):
        found = False
        for key, item in value.items():
            if type(key) is not str:
                raise _ProblemError(
                    f"key {key!r} ({type(key).__name__}) is not a string; JSON object keys must be strings"
                )
            try:
                if _scan(item):
                    found = True
            except _ProblemError as problem:
                problem.trail.append(key)
                raise
        return found
    if t is list or t is tuple or isinstance(value, list):
        found = False
        for index, item in enumerate(value):
            try:
                if _scan(item):
                    found = True
            except _ProblemError as problem:
                problem.trail.append(index)
                raise
        return found
    raise _ProblemError(_describe(value))


def check_json(value: Any, path: str = "data") -> bool:
    """Raise :class:`EnvelopeError` naming ``path`` if ``value`` is not pure JSON.

    Returns whether a float occurs anywhere inside (the encoder needs to know).
    """
    try:
        return _scan(value)
    except _ProblemError as problem:
        raise EnvelopeError(format_path(path, reversed(problem.trail)), problem.problem) from None
    except RecursionError:
        raise EnvelopeError(path, "value is nested too deeply to encode") from None
