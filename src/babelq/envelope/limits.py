"""The envelope's nesting limit (:data:`~babelq.envelope.constants.MAX_DEPTH`), measured one way.

Decode, make and every encoder must agree on how deep a message may nest: a body decode
accepts but encode cannot write can be neither retried nor dead-lettered, so it comes back
after every visibility timeout. This module is the single place that measures depth,
on bytes (:func:`nesting_depth`, :func:`too_deep`) and on values (:func:`deep_trail`), and that
lets the standard library's recursive JSON code run within the limit whatever the caller's stack
depth (:func:`with_fresh_stack`).

Depth counts objects and arrays, the envelope object itself being level 1. On bytes it is
measured outside JSON strings: a ``"`` starts a string that runs to the next unescaped ``"`` (or
to the end of the bytes), ``[``/``{`` go one level down and ``]``/``}`` one up. For a JSON text
that is its nesting depth; for a broken one it is still a well-defined number, so every reader
(the core codec, babelq's JVM scanner for Spark) calls the same bodies too deep.
"""

from __future__ import annotations

import re
import threading
from array import array
from collections.abc import Callable, Iterator
from itertools import accumulate
from typing import Any, Final, TypeVar

from babelq.envelope.constants import MAX_DEPTH

R = TypeVar("R")

#: The reason decode gives for a body nested deeper than the limit. It starts like every other
#: "not JSON" reason: Spark's SQL paths, which cannot tell which, say just "body is not JSON".
TOO_DEEP_REASON: Final = f"body is not JSON: nested too deeply (more than {MAX_DEPTH} levels)"
#: The producer's problem text for a value nested deeper than the limit.
TOO_DEEP_PROBLEM: Final = (
    f"nested too deeply: more than {MAX_DEPTH} levels of objects and arrays "
    "(the envelope itself is level 1)"
)
#: The producer's problem text for a value that contains itself (its nesting never ends).
CYCLE_PROBLEM: Final = "nested too deeply: the value contains itself"
#: A JSON text nested deeper than the limit has at least this many bytes (one opening and one
#: closing bracket per level); shorter valid JSON needs no look.
SHALLOW_JSON_BYTES: Final = 2 * MAX_DEPTH + 1

#: A JSON string, or an unterminated one running to the end (possessive: no backtracking).
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*+(?:"|\\?\Z)', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
#: Every opening bracket as ``(`` and every closing one as ``)``.
_PARENS = bytes.maketrans(b"[{]}", b"(())")
#: ``(`` -> 1 and ``)`` -> 0xFF, which a signed byte array reads as -1.
_STEPS = bytes(1 if b == ord("(") else 0xFF if b == ord(")") else 0 for b in range(256))


def _outside_strings(data: bytes) -> bytes:
    """``data`` without its strings. Without a ``\\"`` in it every ``"`` opens or closes a
    string, so splitting on quotes is exact (and several times faster than the regular
    expression, which handles escaped quotes)."""
    if b'\\"' not in data:
        return b"".join(data.split(b'"')[::2])
    return _STRING.sub(b"", data)


def _brackets(data: bytes) -> bytes:
    """The brackets of ``data`` outside strings, each as ``(`` or ``)``."""
    return _outside_strings(data).translate(_PARENS, _NOT_BRACKETS)


def _deepest(parens: bytes) -> int:
    """The highest running level of a ``(``/``)`` sequence, starting at 0 (never below it)."""
    return max(0, max(accumulate(array("b", parens.translate(_STEPS))), default=0))


def nesting_depth(data: bytes) -> int:
    """The deepest level of objects and arrays in ``data``, counted outside strings."""
    return _deepest(_brackets(data))


def opening_brackets(data: bytes) -> int:
    """How many ``[`` and ``{`` bytes ``data`` holds, strings included (an upper bound of its depth).

    Counted by deleting them: ``bytes.replace`` finds a single byte with ``memchr``, many times
    faster than ``bytes.count``'s byte-by-byte loop on long bodies, and returns the bytes
    themselves when there is nothing to delete.
    """
    return 2 * len(data) - len(data.replace(b"[", b"")) - len(data.replace(b"{", b""))


def too_deep(data: bytes) -> bool:
    """Whether ``data`` nests deeper than :data:`MAX_DEPTH` (any bytes, JSON or not).

    Counting the opening brackets settles almost every body. One holding more than the limit
    (a long table, say) is measured by deleting innermost ``()`` pairs, one level per pass: a
    JSON text empties in as many passes as it is deep, so a usual one takes a handful. What
    does not empty (deeper than the limit, or not JSON) is measured exactly.
    """
    if opening_brackets(data) <= MAX_DEPTH:
        return False
    parens = _brackets(data)
    reduced = parens
    for _ in range(MAX_DEPTH):
        if not reduced:
            return False  # balanced, and at most MAX_DEPTH deep
        shorter = reduced.replace(b"()", b"")
        if len(shorter) == len(reduced):
            break  # unbalanced: not JSON
        reduced = shorter
    return bool(reduced) and _deepest(parens) > MAX_DEPTH


def _children(value: Any) -> Iterator[tuple[str | int, Any]]:
    return iter(value.items()) if isinstance(value, dict) else enumerate(value)


def deep_trail(value: Any, level: int) -> list[str | int] | None:
    """The path (keys and indexes) to the first container beyond the limit, else ``None``.

    ``value`` sits at envelope level ``level`` (2 for ``data`` and ``meta``, 1 for a whole
    document). Iterative, in document order; a value containing itself is reported where the
    cycle crosses the limit.
    """
    if not isinstance(value, dict | list | tuple):
        return None
    if level > MAX_DEPTH:
        return []
    trail: list[str | int] = []
    stack = [_children(value)]
    while stack:
        for key, child in stack[-1]:
            if isinstance(child, dict | list | tuple):
                trail.append(key)
                if level + len(stack) > MAX_DEPTH:
                    return trail
                stack.append(_children(child))
                break
        else:
            stack.pop()
            if trail:
                trail.pop()
    return None


def contains_itself(value: Any, trail: list[str | int]) -> list[str | int] | None:
    """The prefix of ``trail`` (from :func:`deep_trail`) that leads back to a container already
    on it, or ``None`` when the path is simply deep."""
    seen = {id(value)}
    node = value
    for length, key in enumerate(trail, start=1):
        node = node[key]
        if id(node) in seen:
            return trail[:length]
        seen.add(id(node))
    return None


def with_fresh_stack(fn: Callable[[], R]) -> R:
    """``fn()`` run on a new thread, which starts with the interpreter's whole recursion budget.

    The standard library's JSON encoder and decoder recurse once per level. Within
    :data:`MAX_DEPTH` they fit the default budget, but not below a caller that is already
    hundreds of frames deep; such a call is retried here instead of failing on a message the
    limit allows.
    """
    outcome: list[Any] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(fn())
        except BaseException as exc:  # re-raised in the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=run, name="babelq-deep-json", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    result: R = outcome[0]
    return result
