"""``babelq expire``: dead-letter the expired messages waiting on a queue, without running handlers.

    babelq expire --broker redis://127.0.0.1:6379/0 --queue payments            # one pass
    babelq expire --broker sqlite:///var/app/queue.db --queue payments --every 60

A message whose ``meta.expire_at`` has passed is moved to ``<queue>.dlq`` with the record a
worker writes for it (reason ``failed``, cause ``expired``); every other message stays where it
is, byte for byte, in its order (:mod:`babelq.runtime.expiry_sweep`). One pass by default;
``--every SECONDS`` repeats until SIGTERM/SIGINT. On exit the totals are printed as one JSON
line.

Outages are waited out as ``babelq worker`` waits them: a broker that goes down during a pass is
retried with a capped backoff, one warning per attempt, and the pass starts again where the
queue then stands; with ``--every`` a broker that is down at start is waited for too, while a
single pass opens it first and stops with the error line (as ``worker --until-empty`` does).
AMQP and SQS cannot show a queued message without delivering it: the command refuses them in
one line, before connecting, saying why.
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
from typing import TYPE_CHECKING

from babelq.cli.commands import broker_argument, required_broker_url, write

if TYPE_CHECKING:
    from babelq.cli.commands import Subparsers


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "expire",
        help="dead-letter expired messages waiting on a queue, without running handlers",
        description="Move the messages whose meta.expire_at has passed from a queue to <queue>.dlq, with the "
        "record a worker writes for an expired message (reason failed, cause expired); other messages are "
        "not touched. Redis (both layouts) and SQLite; AMQP and SQS cannot list a queue without delivering "
        "its messages and are refused.",
    )
    broker_argument(parser)
    parser.add_argument(
        "--queue", required=True, metavar="QUEUE[,QUEUE...]", help="queue(s) to sweep, comma-separated"
    )
    parser.add_argument(
        "--every", type=float, metavar="SECONDS",
        help="sweep again every SECONDS until SIGTERM/SIGINT (default: one pass)",
    )  # fmt: skip
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from babelq.cli.commands.worker import queue_names
    from babelq.errors import ConfigurationError, UnavailableError
    from babelq.runtime.expiry_sweep import ExpirySweep, check_sweepable
    from babelq.runtime.outage import RetryPause, is_unavailable
    from babelq.runtime.signals import stop_on_signals
    from babelq.transports import open_transport, transport_class
    from babelq.urls import one_line, redact

    every = args.every
    if every is not None and not every > 0:
        raise ConfigurationError(f"--every: must be > 0 seconds, got {every}")
    queues = queue_names(args.queue)
    broker = required_broker_url(args)
    shown = redact(broker)
    try:
        check_sweepable(transport_class(broker))
    except ConfigurationError as exc:
        raise ConfigurationError(f"--broker {shown}: {exc}") from exc
    log = logging.getLogger("babelq.expire")
    stop = threading.Event()
    pauses = RetryPause(first=0.5, cap=10.0)
    totals = {"passes": 0, "read": 0, "expired": 0, "moved": 0}

    def wait_out(exc: BaseException, doing: str) -> None:
        delay = pauses.next()
        log.warning("broker %s unavailable while %s (attempt %d): %s; trying again in %.1f s",
                    shown, doing, pauses.failures, one_line(exc, typed=True), delay)  # fmt: skip
        stop.wait(delay)

    with stop_on_signals(stop.set, stop.set):
        transport = None
        while transport is None and not stop.is_set():
            try:
                transport = open_transport(broker)
            except UnavailableError as exc:
                if every is None:
                    raise
                wait_out(exc, "opening it")
        if transport is None:
            write(json.dumps(totals, sort_keys=True) + "\n")
            return 0
        try:
            sweep = ExpirySweep(transport, logger=log)
            while not stop.is_set():
                try:
                    results = sweep.sweep_all(queues)
                except Exception as exc:
                    if not is_unavailable(exc):
                        raise
                    wait_out(exc, f"sweeping {', '.join(queues)}")
                    continue
                if pauses.failures:
                    log.info("broker %s reachable again after %d failed attempt(s)", shown, pauses.reset())
                totals["passes"] += 1
                for result in results:
                    totals["read"] += result.read
                    totals["expired"] += result.expired
                    totals["moved"] += result.moved
                    log.info(
                        "pass %d over %r: read %d, expired %d, moved %d to the DLQ",
                        totals["passes"], result.queue, result.read, result.expired, result.moved,
                    )  # fmt: skip
                if every is None:
                    break
                stop.wait(every)
        finally:
            transport.close()
    write(json.dumps(totals, sort_keys=True) + "\n")
    return 0
