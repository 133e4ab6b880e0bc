"""``babelq dlq``: triage a dead-letter queue, or redrive chosen messages to their original queue.

``babelq dlq triage --queue Q`` counts; ``babelq dlq redrive --queue Q`` puts the selected
messages back, marked as replays (``--no-mark``: unmarked), to their original queue or
``--to QUEUE``; ``--dry-run`` prints what a redrive would do and writes nothing.

The forms before the subcommands (``babelq dlq --queue Q``, ``... --redrive``) still parse: the
``dlq`` parser keeps every option, hidden, and a subcommand's options default to nothing so they
never overwrite what was given before the subcommand's name.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from babelq.cli.commands import broker_argument, deprecated_option, required_broker_url, write

if TYPE_CHECKING:
    from babelq.cli.commands import Subparsers


def _queue(parser: argparse.ArgumentParser, *, hidden: bool) -> None:
    # required, but checked when the command runs: `dlq --queue Q redrive` gives it before the subcommand
    parser.add_argument(
        "--queue",
        default=None if hidden else argparse.SUPPRESS,
        help=argparse.SUPPRESS if hidden else "the DLQ (e.g. payments.dlq) or its source queue (required)",
    )


def _redrive_options(parser: argparse.ArgumentParser, *, hidden: bool) -> None:
    """The redrive's options: shown on ``dlq redrive``, hidden on ``dlq`` (the form before it)."""

    def add(*names: str, default: object = None, **kwargs: object) -> None:
        if hidden:
            kwargs["help"] = argparse.SUPPRESS
        parser.add_argument(*names, default=default if hidden else argparse.SUPPRESS, **kwargs)  # type: ignore[arg-type]

    add("--dry-run", default=False, action="store_true",
        help="print what would be redriven (by reason, targets); write nothing")
    add("--to", metavar="QUEUE", help="into QUEUE instead of each original queue")
    add("--no-mark", default=False, action="store_true",
        help="do not mark the messages as replays (message.is_replay() is False)")
    add("--reason", help="select by dead_letter.reason (failed, unknown_urn, poison)")
    add("--cause", help="select by dead_letter.cause (expired, max_attempts, ...)")
    add("--urn", help="select by URN")
    add("--id", action="append", dest="ids", metavar="ID", help="select by meta.id (repeatable)")
    add("--limit", type=int, metavar="N", help="redrive at most N of the selected (default: all selected)")


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "dlq",
        help="triage a dead-letter queue or redrive messages from it",
        description="Count dead letters by reason, cause, URN, error and queue (triage); move the "
        "selected ones back (redrive: attempts reset, dead_letter removed, trace_id and meta.id kept), "
        "marked as replays so handlers can skip external effects (message.is_replay()). Poison records "
        "cannot be redriven and stay on the DLQ.",
    )
    # the form before the subcommands: every option, hidden; --redrive chose the redrive
    parser.add_argument("--broker", dest="broker", default=None, help=argparse.SUPPRESS)
    parser.set_defaults(broker_required=True)
    _queue(parser, hidden=True)
    deprecated_option(parser, "--redrive", "babelq dlq redrive", dest="action", flag="redrive")
    _redrive_options(parser, hidden=True)

    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=False)
    triage = actions.add_parser(
        "triage", help="count the dead letters by reason, cause, URN, error and queue"
    )
    broker_argument(triage, default=argparse.SUPPRESS)
    _queue(triage, hidden=False)
    redrive = actions.add_parser("redrive", help="put the selected dead letters back on a queue")
    broker_argument(redrive, default=argparse.SUPPRESS)
    _queue(redrive, hidden=False)
    _redrive_options(redrive, hidden=False)
    parser.set_defaults(func=run)  # no action given is triage, as before the actions


def run(args: argparse.Namespace) -> int:
    from babelq.envelope import dlq_name
    from babelq.errors import ConfigurationError
    from babelq.pipelines.dlq import redrive_messages, selector, triage
    from babelq.transports import open_transport

    redriving = args.action == "redrive" or args.dry_run  # no action (None): triage
    if args.queue is None:
        raise ConfigurationError("--queue: required (babelq dlq triage|redrive --queue QUEUE)")
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
