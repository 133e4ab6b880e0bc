"""The tests of the Spark schema check as Spark conditions, exactly as Python decides them.

A value's JSON kind comes from its Spark type (:func:`kind_of`); a condition is a Python bool
when the type alone decides it (a long column never has type ``string``) and a boolean Column
otherwise, never SQL null, so the compiler (:mod:`babelq.spark.schema_columns`) can leave out
every check a column cannot fail. Numbers compare as Python compares an int with a float (no
rounding of 2**53+1, bounds beyond the double range), and equality is jsonschema's (``1`` equals
``1.0``, ``true`` is no ``1``).
"""

from __future__ import annotations

import math
import operator
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from babelq.errors import EnvelopeError
from babelq.schema.subset import UnsupportedSchemaError

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import DataType

_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1

#: the JSON kind of a Spark column: string, integer, double, boolean, struct, map, array, null
Kind = str


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


def _fold(conds: tuple[Cond, ...], neutral: bool, combine: Callable[[Any, Any], Any]) -> Cond:
    """``conds`` combined, bools folded: ``neutral`` ones are left out, and the other bool decides."""
    out: Cond = neutral
    for c in conds:
        if c is (not neutral):
            return c
        if c is neutral:
            continue
        out = c if out is neutral else combine(out, c)
    return out


def or_(*conds: Cond) -> Cond:
    """Any of ``conds``: ``True`` as soon as one is known true, ``False`` ones left out."""
    return _fold(conds, False, operator.or_)


def and_(*conds: Cond) -> Cond:
    """All of ``conds``: ``False`` as soon as one is known false, ``True`` ones left out."""
    return _fold(conds, True, operator.and_)


def not_(cond: Cond) -> Cond:
    """The negation of ``cond`` (a bool stays a bool)."""
    return (not cond) if isinstance(cond, bool) else ~cond


# -- exact comparisons ------------------------------------------------------------------------------



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


def compare(col: Column, kind: Kind, op: str, bound: int | float) -> Cond:
    """``value op bound`` exactly as Python compares them, for a non-null integer or non-NaN double value."""
    return _compare_integer(col, op, bound) if kind == "integer" else _compare_double(col, op, bound)


# -- equality (enum, const) ---------------------------------------------------------------------------


def equals(col: Column, kind: Kind, present: Cond, value: Any, *, keyword: str, location: str) -> Cond:
    """Whether the value equals ``value`` as jsonschema's ``equal`` decides (never SQL null)."""
    from pyspark.sql import functions as sf

    if value is None:
        return not_(present)
    if isinstance(value, list | dict):
        if kind in ("struct", "map", "array"):
            raise UnsupportedSchemaError(
                keyword,
                location,
                "object or array values are not supported against an object or array column",
            )
        return False
    if isinstance(value, bool):
        return and_(present, col == value) if kind == "boolean" else False
    if isinstance(value, str):
        return and_(present, col == value) if kind == "string" else False
    if isinstance(value, int):
        if kind == "integer":
            return and_(present, _compare_long(col, "<=", value), _compare_long(col, ">=", value))
        if kind == "double":
            return and_(present, _compare_double(col, "<=", value), _compare_double(col, ">=", value))
        return False
    if isinstance(value, float):
        if math.isnan(value):
            return False
        if kind == "double":
            return and_(present, col == sf.lit(value).cast("double"))
        if kind == "integer" and value.is_integer():
            whole = int(value)
            return and_(present, _compare_long(col, "<=", whole), _compare_long(col, ">=", whole))
        return False
    raise UnsupportedSchemaError(keyword, location, f"{value!r} is not a JSON value")


def one_of(col: Column, kind: Kind, present: Cond, values: list[Any], *, location: str) -> Cond:
    """Whether the value equals one of ``values`` (``enum``), as :func:`equals` decides for each.

    The string members of an enum against a string column are one ``isin``, which Spark runs as a
    hash-set lookup: an enum of the 160 ISO 4217 codes costs a row one lookup, not 160 comparisons.
    """
    strings = [value for value in values if isinstance(value, str)] if kind == "string" else []
    if len(strings) < 2:  # one comparison costs no more than a lookup
        strings = []
    found = [equals(col, kind, present, value, keyword="enum", location=location)
             for value in values if not (strings and isinstance(value, str))]
    if strings:
        found.append(and_(present, col.isin(strings)))  # never null: a null value is not present
    return or_(*found)


# -- the type keyword -------------------------------------------------------------------------------


def has_type(col: Column, kind: Kind, present: Cond, name: str) -> Cond:
    """Whether the value is of JSON type ``name`` as jsonschema decides (``1.0`` is an integer)."""
    from pyspark.sql import functions as sf

    if name == "null":
        return not_(present)
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
            return and_(present, sf.coalesce(col % sf.lit(1.0) == sf.lit(0.0), sf.lit(False)))
        return False
    if name == "object":
        return present if kind in ("struct", "map") else False
    return present if kind == "array" else False


