"""Streaming queries that outlive an outage: settle's and consume's one way to wait out a broker,
ledger or sink that went away under a running query.

A task that meets an outage it cannot wait out in place (the broker's connection cut under a
read or an ack) fails, and with it the query. :func:`run_through_outages` then waits, under the
command's :class:`~babelq.runtime.outage.OutagePolicy`, until the broker answers again and starts
the query afresh from its checkpoint: Spark replays the micro-batch that was cut short, the
source hands the replay the messages its first attempt reserved, and the ledger or sink skips
what the first attempt committed. So nothing is lost or done twice. The bound counts from the
outage's start until a micro-batch completes again; past it the run stops with one line
(:class:`~babelq.errors.OutageTooLongError`), and a re-run continues in the same way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from babelq.errors import BabelqError
from babelq.runtime.outage import OutagePolicy, names_outage, wait_for_broker
from babelq.urls import redact_text

R = TypeVar("R")


class _Counted(Protocol):
    batches: int


def run_through_outages(
    start: Callable[[], Any],
    watch: Callable[[Any], R],
    *,
    what: str,
    url: str,
    queue: str,
    policy: OutagePolicy,
    stats: _Counted,
    log: logging.Logger,
) -> R:
    """``watch(start())`` until the query ends without an error, restarting it after an outage;
    returns what ``watch`` returned for the run that ended. ``what`` names the command in lines."""
    outage_since: float | None = None
    pauses = policy.pauses()  # between restarts: a store that stays down must not make them a tight loop
    while True:
        batches = stats.batches
        query = start()
        try:
            result = watch(query)
        finally:
            if query.isActive:
                query.stop()
        error = query.exception()
        if error is None:
            return result
        text = redact_text(str(error))
        if not names_outage(text):
            # the whole text (the CLI shows its root cause on one line); URLs in it redacted
            raise BabelqError(f"{what} query failed: {text}") from None
        now = time.monotonic()
        if outage_since is None or stats.batches > batches:  # a micro-batch completed: a new outage
            outage_since = now
            pauses.reset()
        pause = pauses.next()
        left = policy.timeout - (now + pause - outage_since)
        if left < 0:
            cause = BabelqError(outage_cause(text))
            raise policy.too_long(f"{what}'s broker, ledger or sink", cause) from None
        log.warning("%s: the query stopped on an outage (%s); restarting it from its checkpoint in %.1f s, "
                    "once the broker answers", what, outage_cause(text), pause)
        time.sleep(pause)
        wait_for_broker(url, queue, OutagePolicy(left, policy.first, policy.cap), log=log)


def outage_cause(text: str) -> str:
    """The line of a query's error text that names the outage (the last such: the root cause)."""
    lines = [line.strip() for line in text.splitlines() if names_outage(line)]
    return lines[-1] if lines else " ".join(text.split())[:300]
