"""A bulk batch published once: the journal's plan, the rejects and the publish every producer of
bulk files shares (``babelq ingest``, ``babelq publish``).

A batch is one file under one batch id. :func:`plan_batch` names it and asks the journal
(:mod:`~babelq.pipelines.journal`) what it knows of it before Spark starts; :func:`run_batch`
skips a batch the journal says was published (unless ``republish``) and says whether a run
resumed an interrupted batch; :func:`reject_and_publish` writes the rejected rows aside and
publishes the envelopes of the others through the ``babelq`` data source between the journal's
``publishing`` and ``published`` records. Every row keeps its ``meta.id`` across runs
(:mod:`~babelq.pipelines.message_ids`), so a batch published again is deduplicated downstream.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from babelq.errors import ConfigurationError
from babelq.pipelines.bulk_files import with_record_errors, write_rejects
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


def reject_and_publish(
    spark: Any, plan: BatchPlan, book: IngestJournal, checked: Any, *, target: PublishTarget,
    encode: Callable[[Any], Any], stage: str, clock: StageClock, rejected: int, rows_in: int,
    header: int, misshapen: int, rejects: Callable[[Any], Any] = lambda df: df, drop: tuple[str, ...] = (),
) -> int:
    """Write the rows of ``checked`` with ``reasons`` aside (``rejects`` may shape them) and publish
    the envelopes ``encode`` makes of the others; returns how many were published.

    ``checked`` has ``reasons`` (an array, empty when the row is valid), ``row_no`` and
    ``csv_record``; ``header`` and ``misshapen`` are what :func:`with_record_errors` needs to say
    where a record of the wrong field count is. The stages are ``<stage>.rejects`` and
    ``<stage>.publish``; the journal records the batch ``publishing`` before the first envelope
    and ``published`` after the last."""
    from pyspark.sql import functions as sf

    from babelq.spark.datasource import register

    register(spark)
    published = rows_in - rejected
    with clock.stage(f"{stage}.rejects", total=rejected, spark=spark) as st:
        aside = with_record_errors(spark, checked.filter(sf.size("reasons") > 0), plan.source, header,
                                   misshapen)
        write_rejects(rejects(aside), str(target.rejects_path), target.rejects_format, drop)
        st.rows = rejected
    with clock.stage(f"{stage}.publish", total=published, spark=spark) as st:
        book.begin(plan.batch_id, plan.source, plan.digest)
        bodies = encode(checked.filter(sf.size("reasons") == 0))
        (bodies.write.format("babelq").option("url", target.url).option("queue", target.queue)
         .mode("append").save())
        book.finish(plan.batch_id, rows_in, published)
        st.rows = published
    return published
