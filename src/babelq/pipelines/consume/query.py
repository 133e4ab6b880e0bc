"""A consume pipeline as a Spark streaming query: read the queue, run the handlers, stop when drained.

The query reads the queue through the ``babelq`` source and hands every micro-batch to one Spark
action, one stage whose tasks are the source's read slots, each doing all of this for the rows it
read (no body crosses a shuffle): on the JVM, every body decoded by babelq's scanner and
classified by the consume rules (:mod:`babelq.pipelines.consume.classify`, with the pipeline's
URNs); in Python, the handlers in one sink transaction per partition, then the partition's dead
letters and retries published from that executor (:mod:`babelq.pipelines.consume.partition`).
Each micro-batch is acked once its outcomes are committed and published (:func:`ack_committed`,
in a background thread, :class:`BatchAcks`).

:func:`consume` first opens the sink (a bad ``sink`` fails at once), runs the pipeline's setup
hooks and publishes the dead letters and retries a crashed run committed but never published.
With ``until_drained`` it stops once nothing is waiting (delayed retries count as waiting),
reserved by any consumer (a killed run's reservations come back when their leases lapse, and the
run waits for them) or unacked; otherwise it runs until ``timeout`` (None: until interrupted).
Re-running with the same checkpoint continues.

The user's module travels to the executors by value (cloudpickle), so a pipeline defined in a
file the executors cannot import still runs on a cluster.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from babelq.errors import BabelqError, ConfigurationError
from babelq.errors import InjectedCrashError as InjectedCrashError
from babelq.pipelines.consume.api import Pipeline
from babelq.pipelines.consume.classify import Classifier, decoded
from babelq.pipelines.consume.partition import (
    DEFERRED,
    OUTCOME_SCHEMA,
    READ_BY,
    RETRIED,
    SECONDS,
    ConsumeConfig,
    consume_partition,
    publish_outbox,
)
from babelq.pipelines.consume.sinks import open_sink, sink_prefix
from babelq.pipelines.failpoints import failpoint
from babelq.pipelines.query_outages import run_through_outages
from babelq.runtime.outage import DEFAULT_OUTAGE_SECONDS, OutagePolicy
from babelq.transports import Transport, open_transport
from babelq.urls import redact, redact_text

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ConsumeStats:
    """What the query did, accumulated over micro-batches (driver side, thread-safe): messages by
    (outcome, cause), and by URN too, ``by_urn[(urn, outcome, cause)]``."""

    batches: int = 0
    messages: int = 0
    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: seconds spent per phase of the partitions' Python work, summed over every task (a profile:
    #: ``read`` waiting for the JVM's rows, ``decide``, ``handle`` with the commit, ``publish``)
    seconds: Counter[str] = field(default_factory=Counter)
    #: messages by the process that read them from the broker (the source's ``read_by``:
    #: ``executor <host>:<jvm pid>`` for a Spark executor, ``driver …`` for the driver's reader)
    readers: Counter[str] = field(default_factory=Counter)
    last_batch_rows: int = -1
    #: the last micro-batch's messages were acked by the run itself (:func:`ack_committed`), so no
    #: flush batch has to run for the source to ack them
    last_batch_acked: bool = False
    last_batch_at: float = 0.0
    by_urn: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    #: the outcome of a message its handler did (the pipeline's ``handled_as``, set by the run)
    handled: str = "handled"
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

    def record_batch(self, counts: dict[tuple[str, str, str], int], seconds: dict[str, float],
                     readers: dict[str, int]) -> None:
        folded: dict[tuple[str, str], int] = {}
        for (_, outcome, cause), n in counts.items():
            folded[outcome, cause] = folded.get((outcome, cause), 0) + n
        with self.lock:
            self.by_urn.update(counts)
        self.record(folded, seconds, readers)

    @property
    def unacked(self) -> int:
        """Messages of the last micro-batch that are handled but not acked yet: the broker still
        counts them as reserved."""
        with self.lock:
            return 0 if self.last_batch_acked else max(0, self.last_batch_rows)

    @property
    def settled(self) -> int:
        """Messages with a final outcome (handled, dropped as a duplicate, dead-lettered). A retried
        or deferred one comes back and is settled later, so :attr:`messages` (every delivery
        handled) counts it once more for each time it came back."""
        with self.lock:
            return sum(n for (o, _), n in self.outcomes.items() if o not in (RETRIED, DEFERRED))


#: How often the driver looks whether the queue is drained (two idle looks in a row end the run).
_POLL_SECONDS = 0.1
#: How often the query asks the broker for more when the last micro-batch is done (milliseconds): a
#: micro-batch slower than this starts the next at once, so it is the latency of an idle queue.
TRIGGER_MS = 100
#: A run's micro-batch when the caller names none and the executors read the broker (SQLite,
#: Redis): each micro-batch pays fixed costs (a Spark job, planning, the ack), so a big one
#: (``bench/bench_settle.py --batch`` compares sizes).
EXECUTORS_READ_BATCH = 100_000
#: ... and where the driver's planner reads (AMQP, SQS): every body of a micro-batch passes through
#: the driver's memory, so a smaller one.
DRIVER_READS_BATCH = 20_000


def default_batch(url: str) -> int:
    """Messages per micro-batch for ``url`` when none is given (see :data:`EXECUTORS_READ_BATCH`)."""
    from babelq.spark.datasource.stream_reader import executors_read

    return EXECUTORS_READ_BATCH if executors_read(url) else DRIVER_READS_BATCH


class BatchAcks:
    """Acks committed micro-batches (:func:`ack_committed`) in one background thread, in order.

    Why a thread: the ack of a big micro-batch of SQLite rows is a long write on the driver.
    Done inline it would delay Spark's commit of the batch and the planning of the next one by
    as much. In the background it overlaps them; the next batch's tasks wait for the queue's
    lock only if they claim before it is done. Safe in any order: every outcome is committed and
    published before the ack is asked for. A run that dies before its ack has the source ack the
    batch when it restarts (or the leases lapse and the sink drops the copies), and acking a
    tag twice finds nothing the second time. ``stats.last_batch_acked`` turns true only when the
    ack of the latest micro-batch is done, so a run never calls a queue drained while an ack
    is still pending."""

    def __init__(self, config: ConsumeConfig, checkpoint: str | Path, stats: ConsumeStats) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self._config, self._checkpoint, self._stats = config, checkpoint, stats
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"babelq-{config.name}-ack")
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
            acked = ack_committed(self._config, self._checkpoint, batch_id)
        except Exception:  # a thread's error would be lost: the source still acks when Spark commits
            log.warning("%s batch %d: acking its messages failed", self._config.name, batch_id,
                        exc_info=True)
            return
        if acked:
            with self._stats.lock:
                if self._latest == batch_id:
                    self._stats.last_batch_acked = True

    def close(self) -> None:
        """Wait for the acks asked for so far."""
        self._pool.shutdown(wait=True)


def ack_committed(config: ConsumeConfig, checkpoint: str | Path, batch_id: int) -> bool:
    """Ack micro-batch ``batch_id``'s messages now that everything the run did with them is
    committed (the handlers' writes, processed ids, outbox) and published, instead of when Spark plans the
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
        log.warning("%s batch %d: acking its messages failed (%s); the source acks them when "
                    "Spark commits the batch", config.name, batch_id, redact_text(str(exc)))
        return False
    failpoint(f"{config.name}.after_batch_ack")
    log.debug("%s batch %d: acked %d messages", config.name, batch_id, acked)
    return True


def _source_idle(query: Any, stats: ConsumeStats) -> bool:
    """Nothing in flight and nothing unacked: no trigger is running, and the last micro-batch was
    acked by the run itself or was empty (the source's flush batch: planning it acked everything
    before), or no batch ran at all and the last trigger found no data."""
    status = query.status
    if status.get("isTriggerActive") or status.get("isDataAvailable"):
        return False
    with stats.lock:
        if stats.batches == 0:
            return bool(status.get("message") == "Waiting for data to arrive")
        return stats.last_batch_acked or stats.last_batch_rows == 0


def _left(transport: Transport, queue: str) -> tuple[int, int | None]:
    """(waiting: ready + delayed, reserved by anyone) on ``queue``."""
    return transport.size(queue), transport.reserved(queue)


@dataclass(slots=True)
class ConsumeRun:
    """How a run ended (``drained``: nothing waiting, reserved or unacked; otherwise what is left)."""

    stats: ConsumeStats
    seconds: float
    drained: bool
    waiting: int = 0
    reserved: int | None = 0
    #: outbox rows a crashed run (or a killed task) left unpublished, published by this one
    republished: int = 0


def _ship_by_value(pipeline: Pipeline) -> None:
    """Have cloudpickle send the user's modules' code with the tasks instead of a reference the
    executors would have to import."""
    from pyspark import cloudpickle

    for fn in pipeline.functions:
        name = getattr(fn, "__module__", None)
        module = sys.modules.get(name) if name else None
        if module is None or name == "__main__" or (name or "").split(".")[0] in ("babelq", "pyspark"):
            continue  # __main__ is pickled by value anyway
        cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]


def _flush_outbox(config: ConsumeConfig) -> int:
    """Publish the outbox rows a crashed run or a killed task committed but did not publish."""
    sink = open_sink(config.sink, prefix=config.prefix)
    sink.outage_seconds = config.outage_seconds
    try:
        sink.flush_committed()  # a files sink's committed files a crash left in staging
        total = 0
        while rows := sink.pending_outbox():
            total += publish_outbox(config.url, sink, rows, name=config.name)
    finally:
        sink.close()
    if total:
        log.info("%s: published %d dead letters / retries a crashed run or killed task committed",
                 config.name, total)
    return total


def consume_frame(df: Any, config: ConsumeConfig, classifier: Classifier, *, now: int | None = None,
                  seconds: dict[str, float] | None = None, readers: dict[str, int] | None = None,
                  batch_id: int | None = None) -> dict[tuple[str, str, str], int]:
    """Run the pipeline over the decoded rows of ``df`` (one Spark action, micro-batch
    ``batch_id``); returns the messages per (URN, outcome, cause)."""
    rows = classifier(df, now)
    body = partial(consume_partition, config=config, batch_id=batch_id)
    outcomes = rows.mapInArrow(body, OUTCOME_SCHEMA).collect()
    counts: dict[tuple[str, str, str], int] = {}
    for r in outcomes:
        if r["outcome"] == SECONDS:
            if seconds is not None:
                seconds[r["cause"]] = seconds.get(r["cause"], 0.0) + int(r["n"]) / 1e6
        elif r["outcome"] == READ_BY:
            if readers is not None:
                readers[r["cause"]] = readers.get(r["cause"], 0) + int(r["n"])
        else:
            key = (r["urn"], r["outcome"], r["cause"] or "")
            counts[key] = counts.get(key, 0) + int(r["n"])
    return counts


def _process_batch(df: Any, batch_id: int, *, config: ConsumeConfig, classifier: Classifier,
                   stats: ConsumeStats, acks: BatchAcks, fail_after_batches: int | None) -> None:
    """foreachBatch body: one micro-batch through the pipeline, then its ack in the background."""
    acks.expect(batch_id)
    started = time.perf_counter()
    seconds: dict[str, float] = {}
    readers: dict[str, int] = {}
    counts = consume_frame(df, config, classifier, seconds=seconds, readers=readers, batch_id=batch_id)
    stats.record_batch(counts, seconds, readers)
    n = sum(counts.values())
    took = time.perf_counter() - started
    if n:
        folded: dict[str, int] = {}
        for (_, o, c), k in counts.items():
            folded[f"{o}/{c}" if c else o] = folded.get(f"{o}/{c}" if c else o, 0) + k
        log.info("%s batch %d: %d messages in %.2f s (%.0f msg/s) %s", config.name, batch_id, n, took,
                 n / took if took else 0.0, folded)
    if fail_after_batches is not None and stats.batches >= fail_after_batches:
        raise InjectedCrashError(f"test hook: stopping the query after {stats.batches} batches")
    acks.submit(batch_id)


@dataclass(slots=True)
class ConsumeQuery:
    """A consume run made ready (:func:`prepare_consume`): sink opened and set up, outbox flushed,
    stream and classifier built; :meth:`run` starts the query."""

    config: ConsumeConfig
    stream: Any
    classifier: Classifier
    republished: int = 0

    def run(
        self,
        checkpoint: str | Path,
        *,
        until_drained: bool = True,
        timeout: float | None = 600.0,
        trigger_ms: int = TRIGGER_MS,
        stats: ConsumeStats | None = None,
        fail_after_batches: int | None = None,
        on_poll: Callable[[ConsumeStats], None] | None = None,
    ) -> ConsumeRun:
        """Run the query until the queue is drained (``until_drained``) or ``timeout`` seconds pass."""
        config = self.config
        stats = stats or ConsumeStats()
        stats.handled = config.pipeline.handled_as
        acks = BatchAcks(config, checkpoint, stats)
        body = partial(_process_batch, config=config, classifier=self.classifier, stats=stats, acks=acks,
                       fail_after_batches=fail_after_batches)
        started = time.monotonic()
        policy = OutagePolicy(config.outage_seconds)
        broker = f"broker {redact(config.url)}"
        transport = open_transport(config.url)

        def start() -> Any:
            return (
                self.stream.writeStream.foreachBatch(body)
                .option("checkpointLocation", str(checkpoint))
                .trigger(processingTime=f"{int(trigger_ms)} milliseconds")
                .queryName(f"babelq-{config.name}-{config.queue}")
                .start()
            )

        def left() -> tuple[int, int | None]:
            return policy.wait_out(partial(_left, transport, config.queue), broker, log=log)

        def watch(query: Any) -> tuple[int, bool, int, int | None]:
            republished, drained, idle_polls = self.republished, False, 0
            waiting: int = 0
            reserved: int | None = 0
            told_reserved = 0.0
            try:
                while query.isActive:
                    try:
                        if query.awaitTermination(_POLL_SECONDS):
                            break
                    except Exception:  # the query died: run_through_outages reads its error
                        break
                    if on_poll is not None:
                        on_poll(stats)
                    if until_drained and _source_idle(query, stats):
                        waiting, reserved = left()
                        if waiting == 0 and not reserved:
                            idle_polls += 1
                            if idle_polls >= 2:
                                # a task killed between its commit and its publish and retried by Spark
                                # left its outbox rows unpublished: publish them (no task runs now)
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
                                    "%s: %d messages on %s are reserved by another consumer (a killed run?); "
                                    "waiting for their leases to lapse so they can be handled", config.name,
                                    reserved, config.queue)
                    else:
                        idle_polls = 0
                    if timeout is not None and time.monotonic() - started > timeout:
                        waiting, reserved = left()
                        if until_drained:
                            log.warning("%s: timeout after %.0f s with %d waiting and %s reserved on %s",
                                        config.name, timeout, waiting, reserved, config.queue)
                        break
            except KeyboardInterrupt:
                if until_drained:
                    raise
                # a run told to keep consuming ends on Ctrl-C: stop the query, then report what it did
                waiting, reserved = left()
            return republished, drained, waiting, reserved

        try:
            republished, drained, waiting, reserved = run_through_outages(
                start, watch, what=config.name, url=config.url, queue=config.queue, policy=policy,
                stats=stats, log=log)
        finally:
            transport.close()
            acks.close()
        return ConsumeRun(stats, time.monotonic() - started, drained, 0 if drained else waiting,
                          0 if drained else reserved, republished)


def prepare_consume(
    spark: Any,
    pipeline: Pipeline,
    *,
    url: str,
    sink: str | Path,
    queue: str | None = None,
    prefix: str | None = None,
    max_messages_per_batch: int | None = None,
    num_partitions: int | None = None,
    visibility_timeout: float = 300.0,
    name: str = "consume",
    outage_seconds: float = DEFAULT_OUTAGE_SECONDS,
) -> ConsumeQuery:
    """Everything :func:`consume` does before its query starts (its arguments; ``prefix``, of
    babelq's tables in the sink: None for the pipeline's, else ``babelq_``; ``name``, the run's
    in its query's name, log lines and failpoints)."""
    from babelq.pipelines.cluster_checks import check_session_targets, session_master
    from babelq.pipelines.consume.files import check_files_cluster
    from babelq.spark.datasource import register

    if not isinstance(pipeline, Pipeline):
        got = type(pipeline).__name__
        raise ConfigurationError(f"pipeline: must be a babelq.pipelines.consume.Pipeline, got {got}")
    if not pipeline.urns:
        raise ConfigurationError(
            "pipeline: has no handler (decorate a function with @pipeline.handler(urn) "
            "or @pipeline.batch_handler(urn))")
    check_session_targets(spark, broker=url, ledger=sink, ledger_option="sink")
    check_files_cluster(session_master(spark), str(sink))
    register(spark)
    if prefix is None:
        prefix = sink_prefix(pipeline)
    config = ConsumeConfig(url=url, queue=queue or pipeline.queue, sink=str(sink), pipeline=pipeline,
                           prefix=prefix, max_attempts=pipeline.max_attempts,
                           retry_delay_ms=pipeline.retry_delay_ms, name=name, outage_seconds=outage_seconds)
    opened = open_sink(config.sink, prefix=prefix)  # a bad sink fails here, before the query starts
    try:
        opened.run_setup(pipeline.setups)
    finally:
        opened.close()
    republished = _flush_outbox(config)
    _ship_by_value(pipeline)
    partitions = num_partitions or max(int(spark.sparkContext.defaultParallelism), 1)
    stream = decoded(
        spark.readStream.format("babelq")
        .option("url", url)
        .option("queue", config.queue)
        .option("maxMessagesPerBatch", str(max_messages_per_batch or default_batch(url)))
        .option("numPartitions", str(partitions))
        .option("visibilityTimeout", str(visibility_timeout))
        .load()
    )
    classifier = Classifier(urns=pipeline.urns, policy=config.policy)
    return ConsumeQuery(config, stream, classifier, republished)


def consume(
    spark: Any,
    pipeline: Pipeline,
    *,
    url: str,
    sink: str | Path,
    checkpoint: str | Path,
    queue: str | None = None,
    until_drained: bool = True,
    timeout: float | None = 600.0,
    trigger_ms: int = TRIGGER_MS,
    max_messages_per_batch: int | None = None,
    num_partitions: int | None = None,
    visibility_timeout: float = 300.0,
    stats: ConsumeStats | None = None,
    fail_after_batches: int | None = None,
    outage_seconds: float = DEFAULT_OUTAGE_SECONDS,
) -> ConsumeRun:
    """Consume ``queue`` (default: the pipeline's) from broker ``url`` into ``sink`` with ``pipeline``'s
    handlers, exactly once per message; see the module docstring."""
    prepared = prepare_consume(spark, pipeline, url=url, sink=sink, queue=queue,
                               max_messages_per_batch=max_messages_per_batch, num_partitions=num_partitions,
                               visibility_timeout=visibility_timeout, outage_seconds=outage_seconds)
    return prepared.run(checkpoint, until_drained=until_drained, timeout=timeout, trigger_ms=trigger_ms,
                        stats=stats, fail_after_batches=fail_after_batches)
