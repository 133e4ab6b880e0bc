"""Settle's work on one partition of a micro-batch: the handler, one ledger transaction, the outbox.

Runs in a Spark Python worker, in every partition of the micro-batch at once, over the Arrow
batches of the rows :func:`babelq.pipelines.settle.classify.classified` made on the JVM in the same
task: read from the broker by this partition's slot, decoded, given their consume rule (``rule``).
Only the rows that need it are read further in Python (``data`` for the handler, the envelope for
a dead letter or a retry); the bodies stay in Arrow otherwise. A row is a copy when the partition
met the same ``meta.id`` at the same body attempts and verdict earlier (:func:`_copies`; copies
read by two slots are told apart by the ledger, see :mod:`babelq.pipelines.settle.classify`).
Per row, in order:

1. rule ``poison`` / ``unsupported`` -> DLQ with the exact bytes kept
   (:func:`~babelq.envelope.poison_record`; the record's error is the core codec's own reason);
2. ``meta.id`` already in the processed-ids table (redelivery, replay, redrive) -> dropped: the
   payment is posted, so no later copy is dead-lettered, deferred or retried, whatever else it is;
3. a copy of a message met earlier in the partition -> dropped (its first copy is settled);
4. rule ``expired`` -> DLQ (``failed``, cause ``expired``); ``deferred`` -> published again,
   unchanged, for the rest of its delay; ``unknown_urn`` -> DLQ (reason and cause ``unknown_urn``);
5. the handler: data breaking the URN's JSON Schema or not validated by ingest -> DLQ (cause
   ``invalid``); core banking (:mod:`babelq.pipelines.core_banking`: the simulator, or the
   ``--bank``'s ``post``) fails the attempt -> published again with attempts+1 after the shared
   policy's jittered backoff (``on_failure`` ``retry``), or DLQ (cause ``max_attempts``) when the
   attempts ran out; refuses for good (``PermanentError``) -> DLQ (counted as cause ``rejected``);
   is unavailable -> the task fails, as for the ledger below; otherwise posted. The ledger
   refuses a second posting of the same payment under another ``meta.id`` (its
   ``payment_reference`` is the business key: dropped as a duplicate), and dead-letters a posting
   it cannot store or a different payment reusing a posted reference.

One message can never stop the batch: anything that goes wrong while settling one message (a
handler bug, a body that cannot be re-encoded) dead-letters that message alone, with its original
bytes (cause ``unprocessable``). Infrastructure failures (:class:`~babelq.errors.UnavailableError`:
ledger, broker, core banking) are not the message's fault: they fail the task, so the micro-batch is delivered
again.

Every dead letter, retry and deferral is claimed in the ledger's outbox in the same transaction as
the postings and processed ids, keyed by message and attempt (:func:`~babelq.pipelines.ledger.outbox_key`),
then published from this worker through the ``babelq`` transports and marked. A micro-batch
delivered again after a crash finds its keys and its processed ids: nothing is posted,
dead-lettered or retried twice. Rows a crash left between the commit and the publish are published
by the next run (:func:`publish_outbound`).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from babelq.envelope import Envelope, annotate, decode, dlq_name, now_ms, poison_record, record_or_poison
from babelq.envelope.constants import INT64_MAX
from babelq.errors import DecodeError, UnavailableError
from babelq.pipelines import TRANSFER_URN
from babelq.pipelines.core_banking import BankChoice, bank_post, refusal_text
from babelq.pipelines.failpoints import failpoint
from babelq.pipelines.ledger import Ledger, Outbound, Posting, open_ledger, outbox_key
from babelq.pipelines.settle.classify import CLASSIFIED
from babelq.pipelines.transfer_schema import obviously_valid, schema_errors
from babelq.runtime import rules
from babelq.runtime.backoff import Backoff
from babelq.runtime.errors import PermanentError
from babelq.transports import Outgoing, open_transport

log = logging.getLogger(__name__)

#: DDL of what :func:`settle_partition` yields: how many messages of the partition had each outcome.
OUTCOME_SCHEMA = "outcome STRING, cause STRING, n BIGINT"
#: The outcome of the rows that are no messages but one phase's microseconds in one task (cause: the phase).
SECONDS = "@seconds"
#: The outcome of the rows that count the partition's messages by the process that read them from
#: the broker (cause: the source's ``read_by``, e.g. ``executor <host>:<jvm pid>``).
READ_BY = "@read_by"

POSTED = "posted"
DUPLICATE = "duplicate"
RETRIED = "retried"
DEFERRED = "deferred"
DEAD_LETTERED = "dead_lettered"

#: Cause of a message whose own settling failed (a bug, an envelope that cannot be re-encoded).
UNPROCESSABLE = "unprocessable"
#: Cause of a duplicate whose dead letter or retry an earlier run already wrote.
ALREADY_SETTLED = "already_settled"
#: Causes of a dropped duplicate: a copy earlier in the micro-batch / an id the ledger has.
IN_BATCH = "in_batch"
ALREADY_PROCESSED = "already_processed"
#: The retry label's cause: core banking refused the transfer.
CORE_BANKING = "core_banking"
#: The cause of a transfer whose data breaks the URN's JSON Schema.
INVALID = "invalid"
#: The cause settle counts a payment core banking refused for good under (``PermanentError``).
REJECTED = "rejected"

#: The URNs settle has a handler for; every other one is ``unknown_urn``.
HANDLED_URNS = (TRANSFER_URN,)


@dataclass(frozen=True, slots=True)
class SettleConfig:
    """What every partition needs (pickled to the executors with the task)."""

    url: str
    queue: str
    ledger: str
    ledger_prefix: str = ""
    max_attempts: int = 3
    retry_delay_ms: int = 1_000  #: the backoff's base: the first retry waits up to this long
    #: where payments are posted: None for the simulator, else a ``--bank`` spec, imported by
    #: each Python worker (:func:`~babelq.pipelines.core_banking.bank_post`), or a bank itself
    bank: BankChoice = None

    @property
    def dlq(self) -> str:
        return dlq_name(self.queue)

    @property
    def policy(self) -> rules.RetryPolicy:
        """The runtime's retry policy with this base delay (full jitter, capped as the runtime's)."""
        return rules.RetryPolicy(self.max_attempts, Backoff(base_ms=self.retry_delay_ms))


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
    """The decisions of one partition: outbox rows with their labels, postings, counts."""

    def __init__(self, config: SettleConfig, now: int, rows: _Rows, slot: int) -> None:
        self.config = config
        self.now = now
        self.rows = rows
        self.slot = slot
        self.policy = config.policy
        self.post = bank_post(config.bank)
        self.outbound: list[Outbound] = []
        self.labels: dict[str, tuple[str, str | None]] = {}  # outbox key -> (outcome, cause)
        self.postings: list[Posting] = []
        self.posted_rows: dict[str, int] = {}  # posting's message id -> its row, for the ledger's refusals
        self.counts: Counter[tuple[str, str | None]] = Counter()
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
        raise ValueError(f"settle has no outcome for the consume rule {rule!r}")


def _handle(part: _Partition, i: int) -> None:
    """The handler of ``transfer.requested``: schema, core banking, then a posting or a failure.

    Written for the hot path (most rows are posted): data is read from the JSON text decode left,
    the schema is checked by its quick accept-only test first, and a posting is a plain tuple."""
    columns = part.rows.columns
    text = columns["data_json"][i]
    data: Any = orjson.loads(text) if text is not None else None
    attempts = columns["attempts"][i]
    if not (obviously_valid(data) and data["validation_result"]["passed"] is True):
        problems = schema_errors(data)  # the full validator (the quick test only accepts)
        if not problems and data["validation_result"].get("passed") is not True:
            problems = ["validation_result.passed is not true"]
        if problems:
            part.dead(i, part.envelope(i), rules.REASON_FAILED, INVALID, error="; ".join(problems))
            return
        # valid by the full validator although not by the quick test (e.g. amount 1000.0)
    mid = _message_id(part, i)
    posting = Posting(
        mid, data["payment_reference"], data["amount_cents"], data["currency"], data["debtor_bsb"],
        data["debtor_account"], data["creditor_bsb"], data["creditor_account"],
        columns["correlation_id"][i], columns["trace_id"][i], attempts, part.now,
    )
    try:  # the runtime's handler contract (core_banking's docstring)
        part.post(posting)
    except UnavailableError:
        raise  # core banking is down: the micro-batch is delivered again
    except PermanentError as exc:
        dead = part.dead_letter(i, part.envelope(i), rules.REASON_FAILED, exc.cause or REJECTED,
                                error=_bank_error(exc))
        part.outbound.append(dead)
        part.labels[dead.key] = (DEAD_LETTERED, REJECTED)  # a bounded label set, whatever the cause
        return
    except Exception as exc:
        _failed(part, i, attempts, _bank_error(exc))
        return
    part.postings.append(posting)
    part.posted_rows[mid] = i


_bank_error = refusal_text


def _failed(part: _Partition, i: int, attempts: int, failure: str) -> None:
    """Core banking refused: retried after the shared policy's backoff, or dead-lettered once the
    attempts ran out (``on_failure``, decided on the JVM by the same policy)."""
    columns, config = part.rows.columns, part.config
    runs = part.policy.runs(attempts)
    env = part.envelope(i)
    if attempts > env.attempts:  # the broker counted more deliveries (SQS, docs/standard.md §4)
        env = env.with_attempts(attempts)
    if columns["on_failure"][i] == "retry":
        body = env.with_attempts(runs).encode()
        retry = Outbound(part.key_of(i, part.rows.body(i)), config.queue, body, part.policy.delay_ms(runs),
                         columns["id"][i] or None)
        part.out(retry, RETRIED, CORE_BANKING)
        return
    cause = part.policy.exhausted_cause(None)
    runs = min(runs, INT64_MAX)  # at the maximum: dead-lettered, never written as 2**63
    part.dead(i, env.with_attempts(runs), rules.REASON_FAILED, cause, error=failure, attempts=runs)


def _isolated(part: _Partition, i: int, step: Callable[..., None], *args: Any) -> None:
    """Run one message's ``step``; anything but an infrastructure failure dead-letters it alone."""
    try:
        step(part, i, *args)
    except UnavailableError:
        raise
    except Exception as exc:
        _unprocessable(part, i, exc)


def _unprocessable(part: _Partition, i: int, exc: Exception) -> None:
    log.exception("settle: dead-lettering a message its settling failed on")
    why = f"settle could not process this message: {type(exc).__name__}: {exc}"
    part.poison(part.rows.body(i), why, UNPROCESSABLE)


#: the rules whose messages the processed-ids guard drops (they have a trustworthy id)
_GUARDED = frozenset({None, rules.EXPIRED, rules.DEFERRED, rules.UNKNOWN_URN})


def settle_partition(batches: Iterator[Any], config: SettleConfig) -> Iterator[Any]:
    """Settle one partition of a classified micro-batch; yields one Arrow batch of
    :data:`OUTCOME_SCHEMA`: how many messages had each outcome, and (outcome :data:`SECONDS`) how
    long each phase took in this task, in microseconds. The partition's time (postings, the
    outbox, an expiry's text) is the latest ``now`` its rows were judged by."""
    clock = _Clock()
    rows = _Rows(batches)
    clock.lap("read")  # waiting for the JVM's rows (the broker's reservation, decode) and Arrow -> Python
    part = _Partition(config, rows.now if rows.now is not None else now_ms(), rows, _slot())  # None: no rows
    if rows.count:
        ledger = open_ledger(config.ledger, prefix=config.ledger_prefix)
        try:
            _decide(part, ledger)
            clock.lap("handle")
            _commit(part, ledger, clock)
        finally:
            ledger.close()
    yield _arrow(part.counts, clock.laps, rows.readers)


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


def _decide(part: _Partition, ledger: Ledger) -> None:
    """Every row's outcome, in the module docstring's order (the ledger is only read here)."""
    rows = part.rows
    columns = rows.columns
    rule_of, ids = columns["rule"], columns["id"]
    copies = _copies(ids, columns["body_attempts"], rule_of)
    guarded = [ids[i] for i in range(rows.count) if ids[i] and rule_of[i] in _GUARDED and not copies[i]]
    processed = ledger.already_processed(guarded) if guarded else set()
    counts = part.counts
    for i in range(rows.count):
        rule = rule_of[i]
        if rule is None and not copies[i] and ids[i] not in processed:
            try:  # _isolated, inlined: this is every posted message's path
                _handle(part, i)
            except UnavailableError:
                raise
            except Exception as exc:
                _unprocessable(part, i, exc)
        elif rule in _REJECTED:
            _isolated(part, i, _before_handler, rule)
        elif ids[i] and ids[i] in processed:
            counts[DUPLICATE, ALREADY_PROCESSED] += 1
        elif copies[i]:
            counts[DUPLICATE, IN_BATCH] += 1
        else:
            _isolated(part, i, _before_handler, rule)


class _Clock:
    """Seconds per phase of one partition's work (the profile ``SettleStats.seconds`` adds up)."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.laps[phase] = self.laps.get(phase, 0.0) + now - self._last
        self._last = now


def _commit(part: _Partition, ledger: Ledger, clock: _Clock) -> None:
    """One ledger transaction for the partition, then its outbox rows published and marked."""
    config, counts = part.config, part.counts

    def refusal(posting: Posting, cause: str, why: str) -> Outbound:
        i = part.posted_rows[posting.message_id]
        return part.dead_letter(i, part.envelope(i), rules.REASON_FAILED, cause, error=why)

    settled = ledger.settle(part.postings, part.outbound, refusal, at=part.now)
    clock.lap("ledger")  # the transaction, waiting for the lock included (SQLite: one writer at a time)
    failpoint("settle.after_ledger_commit")
    counts[POSTED, None] += len(settled.posted)
    counts[DUPLICATE, ALREADY_PROCESSED] += settled.duplicate_ids
    counts[DUPLICATE, "already_posted"] += settled.duplicate_payments
    counts[DUPLICATE, ALREADY_SETTLED] += settled.repeated
    counts[DUPLICATE, ALREADY_PROCESSED] += settled.processed_outbound
    for row in settled.outbound:
        counts[part.labels[row.key]] += 1
    publish_outbound(config.url, ledger, settled.outbound)
    clock.lap("publish")


class _Marks(Protocol):
    """Where outbox rows are marked published: the ledger, or a consume pipeline's sink."""

    def mark_published(self, keys: Sequence[str]) -> object: ...


def publish_outbound(
    url: str, store: _Marks, rows: Sequence[Outbound], *, after_publish: str = "settle.after_outbox_publish"
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


def _arrow(counts: Counter[tuple[str, str | None]], laps: dict[str, float], readers: Counter[str]) -> Any:
    import pyarrow as pa

    rows = [(o, c, n) for (o, c), n in counts.items() if n]
    rows += [(SECONDS, phase, round(seconds * 1e6)) for phase, seconds in laps.items()]
    rows += [(READ_BY, reader, n) for reader, n in readers.items()]
    return pa.RecordBatch.from_arrays(
        [pa.array([r[0] for r in rows], pa.string()), pa.array([r[1] for r in rows], pa.string()),
         pa.array([r[2] for r in rows], pa.int64())],
        names=["outcome", "cause", "n"],
    )
