"""Finding the personal-data fields a schema marks (docs/standard.md §9).

A node with ``"x-gdpr-sensitive": true``, or a non-empty category string
(``"x-gdpr-sensitive": "contact"``, as the other SDKs' schema readers accept), marks the value at
its position; ``false``, ``""`` and any other shape leave it unmarked. Positions are
written as dotted paths below ``data`` with ``[]`` for "every item of an array":
``email``, ``profile.full_name``, ``addresses[].line``. A value allowed under arbitrary
keys (``additionalProperties`` / ``patternProperties``) is written ``*``
(``labels.*``). Combinators (``allOf``/``anyOf``/``oneOf``, ``if``/``then``/``else``) and
local ``$ref``s (``#/$defs/...``, ``#/definitions/...``) are followed. A recursive
reference is not expanded inside itself (its paths would be endless), so marks below a
recursion point (``person.friend.name`` where ``friend`` is a ``person``) are not listed.
The root itself cannot be marked (the envelope frame never changes), so a mark on it is
ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

SENSITIVE_KEYWORD: Final = "x-gdpr-sensitive"
_SAME_PLACE: Final = ("allOf", "anyOf", "oneOf")
_SAME_PLACE_SINGLE: Final = ("if", "then", "else")


def _resolve(root: Mapping[str, Any], ref: str) -> Any:
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


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def is_marked(node: Mapping[str, Any]) -> bool:
    """Whether ``node`` carries the mark: ``true`` or a non-empty category string.

    A category mark must count: a producer that skipped it would publish the field in clear
    while the other SDKs' consumers expect ciphertext.
    """
    mark = node.get(SENSITIVE_KEYWORD)
    return mark is True or (isinstance(mark, str) and mark != "")


def sensitive_paths(schema: Mapping[str, Any] | bool) -> list[str]:
    """The dotted paths of every field ``schema`` marks ``x-gdpr-sensitive``, in schema order."""
    found: list[str] = []
    if not isinstance(schema, Mapping):
        return found

    def walk(node: Any, path: str, refs: frozenset[str]) -> None:
        if not isinstance(node, Mapping):
            return
        if is_marked(node) and path and path not in found:
            found.append(path)
        ref = node.get("$ref")
        if isinstance(ref, str) and ref not in refs:
            walk(_resolve(schema, ref), path, refs | {ref})
        properties = node.get("properties")
        if isinstance(properties, Mapping):
            for name, child in properties.items():
                walk(child, _join(path, str(name)), refs)
        patterns = node.get("patternProperties")
        if isinstance(patterns, Mapping):
            for child in patterns.values():
                walk(child, _join(path, "*"), refs)
        walk(node.get("additionalProperties"), _join(path, "*"), refs)
        items = node.get("items")
        if isinstance(items, list):  # Draft 7 tuple form
            for child in items:
                walk(child, f"{path}[]", refs)
        else:
            walk(items, f"{path}[]", refs)
        prefix = node.get("prefixItems")  # 2020-12 tuple form
        if isinstance(prefix, list):
            for child in prefix:
                walk(child, f"{path}[]", refs)
        walk(node.get("additionalItems"), f"{path}[]", refs)
        for key in _SAME_PLACE:
            group = node.get(key)
            if isinstance(group, list):
                for child in group:
                    walk(child, path, refs)
        for key in _SAME_PLACE_SINGLE:
            walk(node.get(key), path, refs)

    walk(schema, "", frozenset())
    return found
