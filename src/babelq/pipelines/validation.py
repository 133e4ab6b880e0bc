"""The bulk file's business rules as Spark SQL expressions (no Python per row).

Each rule is a boolean column that is true when a row breaks it; a row's ``reasons`` is the
array of the rules it breaks, in rule order, so a rejected row says everything wrong with it
at once. Amounts are integer cents written as digits: ``12.50``, ``1e3`` or a float column
are rejected, never rounded. Duplicate references keep the first occurrence in file order
and reject the later ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from babelq.pipelines.currencies import ISO_4217

FIELDS = (
    "payment_reference", "amount_cents", "currency", "debtor_bsb", "debtor_account",
    "creditor_bsb", "creditor_account",
)
OPTIONAL_FIELDS = ("requested_at", "ttl_seconds", "narrative")

BSB = r"^[0-9]{3}-[0-9]{3}$"
ACCOUNT = r"^[0-9]{6,10}$"
DIGITS = r"^-?[0-9]{1,18}$"


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-payment limits (integer cents)."""

    min_amount_cents: int = 1
    max_amount_cents: int = 100_000_000  # 1,000,000.00


def normalise(df: Any) -> Any:
    """Every expected column as a trimmed string (missing optional columns become null), plus ``row_no``."""
    from pyspark.sql import functions as sf

    cols = []
    for name in FIELDS + OPTIONAL_FIELDS:
        if name in df.columns:
            cols.append(sf.trim(sf.col(name).cast("string")).alias(name))
        else:
            cols.append(sf.lit(None).cast("string").alias(name))
    return df.select(*cols).withColumn("row_no", sf.monotonically_increasing_id())


def _blank(col: Any) -> Any:
    from pyspark.sql import functions as sf

    return col.isNull() | (sf.length(col) == 0)


def rule_columns(limits: Limits) -> list[tuple[str, Any]]:
    """(reason, broken-when column) pairs, in the order reasons are reported."""
    from pyspark.sql import functions as sf

    amount = sf.col("amount_cents")
    as_long = sf.expr("try_cast(amount_cents AS BIGINT)")
    missing = [
        _blank(sf.col(c)) for c in ("currency", "debtor_bsb", "debtor_account", "creditor_bsb",
                                   "creditor_account")
    ]
    any_missing = missing[0]
    for m in missing[1:]:
        any_missing = any_missing | m
    ttl = sf.col("ttl_seconds")
    requested = sf.col("requested_at")
    return [
        ("missing_reference", _blank(sf.col("payment_reference"))),
        ("missing_field", any_missing),
        ("amount_not_integer", _blank(amount) | ~amount.rlike(DIGITS)),
        ("amount_out_of_range", amount.rlike(DIGITS) & (
            as_long.isNull() | (as_long < limits.min_amount_cents) | (as_long > limits.max_amount_cents))),
        ("currency_unknown", ~_blank(sf.col("currency")) & ~sf.col("currency").isin(*sorted(ISO_4217))),
        ("debtor_bsb_invalid", ~_blank(sf.col("debtor_bsb")) & ~sf.col("debtor_bsb").rlike(BSB)),
        ("creditor_bsb_invalid", ~_blank(sf.col("creditor_bsb")) & ~sf.col("creditor_bsb").rlike(BSB)),
        ("debtor_account_invalid",
         ~_blank(sf.col("debtor_account")) & ~sf.col("debtor_account").rlike(ACCOUNT)),
        ("creditor_account_invalid",
         ~_blank(sf.col("creditor_account")) & ~sf.col("creditor_account").rlike(ACCOUNT)),
        ("ttl_invalid",
         ~_blank(ttl) & (~ttl.rlike(r"^[0-9]{1,9}$") | (sf.expr("try_cast(ttl_seconds AS INT)") < 1))),
        ("requested_at_invalid", ~_blank(requested) & ~requested.rlike(r"^[0-9]{1,15}$")),
    ]


def validate(df: Any, limits: Limits | None = None) -> Any:
    """``df`` (normalised) with ``reasons`` (array<string>, empty when valid) and ``amount`` (bigint)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    rules = rule_columns(limits or Limits())
    flagged = [sf.when(broken, sf.lit(reason)) for reason, broken in rules]
    first = Window.partitionBy("payment_reference").orderBy("row_no")
    dup = sf.when(
        ~_blank(sf.col("payment_reference")) & (sf.row_number().over(first) > 1),
        sf.lit("duplicate_reference"),
    )
    return (
        df.withColumn("reasons", sf.filter(sf.array(*flagged, dup), lambda x: x.isNotNull()))
        .withColumn("amount", sf.expr("try_cast(amount_cents AS BIGINT)"))
    )
