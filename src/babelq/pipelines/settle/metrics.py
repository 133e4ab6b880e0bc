"""settle's counts in the worker's metric names: what ``babelq settle --metrics-port`` serves.

A worker (:mod:`babelq.runtime`) counts what it did to each message under the runtime's counter
names, and :mod:`babelq.metrics` exports them. settle decides the same things in Spark, per
micro-batch, as (outcome, cause) pairs (:class:`~babelq.pipelines.settle.SettleStats`, the consume
engine's counts of the payments pipeline);
:func:`settle_counters` translates them, so a dashboard built for workers reads a settle run
unchanged, through the same exporter (:func:`babelq.metrics.serve_counters`):

==========================  ===================================================================
runtime counter             settle outcomes
==========================  ===================================================================
``received``                every message a micro-batch took (a retried message each time)
``handled``                 ``posted``: the handler (schema, core banking, the ledger) succeeded
``failed``                  core banking refused: ``retried/core_banking`` and
                            ``dead_lettered/max_attempts`` (the worker's handler raising)
``retried``                 ``retried``: published again with attempts+1 after the backoff
``released``                ``deferred``: published again unchanged for the rest of its delay (a
                            worker releases such a message with that delay)
``dead_lettered.poison``    causes ``poison``, ``unsupported``, ``unprocessable`` (a poison record)
``dead_lettered.unknown_urn``  cause ``unknown_urn``
``dead_lettered.failed``    every other cause (``expired``, ``invalid``, ``max_attempts``,
                            ``rejected``, ``reference_conflict``, ``unpostable``)
==========================  ===================================================================

Not exported, because settle cannot observe them: ``babelq_leases_lost_total`` (the source
renews the micro-batch's leases; one that lapsed shows up as a redelivery, counted as a
duplicate) and ``babelq_handler_seconds`` (the handler runs over a whole partition at once, so
there is no time per message). settle adds its own, with the detail the worker's names fold
away: ``babelq_settle_outcomes_total{queue, outcome, cause}`` (duplicates included) and
``babelq_settle_micro_batches_total{queue}``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from babelq.pipelines.consume.metrics import MetricsExporter, runtime_counters
from babelq.pipelines.payments import POSTED

if TYPE_CHECKING:
    from babelq.metrics import Family
    from babelq.pipelines.settle import SettleStats

#: the exporter :func:`serve_settle_metrics` returns
SettleMetrics = MetricsExporter
__all__ = ["SettleMetrics", "serve_settle_metrics", "settle_counters", "settle_families"]


def settle_counters(stats: SettleStats) -> dict[str, int]:
    """``stats`` under the runtime's counter names (the table in the module docstring)."""
    with stats.lock:
        outcomes = dict(stats.outcomes)
        received = stats.messages
    return runtime_counters(outcomes, received, handled=POSTED)


def settle_families(stats: SettleStats) -> list[Family]:
    """settle's own counters: every (outcome, cause), and the micro-batches."""
    from babelq.metrics import Family

    with stats.lock:
        outcomes = dict(stats.outcomes)
        batches = stats.batches
    return [
        Family("babelq_settle_outcomes", "Messages settle gave each outcome, by cause.", ("outcome", "cause"),
               {(o, c): float(n) for (o, c), n in sorted(outcomes.items())}),
        Family("babelq_settle_micro_batches", "Micro-batches the settle query finished.", (),
               {(): float(batches)}),
    ]


def serve_settle_metrics(stats: SettleStats, port: int, *, url: str, queue: str,
                         addr: str = "0.0.0.0") -> SettleMetrics:
    """Serve ``stats`` (updated by the query after every micro-batch) on ``http://addr:port/metrics``
    in the worker's names, with the queue's depth read from the broker on each scrape through a
    connection of the exporter's own. ``port=0`` takes a free port (``.port``)."""
    from babelq.metrics import serve_counters
    from babelq.transports import open_transport

    transport = open_transport(url)
    try:
        server = serve_counters(lambda: settle_counters(stats), port, queue=queue, addr=addr,
                                transport=transport, families=lambda: settle_families(stats))
    except BaseException:
        transport.close()
        raise
    return SettleMetrics(server, transport)
