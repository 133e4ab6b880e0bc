"""``babelq publish FILE --urn URN``: check a bulk file of any rows in Spark and publish one envelope
of that URN per valid row.

Safe to run again, as ``babelq ingest`` is: the same file is the same batch and every row keeps
its ``meta.id`` across runs, so an interrupted run is completed by running it again and a
finished one publishes nothing and says so.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from babelq.cli.commands import broker_argument, required_broker_url, write
from babelq.cli.commands.ingest import outbox_arguments
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
    from babelq.pipelines.publish import PublishSpec


#: who drops the copies of a batch published again: any consumer deduplicating on meta.id
DROPS = ("consumers that deduplicate on meta.id drop the copies",
         "consumers that deduplicate on meta.id drop copies of what they handled")


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "publish",
        help="check a bulk file of any rows (CSV/JSON lines/Parquet) and publish one envelope per row",
        description="Read a CSV (RFC 4180, a header row), JSON lines or Parquet file in Spark, check each "
        "row against the URN's JSON Schema (--schema; without one every row that is a JSON object is "
        "valid), write the rejected rows aside with their reasons and publish one URN envelope per valid "
        "row. CSV cells are text, read as the schema's integer, number or boolean where it declares one; "
        "JSON lines and Parquet keep their types. Running it again on the same file completes an "
        "interrupted batch and publishes nothing for a finished one.",
    )
    parser.add_argument("file", help="the file: .csv, .jsonl/.ndjson/.json (JSON lines) or .parquet (or a "
                        "Parquet dataset directory)")
    parser.add_argument("--urn", required=True,
                        help="the URN of every envelope, e.g. urn:babel:orders:created")
    broker_argument(parser, example="sqlite:///var/q.db")
    parser.add_argument("--queue", default="default",
                        help="meta.queue and the queue published to, as babelq encode's (default: default)")
    parser.add_argument("--schema", metavar="PATH",
                        help="the JSON Schema of the data: a schema file, a file mapping URNs to schemas "
                        "or a directory of them (default: none, every row that is a JSON object is valid)")
    parser.add_argument("--id-column", metavar="COL",
                        help="meta.id is uuid5 of the batch id and this column's value; a blank value is "
                        "rejected, so is one an earlier row has (default: the row's position in the file)")
    parser.add_argument("--format", choices=("csv", "jsonl", "parquet"),
                        help="the file's format (default: from its name; anything not "
                        ".jsonl/.ndjson/.json/.parquet is CSV)")
    parser.add_argument("--rejects", required=True, help="where rejected rows are written")
    parser.add_argument(
        "--rejects-format", choices=("parquet", "csv"), default="parquet", help="file format of --rejects"
    )
    parser.add_argument(
        "--batch-id",
        help="the batch's id, meta.correlation_id of every envelope (default: bulk_<hash of the file and "
        "the URN>)",
    )
    parser.add_argument(
        "--ttl", type=int, default=86_400, metavar="SECONDS",
        help="meta.ttl of every envelope: how long until it expires",
    )
    parser.add_argument(
        "--journal", metavar="PATH",
        help="the batch journal, an SQLite file (default: publish-journal.db beside --rejects)",
    )
    parser.add_argument(
        "--republish", action="store_true",
        help="publish a batch the journal says is finished again (same meta.ids: consumers drop the copies)",
    )
    outbox_arguments(parser)
    progress_argument(parser)
    spark_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from babelq.cli.commands.demo import show_progress
    from babelq.cli.commands.ingest import summary
    from babelq.envelope.urn import check_urn
    from babelq.errors import ConfigurationError
    from babelq.pipelines.journal import IngestJournal, default_journal
    from babelq.pipelines.publish import JOURNAL_NAME, PublishSpec, plan_publish, publish
    from babelq.pipelines.stages import StageClock

    if not args.queue.strip():
        raise ConfigurationError("--queue: must not be blank")
    if not args.urn.strip():
        raise ConfigurationError("--urn: must not be blank")
    check_urn(args.urn)  # a URN outside the standard's form is a warning, as babelq encode's
    schema = None
    if args.schema:
        from babelq.pipelines.publish_schema import load_schema

        schema = load_schema(args.schema, args.urn)
    spec = PublishSpec(args.urn, schema, args.id_column, args.format)
    if args.outbox:
        return _run_outbox(args, spec)
    url = required_broker_url(args)
    check_before_spark(args, broker=url)
    if args.ttl < 1:
        raise ConfigurationError(f"--ttl: must be at least 1 second, got {args.ttl}")
    journal = args.journal or default_journal(args.rejects, JOURNAL_NAME)
    # the file, the journal and the batch are checked before Spark starts
    book = IngestJournal(journal, beside_rejects=not args.journal)
    try:
        plan = plan_publish(args.file, book, spec, args.batch_id)
    finally:
        book.close()
    with open_progress(args) as progress:
        if plan.already_published and not args.republish:
            spark = None
        else:
            show_progress()
            spark = start_spark(args, "babelq-publish", broker=url, defaults=session_defaults(args, progress))
        result = publish(
            spark, args.file, spec, url=url, queue=args.queue, rejects_path=args.rejects,
            rejects_format=args.rejects_format, ttl_seconds=args.ttl, journal=journal,
            republish=args.republish, plan=plan, clock=StageClock(progress=progress),
        )
    write("\n".join(summary(result, args.queue, DROPS)) + "\n")
    return 0


def _run_outbox(args: argparse.Namespace, spec: PublishSpec) -> int:
    """``--outbox``: check and stage the batch in the outbox, as ``babelq ingest --outbox`` does."""
    from babelq.cli.commands.ingest import run_staging
    from babelq.pipelines.publish import plan_publish_staging, stage_publish

    return run_staging(
        args, "babelq-publish",
        lambda: plan_publish_staging(args.file, args.outbox, spec, args.batch_id, args.outbox_table),
        lambda spark, plan: stage_publish(
            spark, args.file, spec, outbox_url=args.outbox, queue=args.queue, rejects_path=args.rejects,
            ttl_seconds=args.ttl, rejects_format=args.rejects_format, table=args.outbox_table,
            restage=args.republish, plan=plan,
        ),
    )
