"""``babelq dlq``: triage a dead-letter queue, or redrive chosen messages to their original queue."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from babelq.cli.commands import broker_argument, required_broker_url, write

if TYPE_CHECKING:
    from babelq.cli.commands import Subparsers


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "dlq",
        help="triage a dead-letter queue or redrive messages from it",
        description="Count dead letters by reason, cause, URN, error and queue; with --redrive, move the "
        "selected ones back (attempts reset, dead_letter removed, trace_id and meta.id kept). Poison records "
        "cannot be redriven and stay on the DLQ.",
    )
    broker_argument(parser)
    parser.add_argument("--queue", required=True, help="the DLQ (e.g. payments.dlq) or its source queue")
    parser.add_argument("--redrive", action="store_true", help="redrive the selected messages")
    parser.add_argument("--reason", help="select by dead_letter.reason (failed, unknown_urn, poison)")
    parser.add_argument("--cause", help="select by dead_letter.cause (expired, max_attempts, ...)")
    parser.add_argument("--urn", help="select by URN")
    parser.add_argument("--id", action="append", dest="ids", help="select by meta.id (repeatable)")
    parser.add_argument("--limit", type=int, help="redrive at most this many")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from babelq.envelope import dlq_name
    from babelq.pipelines.dlq import redrive_messages, selector, triage
    from babelq.transports import open_transport

    dlq = args.queue if args.queue.endswith(".dlq") else dlq_name(args.queue)
    transport = open_transport(required_broker_url(args))
    try:
        if not args.redrive:
            write(triage(transport, dlq).table() + "\n")
            return 0
        choose = selector(
            reason=args.reason,
            cause=args.cause,
            urn=args.urn,
            message_ids=set(args.ids) if args.ids else None,
        )
        result = redrive_messages(transport, dlq, choose, limit=args.limit)
    finally:
        transport.close()
    lines = [
        f"redriven {result.redriven} from {dlq}: {dict(result.to_queues)}",
        f"not selected {result.not_selected}",
    ]
    if result.poison_kept:
        lines.append(
            f"{result.poison_kept} selected poison records were NOT redriven: their bytes are not an "
            "envelope a consumer can handle; inspect them with babelq inspect"
        )
    write("\n".join(lines) + "\n")
    return 0
