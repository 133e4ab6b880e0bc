"""JSON Schema checks as Spark SQL expressions: each row's first violation, computed on the JVM.

:func:`first_violation` compiles a JSON Schema against the Spark type of a column into one
Column that is null when the value is valid and otherwise holds the first violation as
``"<JSON path>: <message>"`` (``$.amount_cents: 0 is less than the minimum of 1``; the path is
written as jsonschema's ``ValidationError.json_path``). The verdict (valid or not) is the one
``jsonschema`` gives for the Python value PySpark hands back for the same cell, which is the
JSON object :mod:`babelq.spark.encode` writes: a struct field is always present, a null field
is JSON ``null``, a map is an object whose keys are its entries, a float is widened to double.

Supported keywords (drafts 6, 7, 2019-09 and 2020-12, which agree on all of them):

* any value: ``type`` (one or a list), ``enum`` and ``const`` (scalar values; object or array
  values only against scalar columns, where they never match);
* strings: ``minLength``, ``maxLength`` (code points, as Python's ``len``), ``pattern`` (see below);
* numbers: ``minimum``, ``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum`` (numeric
  form), compared exactly as Python compares ints and floats (no rounding of 2**53+1);
* arrays: ``items`` (one schema or a boolean), ``minItems``, ``maxItems``;
* objects: ``required``, ``properties``, ``additionalProperties`` (a boolean or a schema),
  nested to any depth, for struct columns and ``map<string, _>`` columns;
* boolean schemas (``true``/``false``);
* annotations, ignored as jsonschema ignores them: ``$schema`` (one of the drafts above),
  ``$id``, ``$comment``, ``$defs``/``definitions``, ``title``, ``description``, ``default``,
  ``examples``, ``deprecated``, ``readOnly``, ``writeOnly`` and any ``x-...`` key.

Any other keyword (``$ref``, ``allOf``, ``format``, ``multipleOf``, ``prefixItems``,
``patternProperties``...) raises :class:`UnsupportedSchemaError` naming the keyword and its
location in the schema (``#/properties/amount/multipleOf``): a check that silently skipped a
keyword would accept rows the schema refuses.

``pattern`` follows Python's ``re.search`` (what jsonschema runs), translated to a Java regex
run by ``rlike`` (also a search): ``$`` matches at the end or before a final newline and ``.``
matches anything but a newline (Java's ``UNIX_LINES``); ``\\d`` is a Unicode decimal digit
(``\\p{Nd}``); ``[`` and ``&`` inside a class and ``{`` that does not start a quantifier are
literals, as in Python. Shorthands whose Unicode meaning differs between the two engines
(``\\w \\s \\b`` and their negations), backreferences and inline flags are refused.

Violations are looked for in a fixed order, and the first found is reported: ``type``,
``const``, ``enum``, string keywords, number keywords, ``minItems``, ``maxItems``, then
``items`` element by element; ``required`` in its order, ``additionalProperties: false``, then
``properties`` in schema order, then ``additionalProperties`` schemas on the extra members.
"""

from __future__ import annotations

import json
import math
import re
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from babelq.errors import ConfigurationError, EnvelopeError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType

#: a JSON Schema: an object (mapping) or a boolean schema
JsonSchema = Mapping[str, Any] | bool

_DRAFTS = frozenset(
    {
        "https://json-schema.org/draft/2020-12/schema",
        "https://json-schema.org/draft/2019-09/schema",
        "http://json-schema.org/draft-07/schema",
        "http://json-schema.org/draft-06/schema",
    }
)
_ANNOTATIONS = frozenset(
    {
        "$schema",
        "$id",
        "$comment",
        "$defs",
        "definitions",
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
    }
)
_KEYWORDS = frozenset(
    {
        "type",
        "enum",
        "const",
        "minLength",
        "maxLength",
        "pattern",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "items",
        "minItems",
        "maxItems",
        "required",
        "properties",
        "additionalProperties",
    }
)
_TYPES = ("null", "boolean", "object", "array", "number", "integer", "string")
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_PLAIN_KEY = r"^[a-zA-Z][a-zA-Z0-9_]*$"  # jsonschema's json_path: such keys are written .key
_SHOWN_CHARS = 60

#: the JSON kind of a Spark column: string, integer, double, boolean, struct, map, array, null
Kind = str


class UnsupportedSchemaError(ConfigurationError):
    """A schema uses a keyword (or a keyword value) the Spark compiler does not support.

    ``keyword`` is the keyword, ``location`` its JSON pointer in the schema (``#/properties/a``).
    """

    def __init__(self, keyword: str, location: str, problem: str) -> None:
        self.keyword = keyword
        self.location = location
        super().__init__(f"JSON Schema keyword {keyword!r} at {location}: {problem}")


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


# -- Spark types -----------------------------------------------------------------------------------


def kind_of(data_type: DataType, where: str = "value") -> Kind:
    """The JSON kind of a Spark type; raises for types without a JSON form (as ``encode`` does)."""
    from pyspark.sql import types as stypes

    if isinstance(data_type, stypes.StringType | stypes.VarcharType | stypes.CharType):
        return "string"
    if isinstance(data_type, stypes.ByteType | stypes.ShortType | stypes.IntegerType | stypes.LongType):
        return "integer"
    if isinstance(data_type, stypes.FloatType | stypes.DoubleType):
        return "double"
    if isinstance(data_type, stypes.BooleanType):
        return "boolean"
    if isinstance(data_type, stypes.StructType):
        return "struct"
    if isinstance(data_type, stypes.MapType):
        if not isinstance(data_type.keyType, stypes.StringType):
            raise EnvelopeError(where, f"map keys must be strings, got {data_type.keyType.simpleString()}")
        return "map"
    if isinstance(data_type, stypes.ArrayType):
        return "array"
    if isinstance(data_type, stypes.NullType):
        return "null"
    raise EnvelopeError(where, f"Spark type {data_type.simpleString()} has no JSON form")


# -- static folding of boolean columns ---------------------------------------------------------------

#: a condition known when the expression is built (a bool) or only per row (a Column)
Cond = bool | Any


def _or(*conds: Cond) -> Cond:
    out: Cond = False
    for c in conds:
        if c is True:
            return True
        if c is False:
            continue
        out = c if out is False else out | c
    return out


def _and(*conds: Cond) -> Cond:
    out: Cond = True
    for c in conds:
        if c is False:
            return False
        if c is True:
            continue
        out = c if out is True else out & c
    return out


def _not(cond: Cond) -> Cond:
    return (not cond) if isinstance(cond, bool) else ~cond


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


# -- checking keyword values ------------------------------------------------------------------------


def _pointer(location: str, *segments: str | int) -> str:
    out = location
    for seg in segments:
        out += "/" + str(seg).replace("~", "~0").replace("/", "~1")
    return out


def _is_number(value: Any) -> bool:
    return type(value) in (int, float)


def _count(schema: Mapping[str, Any], keyword: str, location: str) -> int | None:
    value = schema.get(keyword)
    if value is None:
        return None
    if type(value) is float and value.is_integer():
        value = int(value)
    if type(value) is not int or value < 0:
        raise UnsupportedSchemaError(keyword, location, f"must be a non-negative integer, got {value!r}")
    return value


def _types_of(schema: Mapping[str, Any], location: str) -> list[str] | None:
    raw = schema.get("type")
    if raw is None:
        return None
    names = [raw] if isinstance(raw, str) else raw
    if not isinstance(names, list) or not names or any(n not in _TYPES for n in names):
        raise UnsupportedSchemaError(
            "type", location, f"must be one of {list(_TYPES)} or a non-empty list of them, got {raw!r}"
        )
    return list(names)


# -- exact comparisons ------------------------------------------------------------------------------

_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _compare_long(col: Column, op: str, bound: int) -> Cond:
    """``col op bound`` for a long column and any Python int (static when out of range)."""
    if bound > _LONG_MAX:
        return op in ("<", "<=")
    if bound < _LONG_MIN:
        return op in (">", ">=")
    ops: dict[str, Callable[[Column, int], Column]] = {
        "<": lambda c, b: c < b,
        "<=": lambda c, b: c <= b,
        ">": lambda c, b: c > b,
        ">=": lambda c, b: c >= b,
    }
    return ops[op](col, bound)


def _compare_integer(col: Column, op: str, bound: int | float) -> Cond:
    """``value op bound`` exactly, for an integer value."""
    if isinstance(bound, int):
        return _compare_long(col, op, bound)
    if math.isinf(bound):
        return (op in ("<", "<=")) == (bound > 0)
    # for integer x: x < b <=> x < ceil(b); x <= b <=> x <= floor(b); likewise for > and >=
    rounded = math.ceil(bound) if op in ("<", ">=") else math.floor(bound)
    return _compare_long(col, op, rounded)


def _compare_double(col: Column, op: str, bound: int | float) -> Cond:
    """``value op bound`` exactly (as Python compares a float with an int), for a non-NaN double."""
    from pyspark.sql import functions as sf

    def at(b: float) -> Column:
        ops: dict[str, Callable[[Column, Column], Column]] = {
            "<": lambda c, x: c < x,
            "<=": lambda c, x: c <= x,
            ">": lambda c, x: c > x,
            ">=": lambda c, x: c >= x,
        }
        return ops[op](col, sf.lit(b).cast("double"))

    if isinstance(bound, float):
        return at(bound)
    if abs(bound) > sys.float_info.max:  # beyond every finite double: the answer does not depend on the row
        lo, hi = (sys.float_info.max, math.inf) if bound > 0 else (-math.inf, -sys.float_info.max)
    else:
        nearest = float(bound)
        if nearest == bound:
            return at(nearest)
        # bound lies strictly between two adjacent doubles lo < bound < hi; no double equals it
        if nearest < bound:
            lo, hi = nearest, math.nextafter(nearest, math.inf)
        else:
            lo, hi = math.nextafter(nearest, -math.inf), nearest
    if op in ("<", "<="):
        return False if math.isinf(lo) else col <= sf.lit(lo).cast("double")
    return False if math.isinf(hi) else col >= sf.lit(hi).cast("double")


def _compare(col: Column, kind: Kind, op: str, bound: int | float) -> Cond:
    return _compare_integer(col, op, bound) if kind == "integer" else _compare_double(col, op, bound)


# -- equality (enum, const) ---------------------------------------------------------------------------


def _equals(v: _Value, value: Any, keyword: str, location: str) -> Cond:
    """Whether the value equals ``value`` as jsonschema's ``equal`` decides (never SQL null)."""
    from pyspark.sql import functions as sf

    col, kind, present = v.col, v.kind, v.present
    if value is None:
        return _not(present)
    if isinstance(value, list | dict):
        if kind in ("struct", "map", "array"):
            raise UnsupportedSchemaError(
                keyword,
                location,
                "object or array values are not supported against an object or array column",
            )
        return False
    if isinstance(value, bool):
        return _and(present, col == value) if kind == "boolean" else False
    if isinstance(value, str):
        return _and(present, col == value) if kind == "string" else False
    if isinstance(value, int):
        if kind == "integer":
            return _and(present, _compare_long(col, "<=", value), _compare_long(col, ">=", value))
        if kind == "double":
            return _and(present, _compare_double(col, "<=", value), _compare_double(col, ">=", value))
        return False
    if isinstance(value, float):
        if math.isnan(value):
            return False
        if kind == "double":
            return _and(present, col == sf.lit(value).cast("double"))
        if kind == "integer" and value.is_integer():
            whole = int(value)
            return _and(present, _compare_long(col, "<=", whole), _compare_long(col, ">=", whole))
        return False
    raise UnsupportedSchemaError(keyword, location, f"{value!r} is not a JSON value")


# -- the type keyword -------------------------------------------------------------------------------


def _has_type(col: Column, kind: Kind, present: Cond, name: str) -> Cond:
    from pyspark.sql import functions as sf

    if name == "null":
        return _not(present)
    if kind == "null":
        return False
    if name == "string":
        return present if kind == "string" else False
    if name == "boolean":
        return present if kind == "boolean" else False
    if name == "number":
        return present if kind in ("integer", "double") else False
    if name == "integer":
        if kind == "integer":
            return present
        if kind == "double":  # jsonschema: a float with an integral value is an integer (1.0)
            return _and(present, sf.coalesce(col % sf.lit(1.0) == sf.lit(0.0), sf.lit(False)))
        return False
    if name == "object":
        return present if kind in ("struct", "map") else False
    return present if kind == "array" else False


# -- patterns ----------------------------------------------------------------------------------------

_QUANTIFIER = re.compile(r"\{(\d*)(?:(,)(\d*))?\}")
_LOOK = ("(?:", "(?=", "(?!", "(?<=", "(?<!", "(?>")


def java_regex(pattern: str, location: str = "#/pattern") -> str:
    """``pattern`` (Python ``re`` syntax, as jsonschema runs it) as an equivalent Java regex."""
    try:
        with warnings.catch_warnings():  # "possible nested set": [ is a literal in Java too
            warnings.simplefilter("ignore", FutureWarning)
            re.compile(pattern)
    except re.error as exc:
        raise UnsupportedSchemaError(
            "pattern", location, f"{pattern!r} is not a valid regex: {exc}"
        ) from None

    def refuse(what: str) -> UnsupportedSchemaError:
        return UnsupportedSchemaError("pattern", location, f"{what} in {pattern!r} is not supported")

    out = ["(?d)"]
    i, n = 0, len(pattern)
    in_class = class_start = False
    while i < n:
        c = pattern[i]
        if c == "\\":
            e = pattern[i + 1]
            step = 2
            if e == "d":
                out.append(r"\p{Nd}")
            elif e == "D":
                out.append(r"\P{Nd}")
            elif e in "wWsSbB":
                raise refuse(f"\\{e} (its Unicode meaning differs between Python and Java)")
            elif e == "A":
                out.append(r"\A")
            elif e == "Z":
                out.append(r"\z")
            elif e in "ntrfa":
                out.append("\\" + e)
            elif e == "v":
                out.append(r"\x0B")
            elif e in "xuU":
                width = {"x": 2, "u": 4, "U": 8}[e]
                out.append("\\x{" + pattern[i + 2 : i + 2 + width] + "}")
                step = 2 + width
            elif e.isdigit():
                raise refuse(f"\\{e} (a backreference or octal escape)")
            elif e.isalnum():
                raise refuse(f"\\{e}")
            else:
                out.append("\\" + e)
            i += step
            class_start = False
            continue
        if in_class:
            if c == "]" and not class_start:
                in_class = False
                out.append("]")
            elif c in "[]&":
                out.append("\\" + c)
            else:
                out.append(c)
            class_start = False
            i += 1
            continue
        if c == "[":
            in_class = class_start = True
            if pattern.startswith("^", i + 1):
                out.append("[^")
                i += 2
            else:
                out.append("[")
                i += 1
            continue
        if c == "{":
            m = _QUANTIFIER.match(pattern, i)
            if m and (m.group(1) or m.group(2)):
                low, comma, high = m.group(1) or "0", m.group(2) or "", m.group(3) or ""
                out.append("{" + low + comma + high + "}")
                i = m.end()
            else:
                out.append(r"\{")
                i += 1
            continue
        if c == "}":
            out.append(r"\}")
            i += 1
            continue
        if c == "(" and pattern.startswith("?", i + 1):
            if pattern.startswith("(?P<", i):
                close = pattern.index(">", i)
                out.append("(")
                i = close + 1
                continue
            look = next((p for p in _LOOK if pattern.startswith(p, i)), None)
            if look is None:
                raise refuse(f"the group {pattern[i : i + 4]!r}... (inline flags, comments, backreferences)")
            out.append(look)
            i += len(look)
            continue
        out.append(c)
        i += 1
    return "".join(out)


# -- checking the schema before compiling it ---------------------------------------------------------------


def check_schema(schema: Any, location: str = "#") -> None:
    """Raise :class:`UnsupportedSchemaError` for anything the compiler does not support (recursively)."""
    if isinstance(schema, bool):
        return
    if not isinstance(schema, Mapping):
        raise UnsupportedSchemaError(
            "(schema)", location, f"a schema must be an object or a boolean, got {schema!r}"
        )
    for keyword in schema:
        if not (keyword in _KEYWORDS or keyword in _ANNOTATIONS or keyword.startswith("x-")):
            raise UnsupportedSchemaError(
                keyword, _pointer(location, keyword), "not supported by the Spark schema check"
            )
    draft = schema.get("$schema")
    if draft is not None and str(draft).rstrip("#") not in _DRAFTS:
        raise UnsupportedSchemaError(
            "$schema",
            _pointer(location, "$schema"),
            f"only drafts 6, 7, 2019-09 and 2020-12 are supported, got {draft!r}",
        )
    _types_of(schema, _pointer(location, "type"))
    if "enum" in schema and not isinstance(schema["enum"], list):
        raise UnsupportedSchemaError(
            "enum", _pointer(location, "enum"), f"must be a list, got {schema['enum']!r}"
        )
    for keyword in ("minLength", "maxLength", "minItems", "maxItems"):
        _count(schema, keyword, _pointer(location, keyword))
    for keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if keyword in schema and not _is_number(schema[keyword]):
            raise UnsupportedSchemaError(
                keyword, _pointer(location, keyword), f"must be a number, got {schema[keyword]!r}"
            )
    if "pattern" in schema:
        where = _pointer(location, "pattern")
        if not isinstance(schema["pattern"], str):
            raise UnsupportedSchemaError("pattern", where, f"must be a string, got {schema['pattern']!r}")
        java_regex(schema["pattern"], where)
    if "items" in schema:
        if isinstance(schema["items"], list):
            raise UnsupportedSchemaError(
                "items", _pointer(location, "items"), "the array (tuple) form is not supported"
            )
        check_schema(schema["items"], _pointer(location, "items"))
    required = schema.get("required", [])
    if not isinstance(required, list) or any(not isinstance(r, str) for r in required):
        raise UnsupportedSchemaError(
            "required", _pointer(location, "required"), f"must be a list of strings, got {required!r}"
        )
    properties = schema.get("properties", {})
    if not isinstance(properties, Mapping):
        raise UnsupportedSchemaError("properties", _pointer(location, "properties"), "must be an object")
    for name, sub in properties.items():
        check_schema(sub, _pointer(location, "properties", name))
    if "additionalProperties" in schema:
        check_schema(schema["additionalProperties"], _pointer(location, "additionalProperties"))


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
        names = _types_of(schema, "#")
        if names is None:
            return None
        ok = _or(*[_has_type(v.col, v.kind, v.present, name) for name in names])
        wanted = ", ".join(repr(name) for name in names)
        return _when(_not(ok), v.message(v.shown, f" is not of type {wanted}"))

    def _enum(self, schema: Mapping[str, Any], v: _Value, location: str) -> list[Column | None]:
        out: list[Column | None] = []
        if "const" in schema:
            ok = _equals(v, schema["const"], "const", _pointer(location, "const"))
            out.append(_when(_not(ok), v.message(_show(schema["const"]), " was expected")))
        if "enum" in schema:
            values = schema["enum"]
            ok = _or(*[_equals(v, value, "enum", _pointer(location, "enum")) for value in values])
            out.append(_when(_not(ok), v.message(v.shown, f" is not one of {_show(values)}")))
        return out

    def _string(self, schema: Mapping[str, Any], v: _Value) -> list[Column | None]:
        from pyspark.sql import functions as sf

        out: list[Column | None] = []
        low = _count(schema, "minLength", "#")
        if low is not None:
            out.append(
                _when(_and(v.present, sf.char_length(v.col) < low), v.message(v.shown, " is too short"))
            )
        high = _count(schema, "maxLength", "#")
        if high is not None:
            out.append(
                _when(_and(v.present, sf.char_length(v.col) > high), v.message(v.shown, " is too long"))
            )
        if "pattern" in schema:
            pattern = schema["pattern"]
            broken = _and(v.present, ~v.col.rlike(java_regex(pattern)))
            out.append(_when(broken, v.message(v.shown, f" does not match {pattern!r}")))
        return out

    def _number(self, schema: Mapping[str, Any], v: _Value) -> list[Column | None]:
        from pyspark.sql import functions as sf

        value = v.col.cast("double") if v.kind == "double" else v.col.cast("long")
        usable = _and(v.present, ~sf.isnan(value)) if v.kind == "double" else v.present
        out: list[Column | None] = []
        for keyword, op, text in _NUMBER_RULES:
            bound = schema.get(keyword)
            if bound is None or (isinstance(bound, float) and math.isnan(bound)):
                continue  # nothing compares true with NaN in Python
            broken = _and(usable, _compare(value, v.kind, op, bound))
            out.append(_when(broken, v.message(v.shown, f" {text} {bound!r}")))
        return out

    def _array(self, schema: Mapping[str, Any], v: _Value, location: str) -> list[Column | None]:
        from pyspark.sql import functions as sf

        out: list[Column | None] = []
        size = sf.size(v.col)
        low = _count(schema, "minItems", "#")
        if low is not None:
            text = f" should have at least {low} items"
            out.append(_when(_and(v.present, size < low), v.message(v.shown, text)))
        high = _count(schema, "maxItems", "#")
        if high is not None:
            text = f" should have at most {high} items"
            out.append(_when(_and(v.present, size > high), v.message(v.shown, text)))
        items = schema.get("items", True)
        if items is False:
            out.append(_when(_and(v.present, size > 0), v.message("no items are allowed")))
        elif items is not True:
            element_type, nullable = v.data_type.elementType, v.data_type.containsNull
            where = _pointer(location, "items")
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
            missing = _and(v.present, _not(member_present(name)))
            out.append(_when(missing, v.message(f"{name!r} is a required property")))
        extras = [name for name in fields if name not in properties]
        if extra is False and extras:
            verb = "was" if len(extras) == 1 else "were"
            listed = ", ".join(repr(e) for e in sorted(extras))
            text = f"Additional properties are not allowed ({listed} {verb} unexpected)"
            out.append(_when(_and(v.present, _or(*[member_present(e) for e in extras])), v.message(text)))
        members = [
            (name, properties[name], _pointer(location, "properties", name))
            for name in properties
            if name in fields
        ]
        if isinstance(extra, Mapping):
            members += [(name, extra, _pointer(location, "additionalProperties")) for name in extras]
        for name, sub, where in members:
            field = fields[name]
            omitted = name in v.omit_null  # then checked only where present, so never null there
            value = v.col.getField(name)
            member = _Value.of(value, field.dataType, _member(v.path, name), field.nullable and not omitted)
            out.append(_guard(_and(v.present, member_present(name)), self.node(sub, member, where)))
        return out

    def _map(self, schema: Mapping[str, Any], v: _Value, location: str) -> list[Column | None]:
        from pyspark.sql import functions as sf

        value_type, nullable = v.data_type.valueType, v.data_type.valueContainsNull
        properties: Mapping[str, Any] = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        names = list(properties)
        out: list[Column | None] = []
        for name in schema.get("required", []):
            missing = _and(v.present, ~sf.map_contains_key(v.col, name))
            out.append(_when(missing, v.message(f"{name!r} is a required property")))
        keys = sf.map_keys(v.col)
        extra_keys = sf.filter(keys, lambda k: ~k.isin(names)) if names else keys
        if extra is False:
            unexpected = sf.array_join(sf.array_sort(extra_keys), "', '")
            verb = sf.when(sf.size(extra_keys) == 1, _lit("' was")).otherwise(_lit("' were"))
            text = sf.concat(
                _lit("Additional properties are not allowed ('"), unexpected, verb, _lit(" unexpected)")
            )
            out.append(_when(_and(v.present, sf.size(extra_keys) > 0), v.message(text)))
        for name, sub in properties.items():
            value = sf.try_element_at(v.col, _lit(name))
            member = _Value.of(value, value_type, _member(v.path, name), nullable)
            found = self.node(sub, member, _pointer(location, "properties", name))
            out.append(_guard(_and(v.present, sf.map_contains_key(v.col, name)), found))
        if isinstance(extra, Mapping):
            entries = sf.map_entries(v.col)
            if names:
                entries = sf.filter(entries, lambda e: ~e["key"].isin(names))
            can_fail = []

            def entry(e: Column) -> Column:
                member = _Value.of(e["value"], value_type, _dynamic_member(v.path, e["key"]), nullable)
                found = self.node(extra, member, _pointer(location, "additionalProperties"))
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
