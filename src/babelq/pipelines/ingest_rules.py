"""The bulk file's business rules as Spark SQL expressions (no Python per row).

Each rule is a boolean column that is true when a row breaks it; a row's ``reasons`` is the
array of the rules it breaks, in rule order, so a rejected row says everything wrong with it
at once, except a CSV record whose field count is not the header's (``field_count_mismatch``):
its cells are not where the header says, so they are not judged, and it claims no reference.
Amounts are integer cents written as digits: ``12.50``, ``1e3`` or a float column
are rejected, never rounded. Duplicate references keep the first occurrence in file order
and reject the later ones.

The payment rules are not written here: the currency list, the BSB and account patterns and the
amount bounds are read from the transfer schema (:func:`~babelq.pipelines.transfer_schema.field_schema`),
its patterns run through the schema check's own translation to Java regexes
(:func:`~babelq.spark.schema_check.java_regex`, so ``rlike`` finds what jsonschema's ``re.search``
finds). What is left here is what the schema cannot say about a CSV cell: blank cells, amounts
written as digits, ``ttl_seconds`` and ``requested_at``, and duplicate references.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from babelq.errors import ConfigurationError
from babelq.pipelines.bulk_files import CSV_RECORD, FIELD_COUNT_MISMATCH
from babelq.pipelines.transfer_schema import field_schema
from babelq.spark.schema_check import java_regex

FIELDS = (
    "payment_reference", "amount_cents", "currency", "debtor_bsb", "debtor_account",
    "creditor_bsb", "creditor_account",
)
OPTIONAL_FIELDS = ("requested_at", "ttl_seconds", "narrative")

__all__ = ["CSV_RECORD", "DIGITS", "FIELDS", "FIELD_COUNT_MISMATCH", "OPTIONAL_FIELDS", "Limits", "normalise",
           "rule_columns", "validate"]


DIGITS = r"^-?[0-9]{1,18}$"  # an amount cell as written: an integer, before it is read as a long

_AMOUNT = field_schema("amount_cents")


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-payment limits (integer cents) of one ingest run, within the transfer schema's bounds.

    The schema's ``amount_cents`` ``minimum`` and ``maximum`` are the defaults and the outer
    limits: settle holds every transfer to the schema, so a run may narrow the range (a file of
    small payments only) but not widen it, which would publish payments settle dead-letters.
    """

    min_amount_cents: int = _AMOUNT["minimum"]
    max_amount_cents: int = _AMOUNT["maximum"]

    def __post_init__(self) -> None:
        low, high = _AMOUNT["minimum"], _AMOUNT["maximum"]
        if not low <= self.min_amount_cents <= self.max_amount_cents <= high:
            raise ConfigurationError(
                f"amount limits {self.min_amount_cents}..{self.max_amount_cents} cents must lie within the "
                f"transfer schema's {low}..{high} (a limit may narrow the schema's range, not widen it)"
            )


def normalise(df: Any) -> Any:
    """Every expected column as a trimmed string (missing optional columns become null), plus
    ``csv_record`` (the text of a CSV record of the wrong field count, else null) and ``row_no``."""
    from pyspark.sql import functions as sf

    cols = []
    for name in FIELDS + OPTIONAL_FIELDS:
        if name in df.columns:
            cols.append(sf.trim(sf.col(name).cast("string")).alias(name))
        else:
            cols.append(sf.lit(None).cast("string").alias(name))
    record = sf.col(CSV_RECORD) if CSV_RECORD in df.columns else sf.lit(None).cast("string")
    cols.append(record.alias("csv_record"))
    return df.select(*cols).withColumn("row_no", sf.monotonically_increasing_id())


def _blank(col: Any) -> Any:
    from pyspark.sql import functions as sf

    return col.isNull() | (sf.length(col) == 0)


def _breaks_pattern(field: str) -> Any:
    """True when the field is filled in but does not match its pattern in the transfer schema."""
    from pyspark.sql import functions as sf

    pattern = java_regex(field_schema(field)["pattern"], f"#/properties/{field}/pattern")
    return ~_blank(sf.col(field)) & ~sf.col(field).rlike(pattern)


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
        ("currency_unknown",
         ~_blank(sf.col("currency")) & ~sf.col("currency").isin(*field_schema("currency")["enum"])),
        ("debtor_bsb_invalid", _breaks_pattern("debtor_bsb")),
        ("creditor_bsb_invalid", _breaks_pattern("creditor_bsb")),
        ("debtor_account_invalid", _breaks_pattern("debtor_account")),
        ("creditor_account_invalid", _breaks_pattern("creditor_account")),
        ("ttl_invalid",
         ~_blank(ttl) & (~ttl.rlike(r"^[0-9]{1,9}$") | (sf.expr("try_cast(ttl_seconds AS INT)") < 1))),
        ("requested_at_invalid", ~_blank(requested) & ~requested.rlike(r"^[0-9]{1,15}$")),
    ]


def validate(df: Any, limits: Limits | None = None) -> Any:
    """``df`` (normalised) with ``reasons`` (array<string>, empty when valid) and ``amount`` (bigint).

    A record of the wrong field count has the one reason ``field_count_mismatch``."""
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    rules = rule_columns(limits or Limits())
    flagged = [sf.when(broken, sf.lit(reason)) for reason, broken in rules]
    misshapen = sf.col("csv_record").isNotNull()
    # a misshapen record's reference may be a piece of another cell: it is kept apart, so it never
    # makes a later valid payment a duplicate
    first = Window.partitionBy(sf.col("payment_reference"), misshapen).orderBy("row_no")
    dup = sf.when(
        ~_blank(sf.col("payment_reference")) & (sf.row_number().over(first) > 1),
        sf.lit("duplicate_reference"),
    )
    reasons = sf.when(misshapen, sf.array(sf.lit(FIELD_COUNT_MISMATCH))).otherwise(
        sf.filter(sf.array(*flagged, dup), lambda x: x.isNotNull()))
    return (
        df.withColumn("reasons", reasons)
        .withColumn("amount", sf.expr("try_cast(amount_cents AS BIGINT)"))
    )
