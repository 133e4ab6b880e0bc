"""Ingest: each validation rule rejects with its reason; valid rows become envelopes on the broker."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from babelq.envelope import decode
from babelq.pipelines import TRANSFER_URN
from babelq.transports import open_transport

pytestmark = [pytest.mark.spark, pytest.mark.slow]

GOOD = {
    "payment_reference": "PAY-OK-1",
    "amount_cents": "150000",
    "currency": "AUD",
    "debtor_bsb": "012-345",
    "debtor_account": "123456789",
    "creditor_bsb": "033-001",
    "creditor_account": "987654321",
    "requested_at": "",
    "ttl_seconds": "",
    "narrative": "Invoice 1",
}

#: reason -> the one change that must trigger it
CASES: dict[str, dict[str, str]] = {
    "missing_reference": {"payment_reference": ""},
    "missing_field": {"creditor_bsb": ""},
    "amount_not_integer": {"amount_cents": "12.50"},
    "amount_out_of_range": {"amount_cents": "0"},
    "currency_unknown": {"currency": "AUX"},
    "debtor_bsb_invalid": {"debtor_bsb": "012345"},
    "creditor_bsb_invalid": {"creditor_bsb": "33-001"},
    "debtor_account_invalid": {"debtor_account": "12345"},
    "creditor_account_invalid": {"creditor_account": "12AB5678"},
    "ttl_invalid": {"ttl_seconds": "-5"},
    "requested_at_invalid": {"requested_at": "yesterday"},
}


def _write(path: Path, rows: list[dict[str, str]]) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(GOOD))
        writer.writeheader()
        writer.writerows(rows)


def test_each_rule_rejects_with_its_reason_and_valid_rows_are_published(
    spark: Any, tmp_path: Path, unique_queue: str
) -> None:
    from babelq.pipelines.ingest import ingest

    rows = []
    for i, (reason, change) in enumerate(CASES.items()):
        row = {**GOOD, "payment_reference": f"PAY-BAD-{i}", **change}
        row["narrative"] = reason
        rows.append(row)
    rows.append({**GOOD, "payment_reference": "PAY-OK-2", "amount_cents": "1500.0", "narrative": "float"})
    rows.append(GOOD)
    rows.append({**GOOD, "narrative": "duplicate of PAY-OK-1"})
    rows.append(
        {
            **GOOD,
            "payment_reference": "PAY-OK-3",
            "amount_cents": "99",
            "requested_at": "1700000000000",
            "ttl_seconds": "60",
        }
    )
    source = tmp_path / "bulk.csv"
    _write(source, rows)
    url = f"sqlite://{tmp_path}/q.db"

    result = ingest(
        spark,
        source,
        url=url,
        queue=unique_queue,
        rejects_path=tmp_path / "rejects",
        batch_id="bulk_ANZ_20250501_batch_0042",
        ttl_seconds=3600,
    )

    assert result.rows_in == len(rows)
    assert result.published == 2
    expected = {reason: 1 for reason in CASES}
    expected["amount_not_integer"] += 1  # "1500.0"
    expected["duplicate_reference"] = 1
    assert result.rejected_by_reason == expected
    # rows and value per (first reason, currency as written): integer amounts only, "0" included
    values = {(g.reason, g.currency): (g.rows, g.valued, g.minor) for g in result.values}
    assert values.pop((None, "AUD")) == (2, 2, 150_099)
    assert values.pop(("amount_not_integer", "AUD")) == (2, 0, 0)  # "12.50", "1500.0": no value
    assert values.pop(("amount_out_of_range", "AUD")) == (1, 1, 0)
    assert values.pop(("currency_unknown", "AUX")) == (1, 1, 150_000)
    assert values == {(reason, "AUD"): (1, 1, 150_000) for reason in expected if reason not in (
        "amount_not_integer", "amount_out_of_range", "currency_unknown")}

    aside = spark.read.parquet(str(tmp_path / "rejects")).collect()
    by_narrative = {r["narrative"]: r for r in aside}
    for reason in CASES:
        assert by_narrative[reason]["reject_reason"] == reason
    assert by_narrative["duplicate of PAY-OK-1"]["reject_reason"] == "duplicate_reference"
    assert by_narrative["float"]["reasons"] == "amount_not_integer"

    published = open_transport(url).reserve(unique_queue, max_messages=10)
    envs = sorted((decode(d.body) for d in published), key=lambda e: e.data["payment_reference"])
    assert [e.data["payment_reference"] for e in envs] == ["PAY-OK-1", "PAY-OK-3"]
    first, third = envs
    assert first.urn == TRANSFER_URN and first.accepts() and first.attempts == 0
    assert first.data["amount_cents"] == 150000 and type(first.data["amount_cents"]) is int
    assert first.data["validation_result"]["passed"] is True
    assert first.correlation_id == "bulk_ANZ_20250501_batch_0042"
    assert first.expire_at is not None and first.created_at is not None
    assert abs(first.expire_at - first.created_at - 3_600_000) < 120_000  # default TTL from ingest time
    assert third.expire_at == 1_700_000_060_000  # requested_at + the row's own ttl_seconds
    assert first.encode() == published[[decode(d.body).id for d in published].index(first.id)].body


def test_parquet_float_amounts_are_rejected(spark: Any, tmp_path: Path, unique_queue: str) -> None:
    from babelq.pipelines.ingest import ingest

    frame = spark.createDataFrame(
        [("PAY-P-1", 1250.0, "AUD"), ("PAY-P-2", 100.0, "AUD")],
        "payment_reference STRING, amount_cents DOUBLE, currency STRING",
    ).selectExpr(
        "*",
        "'012-345' AS debtor_bsb",
        "'123456' AS debtor_account",
        "'033-001' AS creditor_bsb",
        "'654321' AS creditor_account",
    )
    source = tmp_path / "bulk.parquet"
    frame.write.parquet(str(source))
    result = ingest(
        spark,
        source,
        url=f"sqlite://{tmp_path}/q.db",
        queue=unique_queue,
        rejects_path=tmp_path / "rejects",
        rejects_format="csv",
    )
    assert result.published == 0
    assert result.rejected_by_reason == {"amount_not_integer": 2}
    assert [tuple(g) for g in result.values] == [("amount_not_integer", "AUD", 2, 0, 0)]
    assert list((tmp_path / "rejects").glob("*.csv"))
