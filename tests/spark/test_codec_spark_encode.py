"""babelq.spark.encode writes the core codec's bytes, computed on the JVM.

Each hypothesis example is one DataFrame of a few hundred generated rows compared in one
collect(), so the number of Spark jobs stays small.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import pytest
from collected import plain
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from babelq.envelope import make
from babelq.errors import EnvelopeError

pytestmark = pytest.mark.spark

sf: Any = pytest.importorskip("pyspark.sql.functions")

CREATED = 1_749_132_727_000
EDGE_DOUBLES = [
    0.1, 1e20, 1e-7, -0.0, 0.0, 5e-324, -5e-324, 1.7976931348623157e308, 2.2250738585072014e-308, 1e16,
    1e15, 9999999999999998.0, 123456789.123, 1e-4, 1e-5, 0.001, 100.0, 1e23, 2e23, 4.35, -1.5, 1e22,
    123456789012345680.0, 0.30000000000000004,
]  # fmt: skip

ROW_SCHEMA = (
    "n long, d double, f float, s string, b boolean, arr array<double>, m map<string,long>, "
    "st struct<x:string, y:array<struct<z:double, w:int>>>"
)

texts = st.text(alphabet=st.characters(codec="utf-8", min_codepoint=0), max_size=12)
doubles = st.one_of(
    st.sampled_from(EDGE_DOUBLES),
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False).map(lambda v: round(v, 3)),
)
floats32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
longs = st.integers(min_value=-(2**63), max_value=2**63 - 1)
rows = st.tuples(
    st.none() | longs,
    st.none() | doubles,
    st.none() | floats32,
    st.none() | texts,
    st.none() | st.booleans(),
    st.none() | st.lists(st.none() | doubles, max_size=4),
    st.none() | st.dictionaries(texts, st.none() | longs, max_size=3),
    st.none()
    | st.tuples(
        st.none() | texts,
        st.none()
        | st.lists(st.tuples(st.none() | doubles, st.none() | st.integers(-(2**31), 2**31 - 1)), max_size=3),
    ),
)



def _core_body(row: Any, columns: list[str], **extra: Any) -> bytes:
    data = {name: plain(row[name]) for name in columns}
    if "m_entries" in row and row["m_entries"] is not None:
        # a Spark map keeps its entries in order, and encode writes them in that order; collect()
        # hands maps to Python through a Java HashMap, which loses it, so take it from the entries
        data["m"] = {entry["key"]: entry["value"] for entry in row["m_entries"]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = make(
            "urn:babel:spark:row.encoded",
            data,
            queue="spark-q",
            trace_id=row["trace_id"],
            message_id=row["id"],
            created_at=CREATED,
            **extra,
        )
    return env.encode()


#: doubles written by babelq's JVM helper (the default where the jar is loaded) and by SQL alone
JVM = pytest.mark.parametrize("jvm", [True, False], ids=["jvm-float", "sql-float"])


# Each example is one Spark job. Lists much longer than ~100 of these rows overrun hypothesis'
# entropy buffer and are regenerated again and again (that cost more than the Spark jobs).
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(generated=st.lists(rows, min_size=80, max_size=80))
def test_body_bytes_equal_the_core_codec_for_generated_rows(spark: Any, generated: list[Any]) -> None:
    _assert_core_bytes(spark, generated, jvm=True)


@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(generated=st.lists(rows, min_size=80, max_size=80))
def test_body_bytes_equal_the_core_codec_without_the_jvm_helpers(spark: Any, generated: list[Any]) -> None:
    _assert_core_bytes(spark, generated, jvm=False)


def _assert_core_bytes(spark: Any, generated: list[Any], *, jvm: bool) -> None:
    from babelq.spark.encode import encode

    df = spark.createDataFrame(generated, ROW_SCHEMA)
    columns = df.columns
    out = (
        encode(
            df,
            urn="urn:babel:spark:row.encoded",
            data=columns,
            queue="spark-q",
            created_at=sf.lit(CREATED),
            jvm=jvm,
        )
        .withColumn("m_entries", sf.map_entries("m"))
        .collect()
    )
    mismatches = [
        (bytes(r["body"]), _core_body(r, columns)) for r in out if bytes(r["body"]) != _core_body(r, columns)
    ]
    assert not mismatches, mismatches[:3]
    assert len({r["id"] for r in out}) == len(out)
    assert all(r["id"] != r["trace_id"] for r in out)


def _float_function(spark: Any, jvm: bool) -> str | None:
    from babelq.spark.jvm import float_repr

    name = float_repr(spark) if jvm else None
    assert name or not jvm, "babelq's jar is not loaded in the test session"
    return name


@JVM
def test_every_edge_double_is_formatted_like_python_repr(spark: Any, jvm: bool) -> None:
    from babelq.spark.json_expr import json_double

    values = EDGE_DOUBLES + [-v for v in EDGE_DOUBLES] + [math.ldexp(1.0, e) for e in range(-1074, 1024, 7)]
    df = spark.createDataFrame([(v,) for v in values], "d double")
    got = [r[0] for r in df.select(json_double(sf.col("d"), jvm=_float_function(spark, jvm))).collect()]
    assert got == [repr(v) for v in values]


@JVM
def test_random_bit_patterns_are_formatted_like_python_repr(spark: Any, jvm: bool) -> None:
    """Every exponent and mantissa shape, subnormals included: doubles from random 64-bit patterns."""
    import random
    import struct

    from babelq.spark.json_expr import json_double

    rnd = random.Random(20261122)
    values: list[float] = []
    while len(values) < (40_000 if jvm else 5_000):
        value = struct.unpack("<d", rnd.getrandbits(64).to_bytes(8, "little"))[0]
        if math.isfinite(value):
            values.append(value)
    # short decimals too, where the one-digit/two-digit choice matters: d x 10^e
    values += [v for d in range(1, 10) for e in range(-324, 309) if math.isfinite(v := float(f"{d}e{e}"))]
    df = spark.createDataFrame([(v,) for v in values], "d double")
    got = [r[0] for r in df.select(json_double(sf.col("d"), jvm=_float_function(spark, jvm))).collect()]
    wrong = [(v, g) for v, g in zip(values, got, strict=True) if g != repr(v)]
    assert not wrong, wrong[:5]


def test_extensions_and_given_columns_match_make(spark: Any) -> None:
    from babelq.spark.encode import encode

    df = spark.createDataFrame(
        [("a", "t-1", "m-1", "k1", 5, 1_800_000_000_000), ("b", "t-2", "m-2", None, None, None)],
        "name string, tr string, mid string, shard string, prio int, exp long",
    )
    out = encode(
        df,
        urn=sf.lit("urn:babel:spark:ext"),
        data=["name"],
        queue=sf.lit("q"),
        trace_id=sf.col("tr"),
        id=sf.col("mid"),
        created_at=sf.lit(CREATED),
        correlation_id=sf.lit("batch-7"),
        sharding_key=sf.col("shard"),
        priority=sf.col("prio"),
        expire_at=sf.col("exp"),
        deliver_at=sf.lit(CREATED + 5),
        transaction_id=sf.lit("tx/1"),
    ).collect()
    for row in out:
        expected = make(
            "urn:babel:spark:ext",
            {"name": row["name"]},
            queue="q",
            trace_id=row["tr"],
            message_id=row["mid"],
            created_at=CREATED,
            correlation_id="batch-7",
            sharding_key=row["shard"],
            priority=row["prio"],
            expire_at=row["exp"],
            deliver_at=CREATED + 5,
            transaction_id="tx/1",
        ).encode()
        assert bytes(row["body"]) == expected
        assert row["trace_id"] == row["tr"] and row["id"] == row["mid"]


def test_types_the_core_refuses_are_refused_naming_the_path(spark: Any) -> None:
    from babelq.spark.encode import encode

    df = spark.sql("select named_struct('price', cast(1.5 as decimal(10,2))) as d")
    with pytest.raises(EnvelopeError, match=r"data\.price: Decimal"):
        encode(df, urn="urn:babel:spark:bad", data=sf.col("d"), queue="q")
    df = spark.sql("select map(1, 'x') as m")
    with pytest.raises(EnvelopeError, match=r"data\.m: map keys must be strings"):
        encode(df, urn="urn:babel:spark:bad", data=["m"], queue="q")


@JVM
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_nan_and_infinity_fail_the_job_with_the_path(spark: Any, jvm: bool, bad: float) -> None:
    from babelq.spark.encode import encode

    df = spark.createDataFrame([(1.5,), (bad,)], "ratio double")
    out = encode(df, urn="urn:babel:spark:bad", data=["ratio"], queue="q", jvm=jvm)
    with pytest.raises(Exception, match=r"data\.ratio: NaN"):
        out.collect()


def test_blank_urn_fails_like_make(spark: Any) -> None:
    from babelq.spark.encode import encode

    df = spark.createDataFrame([("  ",)], "u string")
    with pytest.raises(Exception, match="job: must be a non-empty string"):
        encode(df, urn=sf.col("u"), data=[], queue="q").collect()
