"""A consume run's counts in the worker runtime's counter names, as settle's metrics do.

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

from typing import TYPE_CHECKING

from babelq.pipelines.settle.metrics import SettleMetrics, runtime_counters

if TYPE_CHECKING:
    from babelq.metrics import Family
    from babelq.pipelines.consume.query import ConsumeStats


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


def serve_consume_metrics(stats: ConsumeStats, port: int, *, url: str, queue: str,
                          addr: str = "0.0.0.0") -> SettleMetrics:
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
    return SettleMetrics(server, transport)
