"""A bulk batch published once: the journal's plan, the rejects and the publish every producer of
bulk files shares (``babelq ingest``, ``babelq publish``).

A batch is one file under one batch id. :func:`plan_batch` names it and asks the journal
(:mod:`~babelq.pipelines.journal`) what it knows of it before Spark starts; :func:`run_batch`
skips a batch the journal says was published (unless ``republish``) and says whether a run
resumed an interrupted batch. A producer's checks give a :class:`CheckedRows` (the cached rows
with their reasons, and how its rejects and envelopes are made), which
:func:`reject_and_publish` writes aside and publishes through the ``babelq`` data source between
the journal's ``publishing`` and ``published`` records (or
:func:`~babelq.pipelines.ingest_outbox.stage_batch` stages in an outbox). Every row keeps its
``meta.id`` across runs (:mod:`~babelq.pipelines.message_ids`), so a batch published again is
deduplicated downstream.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from babelq.errors import ConfigurationError
from babelq.pipelines.bulk_files import FIELD_COUNT_MISMATCH, with_record_errors, write_rejects
from babelq.pipelines.journal import PUBLISHED, BatchRecord, IngestJournal, file_digest
from babelq.pipelines.stages import StageClock

log = logging.getLogger(__name__)

#: What a run did with its batch.
PUBLISHED_NOW = "published"  #: a new batch, published
RESUMED = "resumed"  #: an interrupted batch, published again in full (consumers drop the copies)
ALREADY_PUBLISHED = "already_published"  #: finished before: nothing published
REPUBLISHED = "republished"  #: finished before, published again on request


@dataclass(slots=True)
class BatchResult:
    batch_id: str
    rows_in: int
    published: int
    rejected: int
    rejected_by_reason: dict[str, int] = field(default_factory=dict)
    rejects_path: str = ""
    status: str = PUBLISHED_NOW
    digest: str = ""
    previous: BatchRecord | None = None  #: the journal's record of an earlier run of this batch


R = TypeVar("R", bound=BatchResult)


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


def default_batch_id(digest: str) -> str:
    """``bulk_<first 16 hex digits of the SHA-256>``."""
    return f"bulk_{digest[:16]}"


def plan_batch(
    path: Path, journal: IngestJournal, batch_id: str | None = None,
    default_id: Callable[[str], str] = default_batch_id,
) -> BatchPlan:
    """Hash the (checked) file ``path``, name its batch (``default_id`` of the digest unless given)
    and look it up; a batch id already used for another file is refused."""
    digest = file_digest(path)
    batch = batch_id or default_id(digest)
    if not batch.strip() or "\n" in batch:
        raise ConfigurationError(f"--batch-id: {batch!r} must be a non-empty single line")
    previous = journal.get(batch)
    if previous is not None and previous.digest != digest:
        raise ConfigurationError(
            f"--batch-id {batch}: already used for another file ({previous.source}, "
            f"sha256 {previous.digest[:12]}…); choose a new batch id for a new file"
        )
    return BatchPlan(str(path), batch, digest, previous)


def run_batch(
    book: IngestJournal, plan: BatchPlan, *, republish: bool, rejects_path: str | Path, what: str,
    result_type: type[R], publish: Callable[[BatchPlan], R],
) -> R:
    """``publish(plan)`` unless the journal says the batch was published and ``republish`` is not
    set (then a result with ``already_published`` and nothing done); the result says whether the
    run was a resume or a republish. ``what`` names the command in the log."""
    if plan.already_published and not republish:
        done = plan.previous
        assert done is not None
        log.info("%s %s: already published (%d envelopes); nothing published", what, plan.batch_id,
                 done.published)
        return result_type(plan.batch_id, done.rows_in, 0, done.rows_in - done.published, {},
                           str(rejects_path), ALREADY_PUBLISHED, plan.digest, done)
    result = publish(plan)
    if plan.previous is not None:
        result.status = REPUBLISHED if plan.already_published else RESUMED
        result.previous = plan.previous
    return result


@dataclass(frozen=True, slots=True)
class PublishTarget:
    """Where the envelopes of a batch go and where its rejects are written."""

    url: str
    queue: str
    rejects_path: str | Path
    rejects_format: str = "parquet"


def _same(df: Any) -> Any:
    return df


@dataclass(frozen=True, slots=True)
class CheckedRows:
    """A batch's rows after its checks (cached): what its rejects and its envelopes are made of."""

    #: every row, with ``reasons`` (an array, empty when the row is published), ``row_no`` and
    #: ``csv_record`` (the text of a CSV record of the wrong field count)
    rows: Any
    rows_in: int
    by_reason: dict[str, int]
    #: the CSV header's field count, which :func:`with_record_errors` names (0 for other formats)
    header: int
    #: the valid rows -> a DataFrame of ``body`` (the envelopes)
    encode: Callable[[Any], Any]
    #: the rejected rows (with ``record_error``) -> the columns they are written with
    shape: Callable[[Any], Any] = _same
    drop: tuple[str, ...] = ()  #: columns the rejects are written without

    @property
    def rejected(self) -> int:
        return sum(self.by_reason.values())

    def write_rejects(self, spark: Any, source: str | Path, path: str | Path, fmt: str) -> None:
        """Write the rejected rows to ``path`` as ``fmt``, a misshapen record with its line."""
        from pyspark.sql import functions as sf

        aside = with_record_errors(spark, self.rows.filter(sf.size("reasons") > 0), source, self.header,
                                   self.by_reason.get(FIELD_COUNT_MISMATCH, 0))
        write_rejects(self.shape(aside), str(path), fmt, self.drop)

    def bodies(self) -> Any:
        """The envelopes of the valid rows."""
        from pyspark.sql import functions as sf

        return self.encode(self.rows.filter(sf.size("reasons") == 0))


def reject_and_publish(
    spark: Any, plan: BatchPlan, book: IngestJournal, checked: CheckedRows, *, target: PublishTarget,
    stage: str, clock: StageClock,
) -> int:
    """Write the rejected rows of ``checked`` aside and publish the envelopes of the others; returns
    how many were published. The stages are ``<stage>.rejects`` and ``<stage>.publish``; the
    journal records the batch ``publishing`` before the first envelope and ``published`` after
    the last."""
    from babelq.spark.datasource import register

    register(spark)
    published = checked.rows_in - checked.rejected
    with clock.stage(f"{stage}.rejects", total=checked.rejected, spark=spark) as st:
        checked.write_rejects(spark, plan.source, target.rejects_path, target.rejects_format)
        st.rows = checked.rejected
    with clock.stage(f"{stage}.publish", total=published, spark=spark) as st:
        book.begin(plan.batch_id, plan.source, plan.digest)
        (checked.bodies().write.format("babelq").option("url", target.url).option("queue", target.queue)
         .mode("append").save())
        book.finish(plan.batch_id, checked.rows_in, published)
        st.rows = published
    return published
