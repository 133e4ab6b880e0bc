"""``babelq consume``: run your own pipeline (handlers per URN) with Spark into your SQL database
or into Parquet/ORC files."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from babelq.cli.commands import (
    broker_argument,
    deprecated_option,
    outage_argument,
    outage_policy,
    required_broker_url,
    write,
)
from babelq.cli.spark_options import check_before_spark, session_defaults, spark_arguments, start_spark

if TYPE_CHECKING:
    from babelq.cli.commands import Subparsers
    from babelq.pipelines.consume import ConsumeRun


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "consume",
        help="run your pipeline's handlers over a queue into your SQL database or Parquet files, "
             "each message once",
        description="Run a babelq.pipelines.consume.Pipeline as a Spark streaming query: each handler's "
        "writes commit in the sink with the message's processed id, failures are retried then "
        "dead-lettered to <queue>.dlq, poison, expired and unknown messages follow the consume rules.",
    )
    parser.add_argument("--app", required=True, metavar="MODULE:ATTR",
                        help="the pipeline: a dotted module or a .py file, and its attribute "
                             "(default: pipeline)")
    broker_argument(parser, example="sqlite:///var/q.db")
    parser.add_argument("--sink", required=True, metavar="URL",
                        help="where the handlers write: a database (sqlite:///path.db, postgresql://...) "
                             "or a directory of tables of files (parquet:///dir, orc:///dir; "
                             "?state=postgresql://... keeps babelq's state there)")
    parser.add_argument("--checkpoint", required=True,
                        help="Spark checkpoint directory (keep it between runs)")
    parser.add_argument("--queue", default=None, help="queue (default: the pipeline's)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--until-drained", action="store_true",
                      help="stop once nothing is waiting or reserved (the default)")
    mode.add_argument("--trigger", type=float, metavar="SECONDS", default=None,
                      help="keep consuming, a micro-batch every SECONDS, until --timeout or Ctrl-C")
    parser.add_argument("--micro-batch", type=int, default=None, metavar="N",
                        help="max messages per micro-batch")
    deprecated_option(parser, "--batch", "--micro-batch", dest="micro_batch", type=int)
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help="stop after SECONDS (default: 3600 until drained; none with --trigger)")
    parser.add_argument("--visibility-timeout", type=float, default=300.0, metavar="SECONDS",
                        help="lease of the messages a micro-batch holds; a killed run's come back after it")
    parser.add_argument(
        "--metrics-port", type=int, metavar="PORT",
        help="serve Prometheus metrics on this port at /metrics while the query runs, in the worker's metric "
        "names, updated after every micro-batch (needs babelq[metrics]; default: off)",
    )
    outage_argument(parser)
    spark_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from babelq.cli.commands.demo import show_progress
    from babelq.errors import ConfigurationError
    from babelq.pipelines.consume import ConsumeStats, consume, load_pipeline
    from babelq.pipelines.consume.files import check_files_cluster
    from babelq.pipelines.consume.metrics import serve_consume_metrics
    from babelq.spark.session import explicit_master

    url = required_broker_url(args)
    conf = check_before_spark(args, broker=url, sink=args.sink)
    check_files_cluster(explicit_master(args.master, conf), args.sink)  # a named master: before Spark starts
    if args.micro_batch is not None and args.micro_batch < 1:
        raise ConfigurationError(f"--micro-batch: must be at least 1, got {args.micro_batch}")
    if args.trigger is not None and args.trigger <= 0:
        raise ConfigurationError(f"--trigger: must be more than 0 seconds, got {args.trigger:g}")
    for option, value in (("--timeout", args.timeout), ("--visibility-timeout", args.visibility_timeout)):
        if value is not None and value <= 0:
            raise ConfigurationError(f"{option}: must be more than 0 seconds, got {value:g}")
    outage = outage_policy(args)
    pipeline = load_pipeline(args.app)
    until_drained = args.trigger is None
    timeout = args.timeout if args.timeout is not None else (3_600.0 if until_drained else None)
    queue = args.queue or pipeline.queue
    stats = ConsumeStats()
    # a port in use or a missing prometheus_client fails now, before Spark starts
    exporter = None if args.metrics_port is None else serve_consume_metrics(stats, args.metrics_port, url=url,
                                                                            queue=queue)
    try:
        show_progress()
        spark = start_spark(args, "babelq-consume", broker=url, sink=args.sink,
                            defaults=session_defaults(args))
        result = consume(
            spark, pipeline, url=url, sink=args.sink, checkpoint=args.checkpoint, queue=queue,
            until_drained=until_drained, timeout=timeout,
            trigger_ms=int(args.trigger * 1000) if args.trigger is not None else 100,
            max_messages_per_batch=args.micro_batch, visibility_timeout=args.visibility_timeout, stats=stats,
            outage_seconds=outage.timeout,
        )
    finally:
        if exporter is not None:
            exporter.close()
    write(_summary(result, queue, until_drained, timeout))
    return 0 if result.drained or not until_drained else 1


def _summary(result: ConsumeRun, queue: str, until_drained: bool, timeout: float | None) -> str:
    from babelq.metrics import counter_lines
    from babelq.pipelines.consume.metrics import consume_counters

    stats = result.stats
    if result.drained:
        state = "drained"
    elif until_drained:
        held = "an unknown number" if result.reserved is None else f"{result.reserved:,}"
        state = (f"NOT drained after --timeout {timeout:g} s: {result.waiting:,} waiting, {held} reserved; "
                 "run consume again to continue")
    else:
        state = "stopped"
    lines = [f"{stats.messages} messages in {stats.batches} micro-batches, {result.seconds:.1f} s, {state}"]
    if result.republished:
        lines.append(f"  published {result.republished} dead letters / retries a crashed run had committed")
    for urn in sorted({u for u, _, _ in stats.by_urn}):
        lines.append(f"  {urn}")
        lines += [f"    {o}{'/' + c if c else ''}: {n}"
                  for (u, o, c), n in sorted(stats.by_urn.items()) if u == urn and n]
    lines.append("  as --metrics-port serves them:")
    lines += [f"    {line}" for line in counter_lines(consume_counters(stats), queue)]
    return "\n".join(lines) + "\n"
