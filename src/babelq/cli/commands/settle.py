"""``babelq settle``: consume a payments queue with Spark and post each payment exactly once."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from babelq.cli.commands import write

if TYPE_CHECKING:
    from babelq.cli.commands import Subparsers


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "settle",
        help="stream a payments queue into the ledger exactly once (DLQ, retries) until drained",
        description="Run the settle streaming query until the queue is drained: poison, unsupported and "
        "expired messages go to <queue>.dlq, duplicates are dropped on meta.id, transfers are posted to the "
        "ledger with their processed id in one transaction, failures are retried then dead-lettered.",
    )
    parser.add_argument("--broker", required=True, help="broker URL, e.g. sqlite:///var/q.db")
    parser.add_argument("--queue", default="payments", help="queue (default %(default)s)")
    parser.add_argument("--ledger", required=True, help="ledger: a SQLite file path or a postgresql:// URL")
    parser.add_argument(
        "--checkpoint", required=True, help="Spark checkpoint directory (keep it between runs)"
    )
    parser.add_argument("--max-attempts", type=int, default=3)
    parser.add_argument("--retry-delay-ms", type=int, default=1_000)
    parser.add_argument("--batch", type=int, default=20_000, help="max messages per micro-batch")
    parser.add_argument("--timeout", type=float, default=3_600.0, help="stop after this many seconds")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from babelq.cli.commands.demo import show_progress
    from babelq.pipelines.settle import settle
    from babelq.spark.session import get_session

    show_progress()
    result = settle(
        get_session("babelq-settle"),
        url=args.broker,
        queue=args.queue,
        ledger=args.ledger,
        checkpoint=args.checkpoint,
        max_attempts=args.max_attempts,
        retry_delay_ms=args.retry_delay_ms,
        max_messages_per_batch=args.batch,
        timeout=args.timeout,
    )
    lines = [
        f"{result.stats.messages} messages in {result.stats.batches} micro-batches, {result.seconds:.1f} s, "
        f"{'drained' if result.drained else 'NOT drained (timeout)'}"
    ]
    lines += [f"  {o}{'/' + c if c else ''}: {n}" for (o, c), n in sorted(result.stats.outcomes.items())]
    write("\n".join(lines) + "\n")
    return 0 if result.drained else 1
