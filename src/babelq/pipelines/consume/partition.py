"""A consume pipeline's work on one partition of a micro-batch: handlers, one sink transaction, outbox.

Runs in a Spark Python worker, in every partition of the micro-batch at once, over the Arrow
batches of the rows :mod:`babelq.pipelines.consume.classify` made on the JVM in the same task:
read from the broker by this partition's slot, decoded, given their consume rule (``rule``).
Only the rows that need it are read further in Python; the bodies stay in Arrow otherwise. A row
is a copy when the partition met the same ``meta.id`` at the same body attempts and verdict
earlier (:func:`_copies`; copies read by two slots are told apart by the sink). Per row, in order:

1. rule ``poison`` / ``unsupported`` -> DLQ with the exact bytes kept;
2. ``meta.id`` already processed in the sink -> dropped (duplicate, ``already_processed``);
3. a copy met earlier in the partition -> dropped (duplicate, ``in_batch``);
4. ``expired`` -> DLQ; ``deferred`` -> put back for the rest of its delay; ``unknown_urn`` -> DLQ
   (:func:`_before_handler`);
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

import hashlib
import logging
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from babelq.envelope import Envelope, annotate, decode, dlq_name, now_ms, poison_record, record_or_poison
from babelq.envelope.constants import INT64_MAX
from babelq.errors import DecodeError, UnavailableError
from babelq.pipelines.consume.api import BATCH_COLUMNS, DONE, Message, Pipeline, Verdict, dead_letter, retry
from babelq.pipelines.consume.classify import CLASSIFIED
from babelq.pipelines.consume.sink import DEFAULT_PREFIX, Sink
from babelq.pipelines.consume.sinks import open_sink
from babelq.pipelines.failpoints import failpoint
from babelq.pipelines.ledger import Outbound, outbox_key
from babelq.runtime import rules
from babelq.runtime.backoff import Backoff
from babelq.runtime.errors import PermanentError
from babelq.runtime.outage import DEFAULT_OUTAGE_SECONDS
from babelq.transports import Outgoing, open_transport

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
    #: the run's name: in its query's name, its log lines and its failpoints (``<name>.after_sink_commit``)
    name: str = "consume"
    #: how long an outage of the sink or the broker is waited out (``--outage-timeout``)
    outage_seconds: float = DEFAULT_OUTAGE_SECONDS

    @property
    def dlq(self) -> str:
        return dlq_name(self.queue)

    @property
    def policy(self) -> rules.RetryPolicy:
        """The runtime's retry policy with this base delay (full jitter, capped as the runtime's)."""
        return rules.RetryPolicy(self.max_attempts, Backoff(base_ms=self.retry_delay_ms))


#: The outcome of the rows that are no messages but one phase's microseconds in one task (cause: the phase).
SECONDS = "@seconds"
#: The outcome of the rows that count the partition's messages by the process that read them from
#: the broker (cause: the source's ``read_by``, e.g. ``executor <host>:<jvm pid>``).
READ_BY = "@read_by"

DUPLICATE = "duplicate"
RETRIED = "retried"
DEFERRED = "deferred"
DEAD_LETTERED = "dead_lettered"

#: Cause of a duplicate whose dead letter or retry an earlier run already wrote.
ALREADY_SETTLED = "already_settled"
#: Causes of a dropped duplicate: a copy earlier in the micro-batch / an id the sink has.
IN_BATCH = "in_batch"
ALREADY_PROCESSED = "already_processed"


#: classified columns that are never turned into Python lists for every row
_ARROW_ONLY = frozenset({"body", "read_by", "now"})


class _Rows:
    """The partition's classified rows as Python lists, except the bodies: they stay in Arrow and
    become Python bytes only for the few rows whose dead letter, retry or deferral needs them."""

    def __init__(self, batches: Iterator[Any]) -> None:
        import pyarrow.compute as pc

        self.columns: dict[str, list[Any]] = {name: [] for name in CLASSIFIED if name not in _ARROW_ONLY}
        self._bodies: list[Any] = []  # (first row, Arrow array) per batch
        #: messages per reading process (counted in Arrow: one value per row, a handful distinct)
        self.readers: Counter[str] = Counter()
        #: the latest ``now`` the JVM judged a row of the partition by (ms), None without one
        self.now: int | None = None
        total = 0
        for batch in batches:
            if batch.num_rows == 0:
                continue
            names = batch.schema.names
            for name, values in self.columns.items():
                values.extend(batch.column(names.index(name)).to_pylist())
            self._bodies.append((total, batch.column(names.index("body"))))
            if "read_by" in names:
                for item in batch.column(names.index("read_by")).value_counts().to_pylist():
                    self.readers[item["values"] or "unknown"] += item["counts"]
            if "now" in names:
                latest = pc.max(batch.column(names.index("now"))).as_py()
                if latest is not None and (self.now is None or latest > self.now):
                    self.now = latest
            total += batch.num_rows
        self.count = total

    def body(self, i: int) -> bytes:
        for first, array in reversed(self._bodies):
            if first <= i:
                value = array[i - first].as_py()
                return bytes(value) if value is not None else b""
        raise IndexError(i)


class _Partition:
    """The decisions of one partition before its handlers: outbox rows with their labels."""

    def __init__(self, config: ConsumeConfig, now: int, rows: _Rows, slot: int) -> None:
        self.config = config
        self.now = now
        self.rows = rows
        self.slot = slot
        self.policy = config.policy
        self.outbound: list[Outbound] = []
        self.labels: dict[str, tuple[str, str | None]] = {}  # outbox key -> (outcome, cause)
        self._copies: Counter[str] = Counter()

    # -- keys ----------------------------------------------------------------------------
    def raw_key(self, raw: bytes) -> str:
        """The key of a body without a trustworthy id: its bytes, the read slot and which copy of
        them in the slot's partition (two slots that each read the same bytes dead-letter both)."""
        digest = hashlib.sha256(raw).hexdigest()
        self._copies[digest] += 1
        return outbox_key(f"bytes:{digest}@{self.slot}#{self._copies[digest]}")

    def key_of(self, i: int, raw: bytes) -> str:
        """The outbox key of a decoded message: its id, body attempts and the broker's time of
        storing it, else its bytes.

        Why the storing time: a redrive puts the same meta.id back with attempts 0, so id and
        attempts alone name the redriven message as they named its first life, and its new
        outcome would be taken for the first one's, already published: acked, and lost. A
        redelivery of one stored message keeps its time (the same key: exactly once); a message
        stored again does not. Brokers that keep no storing time (Redis, RabbitMQ) leave it out."""
        columns = self.rows.columns
        mid = columns["id"][i]
        if mid:
            stored = columns["stored_at"][i]
            life = "" if stored is None else f"@stored:{stored}"
            return outbox_key(f"{mid}@{columns['body_attempts'][i]}{life}")
        return self.raw_key(raw)

    # -- outcomes ------------------------------------------------------------------------
    def out(self, row: Outbound, outcome: str, cause: str | None) -> None:
        self.outbound.append(row)
        self.labels[row.key] = (outcome, cause)

    def poison(self, raw: bytes, error: str, cause: str | None = None) -> None:
        record = poison_record(raw, original_queue=self.config.queue, error=error, cause=cause)
        self.out(Outbound(self.raw_key(raw), self.config.dlq, record), DEAD_LETTERED, cause or rules.POISON)

    def dead_letter(self, i: int, env: Envelope, reason: str, cause: str, *, error: str,
                    attempts: int | None = None) -> Outbound:
        """The dead letter of a decoded message; if its record cannot be built, of its original bytes."""
        raw = self.rows.body(i)
        record, _ = record_or_poison(  # an envelope that cannot be re-encoded: keep what was received
            lambda: annotate(env, reason, original_queue=self.config.queue, cause=cause, error=error,
                             attempts=attempts).encode(),
            raw, original_queue=self.config.queue, error=error,
            attempts=env.attempts if attempts is None else attempts, cause=cause,
        )
        key = self.key_of(i, raw)
        self.labels[key] = (DEAD_LETTERED, cause)
        return Outbound(key, self.config.dlq, record, message_id=self.rows.columns["id"][i] or None)

    def dead(self, i: int, env: Envelope, reason: str, cause: str, *, error: str,
             attempts: int | None = None) -> None:
        self.outbound.append(self.dead_letter(i, env, reason, cause, error=error, attempts=attempts))

    def envelope(self, i: int) -> Envelope:
        """The row's envelope, read by the core codec (only for the rows that need one re-encoded)."""
        return decode(self.rows.body(i))


def _message_id(part: _Partition, i: int) -> str:
    """The id a posting is claimed under: meta.id; without a usable one, the body's digest, so
    that a redelivery of the same bytes is still caught (and two id-less payments are not one)."""
    mid: str = part.rows.columns["id"][i]
    return mid or "sha256:" + hashlib.sha256(part.rows.body(i)).hexdigest()


def _before_handler(part: _Partition, i: int, rule: str) -> None:
    """The consume rules' outcomes (the row's ``rule``, decided on the JVM)."""
    columns, config = part.rows.columns, part.config
    if rule == rules.POISON:
        raw = part.rows.body(i)
        try:
            decode(raw)
            why = columns["reject_reason"][i] or "not an envelope"
        except DecodeError as exc:  # the core codec's own words (decode's on the JVM are a prefix)
            why = exc.reason
        part.poison(raw, why)
    elif rule == rules.UNSUPPORTED:
        part.poison(part.rows.body(i), rules.unsupported_error(columns["reject_reason"][i] or "rejected"),
                    rules.UNSUPPORTED)
    elif rule == rules.EXPIRED:
        env = part.envelope(i)
        expire_at = env.expire_at if env.expire_at is not None else part.now
        part.dead(i, env, rules.REASON_FAILED, rules.EXPIRED, error=rules.expired_error(expire_at, part.now))
    elif rule == rules.DEFERRED:
        raw, mid = part.rows.body(i), columns["id"][i]
        # a fresh key per deferral: the copy that comes back early (a delay over the cap) is
        # deferred again, not taken for this decision repeated
        attempt = columns["body_attempts"][i]
        key = outbox_key(f"deferred:{mid}@{attempt}@{part.now}") if mid else part.raw_key(raw)
        delay = int(columns["delay_ms"][i] or 0)
        part.out(Outbound(key, config.queue, raw, delay, mid or None), DEFERRED, None)
    elif rule == rules.UNKNOWN_URN:
        env = part.envelope(i)
        part.dead(i, env, rules.REASON_UNKNOWN_URN, rules.UNKNOWN_URN, error=rules.unknown_urn_error(env.urn))
    else:
        raise ValueError(f"consume has no outcome for the consume rule {rule!r}")


#: the rules whose messages the processed-ids guard drops (they have a trustworthy id)
_GUARDED = frozenset({None, rules.EXPIRED, rules.DEFERRED, rules.UNKNOWN_URN})


def _slot() -> int:
    """This task's partition (the source's read slot), 0 outside a Spark task."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


#: the rules of rows decode rejected: dead-lettered before any other check, and the verdict part of
#: a copy's identity (an envelope is never a copy of a non-envelope)
_REJECTED = frozenset({rules.POISON, rules.UNSUPPORTED})


def _copies(ids: list[str | None], attempts: list[int | None], rule_of: list[str | None]) -> list[bool]:
    """Per row: whether an earlier row of the partition has its non-empty id, body attempts and verdict."""
    seen: set[tuple[str, int | None, bool]] = set()
    out: list[bool] = []
    for mid, attempt, rule in zip(ids, attempts, rule_of, strict=True):
        if not mid:
            out.append(False)
            continue
        key = (mid, attempt, rule in _REJECTED)
        out.append(key in seen)
        seen.add(key)
    return out


class _Clock:
    """Seconds per phase of one partition's work (the profile ``ConsumeStats.seconds`` adds up)."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.laps[phase] = self.laps.get(phase, 0.0) + now - self._last
        self._last = now


class _Consume(_Partition):
    """The partition's state, plus each row's envelope decoded once and its URN."""

    def __init__(self, config: ConsumeConfig, now: int, rows: _Rows, slot: int) -> None:
        super().__init__(config, now, rows, slot)
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
        """The outcome of a rule, the rows it adds to the outbox tagged with the URN."""
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


class _Marks(Protocol):
    """Where outbox rows are marked published: a pipeline's sink."""

    def mark_published(self, keys: Sequence[str]) -> object: ...


def publish_outbound(
    url: str, store: _Marks, rows: Sequence[Outbound], *, after_publish: str = "consume.after_outbox_publish"
) -> int:
    """Publish outbox ``rows`` (grouped by queue, in order), then mark them in ``store``; returns
    how many. ``after_publish`` names the failpoint between the two."""
    if not rows:
        return 0
    by_queue: dict[str, list[Outgoing]] = {}
    for row in rows:
        by_queue.setdefault(row.queue, []).append(Outgoing(row.body, delay_ms=row.delay_ms))
    transport = open_transport(url)
    try:
        for queue, messages in by_queue.items():
            transport.publish_many(queue, messages)
    finally:
        transport.close()
    failpoint(after_publish)
    store.mark_published([row.key for row in rows])
    return len(rows)


def publish_outbox(url: str, sink: Sink, rows: Sequence[Outbound], *, name: str = "consume") -> int:
    """Publish outbox ``rows`` (grouped by queue, in order), then mark them; returns how many."""
    return publish_outbound(url, sink, rows, after_publish=f"{name}.after_outbox_publish")


def consume_partition(batches: Iterator[Any], config: ConsumeConfig, batch_id: int | None = None
                      ) -> Iterator[Any]:
    """Consume one partition of micro-batch ``batch_id`` (classified); yields one Arrow batch of
    :data:`OUTCOME_SCHEMA` (outcome :data:`SECONDS`: a phase's microseconds; :data:`READ_BY`:
    messages per reading process).
    A files sink writes the batch id beside every row it appends."""
    clock = _Clock()
    rows = _Rows(batches)
    clock.lap("read")
    part = _Consume(config, rows.now if rows.now is not None else now_ms(), rows, _slot())
    counts: Counter[tuple[str, str, str]] = Counter(part.by_urn)
    if rows.count:
        sink = open_sink(config.sink, prefix=config.prefix)
        sink.outage_seconds = config.outage_seconds
        try:
            sink.bind(config.pipeline.tables, batch_id)
            candidates = _decide(part, sink)
            clock.lap("decide")
            done = sink.through_outages(lambda: _transaction(part, sink, candidates))
            clock.lap("handle")  # the handlers and the commit, waiting for the sink's lock included
            failpoint(f"{config.name}.after_sink_commit")
            sink.publish_committed()  # a files sink's files, into their tables
            publish_outbox(config.url, sink, done.outbound, name=config.name)
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
