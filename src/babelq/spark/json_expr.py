"""Canonical JSON text as Spark SQL expressions (docs/standard.md §2.3), on the JVM.

Spark's own JSON writer is not the canonical form: it writes doubles the Java way
(``1.0E20`` where Python writes ``1e+20``), escapes control characters with upper-case hex,
drops null struct fields and writes floats as 32-bit values. So every JSON token is built here
from SQL string functions instead, reproducing what
``json.dumps(value, ensure_ascii=False, separators=(",", ":"))`` writes for the Python value
PySpark would hand back for the same cell:

* strings: ``"`` and ``\\`` backslash-escaped, control characters below 0x20 as ``\\n \\r \\t
  \\b \\f`` or ``\\u00xx`` (lower-case hex), nothing else escaped;
* doubles (and floats, widened to double first, as PySpark does): Python's shortest ``repr``.
  The shortest round-trip digits come from the Schubfach implementation that ships inside
  Spark's own jackson-core (Java 17's ``Double.toString`` is not always shortest); the digits
  are then placed the way Python places them (exponent form below 1e-4 and from 1e16 on,
  ``e+XX``/``e-XX`` with at least two exponent digits). Schubfach may pick a closer two-digit
  decimal where a one-digit one also round-trips (``4.9E-324`` for Python's ``5e-324``); that
  case is re-checked by parsing the one-digit candidates back;
* NaN and +-Infinity are refused at run time with an error naming the path (``raise_error``),
  as the core producer refuses them;
* types the core codec refuses (decimal, binary, date, timestamp, non-string map keys...) are
  refused when the expression is built, naming the path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from babelq.envelope.payload import format_path
from babelq.errors import EnvelopeError

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import DataType

_SHORTEST_DOUBLE_CLASS = "com.fasterxml.jackson.core.io.schubfach.DoubleToDecimal"

_SHORT_ESCAPES = {0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r"}
#: (raw control character, its canonical escape) for every code point below 0x20.
CONTROL_ESCAPES: tuple[tuple[str, str], ...] = tuple(
    (chr(code), _SHORT_ESCAPES.get(code, f"\\u{code:04x}")) for code in range(0x20)
)
_CONTROL_CLASS = r"[\x00-\x1f]"


def _lit(value: object) -> Column:
    from pyspark.sql import functions as sf

    return sf.lit(value)


def json_string(col: Column) -> Column:
    """The JSON string token (quoted, escaped) of a string column; null stays null."""
    from pyspark.sql import functions as sf

    basic = sf.replace(sf.replace(col, _lit("\\"), _lit("\\\\")), _lit('"'), _lit('\\"'))
    controls = basic
    for raw, escaped in CONTROL_ESCAPES:
        controls = sf.replace(controls, _lit(raw), _lit(escaped))
    body = sf.when(col.rlike(_CONTROL_CLASS), controls).otherwise(basic)
    return sf.concat(_lit('"'), body, _lit('"'))


def quote_key(key: str) -> str:
    """A struct field name as its canonical JSON key text (built in Python: names are static)."""
    out = ['"']
    for char in key:
        if char in '"\\':
            out.append("\\" + char)
        elif ord(char) < 0x20:
            out.append(CONTROL_ESCAPES[ord(char)][1])
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _let(value: Column, body: Callable[[Column], Column]) -> Column:
    """Evaluate ``value`` once and bind it for ``body`` (Spark SQL has no ``let``).

    Referring to one sub-expression many times would copy it into the plan each time, and the
    copies multiply level after level; a one-element ``transform`` binds it instead.
    """
    from pyspark.sql import functions as sf

    return sf.element_at(sf.transform(sf.array(value), body), 1)


def _python_layout(digits: Column, decpt: Column) -> Column:
    """Place ``digits`` (no leading/trailing zeros; value = 0.digits x 10**decpt) like ``repr``."""
    from pyspark.sql import functions as sf

    length = sf.length(digits)
    exponent = decpt - 1
    scientific = sf.concat(
        sf.substring(digits, 1, 1),
        sf.when(length > 1, sf.concat(_lit("."), sf.substring(digits, 2, 17))).otherwise(_lit("")),
        _lit("e"),
        sf.when(exponent < 0, _lit("-")).otherwise(_lit("+")),
        sf.when(sf.abs(exponent) < 10, _lit("0")).otherwise(_lit("")),
        sf.abs(exponent).cast("string"),
    )
    return (
        sf.when(length == 0, _lit("0.0"))
        .when((decpt > 16) | (decpt < -3), scientific)
        .when(decpt <= 0, sf.concat(_lit("0."), sf.repeat(_lit("0"), -decpt), digits))
        .when(decpt >= length, sf.concat(digits, sf.repeat(_lit("0"), decpt - length), _lit(".0")))
        .otherwise(
            sf.concat(sf.substring(digits, sf.lit(1), decpt), _lit("."), sf.substring(digits, decpt + 1, 17))
        )
    )


def _digits_of(java: Column) -> Column:
    """struct(neg, raw, base) from Java-style text: value = 0.raw x 10**base (raw may have zeros)."""
    from pyspark.sql import functions as sf

    unsigned = sf.ltrim(java, _lit("-"))
    int_part = sf.regexp_extract(unsigned, r"^(\d+)", 1)
    exp10 = sf.regexp_extract(sf.concat(unsigned, _lit("E0")), r"E(-?\d+)", 1).cast("int")
    return sf.struct(
        sf.startswith(java, _lit("-")).alias("neg"),
        sf.concat(int_part, sf.regexp_extract(unsigned, r"\.(\d+)", 1)).alias("raw"),
        (sf.length(int_part) + exp10).alias("base"),
    )


def _trimmed(parts: Column) -> Column:
    """struct(neg, digits, decpt): ``raw`` without leading and trailing zeros."""
    from pyspark.sql import functions as sf

    raw = parts["raw"]
    no_lead = sf.ltrim(raw, _lit("0"))
    return sf.struct(
        parts["neg"].alias("neg"),
        sf.rtrim(no_lead, _lit("0")).alias("digits"),
        (parts["base"] - (sf.length(raw) - sf.length(no_lead))).alias("decpt"),
    )


def _one_digit_if_shorter(state: Column, magnitude: Column) -> Column:
    """Python prefers a one-digit decimal whenever one round-trips; Schubfach may give two."""
    from pyspark.sql import functions as sf

    digits, decpt = state["digits"], state["decpt"]
    low = sf.substring(digits, 1, 1)
    high_n = low.cast("int") + 1
    high = sf.when(high_n == 10, _lit("1")).otherwise(high_n.cast("string"))
    high_decpt = sf.when(high_n == 10, decpt + 1).otherwise(decpt)
    low_ok = sf.concat(_lit("0."), low, _lit("E"), decpt.cast("string")).cast("double") == magnitude
    high_ok = sf.concat(_lit("0."), high, _lit("E"), high_decpt.cast("string")).cast("double") == magnitude
    prefer_low = low_ok & (~high_ok | (sf.substring(digits, 2, 1) < _lit("5")))
    return (
        sf.when(prefer_low, sf.struct(state["neg"].alias("neg"), low.alias("digits"), decpt.alias("decpt")))
        .when(high_ok, sf.struct(state["neg"].alias("neg"), high.alias("digits"), high_decpt.alias("decpt")))
        .otherwise(state)
    )


def json_double(col: Column, path: str = "value", *, jvm: str | None = None) -> Column:
    """Python's ``repr`` of a double column (the canonical JSON number); NaN/Infinity raise.

    ``jvm`` names babelq's float-repr UDF in the session (:func:`babelq.spark.jvm.float_repr`),
    one call per value; without it the same text is built from Spark SQL string functions.
    """
    from pyspark.sql import functions as sf

    if jvm:
        text = sf.call_function(jvm, col.cast("double"))
        refused = sf.raise_error(_lit(f"{path}: NaN and Infinity are not allowed in JSON"))
        # repr is null only for NaN and the infinities; coalesce evaluates raise_error only then
        return sf.when(col.isNull(), sf.lit(None).cast("string")).otherwise(sf.coalesce(text, refused))

    def from_value(value: Column) -> Column:
        magnitude = sf.abs(value)
        java = sf.reflect(_lit(_SHORTEST_DOUBLE_CLASS), _lit("toString"), value)

        def finish(state: Column) -> Column:
            shortest = sf.when(
                sf.length(state["digits"]) == 2, _one_digit_if_shorter(state, magnitude)
            ).otherwise(state)
            return _let(
                shortest,
                lambda s: sf.concat(
                    sf.when(s["neg"], _lit("-")).otherwise(_lit("")), _python_layout(s["digits"], s["decpt"])
                ),
            )

        text = _let(_let(_digits_of(java), _trimmed), finish)
        bad = sf.isnan(value) | (magnitude == sf.lit(float("inf")))
        return sf.when(
            bad, sf.raise_error(_lit(f"{path}: NaN and Infinity are not allowed in JSON"))
        ).otherwise(text)

    return sf.when(col.isNull(), sf.lit(None).cast("string")).otherwise(_let(col.cast("double"), from_value))


def _refusal(type_name: str) -> str:
    if type_name == "decimal":
        return "Decimal is not allowed; use integer minor units (cents) or a string"
    if type_name == "binary":
        return "bytes are not allowed in JSON; base64-encode them into a string"
    if type_name in ("date", "timestamp", "timestamp_ntz"):
        return f"{type_name} is not allowed; use Unix epoch milliseconds (long) or an RFC 3339 UTC string"
    return f"Spark type {type_name} has no canonical JSON form"


def json_value(col: Column, data_type: DataType, path: str = "data", *, jvm: str | None = None) -> Column:
    """Canonical JSON text of ``col`` of Spark type ``data_type``; SQL null becomes ``null``.

    Raises :class:`~babelq.errors.EnvelopeError` naming ``path`` for a type the core codec
    refuses (decimal, binary, dates and timestamps, maps with non-string keys, ...).
    ``jvm``: the name of babelq's float-repr UDF, for doubles (see :func:`json_double`).
    """
    from pyspark.sql import functions as sf
    from pyspark.sql import types as stypes

    null = _lit("null")
    if isinstance(data_type, stypes.StringType):
        return sf.coalesce(json_string(col), null)
    if isinstance(
        data_type,
        stypes.BooleanType | stypes.ByteType | stypes.ShortType | stypes.IntegerType | stypes.LongType,
    ):
        return sf.coalesce(col.cast("string"), null)
    if isinstance(data_type, stypes.DoubleType | stypes.FloatType):
        return sf.coalesce(json_double(col, path, jvm=jvm), null)
    if isinstance(data_type, stypes.NullType):
        return null
    if isinstance(data_type, stypes.StructType):
        return sf.when(col.isNull(), null).otherwise(json_object(col, data_type, path, jvm=jvm))
    if isinstance(data_type, stypes.ArrayType):
        element_type = data_type.elementType
        whole_types = _whole_types()

        def element(item: Column) -> Column:
            return json_value(item, element_type, f"{path}[]", jvm=jvm)

        items = sf.concat(_lit("["), sf.array_join(sf.transform(col, element), ","), _lit("]"))
        if isinstance(element_type, stypes.StringType):
            items = _string_array(col, items)
        elif isinstance(element_type, whole_types):
            items = sf.concat(_lit("["), sf.array_join(col.cast("array<string>"), ",", "null"), _lit("]"))
        return sf.when(col.isNull(), null).otherwise(items)
    if isinstance(data_type, stypes.MapType):
        if not isinstance(data_type.keyType, stypes.StringType):
            raise EnvelopeError(path, f"map keys must be strings, got {data_type.keyType.simpleString()}")
        value_type = data_type.valueType

        def entry(pair: Column) -> Column:
            return sf.concat(
                json_string(pair["key"]),
                _lit(":"),
                json_value(pair["value"], value_type, f"{path}{{}}", jvm=jvm),
            )

        members = sf.array_join(sf.transform(sf.map_entries(col), entry), ",")
        return sf.when(col.isNull(), null).otherwise(sf.concat(_lit("{"), members, _lit("}")))
    raise EnvelopeError(path, _refusal(data_type.typeName()))


def check_json_type(data_type: DataType, path: str = "data") -> None:
    """Raise what :func:`json_value` raises for ``data_type``, without building an expression.

    For callers that write the JSON another way (babelq's JVM writer) but must refuse the same
    types with the same messages when the expression is built.
    """
    from pyspark.sql import types as stypes

    if isinstance(data_type, stypes.StructType):
        for field in data_type.fields:
            check_json_type(field.dataType, format_path(path, [field.name]))
    elif isinstance(data_type, stypes.ArrayType):
        check_json_type(data_type.elementType, f"{path}[]")
    elif isinstance(data_type, stypes.MapType):
        if not isinstance(data_type.keyType, stypes.StringType):
            raise EnvelopeError(path, f"map keys must be strings, got {data_type.keyType.simpleString()}")
        check_json_type(data_type.valueType, f"{path}{{}}")
    elif not isinstance(
        data_type, (stypes.StringType, stypes.DoubleType, stypes.FloatType, stypes.NullType, *_whole_types())
    ):
        raise EnvelopeError(path, _refusal(data_type.typeName()))


def _whole_types() -> tuple[type, ...]:
    from pyspark.sql import types as stypes

    return (stypes.BooleanType, stypes.ByteType, stypes.ShortType, stypes.IntegerType, stypes.LongType)


def _string_array(col: Column, general: Column) -> Column:
    """JSON text of a non-null ``array<string>`` without a per-element lambda where possible.

    Spark evaluates lambdas (``transform``) interpreted, element by element; when no element
    holds a control character the whole array is escaped at once instead: elements are joined
    with U+0001, nulls written as U+0002 (neither can occur in such data), the joined text is
    escaped like one string and the markers are turned into ``","`` and ``null``. Arrays with
    a control character take ``general`` (the per-element path).
    """
    from pyspark.sql import functions as sf

    joined = sf.array_join(col, "\x01", "\x02")
    escaped = sf.replace(sf.replace(joined, _lit("\\"), _lit("\\\\")), _lit('"'), _lit('\\"'))
    quoted = sf.concat(_lit('["'), sf.replace(escaped, _lit("\x01"), _lit('","')), _lit('"]'))
    fast = sf.replace(quoted, _lit('"\x02"'), _lit("null"))
    return (
        sf.when(sf.size(col) == 0, _lit("[]"))
        .when(sf.array_join(col, "").rlike(_CONTROL_CLASS), general)
        .otherwise(fast)
    )


def json_object(
    col: Column,
    schema: DataType,
    path: str = "data",
    *,
    omit_null: frozenset[str] = frozenset(),
    jvm: str | None = None,
) -> Column:
    """Canonical JSON object text of a non-null struct column (fields in schema order).

    Fields named in ``omit_null`` are left out of the object when they are null (as a Python
    producer leaves out a key it does not set) instead of being written as ``null``.
    """
    from pyspark.sql import functions as sf
    from pyspark.sql import types as stypes

    if not isinstance(schema, stypes.StructType):
        raise EnvelopeError(path, f"must be a struct (a JSON object), got {schema.simpleString()}")
    unknown = sorted(omit_null - set(schema.fieldNames()))
    if unknown:
        raise EnvelopeError(path, f"omit_null names fields the struct does not have: {unknown}")
    if omit_null:
        members = []
        for field in schema.fields:
            value = col[field.name]
            token = json_value(value, field.dataType, format_path(path, [field.name]), jvm=jvm)
            member = sf.concat(_lit(quote_key(field.name) + ":"), token)
            members.append(sf.when(value.isNotNull(), member) if field.name in omit_null else member)
        # array_join leaves the null (omitted) members out, commas included
        return sf.concat(_lit("{"), sf.array_join(sf.array(*members), ","), _lit("}"))
    parts: list[Column] = [_lit("{")]
    for index, field in enumerate(schema.fields):
        prefix = ("," if index else "") + quote_key(field.name) + ":"
        parts.append(_lit(prefix))
        parts.append(json_value(col[field.name], field.dataType, format_path(path, [field.name]), jvm=jvm))
    parts.append(_lit("}"))
    return sf.concat(*parts)
