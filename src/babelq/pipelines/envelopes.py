"""Validated bulk rows as ``transfer.requested`` data and envelopes, as Spark SQL expressions (on the JVM).

The data object embeds its ``validation_result`` (ingest's proof that the row passed). The URN's JSON
Schema (:data:`~babelq.pipelines.transfer_schema.TRANSFER_SCHEMA`) is compiled into a Spark
column by :mod:`babelq.spark.schema_check`, so a row that passes the SQL rules but not the
schema is rejected with the schema's message instead of being published. The envelopes come
from :func:`babelq.spark.encode.encode` (the core codec's bytes) with the bulk file's batch id
as ``meta.correlation_id``, ``requested_at`` (or the ingest time) + TTL as ``meta.expire_at``
and the debtor account as ``meta.sharding_key``. A blank ``narrative`` is left out of ``data``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from babelq.pipelines import TRANSFER_URN
from babelq.pipelines.transfer_schema import TRANSFER_SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

ACCOUNT_FIELDS = ("currency", "debtor_bsb", "debtor_account", "creditor_bsb", "creditor_account")
CHECKS = ["reference_present", "amount_integer_cents", "amount_within_limits", "currency_iso4217",
          "bsb_format", "account_format", "reference_unique_in_file", "schema"]


@dataclass(frozen=True, slots=True)
class EncodeSettings:
    queue: str
    batch_id: str
    default_ttl_seconds: int
    validated_at: int


def _blank(col: Column) -> Column:
    from pyspark.sql import functions as sf

    return col.isNull() | (sf.length(col) == 0)


def transfer_data(validated_at: int) -> Column:
    """The ``data`` struct of a validated row (``amount`` is the amount as a long); a blank
    ``narrative`` is null there, and is left out of the published object (``omit_null``)."""
    from pyspark.sql import functions as sf

    proof = sf.struct(
        sf.lit(True).alias("passed"),
        sf.array(*[sf.lit(c) for c in CHECKS]).alias("checks"),
        sf.lit(validated_at).cast("long").alias("validated_at"),
    )
    return sf.struct(
        sf.col("payment_reference"),
        sf.col("amount").alias("amount_cents"),
        *[sf.col(c) for c in ACCOUNT_FIELDS],
        proof.alias("validation_result"),
        sf.when(~_blank(sf.col("narrative")), sf.col("narrative")).alias("narrative"),
    )


#: data fields left out of the object when null
OMIT_NULL = ("narrative",)


def with_schema_check(checked: DataFrame, validated_at: int) -> DataFrame:
    """``checked`` (validated) plus ``schema_error``: the first violation of the URN's JSON Schema
    by the data a row without SQL-rule reasons would publish; such a row gets ``schema_invalid``."""
    from pyspark.sql import functions as sf

    from babelq.spark.schema_check import first_violation_of

    violation = first_violation_of(checked, transfer_data(validated_at), TRANSFER_SCHEMA, omit_null=OMIT_NULL)
    reasons = sf.when(sf.col("schema_error").isNotNull(), sf.array(sf.lit("schema_invalid")))
    return checked.withColumn("schema_error", sf.when(sf.size("reasons") == 0, violation)).withColumn(
        "reasons", reasons.otherwise(sf.col("reasons"))
    )


def encode_transfers(valid: DataFrame, settings: EncodeSettings) -> DataFrame:
    """One ``body`` (binary envelope) per row of ``valid``, built on the JVM.

    ``meta.id`` is a name-based UUID of the batch id and the payment reference
    (:mod:`~babelq.pipelines.payment_ids`): the same row of the same batch is the same
    message on every run, so a re-run after a crash is deduplicated by the consumer."""
    from pyspark.sql import functions as sf

    from babelq.pipelines.payment_ids import payment_id_column
    from babelq.spark.encode import encode

    requested = sf.coalesce(sf.col("requested_at").try_cast("long"), sf.lit(settings.validated_at))
    ttl = sf.coalesce(sf.col("ttl_seconds").try_cast("long"), sf.lit(settings.default_ttl_seconds))
    return encode(
        valid,
        urn=TRANSFER_URN,
        data=transfer_data(settings.validated_at),
        queue=settings.queue,
        correlation_id=sf.lit(settings.batch_id),
        id=payment_id_column(settings.batch_id, sf.col("payment_reference")),
        expire_at=(requested + ttl * 1000).cast("long"),
        sharding_key=sf.col("debtor_account"),
        omit_null=OMIT_NULL,
    ).select("body")
