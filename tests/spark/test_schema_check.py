"""babelq.spark.schema_check gives jsonschema's verdict, computed on the JVM.

The property tests generate a Spark type, a JSON Schema for it (keywords that apply, keywords
of other types, wrong types, nested objects/arrays/maps, boolean schemas) and rows of that
type; every row's Spark verdict (valid or not) must equal jsonschema's on the value PySpark
collects for it, and the path of the reported violation must be one jsonschema reports too.
Each hypothesis example is one DataFrame compared in one collect().
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from collected import plain
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from babelq.pipelines.transfer_schema import TRANSFER_SCHEMA

pytestmark = pytest.mark.spark

jsonschema: Any = pytest.importorskip("jsonschema")
sf: Any = pytest.importorskip("pyspark.sql.functions")
T: Any = pytest.importorskip("pyspark.sql.types")

FIELD_NAMES = ["a", "b", "c_1", "Z9", "x y", "q'uote", "1st"]
MAP_KEYS = ["a", "b", "k-2", "é"]
PATTERNS = [
    "^[A-Z]{3}$", "^[0-9]{3}-[0-9]{3}$", "a|b", r"\d", r"^\d+$", "^.{2}$", "x$", "[^a-c]", "[]a]+", "^$",
    "é", "a{,2}b", "(?P<g>ab)+", "^(?:a|bc)*$", r"\.", "[a-z&]", "{", "a{1,2", r"\u00e9", "[[]",
]  # fmt: skip
STRINGS = [
    "", "a", "b", "ab", "abc", "ABC", "AB", "ABC\n", "123-456", "123-456\n", "12-345", "x", "x\n", "\n",
    "xy\n", "é", "١٢٣", "7", "a{1,2", "{", "&", "[", "]a", ".", "aab", "bcbc", "PAY-1", "a\u2028",
]  # fmt: skip
NUMBERS = [
    0, 1, -1, 3, 2.5, -0.5, 1.0, 2**53, 2**53 + 1, -(2**63), 2**63 - 1, 2**63, 10**400, 1e20, 1e300,
    float("inf"), -float("inf"),
]  # fmt: skip
DOUBLES = [
    0.0, -0.0, 1.0, 2.5, 3.0, -1.0, 1e20, 1e300, 2.0**53, 2.0**63, 9007199254740992.0, float("nan"),
    float("inf"), -float("inf"), 0.5,
]  # fmt: skip
JSON_TYPES = ["null", "boolean", "object", "array", "number", "integer", "string"]
SCALAR_TYPES = [T.StringType(), T.LongType(), T.IntegerType(), T.DoubleType(), T.FloatType(), T.BooleanType()]


def _kind(dt: Any) -> str:
    if isinstance(dt, T.StringType):
        return "string"
    if isinstance(dt, T.LongType | T.IntegerType):
        return "integer"
    if isinstance(dt, T.DoubleType | T.FloatType):
        return "number"
    if isinstance(dt, T.BooleanType):
        return "boolean"
    if isinstance(dt, T.ArrayType):
        return "array"
    return "object"


def _struct(fields: list[tuple[str, Any, bool]]) -> Any:
    return T.StructType([T.StructField(name, dt, nullable) for name, dt, nullable in fields])


#: Spark types with random nullability (non-nullable members let the compiler drop null checks)
spark_types = st.recursive(
    st.sampled_from(SCALAR_TYPES),
    lambda inner: st.one_of(
        st.lists(
            st.tuples(st.sampled_from(FIELD_NAMES), inner, st.booleans()),
            min_size=1,
            max_size=3,
            unique_by=lambda f: f[0],
        ).map(_struct),
        st.tuples(inner, st.booleans()).map(lambda t: T.ArrayType(t[0], t[1])),
        st.tuples(inner, st.booleans()).map(lambda t: T.MapType(T.StringType(), t[0], t[1])),
    ),
    max_leaves=5,
)


def values(dt: Any, nullable: bool = True) -> st.SearchStrategy[Any]:
    """Values of Spark type ``dt`` as createDataFrame takes them (null wherever the type allows)."""
    if isinstance(dt, T.StringType):
        base: st.SearchStrategy[Any] = st.sampled_from(STRINGS) | st.text(max_size=5)
    elif isinstance(dt, T.LongType):
        base = (
            st.integers(-3, 5)
            | st.sampled_from([2**53, 2**53 + 1, -(2**63), 2**63 - 1])
            | st.integers(-(2**63), 2**63 - 1)
        )
    elif isinstance(dt, T.IntegerType):
        base = st.integers(-3, 5) | st.integers(-(2**31), 2**31 - 1)
    elif isinstance(dt, T.DoubleType):
        base = st.sampled_from(DOUBLES) | st.integers(-3, 5).map(float) | st.floats()
    elif isinstance(dt, T.FloatType):
        base = st.sampled_from([0.0, 1.0, 2.5, -1.0, 3.0]) | st.floats(width=32)
    elif isinstance(dt, T.BooleanType):
        base = st.booleans()
    elif isinstance(dt, T.ArrayType):
        base = st.lists(values(dt.elementType, dt.containsNull), max_size=4)
    elif isinstance(dt, T.MapType):
        base = st.dictionaries(
            st.sampled_from(MAP_KEYS), values(dt.valueType, dt.valueContainsNull), max_size=3
        )
    else:
        base = st.tuples(*[values(f.dataType, f.nullable) for f in dt.fields])
    return st.none() | base if nullable else base


def _scalar_values(kind: str) -> st.SearchStrategy[Any]:
    """enum/const candidates: mostly of the column's kind, sometimes of another one."""
    own = {
        "string": st.sampled_from(STRINGS),
        "integer": st.sampled_from([0, 1, 3, -1, 1.0, 2**53 + 1, 2**53]),
        "number": st.sampled_from([0, 1.0, 2.5, -0.0, 3, 2**53 + 1, 9007199254740992.0]),
        "boolean": st.booleans(),
    }.get(kind, st.just(None))
    if kind in ("array", "object"):  # object/array enum values are refused against such columns
        return own | st.sampled_from([None, True, 1, "a"])
    return own | st.sampled_from([None, True, 1, "a", [1], {"a": 1}])


@st.composite
def schemas(draw: st.DrawFn, dt: Any, depth: int = 0) -> Any:
    """A JSON Schema for values of Spark type ``dt``: applicable keywords, and some that are not."""
    if depth and draw(st.integers(0, 9)) == 0:
        return draw(st.booleans())
    kind = _kind(dt)
    schema: dict[str, Any] = {}
    if draw(st.booleans()):
        right = st.sampled_from([kind, [kind, "null"]] + (["integer"] if kind == "number" else []))
        wrong = st.sampled_from(JSON_TYPES) | st.lists(
            st.sampled_from(JSON_TYPES), min_size=1, max_size=3, unique=True
        )
        schema["type"] = draw(right | wrong)
    if draw(st.integers(0, 4)) == 0:
        schema["enum"] = draw(st.lists(_scalar_values(kind), min_size=1, max_size=4))
    if draw(st.integers(0, 6)) == 0:
        schema["const"] = draw(_scalar_values(kind))
    if kind == "string" or draw(st.integers(0, 5)) == 0:
        if draw(st.booleans()):
            schema["minLength"] = draw(st.integers(0, 4))
        if draw(st.booleans()):
            schema["maxLength"] = draw(st.integers(0, 5))
        if draw(st.booleans()):
            schema["pattern"] = draw(st.sampled_from(PATTERNS))
    if kind in ("integer", "number") or draw(st.integers(0, 5)) == 0:
        for keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if draw(st.integers(0, 2)) == 0:
                schema[keyword] = draw(st.sampled_from(NUMBERS))
    if kind == "array":
        if draw(st.booleans()):
            schema["minItems"] = draw(st.integers(0, 3))
        if draw(st.booleans()):
            schema["maxItems"] = draw(st.integers(0, 3))
        if draw(st.integers(0, 3)):
            schema["items"] = draw(schemas(dt.elementType, depth + 1))
    if isinstance(dt, T.StructType | T.MapType):
        if isinstance(dt, T.StructType):
            members = [(f.name, f.dataType) for f in dt.fields]
            known = [name for name, _ in members]
            value_type = members[0][1]
        else:
            known = MAP_KEYS
            value_type = dt.valueType
            members = [(key, value_type) for key in MAP_KEYS]
        chosen = draw(st.lists(st.sampled_from(members), max_size=3, unique_by=lambda m: m[0]))
        if chosen or draw(st.booleans()):
            schema["properties"] = {name: draw(schemas(member, depth + 1)) for name, member in chosen}
        if draw(st.booleans()):
            schema["required"] = draw(st.lists(st.sampled_from([*known, "missing"]), max_size=3, unique=True))
        extra = draw(st.integers(0, 3))
        if extra == 1:
            schema["additionalProperties"] = False
        elif extra == 2:
            schema["additionalProperties"] = draw(schemas(value_type, depth + 1))
    return schema



def _compare(spark: Any, schema: Any, dt: Any, rows: list[Any], nullable: bool = True) -> None:
    from babelq.spark.schema_check import first_violation_of

    df = spark.createDataFrame([(r,) for r in rows], T.StructType([T.StructField("v", dt, nullable)]))
    got = df.select("v", first_violation_of(df, "v", schema).alias("err")).collect()
    validator = jsonschema.Draft202012Validator(schema)
    for row in got:
        value = plain(row["v"])
        errors = list(validator.iter_errors(value))
        assert (row["err"] is None) == (not errors), (schema, value, row["err"], [e.message for e in errors])
        if errors and "False schema does not allow" in row["err"]:
            # jsonschema reports a false subschema at the enclosing value's path; we name the value
            assert any(e.message.startswith("False schema does not allow") for e in errors)
        elif errors:
            path = row["err"].split(": ", 1)[0]
            assert path in {e.json_path for e in errors}, (schema, value, row["err"])


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(st.data())
def test_verdict_equals_jsonschema_for_generated_schemas_and_rows(spark: Any, data: st.DataObject) -> None:
    dt = data.draw(spark_types, label="type")
    nullable = data.draw(st.booleans(), label="nullable")
    schema = data.draw(schemas(dt), label="schema")
    rows = data.draw(st.lists(values(dt, nullable), min_size=1, max_size=15), label="rows")
    _compare(spark, schema, dt, rows, nullable)


TRANSFER_TYPE = (
    "struct<payment_reference:string, amount_cents:bigint, currency:string, debtor_bsb:string, "
    "debtor_account:string, creditor_bsb:string, creditor_account:string, "
    "validation_result:struct<passed:boolean, checks:array<string>, validated_at:bigint>, narrative:string>"
)
_refs = st.sampled_from(["PAY-1", "", "P" * 64, "P" * 65, "é" * 64]) | st.text(max_size=3)
_bsbs = st.sampled_from(["012-345", "012345", "12-345", "012-345\n", "٠١٢-٣٤٥"])
_accounts = st.sampled_from(["123456", "1234567890", "12345", "12345678901", "12A456", "123456\n"])
transfer_rows = st.tuples(
    st.none() | _refs,
    st.none() | st.sampled_from([1, 0, -5, 150000, 2**63 - 1]),
    st.none() | st.sampled_from(["AUD", "AUx", "AU", "AUDD", "usd", "EUR\n"]),
    st.none() | _bsbs,
    st.none() | _accounts,
    st.none() | _bsbs,
    st.none() | _accounts,
    st.none()
    | st.tuples(
        st.none() | st.booleans(),
        st.none() | st.lists(st.none() | st.sampled_from(["reference_present", "schema"]), max_size=3),
        st.none() | st.just(1_749_132_727_000),
    ),
    st.none() | st.sampled_from(["Invoice 1", ""]),
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(transfer_rows, min_size=1, max_size=40))
def test_transfer_schema_verdict_equals_jsonschema(spark: Any, rows: list[Any]) -> None:
    _compare(spark, TRANSFER_SCHEMA, T._parse_datatype_string(TRANSFER_TYPE), rows)


def test_patterns_search_like_python(spark: Any) -> None:
    from babelq.spark.schema_check import java_regex

    grid = [(p, s) for p in PATTERNS for s in STRINGS]
    df = spark.createDataFrame(grid, "p string, s string")
    cases = [sf.col("s").rlike(java_regex(p)) for p in PATTERNS]
    matched = df.select(
        "p", "s", sf.coalesce(*[sf.when(sf.col("p") == p, c) for p, c in zip(PATTERNS, cases, strict=True)])
    ).collect()
    for p, s, hit in matched:
        assert hit == (re.search(p, s) is not None), (p, s)


def test_first_violation_message_and_order(spark: Any) -> None:
    from babelq.spark.schema_check import first_violation_of

    df = spark.createDataFrame(
        [(("", 0, "AUx"),), (("PAY-1", 5, "aud"),), (("PAY-1", 5, "AUD"),), (None,)],
        "v struct<payment_reference:string, amount_cents:bigint, currency:string>",
    )
    schema = {
        "type": "object",
        "required": ["payment_reference", "amount_cents", "currency"],
        "properties": {
            "payment_reference": {"type": "string", "minLength": 1},
            "amount_cents": {"type": "integer", "minimum": 1},
            "currency": {"enum": ["AUD", "EUR"]},
        },
    }
    got = [r[0] for r in df.select(first_violation_of(df, "v", schema)).collect()]
    assert got == [
        "$.payment_reference: '' is too short",
        '$.currency: \'aud\' is not one of ["AUD", "EUR"]',
        None,
        "$: null is not of type 'object'",
    ]


@pytest.mark.parametrize(
    ("schema", "keyword", "location"),
    [
        ({"properties": {"id": {"type": "string", "format": "uuid"}}}, "format", "#/properties/id/format"),
        ({"items": {"$ref": "#/$defs/x"}}, "$ref", "#/items/$ref"),
        ({"properties": {"a": {"allOf": [{"type": "string"}]}}}, "allOf", "#/properties/a/allOf"),
        ({"multipleOf": 5}, "multipleOf", "#/multipleOf"),
        ({"items": [{"type": "string"}]}, "items", "#/items"),
        ({"properties": {"a~b/c": {"pattern": r"\w+"}}}, "pattern", "#/properties/a~0b~1c/pattern"),
        ({"$schema": "http://json-schema.org/draft-04/schema#"}, "$schema", "#/$schema"),
        ({"additionalProperties": {"minLength": -1}}, "minLength", "#/additionalProperties/minLength"),
    ],
)
def test_unsupported_keywords_are_refused_naming_keyword_and_location(
    spark: Any, schema: dict[str, Any], keyword: str, location: str
) -> None:
    from babelq.spark.schema_check import UnsupportedSchemaError, first_violation

    with pytest.raises(UnsupportedSchemaError) as caught:
        first_violation(schema, sf.col("v"), T.StringType())
    assert (caught.value.keyword, caught.value.location) == (keyword, location)
    assert repr(keyword) in str(caught.value) and location in str(caught.value)


@pytest.mark.parametrize("bound", [10**400, -(10**400), 2**1024, -(2**1024), 2**1024 - 2**970, 2**53 + 1])
@pytest.mark.parametrize("keyword", ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"])
def test_integer_bounds_beyond_the_double_range_compare_like_python(
    spark: Any, bound: int, keyword: str
) -> None:
    # 2**1024 - 2**970 rounds to the largest double's neighbour; 10**400 overflows float() outright
    rows = [0.0, 1.7976931348623157e308, -1.7976931348623157e308, 2.0**53, 2.0**53 + 2, -(2.0**53)]
    _compare(spark, {"items": {keyword: bound}}, T.ArrayType(T.DoubleType(), False), [rows], nullable=False)
    _compare(spark, {keyword: bound}, T.DoubleType(), rows, nullable=False)


def test_a_registry_manifest_schema_checks_rows_as_the_registry_does(spark: Any) -> None:
    """The per-URN schema of a registry.json (what ``babelq publish --schema`` reads) compiles to a
    Spark column whose verdicts are the registry's own."""
    from pathlib import Path

    from babelq.pipelines.publish_schema import load_schema
    from babelq.schema import SchemaRegistry
    from babelq.spark.schema_check import first_violation_of

    manifest = Path(__file__).resolve().parents[2] / "examples" / "registry" / "registry.json"
    urn = "urn:babel:orders:created"
    schema = load_schema(manifest, urn)
    registry = SchemaRegistry.from_manifest(manifest)
    values = [(1042, 99.5, "EUR"), (0, 1.0, "USD"), (7, -5.0, "TRY"), (7, 2.0, "GBP")]
    df = spark.createDataFrame(
        [(value,) for value in values], "v struct<order_id:bigint, amount:double, currency:string>"
    )
    got = [r[0] for r in df.select(first_violation_of(df, "v", schema)).collect()]
    rows = [dict(zip(("order_id", "amount", "currency"), value, strict=True)) for value in values]
    assert [error is None for error in got] == [registry.is_valid(urn, row) for row in rows] == [
        True, False, False, False]
    assert got[1] == "$.order_id: 0 is less than the minimum of 1"
