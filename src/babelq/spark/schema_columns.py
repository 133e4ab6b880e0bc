"""Compiling a JSON Schema into one Spark Column: each row's first violation, or null.

The rules it follows (what the verdict is, the supported keywords, the order violations are
looked for in, the message texts) are :mod:`babelq.spark.schema_check`'s, the public face of this
module. The schema is checked against the subset first (:func:`check_schema`); the compiler then
walks it next to the Spark type of the column, folding every condition it can decide from the
type alone (a non-nullable field is never null, a long is never a string), so a schema costs the
rows only the checks its data can fail.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from babelq.errors import EnvelopeError
from babelq.schema import subset
from babelq.schema.subset import JsonSchema, count, pointer, types_of
from babelq.spark.schema_conditions import (
    Cond,
    Kind,
    and_,
    compare,
    equals,
    has_type,
    kind_of,
    not_,
    one_of,
    or_,
)
from babelq.spark.schema_regex import java_regex

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType

_PLAIN_KEY = r"^[a-zA-Z][a-zA-Z0-9_]*$"  # jsonschema's json_path: such keys are written .key
_SHOWN_CHARS = 60


def _lit(value: object) -> Column:
    from pyspark.sql import functions as sf

    return sf.lit(value)


# -- paths ---------------------------------------------------------------------------------------

#: the JSON path of the value being checked: static text, or a Column inside arrays and maps
Path = str | Any


def _path_col(path: Path) -> Column:
    return _lit(path) if isinstance(path, str) else path


def key_segment(key: str) -> str:
    """The json_path segment jsonschema writes for an object member."""
    if re.match(_PLAIN_KEY, key):
        return "." + key
    return "['" + key.replace("\\", "\\\\").replace("'", "\\'") + "']"


def _member(path: Path, key: str) -> Path:
    if isinstance(path, str):
        return path + key_segment(key)
    from pyspark.sql import functions as sf

    return sf.concat(path, _lit(key_segment(key)))


def _dynamic_member(path: Path, key: Column) -> Column:
    from pyspark.sql import functions as sf

    quoted = sf.concat(
        _lit("['"), sf.replace(sf.replace(key, _lit("\\"), _lit("\\\\")), _lit("'"), _lit("\\'")), _lit("']")
    )
    segment = sf.when(key.rlike("(?d)" + _PLAIN_KEY), sf.concat(_lit("."), key)).otherwise(quoted)
    return sf.concat(_path_col(path), segment)


def _item(path: Path, index: Column) -> Column:
    from pyspark.sql import functions as sf

    return sf.concat(_path_col(path), _lit("["), index.cast("string"), _lit("]"))


def _message(path: Path, *text: Column | str) -> Column:
    from pyspark.sql import functions as sf

    parts = [_lit(t) if isinstance(t, str) else t for t in text]
    return sf.concat(_path_col(path), _lit(": "), *parts)


def _when(cond: Cond, message: Column) -> Column | None:
    """``message`` when ``cond`` holds (``cond`` must never be SQL null), else null."""
    from pyspark.sql import functions as sf

    if cond is False:
        return None
    if cond is True:
        return message
    return sf.when(cond, message)


def _first(candidates: list[Column | None]) -> Column | None:
    from pyspark.sql import functions as sf

    found = [c for c in candidates if c is not None]
    if not found:
        return None
    return found[0] if len(found) == 1 else sf.coalesce(*found)


def _first_in_array(messages: Column) -> Column:
    """The first non-null message of an array of messages (null when there is none)."""
    from pyspark.sql import functions as sf

    return sf.get(sf.filter(messages, lambda m: m.isNotNull()), 0)


# -- rendering values in messages -------------------------------------------------------------------


def _render(col: Column, kind: Kind, present: Cond) -> Column:
    """A short human rendering of a value for messages (strings quoted and shortened)."""
    from pyspark.sql import functions as sf

    if kind == "string":
        short = sf.when(
            sf.char_length(col) > _SHOWN_CHARS, sf.concat(sf.substring(col, 1, _SHOWN_CHARS - 3), _lit("..."))
        ).otherwise(col)
        text = sf.concat(_lit("'"), short, _lit("'"))
    elif kind in ("integer", "double", "boolean"):
        text = col.cast("string")
    elif kind in ("struct", "map"):
        text = _lit("{...}")
    elif kind == "array":
        text = _lit("[...]")
    else:
        return _lit("null")
    if isinstance(present, bool):
        return text if present else _lit("null")
    return sf.when(~present, _lit("null")).otherwise(text)


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def check_schema(schema: Any, location: str = "#") -> None:
    """Raise :class:`UnsupportedSchemaError` for anything the compiler does not support (recursively):
    the subset of :mod:`babelq.schema.subset`, with patterns :func:`java_regex` can translate."""
    subset.check_schema(schema, location, by="the Spark schema check", pattern=java_regex)


# -- the compiler (the schema is known to be supported) ------------------------------------------------------


def _no_message() -> Column:
    from pyspark.sql import functions as sf

    return sf.lit(None).cast("string")


@dataclass(frozen=True)
class _Value:
    """The value being checked: its column, Spark type, JSON kind, JSON path, and whether it is
    present (not null): ``True`` when Spark knows it cannot be null, else a Column."""

    col: Column
    data_type: Any
    kind: Kind
    path: Path
    present: Cond
    omit_null: frozenset[str] = frozenset()  # struct fields that are absent (not null) when null

    @classmethod
    def of(
        cls,
        col: Column,
        data_type: DataType,
        path: Path,
        nullable: bool,
        omit_null: frozenset[str] = frozenset(),
    ) -> _Value:
        kind = kind_of(data_type, path if isinstance(path, str) else "value")
        present: Cond = False if kind == "null" else (col.isNotNull() if nullable else True)
        return cls(col, data_type, kind, path, present, omit_null)

    def message(self, *text: Column | str) -> Column:
        return _message(self.path, *text)

    def equals(self, value: Any, keyword: str, location: str) -> Cond:
        return equals(self.col, self.kind, self.present, value, keyword=keyword, location=location)

    @property
    def shown(self) -> Column:
        return _render(self.col, self.kind, self.present)


def _guard(present: Cond, found: Column | None) -> Column | None:
    """``found`` only where the enclosing value is present (a member of a null object is no member)."""
    from pyspark.sql import functions as sf

    if found is None or present is True:
        return found
    if present is False:
        return None
    return sf.when(present, found)


class _Compiler:
    def node(self, schema: JsonSchema, v: _Value, location: str) -> Column | None:
        """The first violation of ``v`` against ``schema`` (a message Column), or None if it cannot fail."""
        if schema is True:
            return None
        if schema is False:
            return v.message("False schema does not allow ", v.shown)
        assert isinstance(schema, Mapping)
        checks: list[Column | None] = [self._type(schema, v), *self._enum(schema, v, location)]
        if v.kind == "string":
            checks += self._string(schema, v)
        elif v.kind in ("integer", "double"):
            checks += self._number(schema, v)
        elif v.kind == "array":
            checks += self._array(schema, v, location)
        elif v.kind == "struct":
            checks += self._struct(schema, v, location)
        elif v.kind == "map":
            checks += self._map(schema, v, location)
        return _first(checks)

    def _type(self, schema: Mapping[str, Any], v: _Value) -> Column | None:
        names = types_of(schema, "#")
        if names is None:
            return None
        ok = or_(*[has_type(v.col, v.kind, v.present, name) for name in names])
        wanted = ", ".join(repr(name) for name in names)
        return _when(not_(ok), v.message(v.shown, f" is not of type {wanted}"))

    def _enum(self, schema: Mapping[str, Any], v: _Value, location: str) -> list[Column | None]:
        out: list[Column | None] = []
        if "const" in schema:
            ok = v.equals(schema["const"], "const", pointer(location, "const"))
            out.append(_when(not_(ok), v.message(_show(schema["const"]), " was expected")))
        if "enum" in schema:
            values = schema["enum"]
            ok = one_of(v.col, v.kind, v.present, values, location=pointer(location, "enum"))
            out.append(_when(not_(ok), v.message(v.shown, f" is not one of {_show(values)}")))
        return out

    def _string(self, schema: Mapping[str, Any], v: _Value) -> list[Column | None]:
        from pyspark.sql import functions as sf

        out: list[Column | None] = []
        low = count(schema, "minLength", "#")
        if low is not None:
            out.append(
                _when(and_(v.present, sf.char_length(v.col) < low), v.message(v.shown, " is too short"))
            )
        high = count(schema, "maxLength", "#")
        if high is not None:
            out.append(
                _when(and_(v.present, sf.char_length(v.col) > high), v.message(v.shown, " is too long"))
            )
        if "pattern" in schema:
            pattern = schema["pattern"]
            broken = and_(v.present, ~v.col.rlike(java_regex(pattern)))
            out.append(_when(broken, v.message(v.shown, f" does not match {pattern!r}")))
        return out

    def _number(self, schema: Mapping[str, Any], v: _Value) -> list[Column | None]:
        from pyspark.sql import functions as sf

        value = v.col.cast("double") if v.kind == "double" else v.col.cast("long")
        usable = and_(v.present, ~sf.isnan(value)) if v.kind == "double" else v.present
        out: list[Column | None] = []
        for keyword, op, text in _NUMBER_RULES:
            bound = schema.get(keyword)
            if bound is None or (isinstance(bound, float) and math.isnan(bound)):
                continue  # nothing compares true with NaN in Python
            broken = and_(usable, compare(value, v.kind, op, bound))
            out.append(_when(broken, v.message(v.shown, f" {text} {bound!r}")))
        return out

    def _array(self, schema: Mapping[str, Any], v: _Value, location: str) -> list[Column | None]:
        from pyspark.sql import functions as sf

        out: list[Column | None] = []
        size = sf.size(v.col)
        low = count(schema, "minItems", "#")
        if low is not None:
            text = f" should have at least {low} items"
            out.append(_when(and_(v.present, size < low), v.message(v.shown, text)))
        high = count(schema, "maxItems", "#")
        if high is not None:
            text = f" should have at most {high} items"
            out.append(_when(and_(v.present, size > high), v.message(v.shown, text)))
        items = schema.get("items", True)
        if items is False:
            out.append(_when(and_(v.present, size > 0), v.message("no items are allowed")))
        elif items is not True:
            element_type, nullable = v.data_type.elementType, v.data_type.containsNull
            where = pointer(location, "items")
            can_fail = []

            def element(x: Column, i: Column) -> Column:
                found = self.node(items, _Value.of(x, element_type, _item(v.path, i), nullable), where)
                can_fail.append(found is not None)
                return _no_message() if found is None else found

            messages = sf.transform(v.col, element)
            if any(can_fail):
                out.append(_guard(v.present, _first_in_array(messages)))
        return out

    def _struct(self, schema: Mapping[str, Any], v: _Value, location: str) -> list[Column | None]:
        fields = {f.name: f for f in v.data_type.fields}
        properties: Mapping[str, Any] = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)

        def member_present(name: str) -> Cond:
            """Whether the member is in the JSON object: a struct field always is (null is JSON
            null), except a field omitted when null."""
            if name not in fields:
                return False
            return v.col.getField(name).isNotNull() if name in v.omit_null else True

        out: list[Column | None] = []
        for name in schema.get("required", []):
            missing = and_(v.present, not_(member_present(name)))
            out.append(_when(missing, v.message(f"{name!r} is a required property")))
        extras = [name for name in fields if name not in properties]
        if extra is False and extras:
            verb = "was" if len(extras) == 1 else "were"
            listed = ", ".join(repr(e) for e in sorted(extras))
            text = f"Additional properties are not allowed ({listed} {verb} unexpected)"
            out.append(_when(and_(v.present, or_(*[member_present(e) for e in extras])), v.message(text)))
        members = [
            (name, properties[name], pointer(location, "properties", name))
            for name in properties
            if name in fields
        ]
        if isinstance(extra, Mapping):
            members += [(name, extra, pointer(location, "additionalProperties")) for name in extras]
        for name, sub, where in members:
            field = fields[name]
            omitted = name in v.omit_null  # then checked only where present, so never null there
            value = v.col.getField(name)
            member = _Value.of(value, field.dataType, _member(v.path, name), field.nullable and not omitted)
            out.append(_guard(and_(v.present, member_present(name)), self.node(sub, member, where)))
        return out

    def _map(self, schema: Mapping[str, Any], v: _Value, location: str) -> list[Column | None]:
        from pyspark.sql import functions as sf

        value_type, nullable = v.data_type.valueType, v.data_type.valueContainsNull
        properties: Mapping[str, Any] = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        names = list(properties)
        out: list[Column | None] = []
        for name in schema.get("required", []):
            missing = and_(v.present, ~sf.map_contains_key(v.col, name))
            out.append(_when(missing, v.message(f"{name!r} is a required property")))
        keys = sf.map_keys(v.col)
        extra_keys = sf.filter(keys, lambda k: ~k.isin(names)) if names else keys
        if extra is False:
            unexpected = sf.array_join(sf.array_sort(extra_keys), "', '")
            verb = sf.when(sf.size(extra_keys) == 1, _lit("' was")).otherwise(_lit("' were"))
            text = sf.concat(
                _lit("Additional properties are not allowed ('"), unexpected, verb, _lit(" unexpected)")
            )
            out.append(_when(and_(v.present, sf.size(extra_keys) > 0), v.message(text)))
        for name, sub in properties.items():
            value = sf.try_element_at(v.col, _lit(name))
            member = _Value.of(value, value_type, _member(v.path, name), nullable)
            found = self.node(sub, member, pointer(location, "properties", name))
            out.append(_guard(and_(v.present, sf.map_contains_key(v.col, name)), found))
        if isinstance(extra, Mapping):
            entries = sf.map_entries(v.col)
            if names:
                entries = sf.filter(entries, lambda e: ~e["key"].isin(names))
            can_fail = []

            def entry(e: Column) -> Column:
                member = _Value.of(e["value"], value_type, _dynamic_member(v.path, e["key"]), nullable)
                found = self.node(extra, member, pointer(location, "additionalProperties"))
                can_fail.append(found is not None)
                return _no_message() if found is None else found

            messages = sf.transform(entries, entry)
            if any(can_fail):
                out.append(_guard(v.present, _first_in_array(messages)))
        return out


_NUMBER_RULES = (
    ("minimum", "<", "is less than the minimum of"),
    ("exclusiveMinimum", "<=", "is less than or equal to the minimum of"),
    ("maximum", ">", "is greater than the maximum of"),
    ("exclusiveMaximum", ">=", "is greater than or equal to the maximum of"),
)


def first_violation(
    schema: JsonSchema,
    col: Column,
    data_type: DataType,
    *,
    nullable: bool = True,
    omit_null: Sequence[str] = (),
) -> Column:
    """A string Column: null when ``col`` (of Spark type ``data_type``) satisfies ``schema``,
    else its first violation as ``"<JSON path>: <message>"``.

    ``nullable=False`` says the column is never null (checks that only a null could fail are
    then left out, as they are for non-nullable struct fields and array elements).
    ``omit_null`` names top-level struct fields that are absent from the object when null (as
    ``babelq.spark.encode.encode(..., omit_null=...)`` writes them) rather than JSON null. Raises
    :class:`UnsupportedSchemaError` for a keyword outside the supported subset (naming the keyword
    and where it is) and :class:`~babelq.errors.EnvelopeError` for a Spark type that has no JSON form.
    """
    from pyspark.sql import functions as sf

    check_schema(schema)
    from pyspark.sql import types as stypes

    if omit_null and isinstance(data_type, stypes.StructType):
        unknown = sorted(set(omit_null) - set(data_type.fieldNames()))
        if unknown:
            raise EnvelopeError("$", f"omit_null names fields the struct does not have: {unknown}")
    root = _Value.of(col, data_type, "$", nullable, frozenset(omit_null))
    found = _Compiler().node(schema, root, "#")
    return sf.lit(None).cast("string") if found is None else found


def first_violation_of(
    df: DataFrame, column: str | Column, schema: JsonSchema, *, omit_null: Sequence[str] = ()
) -> Column:
    """:func:`first_violation` for a column of ``df`` (its Spark type and nullability come from ``df``)."""
    from pyspark.sql import functions as sf

    col = sf.col(column) if isinstance(column, str) else column
    field = df.select(col.alias("_value")).schema.fields[0]
    return first_violation(schema, col, field.dataType, nullable=field.nullable, omit_null=omit_null)
