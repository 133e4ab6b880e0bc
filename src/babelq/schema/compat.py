"""Breaking changes between two versions of a URN's data schema.

A change is breaking when data the old schema accepts can be refused by the new one: a consumer
that moved to the new schema would dead-letter what producers on the old one still send. The
standard's answer to a breaking change is a new URN (``urn:babel:orders:created.v2``), not a
changed schema. The rules are the schema registry format's own:

========================================================  ==========
change                                                    verdict
========================================================  ==========
add an optional property                                  compatible
make an optional property required, add a required one    breaking
remove a property (whatever ``additionalProperties``)     breaking
change a ``type`` (no old type left in the new ones)      breaking
``additionalProperties`` from open to ``false``           breaking
add an ``enum`` where any value was allowed               breaking
drop a value from an ``enum``                             breaking
raise ``minLength`` or ``minimum``                        breaking
widen an ``enum``, relax a bound, drop a required name    compatible
========================================================  ==========

babelq's validator checks more keywords than the registry's own subset, so it also calls these
breaking (:data:`EXTRA_RULES`): a new or different ``const`` or ``pattern``, a lower
``maxLength``/``maximum``/``maxItems``, a higher ``minItems``, a new or tighter
``exclusiveMinimum``/``exclusiveMaximum``, and an ``additionalProperties`` schema where any
extra key was allowed. A type list gaining a type (``"string"`` to ``["string", "null"]``) is a
widening; a ``type`` where there was none is breaking too, but for ``"object"`` on ``data``
itself, which the standard makes always an object. Annotations (``description``,
``x-gdpr-sensitive``...) never break anything.

The rules assume producers write the fields their schema declares: an optional property added to
a schema that allows extra keys is compatible, though an old producer could have sent that key
with another type. Properties are compared by name, array items through ``items`` (an ``items``
schema where there was none is compared with the empty schema, which allowed any item), and an
``additionalProperties`` schema against the other one's. Keywords outside that subset
(``$ref``, ``allOf``...) are not compared. Paths are written as the registry writes them:
dotted, ``[]`` for array items, ``*`` for additional properties (``customer.email``,
``lines[].qty``, ``labels.*``); a change of the whole ``data`` has no path.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

Mode = Literal["backward", "forward", "full"]
MODES: Final = ("backward", "forward", "full")

#: the keywords babelq compares beyond the registry format's own rules
EXTRA_RULES: Final = (
    "const", "pattern", "maxLength", "maximum", "maxItems", "minItems", "exclusiveMinimum",
    "exclusiveMaximum", "additionalProperties schema",
)  # fmt: skip


@dataclass(frozen=True, order=True)
class Change:
    """One breaking change: where (a registry path, ``""`` for ``data`` itself) and what."""

    path: str
    text: str

    def __str__(self) -> str:
        return f"{self.path}: {self.text}" if self.path else self.text


def _key(value: Any) -> str:
    """A value as JSON Schema compares it: ``1`` equals ``1.0``, ``true`` does not equal ``1``."""

    def norm(v: Any) -> Any:
        if isinstance(v, bool) or v is None or isinstance(v, str):
            return v
        if isinstance(v, int | float):
            return ["#n", float(v) if isinstance(v, float) and not v.is_integer() else int(v)]
        if isinstance(v, Mapping):
            return {str(k): norm(x) for k, x in v.items()}
        if isinstance(v, list):
            return [norm(x) for x in v]
        return repr(v)

    return json.dumps(norm(value), sort_keys=True, ensure_ascii=False)


def _types(schema: Mapping[str, Any]) -> set[str] | None:
    kind = schema.get("type")
    if isinstance(kind, str):
        found = {kind}
    elif isinstance(kind, list):
        found = {k for k in kind if isinstance(k, str)}
    else:
        return None
    if "number" in found:
        found.add("integer")  # an integer is a number
    return found


def _type_text(schema: Mapping[str, Any]) -> str:
    kind = schema.get("type")
    return "/".join(str(k) for k in kind) if isinstance(kind, list) else str(kind)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _raised(old: Any, new: Any) -> bool:
    """A lower bound that rejects more: new where there was none, or higher."""
    n, o = _number(new), _number(old)
    return n is not None and (o is None or n > o)


def _lowered(old: Any, new: Any) -> bool:
    """An upper bound that rejects more: new where there was none, or lower."""
    n, o = _number(new), _number(old)
    return n is not None and (o is None or n < o)


def _compare(path: str, old: Any, new: Any, found: list[Change]) -> None:
    if old is False or new is True:
        return  # nothing was accepted before, or everything is now
    if new is False:
        found.append(Change(path, "now accepts no value (false)"))
        return
    old = {} if old is True else old  # the same schema, so the keyword rules apply to it
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return

    def add(text: str) -> None:
        found.append(Change(path, text))

    old_types, new_types = _types(old), _types(new)
    if new_types is not None and old_types is None:
        if path or new_types != {"object"}:  # data itself is always an object (the standard)
            add(f"type {_type_text(new)} added where any type was allowed")
    elif new_types is not None and old_types is not None and not old_types <= new_types:
        change = "changed" if not old_types & new_types else "narrowed"
        add(f"type {change} {_type_text(old)} -> {_type_text(new)}")
        if change == "changed":
            return  # a retype makes everything below it moot

    if "enum" in new and isinstance(new["enum"], list):
        if "enum" not in old:
            add("enum added where any value was allowed")
        elif isinstance(old["enum"], list):
            allowed = {_key(v) for v in new["enum"]}
            for value in old["enum"]:
                if _key(value) not in allowed:
                    add(f"enum value {json.dumps(value, ensure_ascii=False)} removed")
    if "const" in new and ("const" not in old or _key(old["const"]) != _key(new["const"])):
        add("const added" if "const" not in old else "const changed")
    if "pattern" in new and old.get("pattern") != new["pattern"]:
        add("pattern added" if "pattern" not in old else "pattern changed")
    for keyword in ("minLength", "minimum", "minItems", "exclusiveMinimum"):
        if keyword in new and _raised(old.get(keyword), new[keyword]):
            add(f"{keyword} tightened" if keyword in old else f"{keyword} added")
    for keyword in ("maxLength", "maximum", "maxItems", "exclusiveMaximum"):
        if keyword in new and _lowered(old.get(keyword), new[keyword]):
            add(f"{keyword} tightened" if keyword in old else f"{keyword} added")

    old_required = _list(old.get("required"))
    new_required = _list(new.get("required"))
    for name in new_required:
        if name not in old_required:
            found.append(Change(path, f"property {json.dumps(name, ensure_ascii=False)} is now required"))

    old_extra, new_extra = old.get("additionalProperties", True), new.get("additionalProperties", True)
    if old_extra is not False and new_extra is False:
        add("additionalProperties tightened to false")
    elif old_extra is True and isinstance(new_extra, Mapping):
        add("additionalProperties constrained where any extra property was allowed")
    elif isinstance(old_extra, Mapping) and isinstance(new_extra, Mapping):
        _compare(_join(path, "*"), old_extra, new_extra, found)

    old_properties = _mapping(old.get("properties"))
    new_properties = _mapping(new.get("properties"))
    for name, sub in old_properties.items():
        if name not in new_properties:
            # breaking even where extra keys are allowed: the field's type is no longer governed
            found.append(Change(_join(path, str(name)), "property removed"))
        else:
            _compare(_join(path, str(name)), sub, new_properties[name], found)

    old_items, new_items = old.get("items", True), new.get("items", True)
    if not isinstance(old_items, list) and not isinstance(new_items, list):
        _compare(f"{path}[]", old_items, new_items, found)  # no old items schema: any item was allowed


def breaking_changes(
    old: Mapping[str, Any] | bool, new: Mapping[str, Any] | bool, *, mode: Mode = "backward"
) -> list[Change]:
    """The breaking changes from ``old`` to ``new``, sorted by path; ``[]`` when compatible.

    ``mode``: ``backward`` (the registry's rule, the default) asks whether a consumer on ``new``
    accepts what a producer on ``old`` sends; ``forward`` whether a consumer still on ``old``
    accepts what a producer on ``new`` sends; ``full`` both.
    """
    if mode not in MODES:
        from babelq.errors import ConfigurationError

        raise ConfigurationError(f"mode: must be one of {', '.join(MODES)}, got {mode!r}")
    found: list[Change] = []
    if mode in ("backward", "full"):
        _compare("", old, new, found)
    if mode in ("forward", "full"):
        _compare("", new, old, found)
    return sorted(set(found))
