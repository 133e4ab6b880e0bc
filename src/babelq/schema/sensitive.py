"""Finding the personal-data fields a schema marks (docs/standard.md §9).

A node with ``"x-gdpr-sensitive": true``, or a non-empty category string
(``"x-gdpr-sensitive": "contact"``, as the other SDKs' schema readers accept), marks the value at
its position; ``false``, ``""`` and any other shape leave it unmarked. The root itself cannot be
marked (the envelope frame never changes), so a mark on it is ignored.

A position is a tuple of :class:`Step`: a property by its name (taken literally: a property
called ``*`` or ``a.b`` is that one property), every item of an array, or every value of an
object. Other SDKs exchange positions as dotted text, ``[]`` for array items
(``addresses[].line``); :func:`path_text` writes that form, :func:`reference_reach` says whether
a position is one the reference grammar reaches:

* the other SDKs derive marks from ``properties`` and object-form ``items`` only, and read their
  dotted text back by splitting on ``.`` and taking one trailing ``[]`` per part;
* so ``$ref``, ``allOf``/``anyOf``/``oneOf``, ``if``/``then``/``else``,
  ``additionalProperties``/``patternProperties`` and tuple ``items``/``prefixItems``/
  ``additionalItems`` lie beyond it, and so does every position whose dotted text reads back as
  another position: an item of an array of arrays (``grid[][]`` reads as the property
  ``grid[]``), a property whose name contains ``.`` or ends in ``[]`` where no array step follows.

:func:`marked_positions` finds every mark, beyond or not (local ``$ref``s ``#/$defs/...`` and
``#/definitions/...`` followed; a recursive reference is not expanded inside itself, so marks
below a recursion point are not listed), each with the reason it lies beyond the reference
grammar, if it does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

SENSITIVE_KEYWORD: Final = "x-gdpr-sensitive"
_SAME_PLACE: Final = ("allOf", "anyOf", "oneOf")
_SAME_PLACE_SINGLE: Final = ("if", "then", "else")

#: Step kinds: one property, every value of an object, every item of an array.
KEY: Final = "key"
ANY_KEY: Final = "any_key"
ITEMS: Final = "items"


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a position; ``name`` is the property's literal name for :data:`KEY`."""

    kind: str
    name: str = ""


Position = tuple[Step, ...]
_ITEM: Final = Step(ITEMS)
_ANY: Final = Step(ANY_KEY)


@dataclass(frozen=True, slots=True)
class Marked:
    """One marked position; ``beyond`` says why the reference grammar does not reach it ("" if it does)."""

    steps: Position
    beyond: str = ""


def path_text(steps: Position) -> str:
    """The dotted text of a position: ``addresses[].line``; every value of an object is ``*``.

    Only a position :func:`reference_reach` accepts reads back as itself; for the others the text
    names the place for a person (errors, listings), not for another SDK.
    """
    out = ""
    for step in steps:
        if step.kind == ITEMS:
            out += "[]"
        else:
            out += ("." if out else "") + (step.name if step.kind == KEY else "*")
    return out


def _read_back(text: str) -> Position:
    """How the other SDKs read a dotted path: split on ``.``, one trailing ``[]`` per part."""
    if not text:
        return ()
    steps: list[Step] = []
    for part in text.split("."):
        if len(part) >= 2 and part.endswith("[]"):
            steps += (Step(KEY, part[:-2]), _ITEM)
        else:
            steps.append(Step(KEY, part))
    return tuple(steps)


def reference_reach(steps: Position) -> str:
    """"" when the reference grammar reaches ``steps``, else why not (for an error message)."""
    if _read_back(path_text(steps)) == steps:
        return ""
    previous: Step | None = None
    for i, step in enumerate(steps):
        if step.kind == ANY_KEY:
            return "through additionalProperties/patternProperties"
        if step.kind == ITEMS and previous is not None and previous.kind == ITEMS:
            return "as an item of an array of arrays"
        if step.kind == KEY and "." in step.name:
            return f"under a property name with '.' ({step.name!r})"
        if step.kind == KEY and step.name.endswith("[]") and steps[i + 1 : i + 2] != (_ITEM,):
            return f"under a property name that ends in '[]' ({step.name!r})"
        previous = step
    return "at a position the dotted path form cannot write"


def resolve_ref(root: Mapping[str, Any], ref: str) -> Any:
    """The node a local ``$ref`` (``#``, ``#/a/b``) names in ``root``, or None."""
    if not ref.startswith("#"):
        return None
    node: Any = root
    for raw in ref[1:].split("/")[1:] if ref.startswith("#/") else []:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def is_marked(node: Mapping[str, Any]) -> bool:
    """Whether ``node`` carries the mark: ``true`` or a non-empty category string.

    A category mark must count: a producer that skipped it would publish the field in clear
    while the other SDKs' consumers expect ciphertext.
    """
    mark = node.get(SENSITIVE_KEYWORD)
    return mark is True or (isinstance(mark, str) and mark != "")


def marked_positions(schema: Mapping[str, Any] | bool) -> list[Marked]:
    """Every position ``schema`` marks, in schema order, once each.

    A position reached both through the reference grammar and through a wider construct counts
    as reached (``beyond`` is "").
    """
    found: dict[Position, str] = {}
    if not isinstance(schema, Mapping):
        return []

    def walk(node: Any, steps: Position, beyond: str, refs: frozenset[str]) -> None:
        if not isinstance(node, Mapping):
            return
        if is_marked(node) and steps:
            why = beyond or reference_reach(steps)
            if steps not in found or not why:
                found[steps] = why
        ref = node.get("$ref")
        if isinstance(ref, str) and ref not in refs:
            walk(resolve_ref(schema, ref), steps, beyond or "through $ref", refs | {ref})
        properties = node.get("properties")
        if isinstance(properties, Mapping):
            for name, child in properties.items():
                walk(child, (*steps, Step(KEY, str(name))), beyond, refs)
        patterns = node.get("patternProperties")
        if isinstance(patterns, Mapping):
            for child in patterns.values():
                walk(child, (*steps, _ANY), beyond or "through patternProperties", refs)
        # each keyword is looked up before its position is built: most nodes have none of them
        extra = node.get("additionalProperties")
        if isinstance(extra, Mapping):
            walk(extra, (*steps, _ANY), beyond or "through additionalProperties", refs)
        items = node.get("items")
        if isinstance(items, list):  # Draft 7 tuple form
            for child in items:
                walk(child, (*steps, _ITEM), beyond or "through tuple items", refs)
        elif isinstance(items, Mapping):
            walk(items, (*steps, _ITEM), beyond, refs)
        prefix = node.get("prefixItems")  # 2020-12 tuple form
        if isinstance(prefix, list):
            for child in prefix:
                walk(child, (*steps, _ITEM), beyond or "through prefixItems", refs)
        extra = node.get("additionalItems")
        if isinstance(extra, Mapping):
            walk(extra, (*steps, _ITEM), beyond or "through additionalItems", refs)
        for key in _SAME_PLACE:
            group = node.get(key)
            if isinstance(group, list):
                for child in group:
                    walk(child, steps, beyond or f"through {key}", refs)
        for key in _SAME_PLACE_SINGLE:
            child = node.get(key)
            if isinstance(child, Mapping):
                walk(child, steps, beyond or f"through {key}", refs)

    walk(schema, (), "", frozenset())
    return [Marked(steps, why) for steps, why in found.items()]


def sensitive_paths(schema: Mapping[str, Any] | bool) -> list[str]:
    """The dotted text (:func:`path_text`) of every position ``schema`` marks, in schema order."""
    out: list[str] = []
    for marked in marked_positions(schema):
        text = path_text(marked.steps)
        if text not in out:
            out.append(text)
    return out


def covers(outer: Sequence[Step], inner: Sequence[Step]) -> bool:
    """Whether every value ``inner`` reaches lies inside (or is) a value ``outer`` reaches."""
    if len(outer) > len(inner):
        return False
    for a, b in zip(outer, inner, strict=False):
        if a.kind == ANY_KEY and b.kind in (KEY, ANY_KEY):
            continue
        if a != b:
            return False
    return True
