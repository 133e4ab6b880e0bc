"""A payload type's JSON Schema, in the subset every babelq schema checker runs.

``registry.register_type(urn, Order)`` registers the schema of a pydantic model, a msgspec
Struct, a dataclass or a TypedDict as the URN's schema, so the worker's checks, the publish
check and the Spark pipelines' checks (:mod:`babelq.schema.subset`) hold the contract the
handler's type declares. Dataclasses and TypedDicts are read here, for the types the runtime
checks them for (:mod:`babelq.runtime.payloads`); pydantic and msgspec write their own. The
libraries write references (``$ref`` into ``$defs``) and ``anyOf`` for optional fields; those
are rewritten here into the subset: references inlined
(a type that refers to itself cannot be, and is refused), and an ``anyOf`` of alternatives that
differ only by ``type`` merged into one ``type`` list (``int | None`` -> ``["integer", "null"]``).
Anything else outside the subset is refused with the keyword and where it is.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints, is_typeddict

from babelq.errors import ConfigurationError
from babelq.schema.subset import check_schema


def json_schema_of(tp: Any) -> dict[str, Any]:
    """The JSON Schema of ``tp``'s data, rewritten into the subset (ConfigurationError if it cannot be)."""
    raw = _library_schema(tp)
    defs = dict(raw.get("$defs") or raw.get("definitions") or {})
    schema: dict[str, Any] = _inline(raw, defs, (), tp)
    schema.pop("$defs", None)
    schema.pop("definitions", None)
    check_schema(schema, by=f"babelq's schema checkers (the schema of {tp.__qualname__})")
    return schema


def _library_schema(tp: Any) -> dict[str, Any]:
    if isinstance(tp, type) and hasattr(tp, "model_json_schema"):  # pydantic v2
        return dict(tp.model_json_schema(mode="validation"))
    if isinstance(tp, type) and hasattr(tp, "__struct_fields__"):  # msgspec
        import msgspec

        return dict(msgspec.json.schema(tp))
    if (isinstance(tp, type) and dataclasses.is_dataclass(tp)) or is_typeddict(tp):
        return _annotated(tp, tp.__qualname__)
    raise ConfigurationError(
        f"{tp!r}: not a payload type (a pydantic model, a msgspec Struct, a dataclass or a TypedDict)"
    )


def _inline(node: Any, defs: Mapping[str, Any], seen: tuple[str, ...], tp: Any) -> Any:
    if isinstance(node, list):
        return [_inline(item, defs, seen, tp) for item in node]
    if not isinstance(node, Mapping):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        if name in seen or name not in defs:
            problem = "refers to itself" if name in seen else "is not in $defs"
            raise ConfigurationError(f"the schema of {tp.__qualname__}: {ref} {problem}")
        target = _inline(defs[name], defs, (*seen, name), tp)
        rest = {k: _inline(v, defs, seen, tp) for k, v in node.items() if k != "$ref"}
        return {**target, **rest}
    out = {k: _inline(v, defs, seen, tp) for k, v in node.items() if k not in ("$defs", "definitions")}
    for keyword in ("anyOf", "oneOf"):
        if keyword in out:
            merged = _merge_types(out[keyword])
            if merged is not None:
                del out[keyword]
                out = {**merged, **out}
    return out


def _merge_types(options: list[Any]) -> dict[str, Any] | None:
    """One schema for alternatives that differ only by ``type`` (the rest of one of them, at most,
    applies to its own type: ``properties`` only constrain objects); None if they differ more."""
    types: list[str] = []
    rest: dict[str, Any] = {}
    constrained: list[str] = []  #: the types of the one alternative with constraints
    for option in options:
        if not isinstance(option, Mapping) or not isinstance(option.get("type"), str | list):
            return None
        kinds = option["type"] if isinstance(option["type"], list) else [option["type"]]
        others = {k: v for k, v in option.items() if k not in ("type", "title", "description")}
        if others:
            if rest:
                return None  # two alternatives with their own constraints
            rest, constrained = others, kinds
        types += [k for k in kinds if k not in types]
    if "const" in rest:
        rest["enum"] = [rest.pop("const")]
    if "enum" in rest:  # unlike the others, enum constrains every type: let the other types' values in
        if any(t not in constrained for t in types if t != "null") or not isinstance(rest["enum"], list):
            return None
        if "null" in types and "null" not in constrained:
            rest["enum"] = [*rest["enum"], None]
    return {**rest, "type": types if len(types) > 1 else types[0]}


_SCALARS: dict[Any, str] = {
    str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"
}


def _annotated(tp: Any, where: str) -> dict[str, Any]:
    """The schema of a dataclass or TypedDict field's type (the runtime's checked types)."""
    if tp is Any or tp is object:
        return {}
    if tp is None:
        tp = type(None)
    if tp in _SCALARS:
        return {"type": _SCALARS[tp]}
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        merged = _merge_types([_annotated(arg, where) for arg in get_args(tp)])
        if merged is None:
            raise ConfigurationError(
                f"the schema of {where}: {tp!r} is a union babelq's schema subset cannot state"
            )
        return merged
    if origin is Literal:
        values = list(get_args(tp))
        kinds = sorted({_SCALARS[type(v)] for v in values if type(v) in _SCALARS})
        return {"type": kinds if len(kinds) > 1 else kinds[0], "enum": values}
    if origin is list or tp is list:
        args = get_args(tp)
        return {"type": "array", "items": _annotated(args[0], where)} if args else {"type": "array"}
    if origin is dict or tp is dict:
        args = get_args(tp)
        if args:
            return {"type": "object", "additionalProperties": _annotated(args[1], where)}
        return {"type": "object"}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = get_type_hints(tp)
        fields = [f for f in dataclasses.fields(tp) if f.init]
        required = [
            f.name
            for f in fields
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        properties = {f.name: _annotated(hints[f.name], f"{tp.__qualname__}.{f.name}") for f in fields}
        return {"type": "object", "properties": properties, "required": required}
    if is_typeddict(tp):
        hints = get_type_hints(tp)
        properties = {name: _annotated(hint, f"{tp.__qualname__}.{name}") for name, hint in hints.items()}
        required = [name for name in hints if name in getattr(tp, "__required_keys__", hints)]
        return {"type": "object", "properties": properties, "required": required}
    if isinstance(tp, type) and (hasattr(tp, "model_json_schema") or hasattr(tp, "__struct_fields__")):
        raw = _library_schema(tp)
        return dict(_inline(raw, dict(raw.get("$defs") or {}), (), tp))
    raise ConfigurationError(f"the schema of {where}: {tp!r} is not a JSON type babelq can state")
