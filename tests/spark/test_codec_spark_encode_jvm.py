"""babelq.spark.encode's JVM JSON writer (babelq.spark.DataJson) and its Spark SQL fallback.

The writer and the SQL path must give the same bytes (the core codec's) and the same errors for
every type encode takes, including those the other encode tests do not generate: bytes, shorts,
ints and floats, the null type, keys that need escaping or a bracketed path, and null structs.
Where the function catalog cannot load, encode falls back to the SQL path.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from collected import plain
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from babelq.envelope import make
from babelq.errors import ConfigurationError

pytestmark = pytest.mark.spark

sf: Any = pytest.importorskip("pyspark.sql.functions")

CREATED = 1_749_132_727_000
URN = "urn:babel:spark:jvm.writer"
SCHEMA = (
    '`odd key` tinyint, `q"k\\\\ey` smallint, i int, f float, s string, '
    "nested array<map<string, array<struct<`é`: boolean, t: string>>>>, "
    "opt struct<a: long, b: array<float>>"
)

texts = st.text(alphabet=st.characters(codec="utf-8", min_codepoint=0), max_size=8)
floats32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
rows = st.tuples(
    st.none() | st.integers(-128, 127),
    st.none() | st.integers(-(2**15), 2**15 - 1),
    st.none() | st.integers(-(2**31), 2**31 - 1),
    st.none() | floats32,
    st.none() | texts,
    st.none()
    | st.lists(
        st.none()
        | st.dictionaries(
            texts, st.none() | st.lists(st.none() | st.tuples(st.none() | st.booleans(), st.none() | texts))
        ),
        max_size=3,
    ),
    st.none()
    | st.tuples(
        st.none() | st.integers(-(2**63), 2**63 - 1), st.none() | st.lists(st.none() | floats32, max_size=3)
    ),
)


def _encode(df: Any, *, jvm: bool, **kwargs: Any) -> list[Any]:
    from babelq.spark.encode import encode

    return encode(  # type: ignore[no-any-return]
        df,
        urn=URN,
        queue="q",
        id=sf.lit("m-1"),
        trace_id=sf.lit("t-1"),
        created_at=sf.lit(CREATED),
        jvm=jvm,
        **kwargs,
    ).collect()


def _core(data: dict[str, Any]) -> bytes:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = make(URN, data, queue="q", trace_id="t-1", message_id="m-1", created_at=CREATED)
    return env.encode()


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(generated=st.lists(rows, min_size=40, max_size=40), omit=st.sampled_from([(), ("s", "opt")]))
def test_the_jvm_writer_and_the_sql_path_write_the_core_bytes(
    spark: Any, generated: list[Any], omit: tuple[str, ...]
) -> None:
    # maps here come back from collect() as Python dicts (order lost): keep at most one key
    generated = [
        (
            *row[:5],
            None if row[5] is None else [m if m is None else dict(list(m.items())[:1]) for m in row[5]],
            row[6],
        )
        for row in generated
    ]
    df = spark.createDataFrame(generated, SCHEMA)
    columns = df.columns
    by_jvm = _encode(df, jvm=True, data=columns, omit_null=omit)
    by_sql = _encode(df, jvm=False, data=columns, omit_null=omit)
    for fast, slow in zip(by_jvm, by_sql, strict=True):
        data = {name: plain(fast[name]) for name in columns if not (name in omit and fast[name] is None)}
        assert bytes(fast["body"]) == bytes(slow["body"]) == _core(data)


def test_a_null_data_struct_is_an_empty_object_on_both_paths(spark: Any) -> None:
    df = spark.sql("select cast(null as struct<a: long>) as d union all select named_struct('a', 7L)")
    for jvm in (True, False):
        bodies = sorted(bytes(r["body"]) for r in _encode(df, jvm=jvm, data=sf.col("d")))
        assert bodies == sorted([_core({}), _core({"a": 7})])


@pytest.mark.parametrize(
    ("sql", "path"),
    [
        ("named_struct('odd key', double('NaN'))", r'data\["odd key"\]'),
        (
            "named_struct('st', named_struct('y', array(named_struct('z', double('Infinity')))))",
            r"data\.st\.y\[\]\.z",
        ),
        ("named_struct('m', map('k', array(float('-Infinity'))))", r"data\.m\{\}\[\]"),
    ],
)
@pytest.mark.parametrize("jvm", [True, False], ids=["jvm-writer", "sql"])
def test_nan_anywhere_fails_with_the_same_path_on_both_paths(
    spark: Any, sql: str, path: str, jvm: bool
) -> None:
    df = spark.sql(f"select {sql} as d")
    with pytest.raises(Exception, match=path + ": NaN and Infinity are not allowed in JSON"):
        _encode(df, jvm=jvm, data=sf.col("d"))


def test_the_writer_is_one_catalog_function_call_in_the_plan(spark: Any) -> None:
    from babelq.spark.encode import encode
    from babelq.spark.jvm import DATA_JSON_FUNCTION, data_json

    assert data_json(spark) == DATA_JSON_FUNCTION
    assert data_json(spark, frozenset({2, 0})) == DATA_JSON_FUNCTION + "_omit_0_2"
    df = spark.createDataFrame([(1, "x")], "n long, s string")
    plan = encode(df, urn=URN, data=["n", "s"], queue="q")._jdf.queryExecution().optimizedPlan().toString()
    assert "DataJson" in plan and "replace(" not in plan  # nor the ids' escaping: encode made them
    given = encode(df, urn=URN, data=["n"], queue="q", trace_id=sf.col("s"))
    plan = given._jdf.queryExecution().optimizedPlan().toString()
    assert "JsonString" in plan and "replace(" not in plan and "RLIKE" not in plan


def test_without_the_function_catalog_encode_uses_the_sql_path(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from babelq.spark import jvm
    from babelq.spark.encode import encode

    monkeypatch.setattr(jvm, "data_json", lambda session, omit=frozenset(): None)
    df = spark.createDataFrame([(1, 'q"x', 0.1)], "n long, s string, d double")
    out = encode(
        df,
        urn=URN,
        data=["n", "s", "d"],
        queue="q",
        id=sf.lit("m-1"),
        trace_id=sf.lit("t-1"),
        created_at=sf.lit(CREATED),
    )
    assert "DataJson" not in out._jdf.queryExecution().optimizedPlan().toString()
    assert bytes(out.first()["body"]) == _core({"n": 1, "s": 'q"x', "d": 0.1})


def test_jvm_true_without_any_helper_is_a_configuration_error(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from babelq.spark import jvm
    from babelq.spark.encode import encode

    monkeypatch.setattr(jvm, "data_json", lambda session, omit=frozenset(): None)
    monkeypatch.setattr(jvm, "float_repr", lambda session: None)
    df = spark.createDataFrame([(1,)], "n long")
    with pytest.raises(ConfigurationError, match="not on this session's classpath"):
        encode(df, urn=URN, data=["n"], queue="q", jvm=True)


class _NoJarSession:
    """A session whose classpath lacks the jar, refusing ADD JAR (only the decision is tested)."""

    class _Conf:
        def get(self, key: str, default: Any = None) -> Any:
            return default

        def set(self, key: str, value: str) -> None:
            pass

    conf = _Conf()

    def sql(self, text: str) -> None:
        raise RuntimeError(f"cannot run {text!r} here")


def test_a_session_without_the_jar_has_no_writer() -> None:
    from babelq.spark.jvm import data_json

    session = _NoJarSession()
    assert data_json(session) is None
    assert data_json(session, frozenset({1})) is None  # decided once per session


@pytest.mark.parametrize(
    "name", ["data_json_v1_omit", "data_json_v1_omit_", "data_json_v1_omitx_1", "data_json_v2"]
)
def test_the_catalog_knows_only_its_function_names(spark: Any, name: str) -> None:
    from babelq.spark.jvm import FUNCTIONS_CATALOG, data_json

    assert data_json(spark) is not None
    with pytest.raises(Exception, match=r"(?i)function"):
        spark.sql(f"select {FUNCTIONS_CATALOG}.{name}(named_struct('a', 1))").schema  # noqa: B018


ODD_STRINGS = [
    'q"uote',
    "back\\slash",
    "\x00\x01\x1f",
    "tab\there\nnl\r\x0b\x0c\x08",
    "é/ü\u2028😀",
    "\x7f",
    "plain",
]


@pytest.mark.parametrize("jvm", [True, False], ids=["jvm-writer", "sql"])
def test_given_string_fields_are_escaped_like_the_core(spark: Any, jvm: bool) -> None:
    from babelq.spark.encode import encode

    values = [
        (s, f"id-{s}", f"c{s}", s if i % 2 else None, f"tx{s}", f"q{s}") for i, s in enumerate(ODD_STRINGS)
    ]
    df = spark.createDataFrame(
        values, "tr string, mid string, corr string, shard string, tx string, queue string"
    )
    out = encode(
        df,
        urn=URN,
        data=["tr"],
        queue=sf.col("queue"),
        trace_id=sf.col("tr"),
        id=sf.col("mid"),
        correlation_id=sf.col("corr"),
        sharding_key=sf.col("shard"),
        transaction_id=sf.col("tx"),
        created_at=sf.lit(CREATED),
        jvm=jvm,
    ).collect()
    for row in out:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = make(
                URN,
                {"tr": row["tr"]},
                queue=row["queue"],
                trace_id=row["tr"],
                message_id=row["mid"],
                created_at=CREATED,
                correlation_id=row["corr"],
                sharding_key=row["shard"],
                transaction_id=row["tx"],
            ).encode()
        assert bytes(row["body"]) == expected


def test_long_strings_grow_and_release_the_writers_buffer(spark: Any) -> None:
    texts = ["a" * 600 + '"' + "é" * 300 + "\n", "x" * (1 << 21) + "\\", "small\x01", "b" * 5000]
    df = spark.createDataFrame([(t, [t, None]) for t in texts], "s string, arr array<string>").coalesce(1)
    for row in _encode(df, jvm=True, data=["s", "arr"]):
        assert bytes(row["body"]) == _core({"s": row["s"], "arr": [row["s"], None]})
