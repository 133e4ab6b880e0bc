"""``babelq demo``: generate a bulk payments file, ingest and settle it on local Spark, reconcile.

Exit code 0 when the reconciliation balances (every row posted, rejected or dead-lettered,
each valid payment in the ledger exactly once, every currency's value adding up), 1 when it does
not; 2 for a usage error, and when an export asked for by name (``--export png|pdf``) failed.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from babelq.cli.commands import broker_argument, broker_url, deprecated_option, write
from babelq.cli.spark_options import (
    check_before_spark,
    check_targets,
    open_progress,
    progress_argument,
    session_defaults,
    spark_arguments,
)

if TYPE_CHECKING:
    from babelq.cli.commands import Subparsers


def register(subparsers: Subparsers) -> None:
    from babelq.pipelines.report.export import CHOICES  # standard library only: cheap at --help

    parser = subparsers.add_parser(
        "demo",
        help="run the payment pipeline end to end on Spark (local[2] unless --master) and reconcile",
        description="Generate a bulk payments file with known defects, ingest it, settle it exactly once "
        "through the embedded SQLite broker (or --broker), triage the DLQ and reconcile. Payments are "
        "posted through simulated core banking, whose refusals are among the defects.",
    )
    parser.add_argument(
        "--rows", type=int, default=100_000, help="payments in the file"
    )
    parser.add_argument(
        "--out", default="out/demo", help="working directory, recreated"
    )
    broker_argument(parser, required=False, example="redis://127.0.0.1:6379/0", fallback="SQLite in --out")
    parser.add_argument("--seed", type=int, default=42, help="generator seed")
    parser.add_argument(
        "--micro-batch", type=int, default=100_000, metavar="N",
        help="max messages per micro-batch of the settle stage",
    )
    deprecated_option(parser, "--batch", "--micro-batch", dest="micro_batch", type=int)
    parser.add_argument(
        "--ledger",
        metavar="URL",
        default=None,
        help="the ledger: postgresql://... (needed on a cluster; this run gets tables of its own) or an "
        "SQLite file (default: ledger.db in --out, local mode only)",
    )
    parser.add_argument(
        "--export",
        choices=CHOICES,
        default="auto",
        help="a picture of report.html beside it, made by headless Chromium: png, pdf, none, or auto (png "
        "when Chromium is found, else a log line) (default: auto)",
    )
    progress_argument(parser)
    spark_arguments(parser)
    parser.set_defaults(func=run)


def show_progress() -> None:
    """Stage lines on stderr even when the CLI runs at its default WARNING level."""
    progress = logging.getLogger("babelq.pipelines")
    if progress.getEffectiveLevel() > logging.INFO:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
        progress.addHandler(handler)
        progress.setLevel(logging.INFO)
        progress.propagate = False


def run(args: argparse.Namespace) -> int:
    from babelq.pipelines.demo import render_text, run_demo
    from babelq.pipelines.report.export import FORMATS, resolve_export

    if args.rows < 1:
        print("babelq demo: --rows must be >= 1", file=sys.stderr)
        return 2
    broker = broker_url(args)
    # --conf syntax; a named cluster master vs the SQLite ledger (the default) or a relative SQLite broker
    conf = check_before_spark(args, broker=broker, ledger=args.ledger or Path(args.out, "ledger.db"))
    resolve_export(args.export, option="--export")  # --export png without Chromium: one line, before Spark
    # a broker that refuses or is down: one line before Spark starts (run_demo checks --ledger itself,
    # with the tables of its own run)
    check_targets(broker=broker)
    show_progress()
    with open_progress(args) as progress:
        result = run_demo(
            rows=args.rows,
            out=args.out,
            broker=broker,
            seed=args.seed,
            max_messages_per_batch=args.micro_batch,
            ledger=args.ledger,
            master=args.master,
            spark_conf={**session_defaults(args, progress), **conf},
            export=args.export,
            progress=progress,
        )
    write(render_text(result))
    if args.export in FORMATS and result.exported is None:
        print(f"babelq demo: error: --export {args.export}: {result.export_note}", file=sys.stderr)
        return 2
    return 0 if result.balanced else 1
