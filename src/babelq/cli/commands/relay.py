"""``babelq relay``: publish a transactional outbox's committed rows to a broker.

    babelq relay --outbox postgresql://app@db/app --broker redis://127.0.0.1:6379/0
    babelq relay --outbox sqlite:///var/app/app.db --broker amqp://guest:guest@mq/ --once

Runs until SIGTERM/SIGINT (the batch in progress finishes and is marked), polling an empty
outbox every ``--poll`` seconds and backing off while the broker or the database is down;
``--once`` publishes what is pending now and exits (an outage is then an error). On exit the
totals are printed as one JSON line. Both URLs may come from the environment
(``$BABELQ_OUTBOX``, ``$BABELQ_BROKER``) so passwords need not sit on a command line.
Several relays may run against one PostgreSQL table; on SQLite run one.
"""

from __future__ import annotations

import argparse
import json
import logging
from typing import TYPE_CHECKING

from babelq.cli.commands import (
    broker_argument,
    deprecated_option,
    outage_argument,
    outage_policy,
    required_broker_url,
    write,
)
from babelq.cli.commands.outbox import OUTBOX_ENV, outbox_url

if TYPE_CHECKING:
    from babelq.cli.commands import Subparsers


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "relay",
        help="publish a transactional outbox to a broker",
        description="Publish the committed rows of an outbox table (babelq.outbox) to a broker in batches "
        "and mark them published; rows the broker refuses for their content are marked failed with the "
        "error.",
    )
    parser.add_argument("--outbox", metavar="URL", help=f"outbox database (default: ${OUTBOX_ENV})")
    broker_argument(parser)
    parser.add_argument(
        "--publish-batch", type=int, default=500, metavar="N",
        help="outbox rows claimed and published at a time",
    )
    deprecated_option(parser, "--batch", "--publish-batch", dest="publish_batch", type=int)
    parser.add_argument("--once", action="store_true", help="publish what is pending now, then exit")
    parser.add_argument("--table", default="babelq_outbox", help="outbox table")
    parser.add_argument(
        "--lease",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="SQLite: how long a batch's claim lasts if the relay dies",
    )
    parser.add_argument(
        "--poll",
        type=float,
        default=0.5,
        metavar="SECONDS",
        help="wait between polls of an empty outbox",
    )
    outage_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from babelq.errors import ConfigurationError, OutageTooLongError, UnavailableError
    from babelq.outbox import Relay
    from babelq.runtime.signals import stop_on_signals
    from babelq.transports import open_transport
    from babelq.urls import redact

    if args.publish_batch < 1:
        raise ConfigurationError(f"--publish-batch: must be >= 1, got {args.publish_batch}")
    if not args.lease > 0:
        raise ConfigurationError(f"--lease: must be > 0 seconds, got {args.lease}")
    if not args.poll > 0:
        raise ConfigurationError(f"--poll: must be > 0 seconds, got {args.poll}")
    source = outbox_url(args.outbox, "--outbox")
    broker = required_broker_url(args)
    logging.basicConfig(level=logging.WARNING, format="babelq relay: %(message)s")
    outage = outage_policy(args)
    try:
        if args.once:
            transport = open_transport(broker)
        else:  # a long-running relay waits for a broker that is down when it starts
            transport = outage.wait_out(lambda: open_transport(broker), f"broker {redact(broker)}",
                                        log=logging.getLogger("babelq.cli"))
    except ConfigurationError as exc:
        raise ConfigurationError(f"--broker {redact(broker)}: {exc}") from exc
    except UnavailableError as exc:
        if isinstance(exc, OutageTooLongError):
            raise
        raise UnavailableError(f"--broker {redact(broker)}: {exc}") from exc
    try:
        relay = Relay(
            source,
            transport,
            batch=args.publish_batch,
            table=args.table,
            lease_seconds=args.lease,
            poll_interval=args.poll,
            outage_seconds=outage.timeout,
        )
    except BaseException:
        transport.close()
        raise
    try:
        def ready() -> None:  # after the first batch, with the signal handlers in place
            logging.getLogger("babelq.cli").info(
                "relay: publishing rows of table %r in %s to %s", args.table, redact(source), redact(broker)
            )

        with stop_on_signals(relay.stop, relay.stop):
            totals = relay.drain() if args.once else relay.run(on_ready=ready)
    finally:
        relay.close()
        transport.close()
    write(json.dumps(totals.as_dict(), sort_keys=True) + "\n")
    return 0
