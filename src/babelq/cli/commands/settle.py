"""``babelq settle``: consume a payments queue with Spark and post each payment exactly once.

Payments are posted through simulated core banking unless ``--bank MODULE:ATTR`` names a real
posting function (:mod:`babelq.pipelines.core_banking`); the command says which when it starts,
in its summary and in ``--help``.
"""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING, Any

from babelq.cli.commands import (
    broker_argument,
    deprecated_option,
    outage_argument,
    outage_policy,
    required_broker_url,
    write,
)
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
    from babelq.pipelines.core_banking import BankSpec
    from babelq.pipelines.progress import Progress
    from babelq.pipelines.settle import SettleRun, SettleStats


def register(subparsers: Subparsers) -> None:
    from babelq.pipelines.core_banking import SIMULATED, SIMULATED_RULES

    parser = subparsers.add_parser(
        "settle",
        help="stream a payments queue into the ledger exactly once (DLQ, retries) until drained",
        description="Run the settle streaming query until the queue is drained: poison, unsupported and "
        "expired messages go to <queue>.dlq, duplicates are dropped on meta.id, transfers are posted to the "
        "ledger with their processed id in one transaction, failures are retried then dead-lettered. "
        f"Without --bank, payments are posted through {SIMULATED} ({SIMULATED_RULES}): "
        "not for real payments.",
    )
    broker_argument(parser, example="sqlite:///var/q.db")
    parser.add_argument("--queue", default="payments", help="queue")
    parser.add_argument(
        "--ledger", required=True, metavar="URL", help="ledger: a SQLite file path or a postgresql:// URL"
    )
    parser.add_argument(
        "--checkpoint", required=True, help="Spark checkpoint directory (keep it between runs)"
    )
    parser.add_argument(
        "--max-attempts", type=int, default=3, help="attempts of a failing message before it is dead-lettered"
    )
    parser.add_argument(
        "--retry-delay", type=float, default=1.0, metavar="SECONDS",
        help="base delay of a retry's jittered backoff",
    )
    deprecated_option(parser, "--retry-delay-ms", "--retry-delay", dest="retry_delay", type=int,
                      convert=lambda ms: ms / 1000)
    parser.add_argument(
        "--micro-batch", type=int, default=None, metavar="N",
        help="max messages per micro-batch (default: 100000 where the executors read the broker: "
             "sqlite, redis; 20000 where the driver does: amqp, sqs, redis with laravel=1)",
    )
    deprecated_option(parser, "--batch", "--micro-batch", dest="micro_batch", type=int)
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
    parser.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus metrics on this port at /metrics while the query runs, in the worker's metric "
        "names, updated after every micro-batch (needs babelq[metrics]; default: off)",
    )
    parser.add_argument(
        "--bank",
        metavar="MODULE:ATTR",
        help="core banking to post each payment through: a dotted module or a path to a .py file, and an "
        "object with a post(payment) method, a class of them, or a function post(payment); raise "
        "babelq.runtime.PermanentError to dead-letter, UnavailableError when it is down, anything else to "
        f"retry (docs/pipelines.md; default: {SIMULATED}, {SIMULATED_RULES})",
    )
    outage_argument(parser)
    progress_argument(parser)
    spark_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from babelq.cli.commands.demo import show_progress
    from babelq.errors import ConfigurationError
    from babelq.pipelines.core_banking import describe_bank
    from babelq.pipelines.settle import SettleStats
    from babelq.pipelines.settle.metrics import serve_settle_metrics

    url = required_broker_url(args)
    # --conf syntax; a named cluster master vs a relative SQLite broker or an SQLite ledger
    check_before_spark(args, broker=url, ledger=args.ledger)
    for option, value in (("--micro-batch", args.micro_batch), ("--max-attempts", args.max_attempts)):
        if value is not None and value < 1:
            raise ConfigurationError(f"{option}: must be at least 1, got {value}")
    if not (math.isfinite(args.retry_delay) and args.retry_delay >= 0):
        raise ConfigurationError(f"--retry-delay: must be >= 0 seconds, got {args.retry_delay:g}")
    if args.visibility_timeout <= 0 or args.timeout <= 0:
        raise ConfigurationError("--timeout and --visibility-timeout: must be more than 0 seconds")
    outage = outage_policy(args)
    bank = check_bank(args.bank)  # a bad --bank fails now, before Spark starts
    write(f"settle: posting payments through {describe_bank(bank)}\n")
    stats = SettleStats()
    # a port in use or a missing prometheus_client fails now, before Spark starts
    exporter = None if args.metrics_port is None else serve_settle_metrics(stats, args.metrics_port, url=url,
                                                                           queue=args.queue)
    try:
        show_progress()
        with open_progress(args) as progress:
            spark = start_spark(args, "babelq-settle", broker=url, ledger=args.ledger,
                                defaults=session_defaults(args, progress))
            result = _settle_watched(args, spark, url, stats, progress, bank=bank,
                                     outage_seconds=outage.timeout)
    finally:
        if exporter is not None:
            exporter.close()
    write(summary(result, queue=args.queue, timeout=args.timeout))
    return 0 if result.drained else 1


def summary(result: SettleRun, *, queue: str, timeout: float) -> str:
    """What settle prints when it stops: how it ended, where it posted, the outcomes, the counters."""
    from babelq.metrics import counter_lines
    from babelq.pipelines.settle.metrics import settle_counters

    if result.drained:
        state = "drained"
    else:
        held = "an unknown number" if result.reserved is None else f"{result.reserved:,}"
        state = (
            f"NOT drained after --timeout {timeout:g} s: {result.waiting:,} waiting, {held} reserved "
            "by a consumer; run settle again to continue"
        )
    stats = result.stats
    lines = [
        f"{stats.settled:,} messages settled in {stats.batches} micro-batches, {result.seconds:.1f} s, "
        f"{state}",
        f"  posted through {result.bank}",
    ]
    if stats.messages != stats.settled:  # each time a message came back it was handled once more
        lines.append(f"  {stats.messages:,} deliveries handled: {stats.messages - stats.settled:,} of them "
                     "retried or deferred, so delivered again")
    if result.republished:
        who = "a crashed run or a killed task"
        lines.append(f"  published {result.republished} dead letters / retries {who} had committed")
    lines += [f"  {o}{'/' + c if c else ''}: {n}" for (o, c), n in sorted(result.stats.outcomes.items())]
    if result.stats.readers:
        lines.append(f"  read from the broker by {len(result.stats.readers)} process(es):")
        lines += [f"    {who}: {n}" for who, n in sorted(result.stats.readers.items())]
    lines.append("  as --metrics-port serves them:")
    lines += [f"    {line}" for line in counter_lines(settle_counters(result.stats), queue)]
    return "\n".join(lines) + "\n"


def check_bank(text: str | None) -> BankSpec | None:
    """``--bank`` parsed and imported on the driver, so a bad one is one line before Spark starts;
    None for the simulator."""
    from babelq.errors import ConfigurationError
    from babelq.pipelines.core_banking import bank_post, parse_bank

    if text is None:
        return None
    try:
        spec = parse_bank(text)
        bank_post(spec)
    except ConfigurationError as exc:
        raise ConfigurationError(f"--bank {text!r}: {exc}") from exc
    return spec


def _settle_watched(args: argparse.Namespace, spark: Any, url: str, stats: SettleStats,
                    progress: Progress, *, bank: BankSpec | None, outage_seconds: float) -> SettleRun:
    """Run settle with its progress shown: messages settled, reserved and waiting (asked of the
    broker through a connection of its own, only when progress is shown)."""
    from babelq.pipelines.progress import SettleProgress, queue_depth
    from babelq.pipelines.settle import settle
    from babelq.transports import open_transport

    transport = open_transport(url) if progress.live else None
    watch = SettleProgress(progress.task("settle", unit="messages"),
                           lambda: queue_depth(transport, args.queue) if transport
                           else (0, None))
    try:
        result = settle(
            spark,
            url=url,
            queue=args.queue,
            ledger=args.ledger,
            checkpoint=args.checkpoint,
            max_attempts=args.max_attempts,
            retry_delay_ms=round(args.retry_delay * 1000),
            max_messages_per_batch=args.micro_batch,
            timeout=args.timeout,
            visibility_timeout=args.visibility_timeout,
            stats=stats,
            on_poll=watch,
            bank=bank,
            outage_seconds=outage_seconds,
        )
    finally:
        if transport is not None:
            transport.close()
    watch.finish(result)
    return result
