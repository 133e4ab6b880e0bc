"""Publish (any producer's bulk file): check each row of a CSV, JSON lines or Parquet file in
Spark, publish one envelope of a given URN per valid row, write the others aside with reasons.

The same machinery as the payments ingest (:mod:`babelq.pipelines.ingest`), without its payment
rules: the file is read by :mod:`~babelq.pipelines.publish_rows` (CSV per RFC 4180, a record of
the wrong field count rejected with its line), each row's object is held to the URN's JSON
Schema when one is given (compiled to a Spark column by :mod:`babelq.spark.schema_check`), the
rejects and the publish are :func:`~babelq.pipelines.batch_runs.reject_and_publish`'s and the
batch journal makes running it again safe.

Running it again publishes nothing twice: the batch id defaults to a hash of the file and the URN,
and a row's ``meta.id`` is a name-based UUID (:mod:`~babelq.pipelines.message_ids`) of the batch
id and the row's key: the value of its ``id_column``, or without one its position in the file
(``#1`` for the first row). The journal tells a re-run whether the batch was interrupted
(``resumed``: published again, same ids) or finished (``already_published``: nothing, unless
``republish``).

Reasons, in the order they are looked for: ``field_count_mismatch`` (a CSV record with more or
fewer fields than the header), ``not_a_json_object`` (a JSON line that is not one), then
``type_mismatch`` (a value that is not its declared type), ``missing_id`` (a blank
``id_column``), ``duplicate_id`` (an id value an earlier row has), and ``schema_invalid`` for a
row that broke none of those but not the schema. ``reject_error`` says what, naming the column.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from babelq.envelope import now_ms
from babelq.errors import ConfigurationError
from babelq.outbox import DEFAULT_TABLE
from babelq.pipelines.batch_runs import (
    PUBLISHED_NOW,
    BatchPlan,
    BatchResult,
    CheckedRows,
    PublishTarget,
    plan_batch,
    reject_and_publish,
    run_batch,
)
from babelq.pipelines.bulk_files import FIELD_COUNT_MISMATCH, check_source
from babelq.pipelines.ingest_outbox import StagePlan, StageTarget, plan_staging, stage_batch
from babelq.pipelines.journal import IngestJournal, default_journal
from babelq.pipelines.message_ids import message_id_column
from babelq.pipelines.progress import bulk_file_rows
from babelq.pipelines.publish_rows import format_of, read_rows
from babelq.pipelines.publish_schema import declared_types
from babelq.pipelines.stages import StageClock, reasons_text
from babelq.schema.subset import JsonSchema
from babelq.spark.cache import cache_uncompressed

log = logging.getLogger(__name__)

DEFAULT_QUEUE = "default"
DEFAULT_TTL_SECONDS = 86_400
#: the journal's file beside the rejects unless one is given
JOURNAL_NAME = "publish-journal.db"

NOT_AN_OBJECT = "not_a_json_object"
TYPE_MISMATCH = "type_mismatch"
MISSING_ID = "missing_id"
DUPLICATE_ID = "duplicate_id"
SCHEMA_INVALID = "schema_invalid"

#: the low bits of a monotonically increasing id: the row's index in its partition
_IN_PARTITION = (1 << 33) - 1


@dataclass(frozen=True, slots=True)
class PublishSpec:
    """What the rows of a file are published as."""

    urn: str
    schema: JsonSchema | None = None  #: None: every row that is an object is valid
    id_column: str | None = None  #: None: a row's key is its position in the file
    format: str | None = None  #: csv, jsonl or parquet; None: from the file's name


def batch_id_of(digest: str, urn: str) -> str:
    """The default batch id of a file (its SHA-256 ``digest``) published as ``urn``: the same file
    published as two URNs is two batches."""
    return "bulk_" + hashlib.sha256(f"{digest}\n{urn}".encode()).hexdigest()[:16]


def checked_source(source: str | Path, spec: PublishSpec) -> Path:
    """``source`` as a path, or a one-line error saying what is wrong with it (a CSV header without
    the ``id_column`` too)."""
    fmt = format_of(source, spec.format)

    def has_id(names: list[str], path: Path) -> None:
        if spec.id_column is not None and spec.id_column not in names:
            raise ConfigurationError(f"--id-column {spec.id_column}: {path} has no such column "
                                     f"(it has {', '.join(names)})")

    return check_source(source, csv_file=fmt == "csv", header=has_id)


def plan_publish(
    source: str | Path, journal: IngestJournal, spec: PublishSpec, batch_id: str | None = None
) -> BatchPlan:
    """Check ``source``, hash it, name its batch and look it up in the journal."""
    return plan_batch(checked_source(source, spec), journal, batch_id,
                      default_id=lambda digest: batch_id_of(digest, spec.urn))


def plan_publish_staging(
    source: str | Path, outbox_url: str, spec: PublishSpec, batch_id: str | None = None,
    table: str = DEFAULT_TABLE,
) -> StagePlan:
    """Check ``source``, hash it, name its batch and look it up in the outbox's batch records."""
    return plan_staging(source, outbox_url, batch_id=batch_id, table=table,
                        check=lambda path: checked_source(path, spec),
                        default_id=lambda digest: batch_id_of(digest, spec.urn))


def publish(
    spark: Any,
    source: str | Path,
    spec: PublishSpec,
    *,
    url: str,
    queue: str = DEFAULT_QUEUE,
    rejects_path: str | Path,
    batch_id: str | None = None,
    ttl_seconds: int = DEFAULT_TTL_SECONDS,
    rejects_format: str = "parquet",
    clock: StageClock | None = None,
    journal: str | Path | None = None,
    republish: bool = False,
    plan: BatchPlan | None = None,
) -> BatchResult:
    """Check the rows of ``source`` and publish the valid ones as ``spec.urn`` envelopes to ``queue``
    at ``url`` (module docstring). ``journal`` defaults to ``publish-journal.db`` beside the
    rejects; ``plan`` is :func:`plan_publish`'s answer when the caller already asked."""
    from babelq.pipelines.cluster_checks import check_session_targets

    check_session_targets(spark, broker=url)
    book = IngestJournal(journal or default_journal(rejects_path, JOURNAL_NAME))
    target = PublishTarget(url, queue, rejects_path, rejects_format)
    try:
        plan = plan or plan_publish(source, book, spec, batch_id)
        return run_batch(
            book, plan, republish=republish, rejects_path=rejects_path, what="publish",
            result_type=BatchResult,
            publish=lambda p: _publish(spark, p, book, spec, target=target, ttl_seconds=ttl_seconds,
                                       clock=clock or StageClock()))
    finally:
        book.close()


def stage_publish(
    spark: Any,
    source: str | Path,
    spec: PublishSpec,
    *,
    outbox_url: str,
    queue: str = DEFAULT_QUEUE,
    rejects_path: str | Path,
    batch_id: str | None = None,
    ttl_seconds: int = DEFAULT_TTL_SECONDS,
    rejects_format: str = "parquet",
    table: str = DEFAULT_TABLE,
    restage: bool = False,
    plan: StagePlan | None = None,
) -> BatchResult:
    """Check the rows of ``source`` and stage the valid ones' envelopes in the outbox at
    ``outbox_url``, in one transaction with the batch's record (:mod:`~babelq.pipelines.ingest_outbox`),
    for ``babelq relay`` to publish. A batch already staged is not staged again unless ``restage``."""
    plan = plan or plan_publish_staging(source, outbox_url, spec, batch_id, table)
    staging = plan

    def check() -> CheckedRows:
        return check_rows(spark, staging.path, spec, batch_id=staging.batch_id, queue=queue,
                          ttl_seconds=ttl_seconds, csv_rejects=rejects_format == "csv")

    target = StageTarget(outbox_url, table, queue, rejects_path, rejects_format)
    return stage_batch(spark, plan, target, check, restage=restage, what="publish", result_type=BatchResult)


def _publish(
    spark: Any, plan: BatchPlan, book: IngestJournal, spec: PublishSpec, *, target: PublishTarget,
    ttl_seconds: int, clock: StageClock,
) -> BatchResult:
    fmt = format_of(plan.source, spec.format)
    total = (lambda: bulk_file_rows(plan.source)) if fmt != "jsonl" else None
    with clock.stage("file.validate", total=total, spark=spark) as st:
        checked = check_rows(spark, plan.source, spec, batch_id=plan.batch_id, queue=target.queue,
                             ttl_seconds=ttl_seconds, csv_rejects=target.rejects_format == "csv")
        st.rows = checked.rows_in
    try:
        published = reject_and_publish(spark, plan, book, checked, target=target, stage="file", clock=clock)
    finally:
        checked.rows.unpersist()
    log.info("publish %s: %d rows in, %d published to %s as %s, %d rejected (%s)", plan.batch_id,
             checked.rows_in, published, target.queue, spec.urn, checked.rejected,
             reasons_text(checked.by_reason))
    return BatchResult(plan.batch_id, checked.rows_in, published, checked.rejected, checked.by_reason,
                       str(target.rejects_path), PUBLISHED_NOW, plan.digest)


def check_rows(
    spark: Any, source: str | Path, spec: PublishSpec, *, batch_id: str, queue: str, ttl_seconds: int,
    csv_rejects: bool = False,
) -> CheckedRows:
    """Read ``source``, check every row (cached, counted) and say how its rejects and envelopes are
    made: ``queue``, ``meta.correlation_id`` = ``batch_id``, ``meta.expire_at`` = now + the TTL."""
    from pyspark.sql import functions as sf

    fmt = format_of(source, spec.format)
    validated_at = now_ms()
    declared = declared_types(spec.schema) if spec.schema is not None else {}
    rows = read_rows(spark, source, fmt, declared)
    names = list(rows.schema["data"].dataType.fieldNames())
    key = _key_column(rows, spec.id_column, str(source))
    checked = cache_uncompressed(with_reasons(rows, spec, key, names))
    try:
        counts = checked.groupBy(sf.get("reasons", 0).alias("reason")).count().collect()
        row_key = _position_key(checked) if key is None else key
    except BaseException:
        checked.unpersist()
        raise

    def encode(valid: Any) -> Any:
        from babelq.spark.encode import encode as encode_rows

        return encode_rows(
            valid, urn=spec.urn, data=sf.col("data"), queue=queue, correlation_id=sf.lit(batch_id),
            id=message_id_column(spec.urn, batch_id, row_key),
            expire_at=sf.lit(validated_at + ttl_seconds * 1000), omit_null=names,
        ).select("body")

    return CheckedRows(
        checked, sum(int(r["count"]) for r in counts),
        {r["reason"]: int(r["count"]) for r in counts if r["reason"] is not None},
        len(names) if fmt == "csv" else 0, encode,
        shape=lambda rejects: rejects_of(rejects, fmt, csv_out=csv_rejects),
    )


def _key_column(rows: Any, id_column: str | None, source: str) -> Any:
    """The ``id_column`` value of each row as text, or None without one; a column that is not there,
    or holds neither text nor integers, is refused."""
    from pyspark.sql import functions as sf
    from pyspark.sql import types as stypes

    if id_column is None:
        return None
    fields = {f.name: f.dataType for f in rows.schema["data"].dataType.fields}
    kind = fields.get(id_column)
    if kind is None:
        raise ConfigurationError(f"--id-column {id_column}: {source} has no such column "
                                 f"(it has {', '.join(fields) or 'none'})")
    if not isinstance(kind, stypes.StringType | stypes.ByteType | stypes.ShortType | stypes.IntegerType
                      | stypes.LongType | stypes.DecimalType):
        raise ConfigurationError(f"--id-column {id_column}: a {kind.simpleString()} column; an id is read "
                                 "from text or integers")
    return sf.col("data").getField(id_column).cast("string")


def with_reasons(rows: Any, spec: PublishSpec, key: Any, names: list[str]) -> Any:
    """``rows`` (:func:`~babelq.pipelines.publish_rows.read_rows`) plus ``reasons`` (array, empty
    when the row is published), ``reject_error`` and ``schema_error``."""
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    from babelq.spark.schema_check import first_violation_of, key_segment

    none = sf.lit(None).cast("string")
    misshapen = sf.col("csv_record").isNotNull()
    not_object = sf.col("shape_error").isNotNull()
    typed = sf.col("type_error").isNotNull()
    column = f"${key_segment(spec.id_column)}" if spec.id_column else ""
    if key is None:
        blank, duplicate = sf.lit(False), sf.lit(False)
    else:
        blank = key.isNull() | (sf.length(sf.trim(key)) == 0)
        # a row rejected for its shape or types does not make a later row with its id a duplicate
        apart = misshapen | not_object | typed | blank
        first = Window.partitionBy(key, apart).orderBy("row_no")
        duplicate = ~apart & (sf.row_number().over(first) > 1)
    reasons = sf.when(misshapen, sf.array(sf.lit(FIELD_COUNT_MISMATCH))).when(
        not_object, sf.array(sf.lit(NOT_AN_OBJECT))).otherwise(sf.filter(sf.array(
            sf.when(typed, sf.lit(TYPE_MISMATCH)), sf.when(blank, sf.lit(MISSING_ID)),
            sf.when(duplicate, sf.lit(DUPLICATE_ID))), lambda x: x.isNotNull()))
    errors = [sf.col("shape_error"), sf.col("type_error")]
    if key is not None:
        errors += [sf.when(~misshapen & blank, sf.lit(f"{column}: no id value")),
                   sf.when(duplicate, sf.concat(sf.lit(f"{column}: the id "), key,
                                                sf.lit(" is an earlier row's too")))]
    out = rows.withColumn("reasons", reasons).withColumn("reject_error", sf.coalesce(*errors))
    if spec.schema is None:
        return out.withColumn("schema_error", none)
    violation = first_violation_of(out, "data", spec.schema, omit_null=names)
    out = out.withColumn("schema_error", sf.when(sf.size("reasons") == 0, violation))
    return out.withColumn(
        "reasons", sf.when(sf.col("schema_error").isNotNull(), sf.array(sf.lit(SCHEMA_INVALID)))
        .otherwise(sf.col("reasons"))
    ).withColumn("reject_error", sf.coalesce("reject_error", "schema_error"))


def _position_key(checked: Any) -> Any:
    """``#<position>`` of each row: its place in the file (1 for the first row), from the read's
    ``row_no`` (a partition's index in its high bits, the row's index in that partition in its low
    ones) and how many rows the partitions before it hold."""
    from pyspark.sql import functions as sf

    part = sf.shiftright(sf.col("row_no"), 33)
    sizes = sorted((int(r["part"]), int(r["count"]))
                   for r in checked.groupBy(part.alias("part")).count().collect())
    before, offsets = 0, []
    for index, size in sizes:
        offsets += [sf.lit(index), sf.lit(before)]
        before += size
    offset = sf.element_at(sf.create_map(*offsets), part) if offsets else sf.lit(0)
    position = offset + sf.col("row_no").bitwiseAND(_IN_PARTITION) + 1
    return sf.concat(sf.lit("#"), position.cast("string"))


def rejects_of(rejects: Any, fmt: str, *, csv_out: bool) -> Any:
    """The columns a rejected row is written with: its cells as written (CSV), its line (JSON
    lines) or its columns (Parquet), then ``reasons``, ``reject_error`` and where it was read
    (``row_no``, ``csv_record``). For a CSV output, nested values are written as JSON text."""
    from pyspark.sql import functions as sf
    from pyspark.sql import types as stypes

    error = sf.coalesce(sf.col("record_error"), sf.col("reject_error")).alias("reject_error")
    tail = [sf.col("reasons"), error, sf.col("row_no")]
    if fmt == "jsonl":
        return rejects.select(sf.col("json_line"), *tail)
    if fmt == "csv":
        return rejects.select("cells.*", *tail, sf.col("csv_record"))
    fields = rejects.schema["data"].dataType.fields
    atomic = (stypes.StructType, stypes.ArrayType, stypes.MapType)
    cols = [sf.to_json(sf.col("data").getField(f.name)).alias(f.name)
            if csv_out and isinstance(f.dataType, atomic) else sf.col("data").getField(f.name).alias(f.name)
            for f in fields]
    return rejects.select(*cols, *tail)


__all__ = ["DEFAULT_QUEUE", "DEFAULT_TTL_SECONDS", "PublishSpec", "batch_id_of", "check_rows",
           "checked_source", "plan_publish", "plan_publish_staging", "publish", "rejects_of", "stage_publish",
           "with_reasons"]
