"""The Kafka binding on Spark's Kafka source/sink shapes, checked against the conformance block."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from babelq.envelope import decode as core_decode

pytestmark = pytest.mark.spark

sf: Any = pytest.importorskip("pyspark.sql.functions")
CONFORMANCE = Path(__file__).resolve().parents[1] / "conformance"
KAFKA_ROW = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "headers array<struct<key:string,value:binary>>"
)


def _manifest() -> dict[str, Any]:
    return json.loads((CONFORMANCE / "manifest.json").read_text())  # type: ignore[no-any-return]


def test_attempts_reconciliation_cases(spark: Any) -> None:
    from babelq.spark.kafka import decode_kafka

    block = _manifest()["kafka"]["attempts_reconciliation"]
    base = core_decode((CONFORMANCE / "fixtures" / "order-created.json").read_bytes())
    rows = []
    for offset, case in enumerate(block["cases"]):
        body = base.with_attempts(case["body_attempts"]).encode()
        headers = [("bq-job", b"urn:babel:orders:created")]
        if case["header_attempts"] is not None:
            headers.append(("bq-attempts", str(case["header_attempts"]).encode()))
        rows.append((None, body, "orders", 0, offset, None, headers))
    out = decode_kafka(spark.createDataFrame(rows, KAFKA_ROW)).orderBy("offset").collect()
    for case, row in zip(block["cases"], out, strict=True):
        assert row["attempts"] == case["expected_attempts"], case["name"]
        assert row["body_attempts"] == case["body_attempts"]
        assert row["accepted"]
        assert row["bq_headers"]["bq_job"] == "urn:babel:orders:created"


def test_non_numeric_attempts_header_falls_back_to_the_body(spark: Any) -> None:
    from babelq.spark.kafka import decode_kafka

    body = core_decode((CONFORMANCE / "fixtures" / "unicode-and-numbers.json").read_bytes()).encode()
    df = spark.createDataFrame([(None, body, "t", 0, 0, None, [("bq-attempts", b"many")])], KAFKA_ROW)
    assert decode_kafka(df).first()["attempts"] == 2


def test_sink_shape_projects_the_conformance_headers(spark: Any) -> None:
    from babelq.spark.kafka import to_kafka

    block = _manifest()["kafka"]["property_projection"]
    body = (CONFORMANCE / block["envelope_file"]).read_bytes()
    canonical = core_decode(body).encode()
    row = to_kafka(spark.createDataFrame([(canonical,)], "body binary"), topic="orders").first()
    assert bytes(row["value"]) == canonical
    assert row["topic"] == "orders"
    assert row["key"] is None
    assert {h["key"]: bytes(h["value"]).decode() for h in row["headers"]} == block["headers"]
    assert [h["key"] for h in row["headers"]] == list(block["headers"])


def test_sink_key_is_the_sharding_key(spark: Any) -> None:
    from babelq.spark.encode import encode
    from babelq.spark.kafka import to_kafka

    df = spark.createDataFrame([("cust-9", 1)], "customer string, n long")
    encoded = encode(
        df, urn="urn:babel:orders:created", data=["n"], queue="orders", sharding_key=sf.col("customer")
    )
    row = to_kafka(encoded).first()
    assert bytes(row["key"]) == b"cust-9"
    assert "topic" not in row.asDict()
