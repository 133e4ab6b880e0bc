"""Settle: the payments application (:mod:`babelq.pipelines.payments`) run by the consume engine.

* :mod:`~babelq.pipelines.settle.query`: preparing and running it (:func:`settle`, or
  :func:`prepare_settle` then :meth:`SettleQuery.run`; :class:`SettleConfig`, :class:`SettleRun`,
  :data:`SettleStats`; :func:`settle_frame`, one micro-batch);
* :mod:`~babelq.pipelines.settle.metrics`: the run's counts in the worker's Prometheus names.

The machinery (the streaming query, the consume rules on the JVM, one sink transaction per
partition, the outbox, the acks) is :mod:`babelq.pipelines.consume`'s. The ``babelq settle``
command (:mod:`babelq.cli.commands.settle`) is this module's command line.
"""

from babelq.pipelines.settle.query import (
    HANDLED_URNS,
    InjectedCrashError,
    SettleConfig,
    SettleQuery,
    SettleRun,
    SettleStats,
    prepare_settle,
    settle,
    settle_frame,
)

__all__ = [
    "HANDLED_URNS", "InjectedCrashError", "SettleConfig", "SettleQuery", "SettleRun", "SettleStats",
    "prepare_settle", "settle", "settle_frame",
]
