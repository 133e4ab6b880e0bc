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

A URN with a batch handler (:meth:`~babelq.pipelines.consume.api.Pipeline.batch_handler`) goes
through 1-5 the same way; its remaining rows then reach step 6 together, after the per-message
handlers: one call per URN in a savepoint, the ids claimed before it, the claims of the rows it
did not call done taken back after it, each row's verdict settled as the per-message outcome
above. A partition holding one id twice (two attempts of a message) calls it in rounds, each id
once per round, so the later attempt finds the earlier one's claim as it would one by one.

Dead letters and retries are claimed in the sink's outbox in the same transaction, published
after the commit, then marked (:func:`publish_outbox`). A message whose own processing fails in
babelq (an envelope that cannot be re-encoded) is dead-lettered alone (cause ``unprocessable``).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from babelq.envelope import Envelope, annotate, decode, now_ms, poison_record, record_or_poison
from babelq.envelope.constants import INT64_MAX
from babelq.errors import UnavailableError
from babelq.pipelines.consume.api import BATCH_COLUMNS, DONE, Message, Pipeline, Verdict, dead_letter, retry
from babelq.pipelines.consume.sink import DEFAULT_PREFIX, Sink
from babelq.pipelines.consume.sinks import open_sink
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
#: A handler returned: its writes and the message's processed id committed (the default of
#: :attr:`~babelq.pipelines.consume.api.Pipeline.handled_as`).
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


def _raised(exc: Exception) -> Verdict:
    """What a handler raising ``exc`` means, as the runtime decides: a PermanentError dead-letters
    (its cause, else ``rejected``), anything else fails this attempt."""
    return dead_letter(exc) if isinstance(exc, PermanentError) else retry(exc)


def _failed(
    part: _Consume, i: int, env: Envelope | None, attempts: int, verdict: Verdict
) -> tuple[Outbound, str, str]:
    """A failed message's (retry or dead letter, outcome, cause); when its record cannot be
    written, its bytes dead-lettered (cause ``unprocessable``). ``env`` None: decoded here."""
    error = verdict.reason if verdict.reason is not None else verdict.kind
    try:
        env = env if env is not None else part.envelope(i)
        if verdict.kind == "dead_letter":
            row, outcome, cause = _rejected(part, i, env, attempts, error=error, cause=verdict.cause)
        else:
            row, outcome, cause = _retried(part, i, env, attempts, error=error)
            if outcome != RETRIED:  # out of attempts: counted as max_attempts, whatever the label
                return row, outcome, cause
        return row, outcome, verdict.label or cause
    except Exception as again:
        return _unprocessable(part, i, again), DEAD_LETTERED, UNPROCESSABLE


def _rejected(part: _Consume, i: int, env: Envelope, attempts: int, *, error: BaseException | str,
              cause: str | None) -> tuple[Outbound, str, str]:
    """Dead-lettered at once (a PermanentError, a ``dead_letter`` verdict)."""
    cause = cause or REJECTED
    row = _dead_letter(part, i, env, cause=cause, error=error, attempts=max(attempts, 0))
    return row, DEAD_LETTERED, cause


def _retried(part: _Consume, i: int, env: Envelope, attempts: int, *,
             error: BaseException | str) -> tuple[Outbound, str, str]:
    """This attempt failed: retried after the shared policy's backoff, or dead-lettered once the
    attempts ran out (``on_failure``, decided on the JVM by the same policy)."""
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
    row = _dead_letter(part, i, env.with_attempts(runs), cause=cause, error=error, attempts=runs)
    return row, DEAD_LETTERED, cause


#: the verdicts whose message is done: its id stays processed
_DONE = frozenset({"done", "duplicate"})
#: a batch handler's row: (row of the partition, its reconciled attempts)
_BatchRow = tuple[int, int]


def _batch(part: _Consume, urn: str, rows: Sequence[_BatchRow]) -> Any:
    """The batch a batch handler gets (:data:`~babelq.pipelines.consume.api.BATCH_COLUMNS`), from
    the columns the JVM decoded: no envelope is decoded in Python for a batch."""
    import orjson
    import pyarrow as pa

    columns = part.rows.columns
    texts, ids, traces, correlations = (columns["data_json"], columns["id"], columns["trace_id"],
                                        columns["correlation_id"])
    at = [i for i, _ in rows]
    n = len(rows)
    batch = pa.RecordBatch.from_arrays([
        pa.array([ids[i] or "" for i in at], pa.string()),
        pa.array([attempts for _, attempts in rows], pa.int64()),
        pa.array([part.config.queue] * n, pa.string()),
        pa.array([urn] * n, pa.string()),
        pa.array([traces[i] for i in at], pa.string()),
        pa.array([correlations[i] for i in at], pa.string()),
        pa.array([texts[i] if texts[i] is not None else orjson.dumps(part.envelope(i).data).decode()
                  for i in at], pa.string()),
        pa.array(_ids(part, rows), pa.string()),
        pa.array([part.now] * n, pa.int64()),
    ], names=list(BATCH_COLUMNS))
    return batch.to_pandas() if urn in part.consume.pipeline.pandas_urns else batch


def _verdicts(result: object, n: int, urn: str) -> list[Verdict]:
    """A batch handler's result as one verdict per row; a malformed result raises (one line), so
    the batch fails as if the handler had raised."""
    if result is None:
        return [DONE] * n
    if isinstance(result, str | bytes | Mapping | Verdict) or not isinstance(result, Iterable):
        raise TypeError(f"batch handler {urn!r}: returned a {type(result).__name__}; expected a "
                        "sequence of verdicts, one per row, or None")
    got = list(result)
    if len(got) != n:
        raise ValueError(f"batch handler {urn!r}: returned {len(got)} verdicts for {n} messages "
                         "(one per row, in order)")
    out: list[Verdict] = []
    for k, verdict in enumerate(got):
        if verdict is None:
            out.append(DONE)
        elif isinstance(verdict, Verdict):
            out.append(verdict)
        else:
            raise TypeError(f"batch handler {urn!r}: row {k} is a {type(verdict).__name__}, not a verdict "
                            "(DONE, duplicate(...), retry(...), dead_letter(...), unavailable(...)) or None")
    return out


def _ids(part: _Consume, rows: Sequence[_BatchRow]) -> list[str]:
    return [_message_id(part, i) for i, _ in rows]


def _run_batch(part: _Consume, sink: Sink, tx: Any, urn: str, rows: Sequence[_BatchRow], *,
               outbound: list[Outbound], done: _Done) -> None:
    """One call of ``urn``'s batch handler on ``rows`` (distinct ids), in a savepoint: the ids
    claimed first (the rows another run processed meanwhile are duplicates, not passed on), the
    claims of the rows not done taken back, their retries and dead letters added to ``outbound``."""
    handler = part.consume.pipeline.batch_handlers[urn]
    ids = _ids(part, rows)
    fresh: Sequence[_BatchRow] = rows
    verdicts: list[Verdict] = []
    try:
        with sink.savepoint():
            claimed = sink.claim_ids(tx, ids, part.now)
            fresh = [row for row, mid in zip(rows, ids, strict=True) if mid in claimed]
            if fresh:
                shown = [part.rows.columns["id"][i] or "" for i, _ in fresh]  # the batch's meta_id column
                view = sink.view(tx, shown, per_message=False)
                verdicts = _verdicts(handler(_batch(part, urn, fresh), view), len(fresh), urn)
                down = next((v for v in verdicts if v.kind == "unavailable"), None)
                if down is not None:
                    raise UnavailableError(str(down.reason))
                failed = [mid for mid, v in zip(_ids(part, fresh), verdicts, strict=True)
                          if v.kind not in _DONE]
                if failed:
                    sink.unclaim_ids(tx, failed)
                sink.keep_rows(view, {m for m, v in zip(shown, verdicts, strict=True) if v.kind == "done"})
    except Exception as exc:
        if isinstance(exc, UnavailableError) or sink.is_outage(exc):
            raise UnavailableError(f"consume: {urn} batch handler: {exc}") from exc
        # the batch failed this attempt: each message as if its own handler had raised
        verdicts = [_raised(exc)] * len(fresh)
    if len(fresh) < len(rows):
        done.counts[urn, DUPLICATE, ALREADY_PROCESSED] += len(rows) - len(fresh)
    retried = 0
    handled = part.consume.pipeline.handled_as
    for (i, attempts), verdict in zip(fresh, verdicts, strict=True):
        if verdict.kind == "done":
            done.counts[urn, handled, ""] += 1
            continue
        if verdict.kind == "duplicate":
            done.counts[urn, DUPLICATE, verdict.cause or ""] += 1
            continue
        row, outcome, cause = _failed(part, i, None, attempts, verdict)
        retried += outcome == RETRIED
        outbound.append(row)
        done.labels[row.key] = (urn, outcome, cause)
    if retried:
        log.warning("consume: %s batch handler: %d of %d messages failed this attempt; retrying",
                    urn, retried, len(fresh))


def _collect(part: _Consume, i: int, *, rounds: list[dict[str, list[_BatchRow]]], seen: Counter[str],
             outbound: list[Outbound], done: _Done) -> None:
    """A batch handler's row: dead-lettered when its data breaks the URN's schema, else added to
    its round (each id once a round: a later attempt of an id sees the earlier one's claim, as it
    would one message after the other). Reads the JVM's columns; decodes only a dead letter."""
    columns, pipeline = part.rows.columns, part.consume.pipeline
    urn: str = columns["urn"][i]
    attempts = int(columns["attempts"][i])
    try:
        if urn in pipeline.schemas:
            import orjson

            text = columns["data_json"][i]
            data = orjson.loads(text) if text is not None else part.envelope(i).data
            problems = pipeline.schema_errors(urn, data)
            if problems:
                from babelq.schema.errors import SchemaViolationError

                violation = SchemaViolationError(urn, problems)
                row = _dead_letter(part, i, part.envelope(i), cause=rules.SCHEMA, error=violation,
                                   attempts=max(attempts, 0))
                outbound.append(row)
                done.labels[row.key] = (urn, DEAD_LETTERED, rules.SCHEMA)
                return
        mid = _message_id(part, i)
    except Exception as exc:
        row = _unprocessable(part, i, exc)
        outbound.append(row)
        done.labels[row.key] = (NO_URN, DEAD_LETTERED, UNPROCESSABLE)
        return
    k = seen[mid]
    seen[mid] += 1
    if k == len(rounds):
        rounds.append({})
    rounds[k].setdefault(urn, []).append((i, attempts))


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
    #: the batch handlers' rows, per round and URN (:func:`_run_batch`)
    rounds: list[dict[str, list[_BatchRow]]] = []
    seen: Counter[str] = Counter()
    with sink.transaction() as tx:
        for i in candidates:
            if columns["urn"][i] in pipeline.batch_handlers:
                _collect(part, i, rounds=rounds, seen=seen, outbound=outbound, done=done)
                continue
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
                        handler(Message(env, attempts, queue), sink.view(tx, [env.id], per_message=True))
            except Exception as exc:
                if isinstance(exc, UnavailableError) or sink.is_outage(exc):
                    raise UnavailableError(f"consume: {urn} handler: {exc}") from exc
                row, outcome, cause = _failed(part, i, env, attempts, _raised(exc))
                if outcome == RETRIED:
                    log.warning("consume: %s id=%s attempt %d failed (%s: %s); retrying",
                                urn, env.id, attempts, type(exc).__name__, exc)
                outbound.append(row)
                done.labels[row.key] = (urn, outcome, cause)
                continue
            done.counts[urn, pipeline.handled_as if claimed else DUPLICATE,
                        "" if claimed else ALREADY_PROCESSED] += 1
        for batches in rounds:
            for urn, rows in batches.items():
                _run_batch(part, sink, tx, urn, rows, outbound=outbound, done=done)
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


def consume_partition(batches: Iterator[Any], config: ConsumeConfig, batch_id: int | None = None
                      ) -> Iterator[Any]:
    """Consume one partition of micro-batch ``batch_id`` (classified); yields one Arrow batch of
    :data:`OUTCOME_SCHEMA` (outcome :data:`~babelq.pipelines.settle.partition.SECONDS`: a phase's
    microseconds; :data:`~babelq.pipelines.settle.partition.READ_BY`: messages per reading process).
    A files sink writes the batch id beside every row it appends."""
    clock = _Clock()
    rows = _Rows(batches)
    clock.lap("read")
    part = _Consume(config, rows.now if rows.now is not None else now_ms(), rows, _slot())
    counts: Counter[tuple[str, str, str]] = Counter(part.by_urn)
    if rows.count:
        sink = open_sink(config.sink, prefix=config.prefix)
        try:
            sink.bind(config.pipeline.tables, batch_id)
            candidates = _decide(part, sink)
            clock.lap("decide")
            done = sink.through_outages(lambda: _transaction(part, sink, candidates))
            clock.lap("handle")  # the handlers and the commit, waiting for the sink's lock included
            failpoint("consume.after_sink_commit")
            sink.publish_committed()  # a files sink's files, into their tables
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
