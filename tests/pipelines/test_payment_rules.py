"""Ingest's SQL rules are the transfer schema's rules: same patterns, currencies and amount bounds.

Each field rule (``currency_unknown``, ``debtor_bsb_invalid``...) must reject a filled-in cell
exactly when the schema's property refuses the value, checked here against jsonschema on values
that tell the engines apart (a trailing newline or carriage return, digits of other scripts).
``Limits`` default to the schema's amount bounds and may only narrow them.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from babelq.errors import ConfigurationError
from babelq.pipelines.ingest_rules import Limits
from babelq.pipelines.transfer_schema import TRANSFER_SCHEMA, field_schema

#: reason -> (field, values to try)
FIELD_RULES: dict[str, tuple[str, list[str]]] = {
    "currency_unknown": ("currency", ["AUD", "EUR", "XYZ", "AUX", "aud", "AUD\n", "AU", "AUDD", "ZWL"]),
    "debtor_bsb_invalid": ("debtor_bsb", ["012-345", "012345", "12-345", "012-345\n", "012-345\r",
                                          "012-345\u2028", "٠١٢-٣٤٥", "0123-456", "ABC-123"]),
    "creditor_bsb_invalid": ("creditor_bsb", ["033-001", "33-001", "033-001\r\n", "\n033-001"]),
    "debtor_account_invalid": ("debtor_account", ["123456", "1234567890", "12345", "12345678901",
                                                  "123456\n", "123456\r", "١٢٣٤٥٦", "12A456"]),
    "creditor_account_invalid": ("creditor_account", ["987654321", "12AB5678", "9876543210\u0085"]),
}
GOOD = {"payment_reference": "PAY-1", "amount_cents": "1000", "currency": "AUD", "debtor_bsb": "012-345",
        "debtor_account": "123456789", "creditor_bsb": "033-001", "creditor_account": "987654321"}


def test_limits_default_to_the_schemas_amount_bounds() -> None:
    amount = field_schema("amount_cents")
    assert amount is TRANSFER_SCHEMA["properties"]["amount_cents"]
    assert (Limits().min_amount_cents, Limits().max_amount_cents) == (amount["minimum"], amount["maximum"])


@pytest.mark.parametrize("limits", [(0, 1000), (1, 100_000_001), (1, 10**12), (500, 100)])
def test_limits_may_not_widen_the_schemas_bounds(limits: tuple[int, int]) -> None:
    with pytest.raises(ConfigurationError, match=r"within the transfer schema's 1\.\.100000000"):
        Limits(*limits)


def test_limits_may_narrow_the_schemas_bounds() -> None:
    assert Limits(100, 5_000).max_amount_cents == 5_000


@pytest.mark.spark
def test_field_rules_reject_exactly_what_the_schema_refuses(spark: Any) -> None:
    from babelq.pipelines.ingest_rules import normalise, validate

    rows = []
    for reason, (field, values) in FIELD_RULES.items():
        rows += [{**GOOD, "payment_reference": f"{reason}-{i}", field: value, "_reason": reason,
                  "_field": field} for i, value in enumerate(values)]
    columns = [*GOOD, "_reason", "_field"]
    ddl = ", ".join(f"{c} string" for c in columns)
    df = spark.createDataFrame([tuple(r[c] for c in columns) for r in rows], ddl)
    got = {r["payment_reference"]: list(r["reasons"]) for r in validate(normalise(df)).collect()}
    for row in rows:
        field = str(row["_field"])
        refused = not jsonschema.Draft202012Validator(field_schema(field)).is_valid(row[field])
        expected = [row["_reason"]] if refused else []
        assert got[row["payment_reference"]] == expected, (field, row[field])


@pytest.mark.spark
def test_amount_rule_follows_the_limits(spark: Any) -> None:
    from babelq.pipelines.ingest_rules import normalise, validate

    amounts = ["1", "100000000", "100000001", "0", "99", "5000", "5001"]
    df = spark.createDataFrame([(f"PAY-{a}", a) for a in amounts],
                               "payment_reference string, amount_cents string")
    df = df.selectExpr("*", *[f"'{v}' AS {k}" for k, v in GOOD.items() if k not in df.columns])

    def out_of_range(limits: Limits | None) -> list[str]:
        rows = validate(normalise(df), limits).collect()
        return sorted(r["amount_cents"] for r in rows if "amount_out_of_range" in r["reasons"])

    assert out_of_range(None) == ["0", "100000001"]
    assert out_of_range(Limits(100, 5_000)) == ["0", "1", "100000000", "100000001", "5001", "99"]
