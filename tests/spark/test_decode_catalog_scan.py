"""decode's envelope scan as a catalog function gives exactly the Java UDFs' rows.

The catalog function (``babelq_functions.envelope_scan_v1``) hands Spark its internal row where
the Java UDFs return ``Row`` objects Spark converts value by value; it is the default when the
jar is loaded. Every test here decodes the same bodies twice, once with the catalog function and
once with it switched off (the UDF path, as before it existed), and wants identical rows: typed
data (scalars, nulls, nested structs, arrays, maps, repeated keys), data as text, poison and
rejected bodies (same verdicts and reasons).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_decode_scanner import DATA_TYPE, NO_SHRINK, _bodies, _with_data, datas

pytestmark = pytest.mark.spark

T: Any = pytest.importorskip("pyspark.sql.types")

NESTED = (
    "struct<id: bigint, tags: array<string>, who: struct<name: string, langs: array<struct<code: string, "
    "level: int>>>, scores: map<string, array<double>>, flags: array<boolean>, note: string>"
)
NESTED_BODIES = [
    b'{"id":1,"tags":["a","\\u00e9",null],"who":{"name":"Zo\xc3\xab","langs":[{"code":"en","level":3},null,'
    b'{"level":"x"}]},"scores":{"k":[1,2.5,null],"k":[3],"j":null},"flags":[true,false,null],"note":{"x":[1]}}',
    b'{"id":null,"tags":null,"who":null,"scores":null,"flags":null,"note":null}',
    b'{"id":"1","tags":"a","who":[],"scores":[],"flags":{},"note":12.50}',
    b"{}",
    b'{"who":{"langs":[[],{}]},"tags":[1,true,{"a":"b"}],"note":"tab\\there"}',
]


def _decode(
    spark: Any, bodies: list[bytes], monkeypatch: pytest.MonkeyPatch, catalog: bool, **options: Any
) -> Any:
    from babelq.spark import jvm
    from babelq.spark.decode import decode

    with monkeypatch.context() as patch:
        if not catalog:
            patch.setattr(jvm, "catalog_scanner", lambda spark: None)
        df = spark.createDataFrame([(i, b) for i, b in enumerate(bodies)], "n int, body binary")
        out = decode(df, path_column="path", **options)
        plan = out._jdf.queryExecution().executedPlan().toString()
        return out.orderBy("n").collect(), plan


def _both(spark: Any, bodies: list[bytes], monkeypatch: pytest.MonkeyPatch, **options: Any) -> list[Any]:
    new, new_plan = _decode(spark, bodies, monkeypatch, True, **options)
    old, old_plan = _decode(spark, bodies, monkeypatch, False, **options)
    assert "EnvelopeScanFunction" in new_plan
    assert "EnvelopeScanFunction" not in old_plan
    assert new == old
    return list(new)


def _envelope(data: bytes) -> bytes:
    return _with_data({}).replace(b'"data":{}', b'"data":' + data)


def test_typed_nested_data_equals_the_udf_path(spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    schema = T._parse_datatype_string(NESTED)
    rows = _both(spark, [_envelope(d) for d in NESTED_BODIES], monkeypatch, data_schema=schema)
    assert {r["path"] for r in rows} == {"scan"}
    first = rows[0]["data"]
    assert first["who"]["name"] == "Zoë" and first["tags"] == ["a", "é", None]
    assert first["scores"] == {"k": [3.0], "j": None} and first["note"] == '{"x":[1]}'
    assert rows[1]["data"]["id"] is None and rows[2]["data"]["who"] is None


def test_grammar_corpus_gets_the_same_rows_typed_and_as_text(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    bodies = _bodies()
    schema = T._parse_datatype_string(DATA_TYPE)
    typed = _both(spark, bodies, monkeypatch, data_schema=schema)
    text = _both(spark, bodies, monkeypatch)
    assert any(r["path"] == "scan" for r in typed) and any(not r["accepted"] for r in text)


@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck), phases=NO_SHRINK)
@given(st.lists(datas, min_size=40, max_size=40))
def test_random_typed_data_equals_the_udf_path(
    spark: Any, monkeypatch: pytest.MonkeyPatch, datas: list[Any]
) -> None:
    schema = T._parse_datatype_string(DATA_TYPE)
    rows = _both(spark, [_with_data(d) for d in datas], monkeypatch, data_schema=schema)
    assert {r["path"] for r in rows} == {"scan"}


def test_a_type_the_reader_does_not_convert_uses_the_text_scan_and_from_json(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    schema = T._parse_datatype_string("struct<amount: decimal(10,2), n: bigint>")
    [row] = _both(spark, [_envelope(b'{"amount":"12.50","n":3}')], monkeypatch, data_schema=schema)
    assert str(row["data"]["amount"]) == "12.50" and row["data"]["n"] == 3


def test_the_catalog_function_refuses_a_type_it_cannot_read(spark: Any) -> None:
    from babelq.spark.jvm import ENVELOPE_SCAN_FUNCTION, catalog_scanner

    assert catalog_scanner(spark) == ENVELOPE_SCAN_FUNCTION
    with pytest.raises(Exception, match="envelope_scan_v1"):
        _ = spark.sql(
            f"SELECT {ENVELOPE_SCAN_FUNCTION}(CAST(NULL AS BINARY), CAST(NULL AS STRUCT<d: DECIMAL(10,2)>))"
        ).schema


#: values placed in fields the typed reader converts (it validates them as it reads them)
READ_VALUES = [
    b"[" * 300 + b"]" * 300, b"[" * 509 + b"]" * 509, b"[" * 512 + b"NaN" + b"]" * 512, b"[1,NaN]",
    b'["\\ud83d"]', b"[1e400]", b'{"a":"\\ud83d"}', b'{"a":"x","a":1e400}', b"[1,]", b'{"z":[1 2]}',
    b'"\xc3"', b"[" + b"1" * 5000 + b"]",
]  # fmt: skip


def test_bad_values_in_read_fields_get_the_core_verdict(spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_decode_scanner import _checked

    schema = T._parse_datatype_string(DATA_TYPE)
    bodies = [_envelope(b'{"arr":' + v + b',"st":' + v + b',"m":' + v + b"}") for v in READ_VALUES]
    bodies += [_envelope(b'{"s":' + v + b"}") for v in READ_VALUES]
    typed = _both(spark, bodies, monkeypatch, data_schema=schema)
    text = _both(spark, bodies, monkeypatch)
    _checked(text)  # the text path against the core; the typed path must give the same verdicts
    assert [(r["accepted"], r["reject_reason"]) for r in typed] == [
        (r["accepted"], r["reject_reason"]) for r in text
    ]
    assert not any(r["accepted"] for r in typed[:24] if b"[1,]" in bytes(r["body"]))
