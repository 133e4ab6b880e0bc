"""Personal-data fields for people reading messages: an inventory, an audit and masking.

The runtime encrypts what a schema marks ``x-gdpr-sensitive`` (:mod:`babelq.gdpr`); these
helpers serve the people around it, as the schema registry's own tool does:

- :func:`marked_fields`: each marked path with its category (``"x-gdpr-sensitive": "email"``),
  ``None`` for a plain ``true``;
- :func:`unmarked_personal_fields`: fields whose name looks like personal data
  (:data:`PERSONAL_NAMES`) but carry no mark, so a schema review or CI can catch a forgotten
  one; objects and arrays are not flagged themselves (their leaves are);
- :func:`mask`: a copy of some data with every marked value replaced, safe to print or log. A
  string keeps its first character followed by ``***`` (``"ann@example.org"`` -> ``"a***"``),
  so two masked values can still be told apart in a log; any other value (number, boolean,
  object, array, null) becomes ``"***"``. Masking cannot be undone: it is not encryption.

Masking follows every place a schema can describe a value (``properties``, ``items``,
``prefixItems``, ``additionalProperties``, ``patternProperties``, local ``$ref``, ``allOf``/
``anyOf``/``oneOf``, ``if``/``then``/``else``), so it hides at least what encryption would.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from babelq.schema.sensitive import SENSITIVE_KEYWORD, is_marked, resolve_ref, sensitive_paths

MASK: Final = "***"
#: property names that usually hold personal data (case-insensitive search)
PERSONAL_NAMES: Final = (
    r"e_?mail|phone|mobile|msisdn|ssn|tckn|national_?id|passport|iban|card_?number|credit_?card"
    r"|cvv|address|birth|dob|first_?name|last_?name|full_?name|surname|ip_?addr"
)
_COMBINED: Final = ("allOf", "anyOf", "oneOf", "if", "then", "else")


def _here(nodes: Iterable[Any], root: Any) -> list[Mapping[str, Any]]:
    """The schema objects that apply at one place: ``nodes`` and whatever their local ``$ref``s
    and combinators add there (each reference followed once)."""
    found: list[Mapping[str, Any]] = []
    todo = list(nodes)
    refs: set[str] = set()
    while todo:
        node = todo.pop()
        if not isinstance(node, Mapping) or any(node is seen for seen in found):
            continue
        found.append(node)
        ref = node.get("$ref")
        if isinstance(ref, str) and ref not in refs:
            refs.add(ref)
            todo.append(resolve_ref(root, ref))
        for key in _COMBINED:
            group = node.get(key)
            todo.extend(group if isinstance(group, list) else [group])
    return found


def _member(nodes: list[Mapping[str, Any]], name: str) -> list[Any]:
    """The schemas that apply to the member ``name`` of an object described by ``nodes``."""
    found: list[Any] = []
    for node in nodes:
        properties = node.get("properties")
        if isinstance(properties, Mapping) and name in properties:
            found.append(properties[name])
            continue
        matched = False
        patterns = node.get("patternProperties")
        if isinstance(patterns, Mapping):
            for pattern, sub in patterns.items():
                try:
                    hit = re.search(str(pattern), name) is not None
                except re.error:
                    hit = False
                if hit:
                    found.append(sub)
                    matched = True
        if not matched and isinstance(node.get("additionalProperties"), Mapping):
            found.append(node["additionalProperties"])
    return found


def _item(nodes: list[Mapping[str, Any]], index: int) -> list[Any]:
    found: list[Any] = []
    for node in nodes:
        prefix = node.get("prefixItems")
        items = node.get("items")
        if isinstance(prefix, list) and index < len(prefix):
            found.append(prefix[index])
        elif isinstance(items, list):  # Draft 7 tuple form
            found.append(items[index] if index < len(items) else node.get("additionalItems"))
        elif isinstance(items, Mapping):
            found.append(items)
    return found


def _hidden(value: Any) -> Any:
    if isinstance(value, str) and value:
        return value[0] + MASK
    return MASK


def _mask(value: Any, nodes: list[Any], root: Any) -> Any:
    here = _here(nodes, root)
    if any(is_marked(node) for node in here):
        return _hidden(value)
    if isinstance(value, Mapping):
        return {key: _mask(item, _member(here, str(key)), root) for key, item in value.items()}
    if isinstance(value, list):
        return [_mask(item, _item(here, index), root) for index, item in enumerate(value)]
    return value


def mask(data: Any, schema: Mapping[str, Any] | bool) -> Any:
    """A copy of ``data`` with every value ``schema`` marks replaced (module docstring); ``data``
    itself is left as it is. Values the schema does not mark are kept as they are."""
    if not isinstance(schema, Mapping) or not isinstance(data, Mapping):
        return data
    # the root is never marked (the frame stays readable), so start below it
    return {
        key: _mask(item, _member(_here([schema], schema), str(key)), schema) for key, item in data.items()
    }


def _categories(schema: Mapping[str, Any]) -> dict[str, str]:
    """Path -> category of the marks along ``properties`` and ``items``."""
    found: dict[str, str] = {}

    def walk(node: Any, path: str, depth: int) -> None:
        if depth > 64:
            return
        for here in _here([node], schema):
            mark = here.get(SENSITIVE_KEYWORD)
            if path and isinstance(mark, str) and mark:
                found.setdefault(path, mark)
            properties = here.get("properties")
            if isinstance(properties, Mapping):
                for name, sub in properties.items():
                    walk(sub, f"{path}.{name}" if path else str(name), depth + 1)
            items = here.get("items")
            for sub in items if isinstance(items, list) else [items]:
                walk(sub, f"{path}[]", depth + 1)

    walk(schema, "", 0)
    return found


def marked_fields(schema: Mapping[str, Any] | bool) -> list[tuple[str, str | None]]:
    """Every marked path (:func:`~babelq.schema.sensitive_paths`) with its category or None."""
    if not isinstance(schema, Mapping):
        return []
    categories = _categories(schema)
    return [(path, categories.get(path)) for path in sensitive_paths(schema)]


def unmarked_personal_fields(schema: Mapping[str, Any] | bool, pattern: str = PERSONAL_NAMES) -> list[str]:
    """Paths of scalar fields whose name matches ``pattern`` (a regex, searched case-insensitively)
    but which are not marked ``x-gdpr-sensitive``, in schema order."""
    if not isinstance(schema, Mapping):
        return []
    names = re.compile(pattern, re.IGNORECASE)
    found: list[str] = []

    def walk(node: Any, path: str, depth: int) -> None:
        here = _here([node], schema)
        if depth > 64 or any(is_marked(n) for n in here):
            return
        for n in here:
            properties = n.get("properties")
            if isinstance(properties, Mapping):
                for name, sub in properties.items():
                    child = f"{path}.{name}" if path else str(name)
                    subs = _here([sub], schema)
                    container = any(
                        s.get("type") in ("object", "array") or "properties" in s or "items" in s
                        for s in subs
                    )
                    marked = any(is_marked(s) for s in subs)
                    if names.search(str(name)) and not marked and not container and child not in found:
                        found.append(child)
                    walk(sub, child, depth + 1)
            items = n.get("items")
            for sub in items if isinstance(items, list) else [items]:
                if isinstance(sub, Mapping):
                    walk(sub, f"{path}[]", depth + 1)

    walk(schema, "", 0)
    return found
