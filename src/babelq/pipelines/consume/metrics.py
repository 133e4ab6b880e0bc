"""A consume run's counts in the worker runtime's counter names, what ``--metrics-port`` serves.

==========================  ====================================================================
runtime counter             consume outcomes
==========================  ====================================================================
``received``                every message a micro-batch took (a retried message each time)
``handled``                 ``handled`` (the pipeline's ``handled_as``): the handler returned and its
                            writes committed
``failed``                  the handler raised: ``retried/handler``, ``dead_lettered/max_attempts``
``retried``                 ``retried``
``released``                ``deferred``
``dead_lettered.poison``    causes ``poison``, ``unsupported``, ``unprocessable``
``dead_lettered.unknown_urn``  cause ``unknown_urn``
``dead_lettered.failed``    every other cause (``expired``, ``schema``, ``max_attempts``, a
                            PermanentError's cause or ``rejected``)
==========================  ====================================================================

consume adds its own, with the detail those names fold away:
``babelq_consume_outcomes_total{queue, urn, outcome, cause}`` (duplicates included) and
``babelq_consume_micro_batches_total{queue}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from babelq.pipelines.consume.partition import DEAD_LETTERED, DEFERRED, RETRIED, UNPROCESSABLE
from babelq.runtime import rules

if TYPE_CHECKING:
    from babelq.metrics import Family, MetricsServer
    from babelq.pipelines.consume.query import ConsumeStats

#: dead-letter causes that are poison records (their reason is ``poison``)
_POISON_CAUSES = frozenset({rules.POISON, rules.UNSUPPORTED, UNPROCESSABLE})


def dead_letter_reason(cause: str) -> str:
    """The dead letter's ``reason`` for a ``cause`` (as :mod:`babelq.pipelines.consume.partition`
    writes them): poison records, unknown URNs, and ``failed`` for the rest."""
    if cause in _POISON_CAUSES:
        return rules.REASON_POISON
    if cause == rules.UNKNOWN_URN:
        return rules.REASON_UNKNOWN_URN
    return rules.REASON_FAILED


def runtime_counters(
    outcomes: Mapping[tuple[str, str], int], received: int, *, handled: str
) -> dict[str, int]:
    """Counts by (outcome, cause) under the runtime's counter names; ``handled`` is the outcome
    that means the handler's work is done (the pipeline's ``handled_as``)."""
    out = {"received": received, "handled": 0, "failed": 0, "retried": 0, "released": 0,
           "dead_lettered.failed": 0, "dead_lettered.unknown_urn": 0, "dead_lettered.poison": 0}
    for (outcome, cause), n in outcomes.items():
        if outcome == handled:
            out["handled"] += n
        elif outcome == RETRIED:
            out["retried"] += n
            out["failed"] += n
        elif outcome == DEFERRED:
            out["released"] += n
        elif outcome == DEAD_LETTERED:
            out[f"dead_lettered.{dead_letter_reason(cause)}"] += n
            if cause == rules.MAX_ATTEMPTS:
                out["failed"] += n
    return out


def consume_counters(stats: ConsumeStats) -> dict[str, int]:
    """``stats`` under the runtime's counter names (the table in the module docstring)."""
    with stats.lock:
        outcomes = dict(stats.outcomes)
        received = stats.messages
        handled = stats.handled
    return runtime_counters(outcomes, received, handled=handled)


def consume_families(stats: ConsumeStats) -> list[Family]:
    """consume's own counters: every (URN, outcome, cause), and the micro-batches."""
    from babelq.metrics import Family

    with stats.lock:
        by_urn = dict(stats.by_urn)
        batches = stats.batches
    return [
        Family("babelq_consume_outcomes", "Messages consume gave each outcome, by URN and cause.",
               ("urn", "outcome", "cause"), {key: float(n) for key, n in sorted(by_urn.items())}),
        Family("babelq_consume_micro_batches", "Micro-batches the consume query finished.", (),
               {(): float(batches)}),
    ]


@dataclass
class MetricsExporter:
    """A running exporter of a run's counters; :meth:`close` stops it and its broker connection."""

    server: MetricsServer
    transport: Any

    @property
    def port(self) -> int:
        return self.server.port

    def close(self) -> None:
        self.server.close()
        if self.transport is not None:
            self.transport.close()


def serve_consume_metrics(stats: ConsumeStats, port: int, *, url: str, queue: str,
                          addr: str = "0.0.0.0") -> MetricsExporter:
    """Serve ``stats`` on ``http://addr:port/metrics`` in the worker's names, with the queue's depth
    asked of the broker on each scrape (``port=0``: a free port, ``.port``); ``close()`` stops it."""
    from babelq.metrics import serve_counters
    from babelq.transports import open_transport

    transport = open_transport(url)
    try:
        server = serve_counters(lambda: consume_counters(stats), port, queue=queue, addr=addr,
                                transport=transport, families=lambda: consume_families(stats))
    except BaseException:
        transport.close()
        raise
    return MetricsExporter(server, transport)
