"""The subset of JSON Schema that babelq compiles itself, and how its keyword values are read.

Two compilers turn a schema into code instead of handing it to ``jsonschema``: the Spark one
(:mod:`babelq.spark.schema_check`, a first-violation Column run on the JVM) and the quick
accept-only Python check (:mod:`babelq.schema.quick`). Both take exactly this subset, so a schema
one of them compiles the other compiles too, and both refuse anything else up front with
:class:`UnsupportedSchemaError`: a compiler that silently skipped a keyword would accept values
the schema refuses.

The subset (drafts 6, 7, 2019-09 and 2020-12, which agree on all of it): ``type``, ``enum``,
``const``, ``minLength``, ``maxLength``, ``pattern``, ``minimum``, ``maximum``,
``exclusiveMinimum``, ``exclusiveMaximum`` (numeric form), ``items`` (one schema or a boolean),
``minItems``, ``maxItems``, ``required``, ``properties``, ``additionalProperties`` (a boolean or a
schema), boolean schemas, and the annotations jsonschema ignores (``$schema``, ``$id``,
``$comment``, ``$defs``/``definitions``, ``title``, ``description``, ``default``, ``examples``,
``deprecated``, ``readOnly``, ``writeOnly``, any ``x-...`` key).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Mapping
from typing import Any, Final

from babelq.errors import UnsupportedSchemaError as UnsupportedSchemaError

#: a JSON Schema: an object (mapping) or a boolean schema
JsonSchema = Mapping[str, Any] | bool

DRAFTS: Final = frozenset(
    {
        "https://json-schema.org/draft/2020-12/schema",
        "https://json-schema.org/draft/2019-09/schema",
        "http://json-schema.org/draft-07/schema",
        "http://json-schema.org/draft-06/schema",
    }
)
ANNOTATIONS: Final = frozenset(
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
KEYWORDS: Final = frozenset(
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
TYPES: Final = ("null", "boolean", "object", "array", "number", "integer", "string")


def pointer(location: str, *segments: str | int) -> str:
    """``location`` extended by ``segments``, escaped as a JSON pointer (``~0``, ``~1``)."""
    out = location
    for seg in segments:
        out += "/" + str(seg).replace("~", "~0").replace("/", "~1")
    return out


def is_number(value: Any) -> bool:
    """A JSON number as Python holds it (never a bool)."""
    return type(value) in (int, float)


def count(schema: Mapping[str, Any], keyword: str, location: str) -> int | None:
    """The value of a count keyword (``minLength``, ``maxItems``...), None when absent."""
    value = schema.get(keyword)
    if value is None:
        return None
    if type(value) is float and value.is_integer():
        value = int(value)
    if type(value) is not int or value < 0:
        raise UnsupportedSchemaError(keyword, location, f"must be a non-negative integer, got {value!r}")
    return value


def types_of(schema: Mapping[str, Any], location: str) -> list[str] | None:
    """The names ``type`` allows, as a list (None when the keyword is absent)."""
    raw = schema.get("type")
    if raw is None:
        return None
    names = [raw] if isinstance(raw, str) else raw
    if not isinstance(names, list) or not names or any(n not in TYPES for n in names):
        raise UnsupportedSchemaError(
            "type", location, f"must be one of {list(TYPES)} or a non-empty list of them, got {raw!r}"
        )
    return list(names)


def python_regex(pattern: str, location: str = "#/pattern") -> re.Pattern[str]:
    """``pattern`` compiled by Python's ``re`` (what jsonschema runs); refused when it does not compile."""
    try:
        with warnings.catch_warnings():  # "possible nested set": [ is a literal there
            warnings.simplefilter("ignore", FutureWarning)
            return re.compile(pattern)
    except re.error as exc:
        raise UnsupportedSchemaError(
            "pattern", location, f"{pattern!r} is not a valid regex: {exc}"
        ) from None


def check_schema(
    schema: Any,
    location: str = "#",
    *,
    by: str = "babelq's schema compilers",
    pattern: Callable[[str, str], object] = python_regex,
) -> None:
    """Raise :class:`UnsupportedSchemaError` for anything outside the subset (recursively).

    ``by`` names the compiler in the error (``not supported by the Spark schema check``);
    ``pattern(regex, location)`` raises for a ``pattern`` that compiler cannot run (the Spark one
    refuses more than Python's ``re`` does).
    """
    if isinstance(schema, bool):
        return
    if not isinstance(schema, Mapping):
        raise UnsupportedSchemaError(
            "(schema)", location, f"a schema must be an object or a boolean, got {schema!r}"
        )
    for keyword in schema:
        if not (keyword in KEYWORDS or keyword in ANNOTATIONS or keyword.startswith("x-")):
            raise UnsupportedSchemaError(keyword, pointer(location, keyword), f"not supported by {by}")
    draft = schema.get("$schema")
    if draft is not None and str(draft).rstrip("#") not in DRAFTS:
        raise UnsupportedSchemaError(
            "$schema",
            pointer(location, "$schema"),
            f"only drafts 6, 7, 2019-09 and 2020-12 are supported, got {draft!r}",
        )
    types_of(schema, pointer(location, "type"))
    if "enum" in schema and not isinstance(schema["enum"], list):
        raise UnsupportedSchemaError(
            "enum", pointer(location, "enum"), f"must be a list, got {schema['enum']!r}"
        )
    for keyword in ("minLength", "maxLength", "minItems", "maxItems"):
        count(schema, keyword, pointer(location, keyword))
    for keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if keyword in schema and not is_number(schema[keyword]):
            raise UnsupportedSchemaError(
                keyword, pointer(location, keyword), f"must be a number, got {schema[keyword]!r}"
            )
    if "pattern" in schema:
        where = pointer(location, "pattern")
        if not isinstance(schema["pattern"], str):
            raise UnsupportedSchemaError("pattern", where, f"must be a string, got {schema['pattern']!r}")
        pattern(schema["pattern"], where)
    if "items" in schema:
        if isinstance(schema["items"], list):
            raise UnsupportedSchemaError(
                "items", pointer(location, "items"), "the array (tuple) form is not supported"
            )
        check_schema(schema["items"], pointer(location, "items"), by=by, pattern=pattern)
    required = schema.get("required", [])
    if not isinstance(required, list) or any(not isinstance(r, str) for r in required):
        raise UnsupportedSchemaError(
            "required", pointer(location, "required"), f"must be a list of strings, got {required!r}"
        )
    properties = schema.get("properties", {})
    if not isinstance(properties, Mapping):
        raise UnsupportedSchemaError("properties", pointer(location, "properties"), "must be an object")
    for name, sub in properties.items():
        check_schema(sub, pointer(location, "properties", name), by=by, pattern=pattern)
    if "additionalProperties" in schema:
        check_schema(schema["additionalProperties"], pointer(location, "additionalProperties"), by=by,
                     pattern=pattern)
