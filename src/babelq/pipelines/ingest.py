"""Service A: validate a bulk payments file in Spark and publish one envelope per valid payment.

Reads CSV (every column as text, so ``12.50`` stays visible as a float and is rejected) or
Parquet, applies the SQL rules of :mod:`validation` and the URN's JSON Schema (compiled to a
Spark column, :mod:`envelopes`), writes the rejected rows aside with their reasons (Parquet or
CSV), and publishes ``transfer.requested`` envelopes for the rest through the ``babelq`` data
source in per-partition batches. All of it runs as Spark SQL on the JVM (the envelopes come
from :func:`babelq.spark.encode.encode`); Python only publishes the finished bodies. The
validated rows are cached once and read by three actions: the counts by reason, the rejects
and the publish. The batch id becomes every envelope's ``meta.correlation_id``, so a partial
failure can be traced back to its file.
"""

from __future__ import annotations

import csv
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from babelq.envelope import now_ms, uuid4
from babelq.pipelines.envelopes import EncodeSettings, encode_transfers, with_schema_check
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


_PLAIN_HEADER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def local_csv_header(path: str) -> list[str] | None:
    """The column names of a local CSV file, when reading them ourselves gives what Spark would
    (plain, unique names; no byte-order mark); ``None`` means "let Spark read the header"."""
    try:
        with open(path, "rb") as fh:
            first = fh.readline(65_536)
    except OSError:
        return None
    if first.startswith(b"\xef\xbb\xbf") or not first.endswith(b"\n"):
        return None
    try:
        names = next(csv.reader([first.decode("utf-8").rstrip("\r\n")]))
    except (UnicodeDecodeError, csv.Error, StopIteration):
        return None
    if not names or len(set(names)) != len(names) or not all(_PLAIN_HEADER.fullmatch(n) for n in names):
        return None
    return names


def read_bulk(spark: Any, source: str | Path) -> Any:
    """The bulk file as a DataFrame of its own columns (CSV: all strings; Parquet: as stored).

    For a local CSV file the header is read here and handed to Spark as an all-string schema,
    which spares the Spark job that would otherwise read the first line to name the columns.
    """
    path = str(source)
    if path.endswith(".parquet") or Path(path).is_dir():
        return spark.read.parquet(path)
    reader = spark.read.option("header", True).option("inferSchema", False).option("mode", "PERMISSIVE")
    names = local_csv_header(path)
    if names is not None:
        reader = reader.schema(", ".join(f"`{n}` STRING" for n in names))
    return reader.csv(path)


def write_rejects(rejects: Any, path: str, fmt: str) -> None:
    from pyspark.sql import functions as sf

    out = rejects.withColumn("reject_reason", sf.get("reasons", 0)).drop("amount")
    out = out.withColumn("reasons", sf.concat_ws(";", "reasons"))
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
    settings = EncodeSettings(queue, batch, ttl_seconds, now_ms())
    with clock.stage("ingest.validate") as st:
        rows = validate(normalise(read_bulk(spark, source)), limits)
        checked = with_schema_check(rows, settings.validated_at).persist()
        counts = checked.groupBy(sf.get("reasons", 0).alias("reason")).count().collect()
        rows_in = sum(int(r["count"]) for r in counts)
        by_reason = {r["reason"]: int(r["count"]) for r in counts if r["reason"] is not None}
        st.rows = rows_in
    rejected = sum(by_reason.values())
    published = rows_in - rejected
    try:
        with clock.stage("ingest.rejects") as st:
            write_rejects(checked.filter(sf.size("reasons") > 0), str(rejects_path), rejects_format)
            st.rows = rejected
        with clock.stage("ingest.publish") as st:
            bodies = encode_transfers(checked.filter(sf.size("reasons") == 0), settings)
            bodies.write.format("babelq").option("url", url).option("queue", queue).mode("append").save()
            st.rows = published
    finally:
        checked.unpersist()
    log.info("ingest %s: %d rows in, %d published to %s, %d rejected %s", batch, rows_in, published, queue,
             rejected, dict(sorted(by_reason.items())))
    return IngestResult(batch, rows_in, published, rejected, by_reason, str(rejects_path))
