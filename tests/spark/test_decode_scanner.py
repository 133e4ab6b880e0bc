"""babelq's JVM envelope scanner (the decode fast path) agrees with the core codec.

The fuzz corpus in test_codec_spark_decode covers whole-envelope mutations; here the JSON
grammar itself is attacked where the scanner reads it: tricky values inside ``data``, inside a
string the scanner decodes (``trace_id``), as object keys, and raw bytes (broken UTF-8,
overlong forms, encoded surrogates). For every body, ``decode`` (scanner on) must give the
core's verdict, reason and fields; on top, the scanner may only take a row the core accepts.

The typed mode (``data_schema``) reads data into a struct in the same pass; its values are
checked against a Python model of the documented rules, and against ``from_json`` (the SQL
path) wherever every value fits its field's type.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import pytest
from collected import plain
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from babelq.envelope import make

pytestmark = pytest.mark.spark

T: Any = pytest.importorskip("pyspark.sql.types")

#: JSON texts (valid and not) placed where a value goes
VALUES = [
    b"0", b"-0", b"01", b"-", b"1.", b".5", b"1e", b"1e+", b"1E-2", b"1e400", b"-1e400", b"1e-400",
    b"123456789012345678901234567890", b"2.5e+308", b"1" * 400 + b".5", b"tru", b"true", b"nul", b"null",
    b"falsey", b'"a\\u00e9"', b'"\\ud83d\\ude00"', b'"\\ud83d"', b'"\\ude00"', b'"\\ud83d\\u0041"',
    b'"\\x41"', b'"\\u00G0"', b'"tab\tin"', b'"nl\\n"', b'"\\/"', b"[1,]", b"[,1]", b"[]", b"{}",
    b'{"a":1,}', b'{"a" 1}', b'{a:1}', b"[1 2]", b'"\xc3\xa9"', b'"\xc3"', b'"\xe0\x80\x80"',
    b'"\xed\xa0\x80"', b'"\xf4\x90\x80\x80"', b'"\xf0\x9f\x98\x80"', b'"\xc0\xaf"', b"NaN", b"Infinity",
    b"\x0c1", b"1\x0c", b" \t\r\n1", b"[" * 40 + b"]" * 40, b"[" * 300 + b"]" * 300, b'{"":{"":[]}}',
    # the envelope's nesting limit (512, the envelope itself level 1; a data value is level 3)
    b"[" * 510 + b"]" * 510, b"[" * 511 + b"]" * 511, b"[" * 512 + b"NaN" + b"]" * 512,
    b'"' + b"[" * 600 + b'"',
]  # fmt: skip
KEYS = [b'"a"', b'"\\u0061"', b'"job"', b'"j\\u006fb"', b'"a\\"b"', b'""', b'"\xc3\xa9"', b"a", b"1"]


def _template() -> bytes:
    return make("urn:babel:scan:test", {"x": 1}, queue="q", trace_id="T").encode()


def _bodies() -> list[bytes]:
    base = _template()
    out = []
    for value in VALUES:
        out.append(base.replace(b'{"x":1}', b'{"x":' + value + b"}"))  # a data value
        out.append(base.replace(b'"T"', value))  # the trace_id itself
    for key in KEYS:
        out.append(base.replace(b'{"x":1}', b"{" + key + b":1}"))  # a data key
        out.append(base.replace(b'"queue"', key))  # a meta key
        out.append(base.replace(b'"job"', key))  # a top-level key
    out += [base.replace(b'"T"', b'"' + c + b'"') for c in (b" ", b"\\u000b", b"\\f", b"\\u00a0", b"\\t")]
    out += [base.replace(b'"schema_version":1', b'"schema_version":' + v) for v in (b"1.0", b"true", b"01")]
    out += [base.replace(b'"attempts":0', b'"attempts":' + v) for v in (b"-3", b"1" * 25, b"0.0", b"null")]
    return out


def _decoded(spark: Any, bodies: list[bytes], **options: Any) -> list[Any]:
    from babelq.spark.decode import decode

    df = spark.createDataFrame([(i, b) for i, b in enumerate(bodies)], "n int, body binary")
    return decode(df, path_column="path", **options).orderBy("n").collect()


def _checked(rows: list[Any]) -> None:
    from test_codec_spark_decode import _compare, _core

    infinite = [r for r in rows if b"e400" in bytes(r["body"])]
    problems = _compare([r for r in rows if r not in infinite])
    assert not problems, problems[:5]
    for row in rows:
        if row["path"] == "scan":
            assert _core(bytes(row["body"]))[0], bytes(row["body"])  # the scanner only takes accepted rows


def test_tricky_json_gets_the_core_verdict(spark: Any) -> None:
    rows = _decoded(spark, _bodies())
    _checked(rows)
    assert {r["path"] for r in rows} == {"scan", "exact"}


#: ``\u`` escapes whose "hex digits" are non-ASCII characters with a hex digit's low byte
#: (U+D230 is ED 88 B0, U+0130 is C4 B0, U+FF10 is EF BC 90): Spark's JSON parser reads them
#: as digits, Python's json refuses them (found by the byte-damage test below)
BAD_ESCAPES = [
    b'"\\u0\xed\x88\xb00e9"', b'"\\u\xc4\xb0041"', b'"\\u004\xc4\xb1"', b'"\\u\xef\xbc\x90041"',
    b'"\\\\\\u\xc4\xb0041"', b'"\\"\\u00\xc4\xb01"', b'"ok \\\\u\xc4\xb0041"',
]  # fmt: skip


@pytest.mark.parametrize("path", ["scan", "sql", "exact"])
def test_escapes_with_non_ascii_hex_digits_are_poison(spark: Any, path: str) -> None:
    base = _template()
    bodies = [base.replace(b'{"x":1}', b'{"x":' + value + b"}") for value in BAD_ESCAPES]
    bodies += [base.replace(b'"T"', value) for value in BAD_ESCAPES]
    options = {"scan": {}, "sql": {"scanner": False}, "exact": {"fast": False}}[path]
    rows = _decoded(spark, bodies, **options)
    _checked(rows)
    # the last value is a legal escaped backslash followed by text: the core accepts it
    assert [r["accepted"] for r in rows] == [False] * 6 + [True] + [False] * 6 + [True]


#: each example is a Spark job: no shrinking (the assertion prints the offending bodies)
NO_SHRINK = [Phase.explicit, Phase.reuse, Phase.generate]
damages = st.tuples(
    st.integers(0, 10_000), st.binary(min_size=1, max_size=4), st.sampled_from(["insert", "replace"])
)


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck), phases=NO_SHRINK)
@given(st.lists(damages, min_size=300, max_size=300))
def test_random_byte_damage_gets_the_core_verdict(spark: Any, damage: list[tuple[int, bytes, str]]) -> None:
    base = _template().replace(b'{"x":1}', b'{"x":"Zo\xc3\xab \\u00e9 \\ud83d\\ude00","y":[1.5,-2e-3,null]}')
    bodies = []
    for at, chunk, how in damage:
        i = at % len(base)
        bodies.append(base[:i] + chunk + base[i + (len(chunk) if how == "replace" else 0) :])
    _checked(_decoded(spark, bodies))


# -- typed data --------------------------------------------------------------------------------

DATA_TYPE = (
    "struct<s: string, n: bigint, i: int, sh: smallint, by: tinyint, d: double, f: float, b: boolean, "
    "st: struct<a: string, z: array<bigint>>, arr: array<double>, m: map<string, bigint>>"
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.sampled_from([0, 1, -1, 127, 128, -129, 32768, 2**31, 2**63, -(2**63), 2**63 - 1])
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(["a", "z", "q"]), inner, max_size=3),
    max_leaves=6,
)
FIELDS = ["s", "n", "i", "sh", "by", "d", "f", "b", "st", "arr", "m"]


def _fits(value: Any, kind: Any) -> Any:
    """The documented reading of a JSON value (parsed by Python) into Spark type ``kind``."""
    if value is None:
        return None
    if isinstance(kind, T.StringType):
        return value if isinstance(value, str) else _canonical(value).decode()
    integral = isinstance(value, int) and not isinstance(value, bool)
    bounds = {T.LongType: 63, T.IntegerType: 31, T.ShortType: 15, T.ByteType: 7}
    for spark_type, bits in bounds.items():
        if isinstance(kind, spark_type):
            return value if integral and -(2**bits) <= value < 2**bits else None
    if isinstance(kind, T.DoubleType | T.FloatType):
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        number = float(value)
        return number if isinstance(kind, T.DoubleType) else struct.unpack("f", struct.pack("f", number))[0]
    if isinstance(kind, T.BooleanType):
        return value if isinstance(value, bool) else None
    if isinstance(kind, T.StructType):
        if not isinstance(value, dict):
            return None
        return {f.name: _fits(value.get(f.name), f.dataType) for f in kind.fields}
    if isinstance(kind, T.ArrayType):
        return [_fits(v, kind.elementType) for v in value] if isinstance(value, list) else None
    if isinstance(kind, T.MapType):
        return {k: _fits(v, kind.valueType) for k, v in value.items()} if isinstance(value, dict) else None
    raise AssertionError(kind)



def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b) and type(a) is type(b)


def _canonical(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _with_data(data: dict[str, Any]) -> bytes:
    """An envelope around ``data`` as written by hand: make() refuses integers beyond 64 bits."""
    doc = make("urn:babel:scan:typed", {}, queue="q").to_dict()
    doc["data"] = data
    return _canonical(doc)


datas = st.fixed_dictionaries({}, optional={f: json_values for f in FIELDS})


@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck), phases=NO_SHRINK)
@given(st.lists(datas, min_size=60, max_size=60))
def test_typed_data_follows_the_documented_rules(spark: Any, datas: list[dict[str, Any]]) -> None:
    schema = T._parse_datatype_string(DATA_TYPE)
    bodies = [_with_data(d) for d in datas]
    rows = _decoded(spark, bodies, data_schema=schema)
    assert {r["path"] for r in rows} == {"scan"}
    for data, row in zip(datas, rows, strict=True):
        want = _fits(data, schema)
        got = plain(row["data"])
        assert _same(got, want), (data, got, want)


@pytest.mark.filterwarnings("ignore::babelq.errors.UnsafeIntegerWarning")
def test_typed_data_equals_from_json_where_values_fit(spark: Any) -> None:
    schema = T._parse_datatype_string(DATA_TYPE)
    datas = [
        {"s": "Zoë", "n": 2**62, "i": -7, "sh": 300, "by": -128, "d": 0.1, "f": 2.5, "b": True,
         "st": {"a": "x", "z": [1, None, 3]}, "arr": [1.5, None, -2], "m": {"k": 5, "j": None}},
        {"s": None, "d": 1e300, "arr": [], "m": {}, "st": {}},
        {"st": {"z": []}, "f": 1e-3, "n": -(2**63)},
        {},
    ]  # fmt: skip
    bodies = [make("urn:babel:scan:typed", d, queue="q").encode() for d in datas]
    scanned = [plain(r["data"]) for r in _decoded(spark, bodies, data_schema=schema)]
    parsed = [plain(r["data"]) for r in _decoded(spark, bodies, data_schema=schema, scanner=False)]
    assert scanned == parsed
    assert scanned[0]["s"] == "Zoë" and scanned[0]["st"]["z"] == [1, None, 3]


def test_a_data_type_the_scanner_does_not_read_falls_back_to_from_json(spark: Any) -> None:
    from babelq.spark.jvm import reads_data_type

    schema = T._parse_datatype_string("struct<amount: decimal(10,2), at: timestamp>")
    assert not reads_data_type(schema)
    body = make("urn:babel:scan:typed", {"amount": "12.50", "at": "2026-11-22T10:00:00Z"}, queue="q").encode()
    [row] = _decoded(spark, [body], data_schema=schema)
    assert row["accepted"] and row["path"] == "scan"
    assert str(row["data"]["amount"]) == "12.50"
