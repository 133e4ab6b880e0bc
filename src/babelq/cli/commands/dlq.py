"""``babelq dlq``: triage a dead-letter queue, or redrive chosen messages to their original queue.

``babelq dlq [triage] --queue Q`` counts; ``babelq dlq redrive --queue Q`` (or ``--redrive``) puts
the selected messages back, marked as replays (``--no-mark``: unmarked), to their original queue
or ``--to QUEUE``; ``--dry-run`` prints what a redrive would do and writes nothing.
"""

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
        description="Count dead letters by reason, cause, URN, error and queue; with redrive, move the "
        "selected ones back (attempts reset, dead_letter removed, trace_id and meta.id kept), marked as "
        "replays so handlers can skip external effects (message.is_replay()). Poison records "
        "cannot be redriven and stay on the DLQ.",
    )
    parser.add_argument("action", nargs="?", choices=("triage", "redrive"), default="triage",
                        help="triage (count) or redrive")
    broker_argument(parser)
    parser.add_argument("--queue", required=True, help="the DLQ (e.g. payments.dlq) or its source queue")
    parser.add_argument("--redrive", action="store_true", help="redrive the selected messages (as: redrive)")
    parser.add_argument("--dry-run", action="store_true",
                        help="redrive: print what would be redriven (by reason, targets); write nothing")
    parser.add_argument("--to", metavar="QUEUE", help="redrive: into QUEUE instead of each original queue")
    parser.add_argument("--no-mark", action="store_true",
                        help="redrive: do not mark the messages as replays (message.is_replay() is False)")
    parser.add_argument("--reason", help="select by dead_letter.reason (failed, unknown_urn, poison)")
    parser.add_argument("--cause", help="select by dead_letter.cause (expired, max_attempts, ...)")
    parser.add_argument("--urn", help="select by URN")
    parser.add_argument("--id", action="append", dest="ids", help="select by meta.id (repeatable)")
    parser.add_argument("--limit", type=int, help="redrive at most this many (default: all selected)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from babelq.envelope import dlq_name
    from babelq.errors import ConfigurationError
    from babelq.pipelines.dlq import redrive_messages, selector, triage
    from babelq.transports import open_transport

    redriving = args.redrive or args.action == "redrive" or args.dry_run
    if not redriving:
        for flag, given in (("--to", args.to is not None), ("--no-mark", args.no_mark)):
            if given:
                raise ConfigurationError(f"{flag}: only for a redrive (babelq dlq redrive --queue ...)")
    dlq = args.queue if args.queue.endswith(".dlq") else dlq_name(args.queue)
    transport = open_transport(required_broker_url(args))
    try:
        if not redriving:
            write(triage(transport, dlq).table() + "\n")
            return 0
        choose = selector(
            reason=args.reason,
            cause=args.cause,
            urn=args.urn,
            message_ids=set(args.ids) if args.ids else None,
        )
        result = redrive_messages(transport, dlq, choose, limit=args.limit, to_queue=args.to,
                                  dry_run=args.dry_run, mark=not args.no_mark)
    finally:
        transport.close()
    lines = result.lines(dlq)
    if result.poison_kept:
        lines.append(
            f"{result.poison_kept} selected poison records were NOT redriven: their bytes are not an "
            "envelope a consumer can handle; inspect them with babelq inspect"
        )
    write("\n".join(lines) + "\n")
    return 0
