"""``babelq ingest FILE``: validate a bulk payments file in Spark and publish one envelope per valid row."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from babelq.cli.commands import write

if TYPE_CHECKING:
    from babelq.cli.commands import Subparsers


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "ingest",
        help="validate a bulk payments file (CSV/Parquet) and publish transfer.requested envelopes",
        description="Validate a bulk payments file in Spark, write rejected rows aside with their reasons, "
        "and publish urn:babel:payments:transfer.requested envelopes to the broker.",
    )
    parser.add_argument("file", help="bulk file: .csv or .parquet")
    parser.add_argument("--broker", required=True, help="broker URL, e.g. sqlite:///var/q.db")
    parser.add_argument("--queue", default="payments", help="queue (default %(default)s)")
    parser.add_argument("--rejects", required=True, help="where rejected rows are written")
    parser.add_argument("--rejects-format", choices=("parquet", "csv"), default="parquet")
    parser.add_argument("--batch-id", help="meta.correlation_id of every envelope (default: generated)")
    parser.add_argument("--ttl", type=int, default=86_400, help="default TTL seconds (default %(default)s)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from babelq.cli.commands.demo import show_progress
    from babelq.pipelines.ingest import ingest
    from babelq.spark.session import get_session

    show_progress()
    result = ingest(
        get_session("babelq-ingest"),
        args.file,
        url=args.broker,
        queue=args.queue,
        rejects_path=args.rejects,
        rejects_format=args.rejects_format,
        batch_id=args.batch_id,
        ttl_seconds=args.ttl,
    )
    lines = [
        f"batch {result.batch_id}: {result.rows_in} rows, {result.published} published to {args.queue}, "
        f"{result.rejected} rejected -> {result.rejects_path}"
    ]
    lines += [f"  {reason}: {n}" for reason, n in sorted(result.rejected_by_reason.items())]
    write("\n".join(lines) + "\n")
    return 0
