"""Reaching the values a sensitive path names inside ``data``, without touching anything else.

:func:`babelq.schema.sensitive_paths` writes a position as a dotted path: ``email``,
``profile.full_name``, ``addresses[].line`` (``[]`` = every item of an array, possibly
repeated: ``grid[][]``) and ``labels.*`` (``*`` = every value of an object). This module
turns such a path into steps and rewrites the values it reaches.

Why copy-on-write: the runtime hands middleware read-only views and a publisher's ``data``
belongs to the caller, so :func:`rewrite` with ``copy=True`` copies only the containers on the
way to a rewritten value and shares every other object; with ``copy=False`` it changes the
containers in place (the babelqueue package's in-place contract).

A path whose position is absent from this message, or holds another type than the schema
said (an object where an array was declared), is skipped: a schema describes every possible
shape and one message need not carry them all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping, MutableSequence, Sequence
from dataclasses import dataclass
from typing import Any, Final

#: Step kinds: one object key, every value of an object, every item of an array.
KEY: Final = "key"
ANY_KEY: Final = "any_key"
ITEMS: Final = "items"


@dataclass(frozen=True, slots=True)
class Step:
    kind: str
    name: str = ""


def parse(path: str) -> tuple[Step, ...]:
    """``"addresses[].line"`` -> (key addresses, items, key line); ``""`` -> ()."""
    if not path:
        return ()
    steps: list[Step] = []
    for raw in path.split("."):
        part, depth = raw, 0
        while part.endswith("[]"):
            part = part[:-2]
            depth += 1
        if part == "*":
            steps.append(Step(ANY_KEY))
        elif part:
            steps.append(Step(KEY, part))
        steps.extend(Step(ITEMS) for _ in range(depth))
    return tuple(steps)


def _covers(outer: tuple[Step, ...], inner: tuple[Step, ...]) -> bool:
    """Whether every value ``inner`` reaches lies inside (or is) a value ``outer`` reaches."""
    if len(outer) > len(inner):
        return False
    for a, b in zip(outer, inner, strict=False):
        if a.kind == ANY_KEY and b.kind in (KEY, ANY_KEY):
            continue
        if a != b:
            return False
    return True


def outermost(paths: Sequence[str]) -> list[tuple[Step, ...]]:
    """The parsed ``paths`` without those inside (or equal to) another listed path.

    ``profile.name`` under a marked ``profile``, or ``labels.vip`` under ``labels.*``: the
    outer value is protected as one ciphertext, so the inner one is already inside it. Treating
    it again would encrypt twice, or (on unprotect) try to decrypt a cleartext leaf.
    """
    parsed = [steps for steps in (parse(p) for p in paths) if steps]
    kept: list[tuple[Step, ...]] = []
    for i, steps in enumerate(parsed):
        inside = any(
            _covers(other, steps) and (other != steps or j < i) for j, other in enumerate(parsed) if j != i
        )
        if not inside:
            kept.append(steps)
    return kept


#: Transforms one reached value; returns the very same object when it leaves it alone.
LeafOp = Callable[[Any, str], Any]


def rewrite(node: Any, steps: tuple[Step, ...], op: LeafOp, *, copy: bool, where: str = "") -> Any:
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
