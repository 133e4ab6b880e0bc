"""Ingest (the payments producer): validate a bulk payments file in Spark, publish one envelope per valid row.

Reads CSV (every column as text, so ``12.50`` stays visible as a float and is rejected) or
Parquet, applies the SQL rules of :mod:`validation` and the URN's JSON Schema (compiled to a
Spark column, :mod:`envelopes`), writes the rejected rows aside with their reasons (Parquet or
CSV), and publishes ``transfer.requested`` envelopes for the rest through the ``babelq`` data
source in per-partition batches. All of it runs as Spark SQL on the JVM (the envelopes come
from :func:`babelq.spark.encode.encode`); Python only publishes the finished bodies. The
validated rows are cached once and read by three actions: the counts by reason, the rejects
and the publish. The batch id becomes every envelope's ``meta.correlation_id``, so a partial
failure can be traced back to its file.

Running it again is safe. The batch id defaults to the file's content hash and every payment's
``meta.id`` is derived from the batch id and its reference (:mod:`payment_ids`), so a re-run
publishes the very same messages, which settle deduplicates; the batch journal
(:mod:`journal`) tells a re-run whether the batch was interrupted (publish it all again:
``resumed``) or already published (publish nothing: ``already_published``, unless
``republish``).
"""

from __future__ import annotations

import csv
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from babelq.envelope import now_ms
from babelq.errors import ConfigurationError
from babelq.pipelines.csv_layout import csv_layout, field_count, wrong_field_counts
from babelq.pipelines.envelopes import EncodeSettings, encode_transfers, with_schema_check
from babelq.pipelines.ingest_rules import (
    CSV_RECORD,
    DIGITS,
    FIELD_COUNT_MISMATCH,
    FIELDS,
    OPTIONAL_FIELDS,
    Limits,
    normalise,
    validate,
)
from babelq.pipelines.journal import PUBLISHED, BatchRecord, IngestJournal, default_journal, file_digest
from babelq.pipelines.money import ValueGroup
from babelq.pipelines.progress import bulk_file_rows
from babelq.pipelines.stages import StageClock
from babelq.spark.cache import cache_uncompressed

log = logging.getLogger(__name__)

DEFAULT_QUEUE = "payments"
DEFAULT_TTL_SECONDS = 86_400


#: What an ingest run did with its batch.
PUBLISHED_NOW = "published"  #: a new batch, published
RESUMED = "resumed"  #: an interrupted batch, published again in full (consumers drop the copies)
ALREADY_PUBLISHED = "already_published"  #: finished before: nothing published
REPUBLISHED = "republished"  #: finished before, published again on request


@dataclass(slots=True)
class IngestResult:
    batch_id: str
    rows_in: int
    published: int
    rejected: int
    rejected_by_reason: dict[str, int] = field(default_factory=dict)
    rejects_path: str = ""
    status: str = PUBLISHED_NOW
    digest: str = ""
    previous: BatchRecord | None = None  #: the journal's record of an earlier run of this batch
    #: rows and value per (first reject reason or None, currency): what the report reconciles money with
    values: list[ValueGroup] = field(default_factory=list)


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

    CSV is read per RFC 4180: a quoted field may hold commas, line breaks and doubled quotes
    (``""``). A record with more or fewer fields than the header is not cut or padded into a
    payment: its text lands in the column :data:`~babelq.pipelines.ingest_rules.CSV_RECORD`
    (null for every other record), which the rules reject. For a local CSV file the header is
    read here (sparing Spark a job that reads the first line), the file is read whole
    (``multiLine``, one task) only when a quoted field in it spans lines, and the column is left
    out when :func:`~babelq.pipelines.csv_layout.csv_layout` saw that every line has the header's
    field count; a file that is not local is always read whole and checked, since nobody looked.
    """
    from pyspark.sql.types import StringType, StructField, StructType

    path = str(source)
    if path.endswith(".parquet") or Path(path).is_dir():
        return spark.read.parquet(path)
    layout = csv_layout(path)
    reader = (spark.read.option("header", True).option("mode", "PERMISSIVE").option("escape", '"')
              .option("multiLine", layout is None or layout.quoted_line_breaks))
    names = local_csv_header(path)
    if names is None:
        names = list(reader.option("inferSchema", False).csv(path).columns)
    if CSV_RECORD in names:
        raise ConfigurationError(f"{source}: the column name {CSV_RECORD} is reserved for ingest's own use")
    if layout is not None and layout.fields_agree and len(names) == layout.header_fields:
        # the scan saw every record's field count: Spark is spared keeping each record's text
        return reader.schema(StructType([StructField(n, StringType()) for n in names])).csv(path)
    schema = StructType([StructField(n, StringType()) for n in [*names, CSV_RECORD]])
    return reader.option("columnNameOfCorruptRecord", CSV_RECORD).schema(schema).csv(path)


def header_fields(bulk: Any) -> int:
    """How many fields the header of ``bulk`` (:func:`read_bulk`) names."""
    return sum(c != CSV_RECORD for c in bulk.columns)


def with_record_errors(spark: Any, rejects: Any, source: str | Path, header: int, misshapen: int) -> Any:
    """``rejects`` plus ``record_error``: for each of its ``misshapen`` records of the wrong field
    count, ``line 7: 9 fields, the header has 6`` (null for the other rejects).

    Spark flags such a record but does not say where it is, so the few it flagged are found here
    by reading the local file once more, in the same order; where that cannot be done (a file
    that is not local, or whose records this reading does not pair one to one with Spark's) the
    error names the field count without the line."""
    from pyspark.sql import functions as sf
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    if not misshapen:
        return rejects.withColumn("record_error", sf.lit(None).cast("string"))
    flagged = [(int(r["row_no"]), field_count(r["csv_record"])) for r in rejects.filter(
        sf.col("csv_record").isNotNull()).select("row_no", "csv_record").orderBy("row_no").collect()]
    found: list[tuple[int, int]] = []
    if Path(source).is_file():
        try:
            found = wrong_field_counts(source, header)
        except (OSError, csv.Error):
            found = []
    paired = [n for _, n in found] == [n for _, n in flagged]
    errors = [
        (row_no, (f"line {found[i][0]}: " if paired else "") + f"{n} fields, the header has {header}")
        for i, (row_no, n) in enumerate(flagged)
    ]
    schema = StructType([StructField("row_no", LongType()), StructField("record_error", StringType())])
    joined = rejects.join(sf.broadcast(spark.createDataFrame(errors, schema)), "row_no", "left")
    return joined.select(*rejects.columns, "record_error")


def write_rejects(rejects: Any, path: str, fmt: str) -> None:
    from pyspark.sql import functions as sf

    out = rejects.withColumn("reject_reason", sf.get("reasons", 0)).drop("amount")
    out = out.withColumn("reasons", sf.concat_ws(";", "reasons"))
    writer = out.coalesce(1).write.mode("overwrite")
    if fmt == "csv":
        # RFC 4180 as the input: a quote doubled, where Spark's default would put a backslash
        writer.option("header", True).option("escape", '"').csv(path)
    else:
        writer.parquet(path)


def check_source(source: str | Path) -> Path:
    """``source`` as a path, or a one-line ConfigurationError saying what is wrong with it."""
    path = Path(source)
    if not path.exists():
        raise ConfigurationError(f"{source}: no such file or directory")
    if path.is_dir():
        if not any(path.rglob("*.parquet")):
            raise ConfigurationError(
                f"{source}: is a directory without .parquet files; pass a .csv or .parquet file or a Parquet "
                "dataset directory")
    elif not os.access(path, os.R_OK):
        raise ConfigurationError(f"{source}: not readable (permission denied)")
    elif path.suffix.lower() != ".parquet":
        _check_csv_head(path)
    return path


def _check_csv_head(path: Path) -> None:
    """Refuse, before Spark starts, a CSV file that is empty, not UTF-8 text or lacks the payment
    columns (when its header is plain enough to read here; Spark decides the rest)."""
    with open(path, "rb") as fh:
        head = fh.read(65_536)
    if not head.strip():
        raise ConfigurationError(f"{path}: is empty; a bulk payments file needs a header row and payments")
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:  # not merely a character cut at the end of the sample
            raise ConfigurationError(
                f"{path}: is not UTF-8 text (byte 0x{head[exc.start]:02x} at offset {exc.start}); "
                "a bulk payments file is a UTF-8 CSV or Parquet") from None
    names = local_csv_header(str(path))
    if names is not None:
        _refuse_missing(names, path)


def check_columns(df: Any, source: str | Path) -> None:
    """Refuse a bulk file without the payment columns (a CSV of something else, binary garbage)."""
    _refuse_missing([c for c in df.columns if c != CSV_RECORD], source)


def _refuse_missing(columns: list[str], source: str | Path) -> None:
    missing = [name for name in FIELDS if name not in columns]
    if not missing:
        return
    found = [c if len(c) <= 30 else c[:29] + "…" for c in columns[:6]]
    shown = ", ".join(repr(c) for c in found) + (", ..." if len(columns) > 6 else "") if found else "none"
    raise ConfigurationError(
        f"{source}: missing column(s) {', '.join(missing)} (found {shown}); a bulk payments file needs a "
        f"header with {', '.join(FIELDS)} (optional: {', '.join(OPTIONAL_FIELDS)})"
    )


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """Which batch a file is, and what the journal knows of it (before any Spark work)."""

    source: str
    batch_id: str
    digest: str
    previous: BatchRecord | None

    @property
    def already_published(self) -> bool:
        return self.previous is not None and self.previous.state == PUBLISHED


def plan_batch(source: str | Path, journal: IngestJournal, batch_id: str | None = None) -> BatchPlan:
    """Check ``source``, hash it, name its batch (``bulk_<sha256 prefix>`` unless given) and look it up."""
    path = check_source(source)
    digest = file_digest(path)
    batch = batch_id or f"bulk_{digest[:16]}"
    if not batch.strip() or "\n" in batch:
        raise ConfigurationError(f"--batch-id: {batch!r} must be a non-empty single line")
    previous = journal.get(batch)
    if previous is not None and previous.digest != digest:
        raise ConfigurationError(
            f"--batch-id {batch}: already used for another file ({previous.source}, "
            f"sha256 {previous.digest[:12]}…); choose a new batch id for a new file"
        )
    return BatchPlan(str(source), batch, digest, previous)


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
    journal: str | Path | None = None,
    republish: bool = False,
    plan: BatchPlan | None = None,
) -> IngestResult:
    """Validate ``source`` and publish its valid payments to ``queue`` at ``url``.

    ``journal`` is the batch journal file (default: ``ingest-journal.db`` beside the rejects).
    A batch the journal says was published is not published again unless ``republish``.
    ``plan`` is :func:`plan_batch`'s answer when the caller already asked (it hashes the file).
    """
    from babelq.pipelines.cluster_checks import check_session_targets

    check_session_targets(spark, broker=url)
    book = IngestJournal(journal or default_journal(rejects_path))
    try:
        plan = plan or plan_batch(source, book, batch_id)
        if plan.already_published and not republish:
            done = plan.previous
            assert done is not None
            log.info("ingest %s: already published (%d envelopes); nothing published", plan.batch_id,
                     done.published)
            return IngestResult(plan.batch_id, done.rows_in, 0, done.rows_in - done.published, {},
                                str(rejects_path), ALREADY_PUBLISHED, plan.digest, done)
        result = _ingest(spark, plan, book, url=url, queue=queue, rejects_path=rejects_path,
                         ttl_seconds=ttl_seconds, limits=limits, rejects_format=rejects_format,
                         clock=clock or StageClock())
    finally:
        book.close()
    if plan.previous is not None:
        result.status = REPUBLISHED if plan.already_published else RESUMED
        result.previous = plan.previous
    return result


def _ingest(
    spark: Any, plan: BatchPlan, book: IngestJournal, *, url: str, queue: str, rejects_path: str | Path,
    ttl_seconds: int, limits: Limits | None, rejects_format: str, clock: StageClock,
) -> IngestResult:
    from pyspark.sql import functions as sf

    from babelq.spark.datasource import register

    register(spark)
    batch = plan.batch_id
    settings = EncodeSettings(queue, batch, ttl_seconds, now_ms())
    with clock.stage("ingest.validate", total=lambda: bulk_file_rows(plan.source), spark=spark) as st:
        bulk = read_bulk(spark, plan.source)
        check_columns(bulk, plan.source)
        rows = validate(normalise(bulk), limits)
        checked = cache_uncompressed(with_schema_check(rows, settings.validated_at))
        values = value_groups(checked)
        rows_in = sum(g.rows for g in values)
        by_reason: dict[str, int] = {}
        for g in values:
            if g.reason is not None:
                by_reason[g.reason] = by_reason.get(g.reason, 0) + g.rows
        st.rows = rows_in
    rejected = sum(by_reason.values())
    published = rows_in - rejected
    try:
        with clock.stage("ingest.rejects", total=rejected, spark=spark) as st:
            rejects = with_record_errors(spark, checked.filter(sf.size("reasons") > 0), plan.source,
                                         header_fields(bulk), by_reason.get(FIELD_COUNT_MISMATCH, 0))
            write_rejects(rejects, str(rejects_path), rejects_format)
            st.rows = rejected
        with clock.stage("ingest.publish", total=published, spark=spark) as st:
            book.begin(batch, plan.source, plan.digest)
            bodies = encode_transfers(checked.filter(sf.size("reasons") == 0), settings)
            bodies.write.format("babelq").option("url", url).option("queue", queue).mode("append").save()
            book.finish(batch, rows_in, published)
            st.rows = published
    finally:
        checked.unpersist()
    log.info("ingest %s: %d rows in, %d published to %s, %d rejected %s", batch, rows_in, published, queue,
             rejected, dict(sorted(by_reason.items())))
    return IngestResult(batch, rows_in, published, rejected, by_reason, str(rejects_path), PUBLISHED_NOW,
                        plan.digest, values=values)


def value_groups(checked: Any) -> list[ValueGroup]:
    """Rows, and the value of those with an integer amount, per first reject reason and currency code.

    One aggregation over the validated rows, in the job that counts them anyway (a few more
    groups, no extra pass over the file). An amount counts when it is what the rules call an
    integer (:data:`~babelq.pipelines.ingest_rules.DIGITS`); its sum is a DECIMAL(38, 0), so a file
    of 18-digit amounts cannot overflow it."""
    from pyspark.sql import functions as sf

    amount = sf.when(sf.col("amount_cents").rlike(DIGITS), sf.col("amount").cast("decimal(38,0)"))
    rows = checked.groupBy(
        sf.get("reasons", 0).alias("reason"), sf.coalesce(sf.col("currency"), sf.lit("")).alias("currency")
    ).agg(sf.count(sf.lit(1)).alias("n"), sf.count(amount).alias("valued"), sf.sum(amount).alias("minor"))
    return sorted(
        (ValueGroup(r["reason"], r["currency"], int(r["n"]), int(r["valued"]), int(r["minor"] or 0))
         for r in rows.collect()),
        key=lambda g: (g.reason or "", g.currency),
    )
