"""Reaching the values a marked position names inside ``data``, without touching anything else.

A position is a tuple of :class:`~babelq.schema.sensitive.Step` (a property by its literal
name, every item of an array, every value of an object), as
:func:`babelq.schema.sensitive.marked_positions` finds them. Positions never travel as dotted
text inside babelq, so a property called ``*`` or ``a.b`` is never confused with a wildcard or
a nested path.

Why copy-on-write: the runtime hands middleware read-only views and a publisher's ``data``
belongs to the caller, so :func:`rewrite` with ``copy=True`` copies only the containers on the
way to a rewritten value and shares every other object; with ``copy=False`` it changes the
containers in place (the babelqueue package's in-place contract).

A position absent from this message, or holding another type than the schema said (an object
where an array was declared), is skipped: a schema describes every possible shape and one
message need not carry them all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping, MutableSequence, Sequence
from typing import Any

from babelq.schema.sensitive import ANY_KEY, ITEMS, KEY, Position, Step, covers

__all__ = ["ANY_KEY", "ITEMS", "KEY", "LeafOp", "Position", "Step", "outermost", "rewrite"]


def outermost(positions: Sequence[Position]) -> list[Position]:
    """``positions`` without those inside (or equal to) another listed one.

    ``profile.name`` under a marked ``profile``, or ``labels.vip`` under every value of
    ``labels``: the outer value is protected as one ciphertext, so the inner one is already
    inside it. Treating it again would encrypt twice, or (on unprotect) try to decrypt a
    cleartext leaf.
    """
    parsed = [steps for steps in positions if steps]
    kept: list[Position] = []
    for i, steps in enumerate(parsed):
        inside = any(
            covers(other, steps) and (other != steps or j < i) for j, other in enumerate(parsed) if j != i
        )
        if not inside:
            kept.append(steps)
    return kept


#: Transforms one reached value; returns the very same object when it leaves it alone.
LeafOp = Callable[[Any, str], Any]


def rewrite(node: Any, steps: Position, op: LeafOp, *, copy: bool, where: str = "") -> Any:
    """``node`` with ``op`` applied to every value ``steps`` reach (``where`` names the value for errors).

    Returns ``node`` itself when nothing changed; with ``copy`` a changed container is a
    shallow copy, otherwise the container is changed in place.
    """
    if not steps:
        return op(node, where)
    step, rest = steps[0], steps[1:]
    if step.kind == ITEMS:
        if not isinstance(node, Sequence) or isinstance(node, (str, bytes)):
            return node
        items: Any = node
        for i, item in enumerate(node):
            new = rewrite(item, rest, op, copy=copy, where=f"{where}[{i}]")
            if new is not item:
                if items is node and (copy or not isinstance(node, MutableSequence)):
                    items = list(node)
                items[i] = new
        return items
    if not isinstance(node, Mapping):
        return node
    keys = list(node) if step.kind == ANY_KEY else [step.name] if step.name in node else []
    result: Any = node
    for key in keys:
        child = node[key]
        new = rewrite(child, rest, op, copy=copy, where=f"{where}.{key}" if where else str(key))
        if new is not child:
            if result is node and (copy or not isinstance(node, MutableMapping)):
                result = dict(node)
            result[key] = new
    return result
