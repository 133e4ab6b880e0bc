"""A consume pipeline as a Spark streaming query: read the queue, run the handlers, stop when drained.

Settle's query (:mod:`babelq.pipelines.settle.query`) with a :class:`~babelq.pipelines.consume.Pipeline`
in place of the payments handler: the ``babelq`` source reads the queue from the executors, the
consume rules classify every row on the JVM (settle's :class:`~babelq.pipelines.settle.classify.Classifier`
with the pipeline's URNs), each partition runs its handlers in one sink transaction
(:mod:`babelq.pipelines.consume.partition`), and each micro-batch is acked once its outcomes are
committed and published (settle's :class:`~babelq.pipelines.settle.query.BatchAcks`).

:func:`consume` first opens the sink (a bad ``sink`` fails at once), runs the pipeline's setup
hooks and publishes the dead letters and retries a crashed run committed but never published.
With ``until_drained`` it stops once nothing is waiting, reserved or unacked; otherwise it runs
until ``timeout`` (None: until interrupted). Re-running with the same checkpoint continues.

The user's module travels to the executors by value (cloudpickle), so a pipeline defined in a
file the executors cannot import still runs on a cluster.
"""

from __future__ import annotations

import logging
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from babelq.errors import BabelqError, ConfigurationError
from babelq.pipelines.consume.api import Pipeline
from babelq.pipelines.consume.partition import (
    OUTCOME_SCHEMA,
    ConsumeConfig,
    consume_partition,
    publish_outbox,
)
from babelq.pipelines.consume.sinks import open_sink, sink_prefix
from babelq.pipelines.settle.classify import Classifier, decoded
from babelq.pipelines.settle.partition import READ_BY, SECONDS
from babelq.pipelines.settle.query import (
    _POLL_SECONDS,
    TRIGGER_MS,
    BatchAcks,
    InjectedCrashError,
    SettleStats,
    _left,
    _source_idle,
    default_batch,
)
from babelq.transports import open_transport
from babelq.urls import redact_text

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ConsumeStats(SettleStats):
    """:class:`~babelq.pipelines.settle.SettleStats` (outcomes by (outcome, cause)) and the same
    counts by URN: ``by_urn[(urn, outcome, cause)]``."""

    by_urn: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    #: the outcome of a message its handler did (the pipeline's ``handled_as``, set by the run)
    handled: str = "handled"

    def record_batch(self, counts: dict[tuple[str, str, str], int], seconds: dict[str, float],
                     readers: dict[str, int]) -> None:
        folded: dict[tuple[str, str], int] = {}
        for (_, outcome, cause), n in counts.items():
            folded[outcome, cause] = folded.get((outcome, cause), 0) + n
        with self.lock:
            self.by_urn.update(counts)
        self.record(folded, seconds, readers)


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
    try:
        sink.flush_committed()  # a files sink's committed files a crash left in staging
        total = 0
        while rows := sink.pending_outbox():
            total += publish_outbox(config.url, sink, rows)
    finally:
        sink.close()
    if total:
        log.info("consume: published %d dead letters / retries a crashed run or killed task committed", total)
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
    if n:
        log.info("consume batch %d: %d messages in %.2f s", batch_id, n, time.perf_counter() - started)
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
        acks = BatchAcks(config.settle, checkpoint, stats)
        body = partial(_process_batch, config=config, classifier=self.classifier, stats=stats, acks=acks,
                       fail_after_batches=fail_after_batches)
        started = time.monotonic()
        query: Any = (
            self.stream.writeStream.foreachBatch(body)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime=f"{int(trigger_ms)} milliseconds")
            .queryName(f"babelq-consume-{config.queue}")
            .start()
        )
        transport = open_transport(config.url)
        republished, drained, idle_polls = self.republished, False, 0
        waiting: int = 0
        reserved: int | None = 0
        try:
            while query.isActive:
                try:
                    if query.awaitTermination(_POLL_SECONDS):
                        break
                except Exception:  # the query died: its error is raised below
                    break
                if on_poll is not None:
                    on_poll(stats)
                if until_drained and _source_idle(query, stats):
                    waiting, reserved = _left(transport, config.queue)
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
                else:
                    idle_polls = 0
                if timeout is not None and time.monotonic() - started > timeout:
                    waiting, reserved = _left(transport, config.queue)
                    if until_drained:
                        log.warning("consume: timeout after %.0f s with %d waiting and %s reserved on %s",
                                    timeout, waiting, reserved, config.queue)
                    break
        except KeyboardInterrupt:
            if until_drained:
                raise
            # a run told to keep consuming ends on Ctrl-C: stop the query, then report what it did
            waiting, reserved = _left(transport, config.queue)
        finally:
            transport.close()
            if query.isActive:
                query.stop()
            acks.close()
        error = query.exception()
        if error is not None:
            raise BabelqError(f"consume query failed: {redact_text(str(error))}") from None
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
) -> ConsumeQuery:
    """Everything :func:`consume` does before its query starts (its arguments; ``prefix``, of
    babelq's tables in the sink: None for the pipeline's, else ``babelq_``)."""
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
                           retry_delay_ms=pipeline.retry_delay_ms)
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
) -> ConsumeRun:
    """Consume ``queue`` (default: the pipeline's) from broker ``url`` into ``sink`` with ``pipeline``'s
    handlers, exactly once per message; see the module docstring."""
    prepared = prepare_consume(spark, pipeline, url=url, sink=sink, queue=queue,
                               max_messages_per_batch=max_messages_per_batch, num_partitions=num_partitions,
                               visibility_timeout=visibility_timeout)
    return prepared.run(checkpoint, until_drained=until_drained, timeout=timeout, trigger_ms=trigger_ms,
                        stats=stats, fail_after_batches=fail_after_batches)
