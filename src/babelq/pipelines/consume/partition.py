"""A consume pipeline's work on one partition of a micro-batch: handlers, one sink transaction, outbox.

Settle's machinery (:mod:`babelq.pipelines.settle.partition`) with the user's handlers and the
user's database instead of the payments ledger. The rows come classified by the consume rules
on the JVM (:mod:`babelq.pipelines.settle.classify`); per row, in order:

1. rule ``poison`` / ``unsupported`` -> DLQ with the exact bytes kept;
2. ``meta.id`` already processed in the sink -> dropped (duplicate, ``already_processed``);
3. a copy met earlier in the partition -> dropped (duplicate, ``in_batch``);
4. ``expired`` -> DLQ; ``deferred`` -> put back for the rest of its delay; ``unknown_urn`` -> DLQ
   (settle's own code for these, :func:`~babelq.pipelines.settle.partition._before_handler`);
5. data breaking the URN's JSON Schema -> DLQ (reason ``failed``, cause ``schema``), the handler
   is not called;
6. the handler, in a savepoint of the partition's transaction with the message's id claimed in
   it: returns -> ``handled``; raises -> retried after the shared policy's backoff, or DLQ (cause
   ``max_attempts``) once the attempts ran out; :class:`~babelq.runtime.errors.PermanentError`
   -> DLQ at once (its cause, else ``rejected``); an outage (:class:`~babelq.errors.UnavailableError`,
   a lost sink connection) -> the whole transaction is rolled back and run again, and when the
   outage outlasts :attr:`~babelq.pipelines.consume.sink.Sink.outage_seconds` the task fails so the
   micro-batch is delivered again.

Dead letters and retries are claimed in the sink's outbox in the same transaction, published
after the commit, then marked (:func:`publish_outbox`). A message whose own processing fails in
babelq (an envelope that cannot be re-encoded) is dead-lettered alone (cause ``unprocessable``).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from babelq.envelope import Envelope, annotate, decode, now_ms, poison_record, record_or_poison
from babelq.envelope.constants import INT64_MAX
from babelq.errors import UnavailableError
from babelq.pipelines.consume.api import Message, Pipeline
from babelq.pipelines.consume.sink import DEFAULT_PREFIX, Sink, open_sink
from babelq.pipelines.failpoints import failpoint
from babelq.pipelines.ledger import Outbound
from babelq.pipelines.settle.partition import (
    _GUARDED,
    _REJECTED,
    ALREADY_PROCESSED,
    ALREADY_SETTLED,
    DEAD_LETTERED,
    DUPLICATE,
    IN_BATCH,
    READ_BY,
    RETRIED,
    SECONDS,
    SettleConfig,
    _before_handler,
    _Clock,
    _copies,
    _message_id,
    _Partition,
    _Rows,
    _slot,
    publish_outbound,
)
from babelq.runtime import rules
from babelq.runtime.errors import PermanentError

log = logging.getLogger(__name__)

#: DDL of what :func:`consume_partition` yields: messages per (URN, outcome, cause) of the partition.
OUTCOME_SCHEMA = "urn STRING, outcome STRING, cause STRING, n BIGINT"
#: A handler returned: its writes and the message's processed id committed.
HANDLED = "handled"
#: The retry label's cause: the handler raised.
HANDLER = "handler"
#: The cause of a PermanentError without one of its own (the runtime's label for it).
REJECTED = "rejected"
#: Cause of a message babelq itself could not process (its dead letter keeps the original bytes).
UNPROCESSABLE = "unprocessable"
#: The URN counted for a body that has none readable (poison, unsupported).
NO_URN = "-"


@dataclass
class ConsumeConfig:
    """What every partition needs (pickled to the executors with the task, the pipeline included)."""

    url: str
    queue: str
    sink: str
    pipeline: Pipeline
    prefix: str = DEFAULT_PREFIX
    max_attempts: int = 3
    retry_delay_ms: int = 1_000
    settle: SettleConfig = field(init=False)

    def __post_init__(self) -> None:
        # the view settle's helpers read: queue, DLQ, retry policy (its ledger is the sink)
        self.settle = SettleConfig(url=self.url, queue=self.queue, ledger=self.sink,
                                   max_attempts=self.max_attempts, retry_delay_ms=self.retry_delay_ms)

    @property
    def policy(self) -> rules.RetryPolicy:
        return self.settle.policy


class _Consume(_Partition):
    """settle's partition state, plus each row's envelope decoded once and its URN."""

    def __init__(self, config: ConsumeConfig, now: int, rows: _Rows, slot: int) -> None:
        super().__init__(config.settle, now, rows, slot)
        self.consume = config
        self._envelopes: dict[int, Envelope] = {}
        #: outbox key -> the URN of the message it settles
        self.urn_of_key: dict[str, str] = {}
        self.by_urn: Counter[tuple[str, str, str]] = Counter()

    def envelope(self, i: int) -> Envelope:
        env = self._envelopes.get(i)
        if env is None:
            env = self._envelopes[i] = decode(self.rows.body(i))
        return env

    def urn(self, i: int) -> str:
        if self.rows.columns["rule"][i] in _REJECTED:
            return NO_URN
        try:
            return self.envelope(i).urn or NO_URN
        except Exception:  # the JVM accepted what the core codec does not: counted without a URN
            return NO_URN

    def step(self, i: int, rule: str) -> None:
        """settle's outcome for a rule, the rows it adds to the outbox tagged with the URN."""
        before = len(self.outbound)
        try:
            _before_handler(self, i, rule)
        except UnavailableError:
            raise
        except Exception as exc:
            self.unprocessable(i, exc)
        for row in self.outbound[before:]:
            self.urn_of_key[row.key] = self.urn(i)

    def unprocessable(self, i: int, exc: Exception) -> None:
        log.exception("consume: dead-lettering a message its processing failed on")
        self.poison(self.rows.body(i), _unprocessable_error(exc), UNPROCESSABLE)


def _unprocessable_error(exc: Exception) -> str:
    return f"babelq could not process this message: {type(exc).__name__}: {exc}"


def _unprocessable(part: _Consume, i: int, exc: Exception) -> Outbound:
    """The poison record of a message babelq failed on, keyed by its id and attempt (stable when
    an outage runs the transaction again)."""
    log.exception("consume: dead-lettering a message its processing failed on")
    raw = part.rows.body(i)
    record = poison_record(raw, original_queue=part.config.queue, error=_unprocessable_error(exc),
                           cause=UNPROCESSABLE)
    return Outbound(part.key_of(i, raw), part.config.dlq, record)


@dataclass
class _Done:
    """What one run of the partition's transaction did (built afresh when an outage reruns it)."""

    outbound: list[Outbound] = field(default_factory=list)  #: claimed: publish these
    counts: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    #: outbox key -> (urn, outcome, cause)
    labels: dict[str, tuple[str, str, str]] = field(default_factory=dict)


def _dead_letter(part: _Consume, i: int, env: Envelope, *, cause: str, error: BaseException | str,
                 attempts: int) -> Outbound:
    """The dead letter (reason ``failed``) of a decoded message, the exception named as the runtime does."""
    raw = part.rows.body(i)
    text = error if isinstance(error, str) else (str(error) or type(error).__name__)
    record, _ = record_or_poison(
        lambda: annotate(env, rules.REASON_FAILED, original_queue=part.config.queue, cause=cause, error=error,
                         attempts=attempts).encode(),
        raw, original_queue=part.config.queue, error=text, attempts=attempts, cause=cause,
    )
    return Outbound(part.key_of(i, raw), part.config.dlq, record,
                    message_id=part.rows.columns["id"][i] or None)


def _failure(
    part: _Consume, i: int, env: Envelope, attempts: int, exc: Exception
) -> tuple[Outbound, str, str]:
    """A handler raised: (the retry or dead letter, outcome, cause), as the runtime decides."""
    if isinstance(exc, PermanentError):
        cause = exc.cause or REJECTED
        row = _dead_letter(part, i, env, cause=cause, error=exc, attempts=max(attempts, 0))
        return row, DEAD_LETTERED, cause
    policy = part.policy
    runs = policy.runs(attempts)
    if attempts > env.attempts:  # the broker counted more deliveries (docs/standard.md §4)
        env = env.with_attempts(attempts)
    if part.rows.columns["on_failure"][i] == "retry":
        body = env.with_attempts(runs).encode()
        row = Outbound(part.key_of(i, part.rows.body(i)), part.config.queue, body, policy.delay_ms(runs),
                       part.rows.columns["id"][i] or None)
        return row, RETRIED, HANDLER
    runs = min(runs, INT64_MAX)
    cause = policy.exhausted_cause(None)
    row = _dead_letter(part, i, env.with_attempts(runs), cause=cause, error=exc, attempts=runs)
    return row, DEAD_LETTERED, cause


def _transaction(part: _Consume, sink: Sink, candidates: Sequence[int]) -> _Done:
    """The partition's one transaction: the handlers, the processed ids, the outbox claims."""
    done = _Done()
    pipeline, queue, at = part.consume.pipeline, part.config.queue, part.now
    columns = part.rows.columns
    outbound: list[Outbound] = list(part.outbound)
    for row in part.outbound:
        urn = part.urn_of_key.get(row.key, NO_URN)
        outcome, cause = part.labels[row.key]
        done.labels[row.key] = (urn, outcome, cause or "")
    with sink.transaction() as tx:
        for i in candidates:
            try:
                env = part.envelope(i)
                urn = env.urn
                attempts = int(columns["attempts"][i])
                problems = pipeline.schema_errors(urn, env.data)
            except Exception as exc:
                row = _unprocessable(part, i, exc)
                outbound.append(row)
                done.labels[row.key] = (NO_URN, DEAD_LETTERED, UNPROCESSABLE)
                continue
            if problems:
                from babelq.schema.errors import SchemaViolationError

                violation = SchemaViolationError(urn, problems)
                row = _dead_letter(part, i, env, cause=rules.SCHEMA, error=violation,
                                   attempts=max(attempts, 0))
                outbound.append(row)
                done.labels[row.key] = (urn, DEAD_LETTERED, rules.SCHEMA)
                continue
            handler = pipeline.handlers[urn]
            try:
                with sink.savepoint():
                    claimed = sink.claim_id(tx, _message_id(part, i), at)
                    if claimed:
                        handler(Message(env, attempts, queue), tx)
            except Exception as exc:
                if isinstance(exc, UnavailableError) or sink.is_outage(exc):
                    raise UnavailableError(f"consume: {urn} handler: {exc}") from exc
                try:
                    row, outcome, cause = _failure(part, i, env, attempts, exc)
                except Exception as again:  # its retry or dead letter cannot be written
                    row, outcome, cause = _unprocessable(part, i, again), DEAD_LETTERED, UNPROCESSABLE
                if outcome == RETRIED:
                    log.warning("consume: %s id=%s attempt %d failed (%s: %s); retrying",
                                urn, env.id, attempts, type(exc).__name__, exc)
                outbound.append(row)
                done.labels[row.key] = (urn, outcome, cause)
                continue
            done.counts[urn, HANDLED if claimed else DUPLICATE, "" if claimed else ALREADY_PROCESSED] += 1
        # the same decision twice in the partition: the first one counts
        unique = list({o.key: o for o in reversed(outbound)}.values())[::-1]
        for key, n in Counter(o.key for o in outbound).items():
            if n > 1:
                done.counts[done.labels[key][0], DUPLICATE, ALREADY_SETTLED] += n - 1
        # a message processed meanwhile (another partition, an earlier run) is neither retried nor
        # dead-lettered: its late rows are dropped, as the ledger does
        guarded = [o.message_id for o in unique if o.message_id]
        processed = sink.processed_in(tx, guarded) if guarded else set()
        kept: list[Outbound] = []
        for o in unique:
            if o.message_id and o.message_id in processed:
                done.counts[done.labels[o.key][0], DUPLICATE, ALREADY_PROCESSED] += 1
            else:
                kept.append(o)
        claimed_keys = sink.claim_outbox(tx, kept, at) if kept else set()
        for o in kept:
            if o.key in claimed_keys:
                done.outbound.append(o)
                done.counts[done.labels[o.key]] += 1
            else:
                done.counts[done.labels[o.key][0], DUPLICATE, ALREADY_SETTLED] += 1
    return done


def _decide(part: _Consume, sink: Sink) -> list[int]:
    """The rules' outcomes and the duplicates (the sink only read); returns the rows for the handlers."""
    rows = part.rows
    columns = rows.columns
    rule_of, ids = columns["rule"], columns["id"]
    copies = _copies(ids, columns["body_attempts"], rule_of)
    guarded = [ids[i] for i in range(rows.count) if ids[i] and rule_of[i] in _GUARDED and not copies[i]]
    processed = sink.processed(guarded)
    candidates: list[int] = []
    for i in range(rows.count):
        rule = rule_of[i]
        if rule is None and not copies[i] and ids[i] not in processed:
            candidates.append(i)
        elif rule in _REJECTED:
            part.step(i, rule)
        elif ids[i] and ids[i] in processed:
            part.by_urn[part.urn(i), DUPLICATE, ALREADY_PROCESSED] += 1
        elif copies[i]:
            part.by_urn[part.urn(i), DUPLICATE, IN_BATCH] += 1
        else:
            part.step(i, rule)
    return candidates


def publish_outbox(url: str, sink: Sink, rows: Sequence[Outbound]) -> int:
    """Publish outbox ``rows`` (grouped by queue, in order), then mark them; returns how many."""
    return publish_outbound(url, sink, rows, after_publish="consume.after_outbox_publish")


def consume_partition(batches: Iterator[Any], config: ConsumeConfig) -> Iterator[Any]:
    """Consume one partition of a classified micro-batch; yields one Arrow batch of
    :data:`OUTCOME_SCHEMA` (outcome :data:`~babelq.pipelines.settle.partition.SECONDS`: a phase's
    microseconds; :data:`~babelq.pipelines.settle.partition.READ_BY`: messages per reading process)."""
    clock = _Clock()
    rows = _Rows(batches)
    clock.lap("read")
    part = _Consume(config, rows.now if rows.now is not None else now_ms(), rows, _slot())
    counts: Counter[tuple[str, str, str]] = Counter(part.by_urn)
    if rows.count:
        sink = open_sink(config.sink, prefix=config.prefix)
        try:
            candidates = _decide(part, sink)
            clock.lap("decide")
            done = sink.through_outages(lambda: _transaction(part, sink, candidates))
            clock.lap("handle")  # the handlers and the commit, waiting for the sink's lock included
            failpoint("consume.after_sink_commit")
            publish_outbox(config.url, sink, done.outbound)
            clock.lap("publish")
        finally:
            sink.close()
        counts = part.by_urn + done.counts
    yield _arrow(counts, clock.laps, rows.readers)


def _arrow(counts: Counter[tuple[str, str, str]], laps: dict[str, float], readers: Counter[str]) -> Any:
    import pyarrow as pa

    rows = [(u, o, c, n) for (u, o, c), n in counts.items() if n]
    rows += [("", SECONDS, phase, round(seconds * 1e6)) for phase, seconds in laps.items()]
    rows += [("", READ_BY, reader, n) for reader, n in readers.items()]
    return pa.RecordBatch.from_arrays(
        [*(pa.array([r[i] for r in rows], pa.string()) for i in range(3)),
         pa.array([r[3] for r in rows], pa.int64())],
        names=["urn", "outcome", "cause", "n"],
    )
