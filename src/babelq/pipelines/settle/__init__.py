"""Settle, the payments pipeline's consuming half: a Spark streaming query that posts each payment once.

One job per module:

* :mod:`~babelq.pipelines.settle.query`: the streaming query, its micro-batch body and when it
  stops (:func:`settle`, or :func:`prepare_settle` then :meth:`SettleQuery.run`; :class:`SettleStats`,
  :class:`SettleRun`);
* :mod:`~babelq.pipelines.settle.classify`: the JVM half of a micro-batch (decode, the consume
  rules as one ``CASE WHEN``, copies, partitioning);
* :mod:`~babelq.pipelines.settle.partition`: the Python half, in every partition at once (the
  handler, one ledger transaction, the partition's dead letters and retries);
* :mod:`~babelq.pipelines.settle.metrics`: the run's counts in the worker's Prometheus names.

The ``babelq settle`` command (:mod:`babelq.cli.commands.settle`) is this query's command line.
"""

from babelq.pipelines.settle.query import (
    InjectedCrashError,
    SettleQuery,
    SettleRun,
    SettleStats,
    prepare_settle,
    settle,
    settle_frame,
)

__all__ = [
    "InjectedCrashError", "SettleQuery", "SettleRun", "SettleStats", "prepare_settle", "settle",
    "settle_frame",
]
