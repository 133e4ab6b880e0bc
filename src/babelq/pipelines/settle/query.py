"""Settle (the payments consumer) as a Spark streaming query: consume, settle exactly once, stop when drained.

The query reads the queue through the ``babelq`` source (acks after each micro-batch
commits) and hands every micro-batch to :func:`process_batch`, one Spark action per
micro-batch, one stage whose tasks are the source's read slots, each doing all of this for the
rows it read (no body crosses a shuffle):

* on the JVM (:mod:`babelq.pipelines.settle.classify`): every body decoded by babelq's scanner,
  classified by the consume rules the worker runtime applies (:mod:`babelq.runtime.rules`: poison,
  unsupported, expired, deferred, unknown URN, retry or DLQ on failure) as Spark expressions;
* in Python (:mod:`babelq.pipelines.settle.partition`): the handler (schema, core banking) for
  the rows that reach it (a copy met earlier in the partition is dropped; the ledger drops one
  that two partitions met), then one ledger transaction per partition holding its postings,
  processed ids and outbox claims, then the partition's dead letters and retries published from
  that executor through the ``babelq`` transports.

The micro-batch is read once (the source reserves when it is read): everything happens in the
one ``collect`` of the partitions' outcome counts.

:func:`settle` first opens the ledger (a bad ``--ledger`` fails at once) and publishes the dead
letters and retries a crashed run committed but never published (the ledger's outbox). It then
runs the query with a processing-time trigger and stops it once the queue is drained: the last
finished micro-batch is acked (settle acks each batch itself once its outcomes are committed
and published, :func:`ack_settled`, in a background thread, :class:`BatchAcks`; for a source the
driver reads, the batch was the source's empty flush batch, whose planning acked everything
before it), nothing is waiting on the queue
(delayed retries count as waiting) and nothing is reserved by any consumer: a killed run's
reservations come back when their leases lapse, and settle waits for them (up to ``timeout``)
instead of calling a queue with messages in flight drained.
Re-running with the same checkpoint continues where the last run stopped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypedDict, Unpack, cast

from babelq.errors import BabelqError
from babelq.pipelines.core_banking import SIMULATED_DESCRIPTION, BankChoice, BankSpec, describe_bank
from babelq.pipelines.failpoints import failpoint
from babelq.pipelines.ledger import open_ledger
from babelq.pipelines.settle.classify import Classifier, decoded
from babelq.pipelines.settle.partition import (
    DEFERRED,
    HANDLED_URNS,
    OUTCOME_SCHEMA,
    READ_BY,
    RETRIED,
    SECONDS,
    SettleConfig,
    publish_outbound,
    settle_partition,
)
from babelq.transports import Transport, open_transport
from babelq.urls import redact_text

log = logging.getLogger(__name__)


@dataclass(slots=True)
class SettleStats:
    """What the query did, accumulated over micro-batches (driver side, thread-safe)."""

    batches: int = 0
    messages: int = 0
    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: seconds spent per phase of the partitions' Python work, summed over every task (a profile:
    #: ``read`` waiting for the JVM's rows, ``handle``, ``ledger``, ``publish``)
    seconds: Counter[str] = field(default_factory=Counter)
    #: messages by the process that read them from the broker (the source's ``read_by``:
    #: ``executor <host>:<jvm pid>`` for a Spark executor, ``driver …`` for the driver's reader)
    readers: Counter[str] = field(default_factory=Counter)
    last_batch_rows: int = -1
    #: the last micro-batch's messages were acked by settle itself (:func:`ack_settled`), so no
    #: flush batch has to run for the source to ack them
    last_batch_acked: bool = False
    last_batch_at: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, counts: dict[tuple[str, str], int], seconds: dict[str, float] | None = None,
               readers: dict[str, int] | None = None) -> None:
        rows = sum(counts.values())
        with self.lock:
            self.seconds.update(seconds or {})
            self.readers.update(readers or {})
            self.batches += 1
            self.messages += rows
            self.outcomes.update(counts)
            self.last_batch_rows = rows
            self.last_batch_acked = False
            self.last_batch_at = time.monotonic()

    def count(self, outcome: str, cause: str | None = None) -> int:
        return sum(n for (o, c), n in self.outcomes.items() if o == outcome and (cause is None or c == cause))

    @property
    def unacked(self) -> int:
        """Messages of the last micro-batch that are handled but not acked yet: the broker still
        counts them as reserved."""
        with self.lock:
            return 0 if self.last_batch_acked else max(0, self.last_batch_rows)

    @property
    def settled(self) -> int:
        """Messages with a final outcome (posted, dropped as a duplicate, dead-lettered). A retried
        or deferred one comes back and is settled later, so :attr:`messages` (every delivery
        handled) counts it once more for each time it came back."""
        with self.lock:
            return sum(n for (o, _), n in self.outcomes.items() if o not in (RETRIED, DEFERRED))


#: How often the driver looks whether the queue is drained (two idle looks in a row end the run).
_POLL_SECONDS = 0.1
#: How often the query asks the broker for more when the last micro-batch is done (milliseconds): a
#: micro-batch slower than this starts the next at once, so it is the latency of an idle queue.
TRIGGER_MS = 100
#: Settle's micro-batch when the caller names none and the executors read the broker (SQLite,
#: Redis): each micro-batch pays fixed costs (a Spark job, planning, the ack), so a big one
#: (``bench/bench_settle.py --batch`` compares sizes).
EXECUTORS_READ_BATCH = 100_000
#: ... and where the driver's planner reads (AMQP, SQS): every body of a micro-batch passes through
#: the driver's memory, so a smaller one.
DRIVER_READS_BATCH = 20_000


def default_batch(url: str) -> int:
    """Settle's messages per micro-batch for ``url`` when none is given (see :data:`EXECUTORS_READ_BATCH`)."""
    from babelq.spark.datasource.stream_reader import executors_read

    return EXECUTORS_READ_BATCH if executors_read(url) else DRIVER_READS_BATCH


class InjectedCrashError(BabelqError):
    """Raised by the test hook ``fail_after_batches`` to kill a query mid-run."""


def settle_frame(
    df: Any, config: SettleConfig, *, now: int | None = None,
    seconds: dict[str, float] | None = None, readers: dict[str, int] | None = None,
    classifier: Classifier | None = None,
) -> dict[tuple[str, str], int]:
    """Settle the messages of ``df``, rows :func:`~babelq.pipelines.settle.classify.decoded` made (of a
    ``body`` column, optionally ``broker_attempts``, ``read_by`` and ``reserved_at``), each of its
    partitions by one task (no shuffle), judged at ``now`` (ms; None: each row at its
    ``reserved_at``); returns how many had each (outcome, cause), adds each phase's seconds
    (summed over the tasks) to ``seconds`` and the messages per reading process to ``readers``.
    One Spark action, so a streaming micro-batch is read (reserved) once."""
    classify = classifier or Classifier(urns=HANDLED_URNS, policy=config.policy)
    rows = classify(df, now)  # None: each row at its reserved_at (the same code every micro-batch)
    outcomes = rows.mapInArrow(partial(settle_partition, config=config), OUTCOME_SCHEMA).collect()
    counts: dict[tuple[str, str], int] = {}
    for r in outcomes:  # one row per outcome and partition: add the partitions up
        if r["outcome"] == SECONDS:
            if seconds is not None:
                seconds[r["cause"]] = seconds.get(r["cause"], 0.0) + int(r["n"]) / 1e6
            continue
        if r["outcome"] == READ_BY:
            if readers is not None:
                readers[r["cause"]] = readers.get(r["cause"], 0) + int(r["n"])
            continue
        key = (r["outcome"], r["cause"] or "")
        counts[key] = counts.get(key, 0) + int(r["n"])
    return counts


def process_batch(
    df: Any,
    batch_id: int,
    *,
    config: SettleConfig,
    stats: SettleStats,
    fail_after_batches: int | None = None,
    classifier: Classifier | None = None,
    acks: BatchAcks | None = None,
) -> None:
    """foreachBatch body: settle one micro-batch, already decoded (one Spark action, a task per read slot;
    ``classifier``: the query's, built once), then have ``acks`` ack its messages in the background
    (:class:`BatchAcks`)."""
    started = time.perf_counter()
    if acks is not None:
        acks.expect(batch_id)
    phases: dict[str, float] = {}
    readers: dict[str, int] = {}
    counts = settle_frame(df, config, seconds=phases, readers=readers, classifier=classifier)
    stats.record(counts, phases, readers)
    n = sum(counts.values())
    seconds = time.perf_counter() - started
    if n:
        log.info(
            "settle batch %d: %d messages in %.2f s (%.0f msg/s) %s",
            batch_id,
            n,
            seconds,
            n / seconds if seconds else 0.0,
            {f"{o}/{c}" if c else o: k for (o, c), k in counts.items()},
        )
    if fail_after_batches is not None and stats.batches >= fail_after_batches:
        raise InjectedCrashError(f"test hook: stopping the query after {stats.batches} batches")
    if acks is not None:
        acks.submit(batch_id)


class BatchAcks:
    """Acks settled micro-batches (:func:`ack_settled`) in one background thread, in order.

    Why a thread: the ack of a big micro-batch of SQLite rows is a long write on the driver.
    Done inline it would delay Spark's commit of the batch and the planning of the next one by
    as much. In the background it overlaps them; the next batch's tasks wait for the queue's
    lock only if they claim before it is done. Safe in any order: every outcome is committed and
    published before the ack is asked for. A run that dies before its ack has the source ack the
    batch when it restarts (or the leases lapse and the ledger drops the copies), and acking a
    tag twice finds nothing the second time. ``stats.last_batch_acked`` turns true only when the
    ack of the latest micro-batch is done, so settle never calls a queue drained while an ack
    is still pending."""

    def __init__(self, config: SettleConfig, checkpoint: str | Path, stats: SettleStats) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self._config, self._checkpoint, self._stats = config, checkpoint, stats
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="babelq-settle-ack")
        self._latest = -1

    def expect(self, batch_id: int) -> None:
        """Micro-batch ``batch_id`` has started: an older batch's ack no longer makes the last batch acked."""
        with self._stats.lock:
            self._latest = batch_id

    def submit(self, batch_id: int) -> None:
        try:
            self._pool.submit(self._ack, batch_id)
        except RuntimeError:  # closed (the run stopped while this batch settled): ack it here
            self._ack(batch_id)

    def _ack(self, batch_id: int) -> None:
        try:
            acked = ack_settled(self._config, self._checkpoint, batch_id)
        except Exception:  # a thread's error would be lost: the source still acks when Spark commits
            log.warning("settle batch %d: acking its messages failed", batch_id, exc_info=True)
            return
        if acked:
            with self._stats.lock:
                if self._latest == batch_id:
                    self._stats.last_batch_acked = True

    def close(self) -> None:
        """Wait for the acks asked for so far."""
        self._pool.shutdown(wait=True)


def ack_settled(config: SettleConfig, checkpoint: str | Path, batch_id: int) -> bool:
    """Ack micro-batch ``batch_id``'s messages now that everything settle did with them is
    committed (postings, processed ids, outbox) and published, instead of when Spark plans the
    next batch: the queue is empty as soon as the last batch is settled, with no flush batch to
    run. Only for a source whose executors read by slots (the plan, in the checkpoint's offset
    log, names every tag); returns whether it acked. A failure to ack is logged, not raised:
    the source still acks the batch when Spark commits it (infrastructure is never the
    messages' fault). Acking twice is harmless: a tag acked once holds nothing."""
    from babelq.spark.datasource.slots import logged_plan

    plan = logged_plan(checkpoint, batch_id)
    if plan is None or not plan.shares:
        return False
    try:
        transport = open_transport(config.url)
        try:
            acked = transport.ack_tagged(config.queue, plan.tags(config.queue))
        finally:
            transport.close()
    except BabelqError as exc:
        log.warning("settle batch %d: acking its messages failed (%s); the source acks them when "
                    "Spark commits the batch", batch_id, redact_text(str(exc)))
        return False
    failpoint("settle.after_batch_ack")
    log.debug("settle batch %d: acked %d messages", batch_id, acked)
    return True


def _source_idle(query: Any, stats: SettleStats) -> bool:
    """Nothing in flight and nothing unacked: no trigger is running, and the last micro-batch was
    acked by settle itself or was empty (the source's flush batch: planning it acked everything
    before), or no batch ran at all and the last trigger found no data."""
    status = query.status
    if status.get("isTriggerActive") or status.get("isDataAvailable"):
        return False
    with stats.lock:
        if stats.batches == 0:
            return bool(status.get("message") == "Waiting for data to arrive")
        return stats.last_batch_acked or stats.last_batch_rows == 0


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


def _flush_outbox(config: SettleConfig) -> int:
    """Open the ledger (so a bad ``--ledger`` fails now, not at the first message) and publish the
    dead letters and retries a crashed run, or a task killed and retried in this run, committed but
    did not publish."""
    ledger = open_ledger(config.ledger, prefix=config.ledger_prefix)
    try:
        total = 0
        while rows := ledger.pending_outbox():
            total += publish_outbound(config.url, ledger, rows)
    finally:
        ledger.close()
    if total:
        log.info("settle: published %d dead letters / retries a crashed run or killed task committed", total)
    return total


def _left(transport: Transport, queue: str) -> tuple[int, int | None]:
    """(waiting: ready + delayed, reserved by anyone) on ``queue``."""
    return transport.size(queue), transport.reserved(queue)


@dataclass(slots=True)
class SettleQuery:
    """A settle run made ready to start (:func:`prepare_settle`): the ledger opened and its outbox
    flushed, the decoded stream and the classifier built. :meth:`run` starts the query.

    Preparing is the driver's Python and Py4J work (decode's expressions, the source's schema,
    the ledger); a caller with something else to wait for (the
    demo, while ingest publishes) prepares in another thread and runs when the queue is filled."""

    config: SettleConfig
    stream: Any
    classifier: Classifier
    #: outbox rows a crashed run committed but never published, published while preparing
    republished: int = 0
    #: where payments are posted (:func:`~babelq.pipelines.core_banking.describe_bank`)
    bank: str = SIMULATED_DESCRIPTION

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
        config, queue, url = self.config, self.config.queue, self.config.url
        republished = self.republished
        stats = stats or SettleStats()
        acks = BatchAcks(config, checkpoint, stats)
        handler = partial(process_batch, config=config, stats=stats,
                          fail_after_batches=fail_after_batches, classifier=self.classifier, acks=acks)
        started = time.monotonic()
        query: Any = (  # Any: pyspark types awaitTermination's timeout as int, it takes seconds as a float
            self.stream.writeStream.foreachBatch(handler)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime=f"{int(trigger_ms)} milliseconds")
            .queryName(f"babelq-settle-{queue}")
            .start()
        )
        transport = open_transport(url)
        drained = False
        idle_polls = 0
        waiting: int = 0
        reserved: int | None = 0
        told_reserved = 0.0
        try:
            while query.isActive:
                try:
                    if query.awaitTermination(_POLL_SECONDS):
                        break
                except Exception:  # the query died; its error is re-raised below from query.exception()
                    break
                if on_poll is not None:
                    on_poll(stats)
                if _source_idle(query, stats):
                    waiting, reserved = _left(transport, queue)
                    if waiting == 0 and not reserved:
                        idle_polls += 1
                        if idle_polls >= 2:
                            # a task that died between its ledger commit and its publish, retried by
                            # Spark in this run, found its outbox rows claimed and published nothing:
                            # publish them now (no task runs while the source is idle), then go on
                            flushed = _flush_outbox(config)
                            if flushed:
                                republished += flushed
                                idle_polls = 0
                                continue
                            drained = True
                            break
                    else:
                        idle_polls = 0
                        if reserved and not waiting and time.monotonic() - told_reserved > 30:
                            told_reserved = time.monotonic()
                            log.warning(
                                "settle: %d messages on %s are reserved by another consumer (a killed run?); "
                                "waiting for their leases to lapse so they can be settled", reserved, queue)
                else:
                    idle_polls = 0
                if time.monotonic() - started > timeout:
                    waiting, reserved = _left(transport, queue)
                    log.warning("settle: timeout after %.0f s with %d messages waiting and %s reserved on %s",
                                timeout, waiting, reserved, queue)
                    break
        finally:
            transport.close()
            if query.isActive:
                query.stop()
            acks.close()
        error = query.exception()
        if error is not None:
            # the whole text (the CLI shows its root cause on one line); URLs in it redacted
            raise BabelqError(f"settle query failed: {redact_text(str(error))}") from None
        return SettleRun(stats, time.monotonic() - started, drained, waiting if not drained else 0,
                         reserved if not drained else 0, republished, self.bank)


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
) -> SettleQuery:
    """Everything :func:`settle` does before its query starts: check the targets, load the bank
    (a bad one fails now) and ship its file to a cluster's executors, open the ledger (a bad
    ``--ledger`` fails now) and publish what a crashed run left in its outbox, build the decoded
    stream and the classifier. The arguments are :func:`settle`'s."""
    from babelq.pipelines.cluster_checks import check_session_targets
    from babelq.pipelines.core_banking import parse_bank
    from babelq.spark.datasource import register

    check_session_targets(spark, broker=url, ledger=ledger)
    chosen = parse_bank(bank) if isinstance(bank, str) else bank
    described = describe_bank(chosen)  # imports it: a bad bank fails here, not in every task
    _ship_bank(spark, chosen)
    log.debug("settle: posting through %s", described)  # the CLI prints it; SettleRun.bank holds it
    register(spark)
    config = SettleConfig(
        url=url,
        queue=queue,
        ledger=str(ledger),
        ledger_prefix=ledger_prefix,
        max_attempts=max_attempts,
        retry_delay_ms=retry_delay_ms,
        bank=chosen,
    )
    partitions = num_partitions or max(int(spark.sparkContext.defaultParallelism), 1)
    republished = _flush_outbox(config)
    stream = decoded(  # once, on the stream: every micro-batch shares the expressions and their code
        spark.readStream.format("babelq")
        .option("url", url)
        .option("queue", queue)
        .option("maxMessagesPerBatch", str(max_messages_per_batch or default_batch(url)))
        .option("numPartitions", str(partitions))
        .option("visibilityTimeout", str(visibility_timeout))
        .load()
    )
    classifier = Classifier(urns=HANDLED_URNS, policy=config.policy)
    return SettleQuery(config, stream, classifier, republished, described)


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
    (:func:`default_batch`: 100,000 where the executors read the broker, SQLite and Redis; 20,000
    where the driver's planner does, AMQP, SQS, Redis's Laravel layout), ``num_partitions`` (how
    many tasks read and settle each micro-batch in parallel; default: Spark's default parallelism,
    the cores of a local master), ``visibility_timeout`` (300 s), ``bank`` (where payments are
    posted: None for the simulator, or ``MODULE:ATTR``, see :mod:`babelq.pipelines.core_banking`);
    ``timeout`` (600 s), ``stats``,
    ``on_poll`` and ``trigger_ms``. Raises the query's error if it dies (e.g.
    :class:`InjectedCrashError` from the test hook); the checkpoint then lets the next call
    continue.
    """
    preparing, running = SettleOptions.__optional_keys__, RunOptions.__optional_keys__
    unknown = sorted(settings.keys() - preparing - running)
    if unknown:
        raise TypeError(f"settle() got unexpected keyword argument(s): {', '.join(unknown)}")
    prepare = cast(SettleOptions, {k: v for k, v in settings.items() if k in preparing})
    run = cast(RunOptions, {k: v for k, v in settings.items() if k in running})
    return prepare_settle(spark, url=url, queue=queue, ledger=ledger, **prepare).run(checkpoint, **run)
