"""A consume run's counts in the worker runtime's counter names, as settle's metrics do.

==========================  ====================================================================
runtime counter             consume outcomes
==========================  ====================================================================
``received``                every message a micro-batch took (a retried message each time)
``handled``                 ``handled``: the handler returned and its writes committed
``failed``                  the handler raised: ``retried/handler``, ``dead_lettered/max_attempts``
``retried``                 ``retried``
``released``                ``deferred``
``dead_lettered.poison``    causes ``poison``, ``unsupported``, ``unprocessable``
``dead_lettered.unknown_urn``  cause ``unknown_urn``
``dead_lettered.failed``    every other cause (``expired``, ``schema``, ``max_attempts``, a
                            PermanentError's cause or ``rejected``)
==========================  ====================================================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from babelq.pipelines.consume.partition import HANDLED
from babelq.pipelines.settle.metrics import dead_letter_reason
from babelq.pipelines.settle.partition import DEAD_LETTERED, DEFERRED, RETRIED
from babelq.runtime import rules

if TYPE_CHECKING:
    from babelq.pipelines.consume.query import ConsumeStats


def consume_counters(stats: ConsumeStats) -> dict[str, int]:
    """``stats`` under the runtime's counter names (the table in the module docstring)."""
    with stats.lock:
        outcomes = dict(stats.outcomes)
        received = stats.messages
    out = {"received": received, "handled": 0, "failed": 0, "retried": 0, "released": 0,
           "dead_lettered.failed": 0, "dead_lettered.unknown_urn": 0, "dead_lettered.poison": 0}
    for (outcome, cause), n in outcomes.items():
        if outcome == HANDLED:
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
