"""Settle: the payments application (:mod:`babelq.pipelines.payments`) run by the consume engine.

Everything that makes a run exactly once is the engine's (:mod:`babelq.pipelines.consume`): the
``babelq`` source, the consume rules classified on the JVM, one sink transaction per partition
holding the handler's writes, the processed ids and the outbox claims, the acks after the commit,
the drain check. Settle adds what the payments command line promises: the ledger opened (a bad
``--ledger`` fails at once) and its tables made before the query starts, the bank loaded and
shipped to a cluster's executors (a bad ``--bank`` fails at once), the run named ``settle`` (its
query ``babelq-settle-<queue>``, its log lines and failpoints ``settle.*``), its counts folded to
(outcome, cause) and where it posted (:attr:`SettleRun.bank`).

:func:`settle` runs until the queue is drained: nothing waiting (delayed retries count as
waiting), nothing reserved by any consumer (a killed run's reservations come back when their
leases lapse) and the last micro-batch acked. Re-running with the same checkpoint continues
where the last run stopped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, Unpack, cast

from babelq.envelope import dlq_name
from babelq.pipelines import TRANSFER_URN
from babelq.pipelines.consume.api import Pipeline
from babelq.pipelines.consume.classify import Classifier
from babelq.pipelines.consume.partition import ConsumeConfig
from babelq.pipelines.consume.query import (
    TRIGGER_MS,
    ConsumeQuery,
    ConsumeStats,
    InjectedCrashError,
    consume_frame,
)
from babelq.pipelines.core_banking import SIMULATED_DESCRIPTION, BankChoice, BankSpec, describe_bank
from babelq.pipelines.ledger import open_ledger
from babelq.runtime.outage import DEFAULT_OUTAGE_SECONDS

log = logging.getLogger(__name__)

#: A settle run's counts: the consume engine's (by (outcome, cause), and by URN).
SettleStats = ConsumeStats
#: The URNs settle has a handler for; every other one is ``unknown_urn``.
HANDLED_URNS = (TRANSFER_URN,)
#: The run's name: in its query's name, its log lines and its failpoints.
NAME = "settle"

__all__ = ["HANDLED_URNS", "InjectedCrashError", "SettleConfig", "SettleQuery", "SettleRun", "SettleStats",
           "prepare_settle", "settle", "settle_frame"]


@dataclass(frozen=True, slots=True)
class SettleConfig:
    """Where settle reads and posts, and how it retries (pickled to the executors in the pipeline)."""

    url: str
    queue: str
    ledger: str
    ledger_prefix: str = ""
    max_attempts: int = 3
    retry_delay_ms: int = 1_000  #: the backoff's base: the first retry waits up to this long
    #: where payments are posted: None for the simulator, else a ``--bank`` spec, imported by
    #: each Python worker (:func:`~babelq.pipelines.core_banking.bank_post`), or a bank itself
    bank: BankChoice = None
    #: how long an outage (the ledger, the bank) is waited out before the task fails
    outage_seconds: float = DEFAULT_OUTAGE_SECONDS

    @property
    def dlq(self) -> str:
        return dlq_name(self.queue)

    def pipeline(self) -> Pipeline:
        """The payments pipeline these settings describe."""
        from babelq.pipelines.payments import payments_pipeline

        return payments_pipeline(self.queue, bank=self.bank, ledger_prefix=self.ledger_prefix,
                                 max_attempts=self.max_attempts, retry_delay_ms=self.retry_delay_ms)

    def consume(self, pipeline: Pipeline) -> ConsumeConfig:
        """The engine's configuration of a settle run of ``pipeline``."""
        return ConsumeConfig(url=self.url, queue=self.queue, sink=self.ledger, pipeline=pipeline,
                             prefix=self.ledger_prefix, max_attempts=self.max_attempts,
                             retry_delay_ms=self.retry_delay_ms, name=NAME,
                             outage_seconds=self.outage_seconds)


def _fold(by_urn: dict[tuple[str, str, str], int]) -> dict[tuple[str, str], int]:
    counts: dict[tuple[str, str], int] = {}
    for (_, outcome, cause), n in by_urn.items():
        counts[outcome, cause] = counts.get((outcome, cause), 0) + n
    return counts


def settle_frame(
    df: Any, config: SettleConfig, *, now: int | None = None,
    seconds: dict[str, float] | None = None, readers: dict[str, int] | None = None,
    classifier: Classifier | None = None,
) -> dict[tuple[str, str], int]:
    """Settle the messages of ``df``, rows :func:`~babelq.pipelines.consume.classify.decoded` made
    (of a ``body`` column, optionally ``broker_attempts``, ``read_by`` and ``reserved_at``), each
    of its partitions by one task (no shuffle), judged at ``now`` (ms; None: each row at its
    ``reserved_at``); returns how many had each (outcome, cause), adds each phase's seconds
    (summed over the tasks) to ``seconds`` and the messages per reading process to ``readers``.
    One Spark action, so a streaming micro-batch is read (reserved) once. The ledger's tables are
    made first, as a run's start makes them."""
    open_ledger(config.ledger, prefix=config.ledger_prefix).close()
    pipeline = config.pipeline()
    engine = config.consume(pipeline)
    classify = classifier or Classifier(urns=pipeline.urns, policy=engine.policy)
    return _fold(consume_frame(df, engine, classify, now=now, seconds=seconds, readers=readers))


@dataclass(slots=True)
class SettleRun:
    """How a run ended. ``drained``: nothing waiting, nothing reserved, nothing delayed. Otherwise
    ``waiting`` (ready + delayed) and ``reserved`` (held by a consumer, e.g. a killed run whose
    leases have not lapsed; None when the broker cannot tell) say what is left."""

    stats: SettleStats
    seconds: float
    drained: bool
    waiting: int = 0
    reserved: int | None = 0
    #: outbox rows a crashed run (at start) or a task Spark retried (before "drained") left unpublished
    republished: int = 0
    #: where the run posted payments (:func:`~babelq.pipelines.core_banking.describe_bank`)
    bank: str = SIMULATED_DESCRIPTION


@dataclass(slots=True)
class SettleQuery:
    """A settle run made ready to start (:func:`prepare_settle`): the ledger opened and its outbox
    flushed, the decoded stream and the classifier built (the engine's :class:`ConsumeQuery`).
    :meth:`run` starts the query.

    Preparing is the driver's Python and Py4J work (decode's expressions, the source's schema,
    the ledger); a caller with something else to wait for (the
    demo, while ingest publishes) prepares in another thread and runs when the queue is filled."""

    query: ConsumeQuery
    #: where payments are posted (:func:`~babelq.pipelines.core_banking.describe_bank`)
    bank: str = SIMULATED_DESCRIPTION

    @property
    def republished(self) -> int:
        """Outbox rows a crashed run committed but never published, published while preparing."""
        return self.query.republished

    def run(
        self,
        checkpoint: str | Path,
        *,
        timeout: float = 600.0,
        stats: SettleStats | None = None,
        fail_after_batches: int | None = None,
        on_poll: Callable[[SettleStats], None] | None = None,
        trigger_ms: int = TRIGGER_MS,
    ) -> SettleRun:
        """Run the query until the queue is drained (or ``timeout`` seconds pass); see :func:`settle`."""
        run = self.query.run(checkpoint, until_drained=True, timeout=timeout, trigger_ms=trigger_ms,
                             stats=stats, fail_after_batches=fail_after_batches, on_poll=on_poll)
        return SettleRun(run.stats, run.seconds, run.drained, run.waiting, run.reserved, run.republished,
                         self.bank)


def prepare_settle(
    spark: Any,
    *,
    url: str,
    queue: str,
    ledger: str | Path,
    ledger_prefix: str = "",
    max_attempts: int = 3,
    retry_delay_ms: int = 1_000,
    max_messages_per_batch: int | None = None,
    num_partitions: int | None = None,
    visibility_timeout: float = 300.0,
    bank: str | BankChoice = None,
    outage_seconds: float = DEFAULT_OUTAGE_SECONDS,
) -> SettleQuery:
    """Everything :func:`settle` does before its query starts: check the targets, load the bank
    (a bad one fails now) and ship its file to a cluster's executors, open the ledger (a bad
    ``--ledger`` fails now), then the engine's preparation (:func:`~babelq.pipelines.consume.prepare_consume`:
    the sink's tables, what a crashed run left in its outbox published, the decoded stream and
    the classifier). The arguments are :func:`settle`'s."""
    from babelq.pipelines.cluster_checks import check_session_targets
    from babelq.pipelines.consume.query import prepare_consume
    from babelq.pipelines.core_banking import parse_bank

    check_session_targets(spark, broker=url, ledger=ledger)
    chosen = parse_bank(bank) if isinstance(bank, str) else bank
    described = describe_bank(chosen)  # imports it: a bad bank fails here, not in every task
    _ship_bank(spark, chosen)
    log.debug("settle: posting through %s", described)  # the CLI prints it; SettleRun.bank holds it
    open_ledger(ledger, prefix=ledger_prefix).close()  # a bad --ledger fails here, named as such
    config = SettleConfig(url=url, queue=queue, ledger=str(ledger), ledger_prefix=ledger_prefix,
                          max_attempts=max_attempts, retry_delay_ms=retry_delay_ms, bank=chosen)
    prepared = prepare_consume(
        spark, config.pipeline(), url=url, sink=str(ledger), queue=queue, prefix=ledger_prefix,
        max_messages_per_batch=max_messages_per_batch, num_partitions=num_partitions,
        visibility_timeout=visibility_timeout, name=NAME, outage_seconds=outage_seconds)
    return SettleQuery(prepared, described)


def _ship_bank(spark: Any, bank: BankChoice) -> None:
    """Ship a ``--bank`` ``.py`` file to the executors when they may not share the driver's files
    (a cluster): each Python worker imports it from there by its path
    (:func:`~babelq.pipelines.core_banking.bank_post`). ``addFile``, not ``addPyFile``: a file
    on the workers' import path could shadow a module of the same name (a ``json.py``)."""
    from babelq.spark.session import is_local_master

    sc = spark.sparkContext
    if isinstance(bank, BankSpec) and bank.path and not is_local_master(str(sc.master)):
        sc.addFile(bank.module)
        log.info("shipping %s to the executors", bank.module)


class SettleOptions(TypedDict, total=False):
    """:func:`prepare_settle`'s optional settings (their defaults are written there, once)."""

    ledger_prefix: str
    max_attempts: int
    retry_delay_ms: int
    max_messages_per_batch: int | None
    num_partitions: int | None
    visibility_timeout: float
    bank: str | BankChoice
    outage_seconds: float


class RunOptions(TypedDict, total=False):
    """:meth:`SettleQuery.run`'s optional settings (their defaults are written there, once)."""

    timeout: float
    stats: SettleStats | None
    fail_after_batches: int | None
    on_poll: Callable[[SettleStats], None] | None
    trigger_ms: int


class SettleSettings(SettleOptions, RunOptions, total=False):
    """What :func:`settle` takes besides where to read, where to post and the checkpoint."""


def settle(
    spark: Any,
    *,
    url: str,
    queue: str,
    ledger: str | Path,
    checkpoint: str | Path,
    **settings: Unpack[SettleSettings],
) -> SettleRun:
    """Consume ``queue`` until it is drained (or ``timeout`` seconds pass) and settle every message.

    :func:`prepare_settle` then :meth:`SettleQuery.run`, in one call; ``settings`` are theirs:
    ``ledger_prefix``, ``max_attempts`` (3), ``retry_delay_ms`` (1000: the base of the retries'
    jittered backoff, :class:`babelq.runtime.rules.RetryPolicy`), ``max_messages_per_batch``
    (:func:`~babelq.pipelines.consume.query.default_batch`: 100,000 where the executors read the
    broker, SQLite and Redis; 20,000 where the driver's planner does, AMQP, SQS, Redis's Laravel
    layout), ``num_partitions`` (how many tasks read and settle each micro-batch in parallel;
    default: Spark's default parallelism, the cores of a local master), ``visibility_timeout``
    (300 s), ``bank`` (where payments are posted: None for the simulator, or ``MODULE:ATTR``, see
    :mod:`babelq.pipelines.core_banking`); ``timeout`` (600 s), ``stats``, ``on_poll`` and
    ``trigger_ms``. Raises the query's error if it dies (e.g. :class:`InjectedCrashError` from
    the test hook); the checkpoint then lets the next call continue.
    """
    preparing, running = SettleOptions.__optional_keys__, RunOptions.__optional_keys__
    unknown = sorted(settings.keys() - preparing - running)
    if unknown:
        raise TypeError(f"settle() got unexpected keyword argument(s): {', '.join(unknown)}")
    prepare = cast(SettleOptions, {k: v for k, v in settings.items() if k in preparing})
    run = cast(RunOptions, {k: v for k, v in settings.items() if k in running})
    return prepare_settle(spark, url=url, queue=queue, ledger=ledger, **prepare).run(checkpoint, **run)
