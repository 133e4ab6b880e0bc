"""``babelq settle``: consume a payments queue with Spark and post each payment exactly once."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from babelq.cli.commands import broker_argument, required_broker_url, write
from babelq.cli.spark_options import check_before_spark, spark_arguments, start_spark

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
    broker_argument(parser, example="sqlite:///var/q.db")
    parser.add_argument("--queue", default="payments", help="queue")
    parser.add_argument("--ledger", required=True, help="ledger: a SQLite file path or a postgresql:// URL")
    parser.add_argument(
        "--checkpoint", required=True, help="Spark checkpoint directory (keep it between runs)"
    )
    parser.add_argument(
        "--max-attempts", type=int, default=3, help="attempts of a failing message before it is dead-lettered"
    )
    parser.add_argument(
        "--retry-delay-ms", type=int, default=1_000, help="base delay of a retry's jittered backoff, in ms"
    )
    parser.add_argument("--batch", type=int, default=20_000, help="max messages per micro-batch")
    parser.add_argument(
        "--timeout", type=float, default=3_600.0, metavar="SECONDS", help="stop after this many seconds"
    )
    parser.add_argument(
        "--visibility-timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="lease of the messages a micro-batch holds (renewed while it runs); a killed run's "
        "messages come back after it",
    )
    spark_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from babelq.cli.commands.demo import show_progress
    from babelq.errors import ConfigurationError
    from babelq.pipelines.ledger import open_ledger
    from babelq.pipelines.settle import settle

    url = required_broker_url(args)
    # --conf syntax; a named cluster master vs a relative SQLite broker or an SQLite ledger
    check_before_spark(args, broker=url, ledger=args.ledger)
    for option, value in (("--batch", args.batch), ("--max-attempts", args.max_attempts)):
        if value < 1:
            raise ConfigurationError(f"{option}: must be at least 1, got {value}")
    if args.visibility_timeout <= 0 or args.timeout <= 0:
        raise ConfigurationError("--timeout and --visibility-timeout: must be more than 0 seconds")
    open_ledger(args.ledger).close()  # a bad --ledger fails now, before Spark starts
    show_progress()
    result = settle(
        start_spark(args, "babelq-settle", broker=url, ledger=args.ledger),
        url=url,
        queue=args.queue,
        ledger=args.ledger,
        checkpoint=args.checkpoint,
        max_attempts=args.max_attempts,
        retry_delay_ms=args.retry_delay_ms,
        max_messages_per_batch=args.batch,
        timeout=args.timeout,
        visibility_timeout=args.visibility_timeout,
    )
    if result.drained:
        state = "drained"
    else:
        held = "an unknown number" if result.reserved is None else f"{result.reserved:,}"
        state = (
            f"NOT drained after --timeout {args.timeout:g} s: {result.waiting:,} waiting, {held} reserved "
            "by a consumer; run settle again to continue"
        )
    lines = [
        f"{result.stats.messages} messages in {result.stats.batches} micro-batches, {result.seconds:.1f} s, "
        f"{state}"
    ]
    if result.republished:
        who = "a crashed run or a killed task"
        lines.append(f"  published {result.republished} dead letters / retries {who} had committed")
    lines += [f"  {o}{'/' + c if c else ''}: {n}" for (o, c), n in sorted(result.stats.outcomes.items())]
    if result.stats.readers:
        lines.append(f"  read from the broker by {len(result.stats.readers)} process(es):")
        lines += [f"    {who}: {n}" for who, n in sorted(result.stats.readers.items())]
    write("\n".join(lines) + "\n")
    return 0 if result.drained else 1
