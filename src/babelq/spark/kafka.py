"""Envelopes in Spark's Kafka source and sink shapes (docs/standard.md §4, the Kafka binding).

The binding projects six ``bq-*`` record headers (UTF-8 bytes) from the envelope and, on
consume, takes attempts from the ``bq-attempts`` header when present - authoritative even when
lower than the body's - else from the body. :func:`decode_kafka` applies that to a DataFrame
read with ``format("kafka")``; :func:`to_kafka` shapes encoded bodies for ``write.format("kafka")``.
Both stay in Spark SQL expressions.

Spark's Kafka sink cannot set the record timestamp, so the binding's "record timestamp =
meta.created_at" is not expressible here; consumers get created_at from the body.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from babelq.spark.decode import decode

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

#: Header name -> decoded column it projects, in the binding's order.
HEADER_FIELDS: tuple[tuple[str, str], ...] = (
    ("bq-job", "urn"),
    ("bq-trace-id", "trace_id"),
    ("bq-message-id", "id"),
    ("bq-schema-version", "schema_version"),
    ("bq-source-lang", "lang"),
    ("bq-attempts", "attempts"),
)


def header_value(headers: Column, name: str) -> Column:
    """The last value of header ``name`` as UTF-8 text, or null when absent."""
    from pyspark.sql import functions as sf

    matching = sf.filter(headers, lambda h: h["key"] == sf.lit(name))
    return sf.when(sf.size(matching) > 0, sf.element_at(matching, -1)["value"].cast("string"))


def decode_kafka(
    df: DataFrame,
    *,
    data_schema: StructType | None = None,
    data_json: bool | None = None,
) -> DataFrame:
    """Decode the ``value`` of Kafka records and reconcile attempts with ``bq-attempts``.

    Adds every column :func:`babelq.spark.decode.decode` adds, with ``attempts`` reconciled,
    plus ``body_attempts`` (what the body said) and ``bq_headers`` (a struct of the six
    ``bq-*`` header values as text, null when absent). A ``bq-attempts`` header that is not an
    integer is ignored (the body's value is used).
    """
    from pyspark.sql import functions as sf

    has_headers = "headers" in df.columns
    out = decode(df, "value", data_schema=data_schema, data_json=data_json)
    out = out.withColumnRenamed("attempts", "body_attempts")
    if has_headers:
        fields = [
            header_value(sf.col("headers"), name).alias(name.replace("-", "_")) for name, _ in HEADER_FIELDS
        ]
        bq_headers = sf.struct(*fields)
    else:
        bq_headers = sf.struct(
            *[sf.lit(None).cast("string").alias(n.replace("-", "_")) for n, _ in HEADER_FIELDS]
        )
    out = out.withColumn("bq_headers", bq_headers)
    header_attempts = sf.expr("try_cast(bq_headers.bq_attempts as bigint)")
    return out.withColumn("attempts", sf.coalesce(header_attempts, sf.col("body_attempts")))


def to_kafka(
    df: DataFrame,
    body: str = "body",
    *,
    topic: str | None = None,
    key: Column | None = None,
) -> DataFrame:
    """The Kafka sink shape: ``key`` (binary), ``value`` (the body bytes), ``headers`` (+ ``topic``).

    ``key`` defaults to the envelope's ``meta.sharding_key`` (null when it has none); headers
    are the binding's ``bq-*`` projection of each body. A header whose source field is absent
    (a rejected body) is left out rather than written empty.
    """
    from pyspark.sql import functions as sf

    decoded = decode(df, body, data_json=False)
    entries = [
        sf.struct(sf.lit(name).alias("key"), sf.col(column).cast("string").cast("binary").alias("value"))
        for name, column in HEADER_FIELDS
    ]
    present = sf.filter(sf.array(*entries), lambda h: h["value"].isNotNull() & (sf.length(h["value"]) > 0))
    key_col = key.cast("binary") if key is not None else sf.col("extensions.sharding_key").cast("binary")
    columns = [key_col.alias("key"), sf.col(body).cast("binary").alias("value"), present.alias("headers")]
    if topic is not None:
        columns.append(sf.lit(topic).alias("topic"))
    return decoded.select(*columns)
