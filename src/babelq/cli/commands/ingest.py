"""``babelq ingest FILE``: validate a bulk payments file in Spark and publish one envelope per valid row.

Safe to run again: the same file is the same batch (its id defaults to the file's SHA-256) and
every payment keeps its ``meta.id`` across runs, so an interrupted run is completed by running
it again, and a finished one publishes nothing and says so (see the batch journal).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from babelq.cli.commands import broker_argument, required_broker_url, write
from babelq.cli.spark_options import (
    check_before_spark,
    open_progress,
    progress_argument,
    session_defaults,
    spark_arguments,
    start_spark,
)

if TYPE_CHECKING:
    from babelq.cli.commands import Subparsers
    from babelq.pipelines.batch_runs import BatchResult
    from babelq.pipelines.ingest_outbox import StagePlan


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "ingest",
        help="validate a bulk payments file (CSV/Parquet) and publish transfer.requested envelopes",
        description="Validate a bulk payments file in Spark, write rejected rows aside with their reasons, "
        "and publish urn:babel:payments:transfer.requested envelopes to the broker. Running it again on the "
        "same file completes an interrupted batch and publishes nothing for a finished one.",
    )
    parser.add_argument(
        "file", help="bulk file: .csv (RFC 4180, a header row) or .parquet (or a Parquet dataset directory)")
    broker_argument(parser, example="sqlite:///var/q.db")
    parser.add_argument("--queue", default="payments", help="queue")
    parser.add_argument("--rejects", required=True, help="where rejected rows are written")
    parser.add_argument(
        "--rejects-format", choices=("parquet", "csv"), default="parquet", help="file format of --rejects"
    )
    parser.add_argument(
        "--batch-id",
        help="the batch's id, meta.correlation_id of every envelope (default: bulk_<file sha256 prefix>)",
    )
    parser.add_argument(
        "--ttl", type=int, default=86_400, metavar="SECONDS",
        help="meta.ttl of every envelope: how long until it expires",
    )
    parser.add_argument(
        "--journal",
        metavar="PATH",
        help="the batch journal, an SQLite file (default: ingest-journal.db beside --rejects)",
    )
    parser.add_argument(
        "--republish",
        action="store_true",
        help="publish a batch the journal says is finished again (same meta.ids: consumers drop the copies)",
    )
    outbox_arguments(parser)
    progress_argument(parser)
    spark_arguments(parser)
    parser.set_defaults(func=run)


def outbox_arguments(parser: argparse.ArgumentParser) -> None:
    """``--outbox URL`` and ``--outbox-table``: stage the batch for ``babelq relay`` instead."""
    parser.add_argument(
        "--outbox",
        metavar="URL",
        help="stage the envelopes in this transactional outbox (sqlite:///path.db or postgresql://...) in "
        "one transaction with the batch's record, instead of publishing; `babelq relay` publishes them",
    )
    parser.add_argument("--outbox-table", default="babelq_outbox", help="outbox table")


def run_staging(
    args: argparse.Namespace, app_name: str, plan: Callable[[], StagePlan],
    stage: Callable[[Any, StagePlan], BatchResult],
) -> int:
    """``--outbox``: ``plan`` the batch before Spark starts, then ``stage`` it in the outbox
    (babelq.pipelines.ingest_outbox) unless it already is and ``--republish`` is not given."""
    from babelq.cli.commands.demo import show_progress
    from babelq.errors import ConfigurationError

    if args.broker or args.journal:
        raise ConfigurationError("--outbox: stages for `babelq relay`; give it without --broker or --journal")
    if args.ttl < 1:
        raise ConfigurationError(f"--ttl: must be at least 1 second, got {args.ttl}")
    check_before_spark(args)
    planned = plan()
    if planned.staged is not None and not args.republish:
        write(
            f"batch {planned.batch_id} is already staged in the outbox ({planned.staged:,} envelopes); "
            "nothing staged now. Use --republish to stage it again.\n"
        )
        return 0
    show_progress()
    spark = start_spark(args, app_name, outbox=args.outbox, defaults=session_defaults(args))
    result = stage(spark, planned)
    lines = [
        f"batch {result.batch_id}: {result.rows_in:,} rows, {result.published:,} staged in the outbox "
        f"for {args.queue}, {result.rejected:,} rejected -> {result.rejects_path}"
    ]
    lines += [f"  {reason}: {n:,}" for reason, n in sorted(result.rejected_by_reason.items())]
    write("\n".join(lines) + "\n")
    return 0


def run_outbox(args: argparse.Namespace) -> int:
    """``--outbox``: validate and stage the batch in the outbox (babelq.pipelines.ingest_outbox)."""
    from babelq.pipelines.ingest_outbox import plan_staging, stage_ingest

    return run_staging(
        args, "babelq-ingest",
        lambda: plan_staging(args.file, args.outbox, batch_id=args.batch_id, table=args.outbox_table),
        lambda spark, plan: stage_ingest(
            spark, args.file, outbox_url=args.outbox, queue=args.queue, rejects_path=args.rejects,
            ttl_seconds=args.ttl, rejects_format=args.rejects_format, table=args.outbox_table,
            restage=args.republish, plan=plan,
        ),
    )


def _when(ms: int | None) -> str:
    if ms is None:
        return "an unknown time"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


#: who drops the copies of a batch published again: (after a resume, after a republish)
SETTLE_DROPS = ("settle drops the copies", "settle drops copies of what it already posted")


def summary(result: BatchResult, queue: str, drops: tuple[str, str] = SETTLE_DROPS) -> list[str]:
    """What the run did, in the words an operator needs; ``drops`` says who drops the copies of a
    resumed and of a republished batch."""
    from babelq.pipelines.batch_runs import ALREADY_PUBLISHED, REPUBLISHED, RESUMED

    before = result.previous
    if result.status == ALREADY_PUBLISHED and before is not None:
        return [
            f"batch {result.batch_id} was already published at {_when(before.finished_at)} "
            f"({before.published:,} envelopes to the broker); nothing published now. "
            "Use --republish to publish it again."
        ]
    lines = [
        f"batch {result.batch_id}: {result.rows_in:,} rows, {result.published:,} published to {queue}, "
        f"{result.rejected:,} rejected -> {result.rejects_path}"
    ]
    if result.status == RESUMED and before is not None:
        lines.append(
            f"  resumed: the run started at {_when(before.started_at)} was interrupted; the whole batch was "
            f"published again with the same meta.ids, and {drops[0]}"
        )
    elif result.status == REPUBLISHED:
        lines.append(f"  republished on request: same meta.ids; {drops[1]}")
    lines += [f"  {reason}: {n:,}" for reason, n in sorted(result.rejected_by_reason.items())]
    return lines


def run(args: argparse.Namespace) -> int:
    from babelq.cli.commands.demo import show_progress
    from babelq.errors import ConfigurationError
    from babelq.pipelines.ingest import ingest, plan_batch
    from babelq.pipelines.journal import IngestJournal, default_journal
    from babelq.pipelines.stages import StageClock

    if args.outbox:
        return run_outbox(args)
    url = required_broker_url(args)
    check_before_spark(args, broker=url)  # --conf syntax; a named cluster master vs a relative SQLite path
    if args.ttl < 1:
        raise ConfigurationError(f"--ttl: must be at least 1 second, got {args.ttl}")
    journal = args.journal or default_journal(args.rejects)
    # checks the file, the journal and the batch before Spark starts
    book = IngestJournal(journal, beside_rejects=not args.journal)
    try:
        plan = plan_batch(args.file, book, args.batch_id)
    finally:
        book.close()
    with open_progress(args) as progress:
        if plan.already_published and not args.republish:
            spark = None
        else:
            show_progress()
            spark = start_spark(args, "babelq-ingest", broker=url, defaults=session_defaults(args, progress))
        result = ingest(
            spark,
            args.file,
            url=url,
            queue=args.queue,
            rejects_path=args.rejects,
            rejects_format=args.rejects_format,
            ttl_seconds=args.ttl,
            journal=journal,
            republish=args.republish,
            plan=plan,
            clock=StageClock(progress=progress),
        )
    write("\n".join(summary(result, args.queue)) + "\n")
    return 0
