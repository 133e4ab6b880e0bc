"""Service A: validate a bulk payments file in Spark and publish one envelope per valid payment.

Reads CSV (every column as text, so ``12.50`` stays visible as a float and is rejected) or
Parquet, applies the SQL rules of :mod:`validation`, writes the rejected rows aside with
their reasons (Parquet or CSV), builds ``transfer.requested`` envelopes for the rest
(:mod:`envelopes`) and publishes them through the ``babelq`` data source in per-partition
batches. The batch id becomes every envelope's ``meta.correlation_id``, so a partial
failure can be traced back to its file.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from babelq.envelope import now_ms, uuid4
from babelq.pipelines.envelopes import ENCODED_SCHEMA, EncodeSettings, encode_partition
from babelq.pipelines.stages import StageClock
from babelq.pipelines.validation import Limits, normalise, validate

log = logging.getLogger(__name__)

DEFAULT_QUEUE = "payments"
DEFAULT_TTL_SECONDS = 86_400


@dataclass(slots=True)
class IngestResult:
    batch_id: str
    rows_in: int
    published: int
    rejected: int
    rejected_by_reason: dict[str, int] = field(default_factory=dict)
    rejects_path: str = ""


def read_bulk(spark: Any, source: str | Path) -> Any:
    """The bulk file as a DataFrame of its own columns (CSV: all strings; Parquet: as stored)."""
    path = str(source)
    if path.endswith(".parquet") or Path(path).is_dir():
        return spark.read.parquet(path)
    reader = spark.read.option("header", True).option("inferSchema", False)
    return reader.option("mode", "PERMISSIVE").csv(path)


def write_rejects(rejects: Any, path: str, fmt: str) -> None:
    from pyspark.sql import functions as sf

    out = rejects.withColumn("reasons", sf.concat_ws(";", "reasons"))
    writer = out.coalesce(1).write.mode("overwrite")
    if fmt == "csv":
        writer.option("header", True).csv(path)
    else:
        writer.parquet(path)


def ingest(
    spark: Any,
    source: str | Path,
    *,
    url: str,
    queue: str = DEFAULT_QUEUE,
    rejects_path: str | Path,
    batch_id: str | None = None,
    ttl_seconds: int = DEFAULT_TTL_SECONDS,
    limits: Limits | None = None,
    rejects_format: str = "parquet",
    clock: StageClock | None = None,
) -> IngestResult:
    """Validate ``source`` and publish its valid payments to ``queue`` at ``url``."""
    from pyspark.sql import functions as sf

    from babelq.spark.datasource import register

    register(spark)
    clock = clock or StageClock()
    batch = batch_id or f"bulk_{uuid4()[:8]}"
    with clock.stage("ingest.validate") as st:
        checked = validate(normalise(read_bulk(spark, source)), limits).persist()
        rows_in = checked.count()
        st.rows = rows_in
        bad = checked.filter(sf.size("reasons") > 0)
        by_reason = {
            r["reason"]: int(r["n"])
            for r in bad.groupBy(sf.col("reasons")[0].alias("reason")).agg(sf.count("*").alias("n")).collect()
        }
    with clock.stage("ingest.encode") as st:
        settings = EncodeSettings(queue, batch, ttl_seconds, now_ms())
        valid = checked.filter(sf.size("reasons") == 0)
        encoded = valid.mapInArrow(partial(encode_partition, settings=settings), ENCODED_SCHEMA).persist()
        schema_bad = encoded.filter(sf.col("schema_error").isNotNull())
        n_schema_bad = schema_bad.count()
        st.rows = rows_in - sum(by_reason.values())
    if n_schema_bad:
        by_reason["schema_invalid"] = n_schema_bad
    rejected = sum(by_reason.values())
    with clock.stage("ingest.rejects") as st:
        schema_rows = schema_bad.select("row_no", "schema_error").join(checked, "row_no").select(
            *[c for c in checked.columns if c != "reasons"],
            sf.array(sf.lit("schema_invalid")).alias("reasons"), "schema_error",
        )
        aside = bad.withColumn("schema_error", sf.lit(None).cast("string")).unionByName(schema_rows)
        aside = aside.withColumn("reject_reason", sf.col("reasons")[0]).drop("amount")
        write_rejects(aside, str(rejects_path), rejects_format)
        st.rows = rejected
    with clock.stage("ingest.publish") as st:
        to_publish = encoded.filter(sf.col("body").isNotNull()).select("body")
        (to_publish.write.format("babelq").option("url", url).option("queue", queue)
         .mode("append").save())
        published = rows_in - rejected
        st.rows = published
    encoded.unpersist()
    checked.unpersist()
    log.info("ingest %s: %d rows in, %d published to %s, %d rejected %s", batch, rows_in, published, queue,
             rejected, dict(sorted(by_reason.items())))
    return IngestResult(batch, rows_in, published, rejected, by_reason, str(rejects_path))
