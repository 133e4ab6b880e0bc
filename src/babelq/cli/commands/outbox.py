"""``babelq outbox``: create and look after a transactional outbox table.

    babelq outbox init sqlite:///var/app/app.db
    babelq outbox init postgresql://app@db/app --table orders_outbox
    babelq outbox status postgresql://app@db/app        # counts per status, the failed rows
    babelq outbox requeue postgresql://app@db/app       # failed rows -> pending (after a fix)
    babelq outbox prune postgresql://app@db/app --older-than 86400

The URL may come from ``$BABELQ_OUTBOX`` instead, so a password need not sit on a command line.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import TYPE_CHECKING

from babelq.cli.commands import write

if TYPE_CHECKING:
    from babelq.cli.commands import Subparsers

#: Environment variable that supplies the outbox database URL.
OUTBOX_ENV = "BABELQ_OUTBOX"


def outbox_url(value: str | None, option: str) -> str:
    from babelq.errors import ConfigurationError

    url = value or os.environ.get(OUTBOX_ENV)
    if not url:
        given = "the URL argument" if option == "URL" else f"{option} URL"
        raise ConfigurationError(f"{option}: no outbox URL given; pass {given} or set {OUTBOX_ENV}")
    return url


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "url",
        nargs="?",
        metavar="URL",
        help=f"outbox database: sqlite:///path.db, a file path or postgresql://... (default: ${OUTBOX_ENV})",
    )
    parser.add_argument("--table", default="babelq_outbox", help="outbox table")


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "outbox",
        help="create or inspect a transactional outbox table",
        description="Create the outbox table producers write with babelq.outbox.Outbox.add, count its rows, "
        "requeue failed ones or prune published ones. `babelq relay` publishes it.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    _common(actions.add_parser("init", help="create the outbox table (idempotent)"))
    status = actions.add_parser("status", help="rows per status and the failed rows with their errors")
    _common(status)
    status.add_argument("--failed", type=int, default=20, metavar="N", help="show at most N failed rows")
    _common(actions.add_parser("requeue", help="make every failed row pending again"))
    prune = actions.add_parser("prune", help="delete rows published more than --older-than seconds ago")
    _common(prune)
    prune.add_argument(
        "--older-than",
        type=float,
        required=True,
        metavar="SECONDS",
        help="age of the oldest published row kept",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from babelq.errors import ConfigurationError
    from babelq.outbox import Outbox, open_relay_store
    from babelq.urls import redact

    url = outbox_url(args.url, "URL")
    if args.action == "init":
        Outbox.init(url, table=args.table)
        write(f"outbox table {args.table} ready in {redact(url)}\n")
        return 0
    store = open_relay_store(url, table=args.table)
    try:
        if args.action == "status":
            if args.failed < 0:
                raise ConfigurationError(f"--failed: must be >= 0, got {args.failed}")
            report = {
                "counts": store.counts(),
                "failed": [
                    {"id": i, "queue": q, "attempts": a, "error": e}
                    for i, q, a, e in store.failed_rows(args.failed)
                ],
            }
            write(json.dumps(report, ensure_ascii=False) + "\n")
        elif args.action == "requeue":
            write(json.dumps({"requeued": store.requeue_failed()}) + "\n")
        else:
            if not args.older_than >= 0:
                raise ConfigurationError(f"--older-than: must be >= 0 seconds, got {args.older_than}")
            write(json.dumps({"pruned": store.prune(int(args.older_than * 1000))}) + "\n")
    finally:
        store.close()
    return 0
