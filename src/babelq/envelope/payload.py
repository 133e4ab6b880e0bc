"""Checks that a value is pure JSON before it goes on the wire (docs/standard.md §2).

The check refuses what other SDKs cannot read or what a JSON encoder would silently
change: NaN/Infinity, integers outside signed 64-bit, bytes, datetimes, Decimals, sets,
Enums and other objects, non-string keys and strings that are not valid Unicode (lone
surrogates). It never converts anything. The error names the path of the offending value
(``data.items[3].price: NaN is not allowed``), built only once a problem is found so the
happy path stays cheap.

There are two walks:

* :func:`check_json`, the full check with paths, for callers and for explaining a refusal;
* :func:`fast_flags`, the producer's hot path. It checks value types, numbers and nesting
  but leaves dictionary keys and string contents to orjson, which refuses non-``str`` keys
  and lone surrogates on its own when the envelope is encoded. Any doubt (a refusal, an
  exotic container type) sends the caller to :func:`check_json`.

Neither walk measures nesting: both recurse, and a recursion error makes the full check ask
:mod:`babelq.envelope.limits` whether the value is deeper than the envelope's limit (refused,
naming the path) or only the caller's stack is short (checked again on a fresh stack). A value
deep enough to pass the walks but beyond the limit is refused by whoever encodes it.

Both report whether the value holds a float that the fast encoder (orjson) formats
differently from the canonical Python ``repr`` form: only floats with a magnitude in
``[1e-9, 1e-4)`` (orjson writes ``0.00001`` and ``1e-7`` where ``repr`` writes ``1e-05``
and ``1e-07``). Every other finite float is written identically by both; the differential
tests in ``tests/envelope`` hold that claim against the standard library.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import enum
import math
import re
import warnings
from collections.abc import Iterable
from typing import Any

from babelq.envelope.constants import INT64_MAX, INT64_MIN, JS_SAFE_MAX
from babelq.envelope.limits import (
    CYCLE_PROBLEM,
    TOO_DEEP_PROBLEM,
    contains_itself,
    deep_trail,
    with_fresh_stack,
)
from babelq.errors import EnvelopeError, UnsafeIntegerWarning

#: Flag: a float that only the standard library encoder writes in canonical form.
NEEDS_STD_ENCODER = 1
#: Flag: an integer beyond 2**53-1 in magnitude (JavaScript consumers lose precision).
UNSAFE_INTEGER = 2

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*\Z")


class _ProblemError(Exception):
    """Internal: carries a problem up the recursion while the path is collected."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.trail: list[str | int] = []


class _RefusedError(Exception):
    """Internal: the fast walk met something it will not judge; use the full check."""


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


def _printable(text: str) -> str:
    """A key or string safe to put in an error message (lone surrogates escaped)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


# -- the fast walk (producer hot path) ------------------------------------------------------


def _fast_float(value: float) -> int:
    if value - value:  # NaN - NaN and inf - inf are NaN (truthy); finite - itself is 0.0
        raise _RefusedError
    if 1e-9 <= value < 1e-4 or -1e-4 < value <= -1e-9:
        return NEEDS_STD_ENCODER
    return 0


def _fast_int(value: int) -> int:
    if INT64_MIN <= value <= INT64_MAX:
        return UNSAFE_INTEGER
    raise _RefusedError


def _fast_values(items: Iterable[Any]) -> int:
    """The fast scan over a container's values (a dict's ``.values()`` or a list)."""
    flags = 0
    for item in items:
        t = type(item)
        if t is str:
            continue
        if t is int:
            if -JS_SAFE_MAX <= item <= JS_SAFE_MAX:
                continue
            flags |= _fast_int(item)
        elif t is dict:
            flags |= _fast_values(item.values())
        elif t is float:
            flags |= _fast_float(item)
        elif t is list:
            flags |= _fast_values(item)
        elif t is not bool and item is not None:
            raise _RefusedError
    return flags


def fast_flags(value: dict[str, Any]) -> int | None:
    """Flags for a plain ``dict`` payload, or ``None`` when :func:`check_json` must decide.

    Keys and string contents are not checked here (orjson refuses bad ones when encoding).
    """
    try:
        return _fast_values(value.values())
    except (_RefusedError, RecursionError):
        return None


# -- the full check (paths, messages) ----------------------------------------------------------


def _describe(value: object) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        return f"{type(value).__name__} is not allowed in JSON; base64-encode it into a string"
    if isinstance(value, _dt.datetime | _dt.date | _dt.time):
        return (
            f"{type(value).__name__} is not allowed; use Unix epoch milliseconds (int) "
            "or an RFC 3339 UTC string"
        )
    if isinstance(value, decimal.Decimal):
        return "Decimal is not allowed; use integer minor units (cents) or a string"
    if isinstance(value, set | frozenset):
        return f"{type(value).__name__} is not allowed; use a list"
    if isinstance(value, enum.Enum):
        return (
            f"Enum member {type(value).__qualname__}.{value.name} is not a JSON value; "
            "pass its .value"
        )
    if isinstance(value, str | int | float):
        return (
            f"{type(value).__name__} (a subclass of {type(value).__mro__[1].__name__}) is not a "
            "plain JSON value; pass a plain str, int or float"
        )
    return f"{type(value).__module__}.{type(value).__qualname__} is not a JSON type"


def _check_str(value: str) -> None:
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise _ProblemError(
                f"string holds a lone surrogate {value[exc.start]!r} at index {exc.start}, "
                "which is not valid UTF-8"
            ) from None


def _scan(value: Any) -> int:
    """Raise :class:`_ProblemError` for a non-JSON value; else return the flags."""
    t = type(value)
    if t is str:
        _check_str(value)
        return 0
    if t is int:
        if -JS_SAFE_MAX <= value <= JS_SAFE_MAX:
            return 0
        if INT64_MIN <= value <= INT64_MAX:
            return UNSAFE_INTEGER
        raise _ProblemError(f"integer {value} is outside signed 64-bit; send it as a string")
    if t is float:
        if math.isnan(value):
            raise _ProblemError("NaN is not allowed")
        if math.isinf(value):
            raise _ProblemError(f"{'-' if value < 0 else ''}Infinity is not allowed")
        return _fast_float(value)
    if value is None or t is bool:
        return 0
    if isinstance(value, dict):
        flags = 0
        for key, item in value.items():
            if type(key) is not str:
                raise _ProblemError(
                    f"key {key!r} ({type(key).__name__}) is not a string; JSON object keys must be "
                    "plain strings"
                )
            try:
                _check_str(key)
            except _ProblemError as problem:
                raise _ProblemError(f"key {_printable(key)!r}: {problem.problem}") from None
            try:
                flags |= _scan(item)
            except _ProblemError as problem:
                problem.trail.append(key)
                raise
        return flags
    if isinstance(value, list | tuple) and not isinstance(value, enum.Enum):
        flags = 0
        for index, item in enumerate(value):
            try:
                flags |= _scan(item)
            except _ProblemError as problem:
                problem.trail.append(index)
                raise
        return flags
    raise _ProblemError(_describe(value))


def _first_unsafe_int(value: Any, trail: list[str | int]) -> int | None:
    """The first integer beyond 2**53-1 inside ``value``; ``trail`` gets its path."""
    if type(value) is int:
        return value if not -JS_SAFE_MAX <= value <= JS_SAFE_MAX else None
    items: Iterable[tuple[str | int, Any]]
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = _first_unsafe_int(item, trail)
        if found is not None:
            trail.append(key)
            return found
    return None


def warn_unsafe_integer(value: Any, path: str, *, stacklevel: int = 2) -> None:
    """Emit :class:`UnsafeIntegerWarning` naming the first integer beyond 2**53-1 in ``value``."""
    trail: list[str | int] = []
    try:
        found = _first_unsafe_int(value, trail)
    except RecursionError:  # within the limit, under a deep caller
        trail.clear()
        found = with_fresh_stack(lambda: _first_unsafe_int(value, trail))
    if found is None:
        return
    warnings.warn(
        f"{format_path(path, reversed(trail))}: integer {found} exceeds 2**53-1 and loses precision "
        "in JavaScript consumers; consider sending it as a string",
        UnsafeIntegerWarning,
        stacklevel=stacklevel + 1,
    )


def too_deep_error(value: Any, path: str, *, level: int) -> EnvelopeError:
    """The error for ``value`` (at envelope level ``level``) nesting deeper than the limit,
    naming the first container beyond it (or, for a value containing itself, where it does)."""
    trail = deep_trail(value, level) or []
    cycle = contains_itself(value, trail)
    if cycle is not None:
        return EnvelopeError(format_path(path, cycle), CYCLE_PROBLEM)
    return EnvelopeError(format_path(path, trail), TOO_DEEP_PROBLEM)


def _scan_named(value: Any, path: str) -> int:
    try:
        return _scan(value)
    except _ProblemError as problem:
        raise EnvelopeError(format_path(path, reversed(problem.trail)), problem.problem) from None


def problem_flags(value: Any, path: str, *, level: int = 2) -> int:
    """The full check without warnings: raise :class:`EnvelopeError` naming the path, else flags.

    ``level`` is where ``value`` sits in the envelope (2 for ``data``, ``meta`` and the other
    members, 1 for a whole document); it places the nesting limit when the walk runs out of
    stack.
    """
    try:
        return _scan_named(value, path)
    except RecursionError:
        pass
    if deep_trail(value, level) is not None:  # deeper than the limit, or contains itself
        raise too_deep_error(value, path, level=level) from None
    return with_fresh_stack(lambda: _scan_named(value, path))  # only the caller's stack was short


def check_json(value: Any, path: str = "data") -> bool:
    """Raise :class:`EnvelopeError` naming the path if ``value`` is not pure JSON.

    ``value`` is taken to sit where ``data`` does (level 2 of the envelope), so it may nest
    :data:`~babelq.envelope.constants.MAX_DEPTH` - 1 levels itself. Warns
    (:class:`UnsafeIntegerWarning`, naming the path) about integers JavaScript cannot
    hold exactly. Returns whether ``value`` holds a float that only the standard library
    encoder writes in canonical form (the wire layer needs to know).
    """
    flags = problem_flags(value, path)
    if deep_trail(value, 2) is not None:
        raise too_deep_error(value, path, level=2)
    if flags & UNSAFE_INTEGER:
        warn_unsafe_integer(value, path, stacklevel=2)
    return bool(flags & NEEDS_STD_ENCODER)
