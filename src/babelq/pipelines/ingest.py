"""Ingest (the payments producer): validate a bulk payments file in Spark, publish one envelope per valid row.

Reads CSV (every column as text, so ``12.50`` stays visible as a float and is rejected) or
Parquet, applies the SQL rules of :mod:`validation` and the URN's JSON Schema (compiled to a
Spark column, :mod:`envelopes`), writes the rejected rows aside with their reasons (Parquet or
CSV), and publishes ``transfer.requested`` envelopes for the rest through the ``babelq`` data
source in per-partition batches. All of it runs as Spark SQL on the JVM (the envelopes come
from :func:`babelq.spark.encode.encode`); Python only publishes the finished bodies. The
validated rows are cached once and read by three actions: the counts by reason, the rejects
and the publish. The batch id becomes every envelope's ``meta.correlation_id``, so a partial
failure can be traced back to its file. Reading the file, the rejects, the journal and the
publish are the steps every bulk producer shares (:mod:`bulk_files`, :mod:`batch_runs`; ``babelq
publish`` is the other); only the payment rules are written here and in :mod:`ingest_rules`.

Running it again is safe. The batch id defaults to the file's content hash and every payment's
``meta.id`` is derived from the batch id and its reference (:mod:`payment_ids`), so a re-run
publishes the very same messages, which settle deduplicates; the batch journal
(:mod:`journal`) tells a re-run whether the batch was interrupted (publish it all again:
``resumed``) or already published (publish nothing: ``already_published``, unless
``republish``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from babelq.envelope import now_ms
from babelq.errors import ConfigurationError
from babelq.pipelines.batch_runs import (
    ALREADY_PUBLISHED,
    PUBLISHED_NOW,
    REPUBLISHED,
    RESUMED,
    BatchPlan,
    BatchResult,
    CheckedRows,
    PublishTarget,
    reject_and_publish,
    run_batch,
)
from babelq.pipelines.batch_runs import plan_batch as plan_journaled
from babelq.pipelines.bulk_files import check_source as check_file
from babelq.pipelines.bulk_files import (
    header_fields,
    local_csv_header,
    read_csv,
    with_record_errors,
    write_rejects,
)
from babelq.pipelines.envelopes import EncodeSettings, encode_transfers, with_schema_check
from babelq.pipelines.ingest_rules import (
    CSV_RECORD,
    DIGITS,
    FIELDS,
    OPTIONAL_FIELDS,
    Limits,
    normalise,
    validate,
)
from babelq.pipelines.journal import IngestJournal, default_journal
from babelq.pipelines.money import ValueGroup
from babelq.pipelines.progress import bulk_file_rows
from babelq.pipelines.stages import StageClock, reasons_text
from babelq.spark.cache import cache_uncompressed

log = logging.getLogger(__name__)

DEFAULT_QUEUE = "payments"
DEFAULT_TTL_SECONDS = 86_400

__all__ = [
    "ALREADY_PUBLISHED", "PUBLISHED_NOW", "REPUBLISHED", "RESUMED", "BatchPlan", "IngestResult",
    "check_columns", "check_source", "header_fields", "ingest", "local_csv_header", "plan_batch", "read_bulk",
    "value_groups", "with_record_errors", "write_rejects",
]


@dataclass(slots=True)
class IngestResult(BatchResult):
    #: rows and value per (first reject reason or None, currency): what the report reconciles money with
    values: list[ValueGroup] = field(default_factory=list)


def read_bulk(spark: Any, source: str | Path) -> Any:
    """The bulk file as a DataFrame of its own columns (CSV: all strings, per RFC 4180, a record of
    the wrong field count in :data:`~babelq.pipelines.ingest_rules.CSV_RECORD`, which the rules
    reject: :func:`~babelq.pipelines.bulk_files.read_csv`; Parquet: as stored)."""
    path = str(source)
    if path.endswith(".parquet") or Path(path).is_dir():
        return spark.read.parquet(path)
    return read_csv(spark, path)


def check_source(source: str | Path) -> Path:
    """``source`` as a path, or a one-line ConfigurationError saying what is wrong with it (a CSV
    file without the payment columns too, when its header is plain enough to read here)."""
    return check_file(source, what="a bulk payments file", header=_refuse_missing)


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


def plan_batch(source: str | Path, journal: IngestJournal, batch_id: str | None = None) -> BatchPlan:
    """Check ``source``, hash it, name its batch (``bulk_<sha256 prefix>`` unless given) and look it up."""
    return plan_journaled(check_source(source), journal, batch_id)


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
    target = PublishTarget(url, queue, rejects_path, rejects_format)
    try:
        plan = plan or plan_batch(source, book, batch_id)
        return run_batch(
            book, plan, republish=republish, rejects_path=rejects_path, what="ingest",
            result_type=IngestResult,
            publish=lambda p: _ingest(spark, p, book, target=target, ttl_seconds=ttl_seconds, limits=limits,
                                      clock=clock or StageClock()))
    finally:
        book.close()


def _ingest(
    spark: Any, plan: BatchPlan, book: IngestJournal, *, target: PublishTarget, ttl_seconds: int,
    limits: Limits | None, clock: StageClock,
) -> IngestResult:
    batch = plan.batch_id
    settings = EncodeSettings(target.queue, batch, ttl_seconds, now_ms())
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
    try:
        published = reject_and_publish(
            spark, plan, book, checked_payments(checked, bulk, rows_in, by_reason, settings), target=target,
            stage="ingest", clock=clock)
    finally:
        checked.unpersist()
    rejected = rows_in - published
    log.info("ingest %s: %d rows in, %d published to %s, %d rejected (%s)", batch, rows_in, published,
             target.queue, rejected, reasons_text(by_reason))
    return IngestResult(batch, rows_in, published, rejected, by_reason, str(target.rejects_path),
                        PUBLISHED_NOW, plan.digest, values=values)


def checked_payments(
    checked: Any, bulk: Any, rows_in: int, by_reason: dict[str, int], settings: EncodeSettings
) -> CheckedRows:
    """The validated payments (``checked``, of the file read as ``bulk``) as rejects and envelopes."""
    return CheckedRows(checked, rows_in, by_reason, header_fields(bulk),
                       encode=lambda valid: encode_transfers(valid, settings), drop=("amount",))


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
