"""The baseline of bench_settle.py: settle's micro-batch code as it was before it became a Spark job.

A verbatim copy of ``babelq.pipelines.settle_partition`` at commit ff5735d (only this docstring and
the ``process_batch`` at the end, copied from ``babelq.pipelines.settle`` of the same commit, are
new; both modules live in the ``babelq.pipelines.settle`` package now): the whole micro-batch
coalesced into ONE task, which decodes, classifies, posts and publishes in Python, row by row. Kept
here, not in the package, so the benchmark can measure it in the same run as the current code.

The original module docstring follows (its words for the two stages changed to ingest and settle).

Settle's work on a micro-batch: classify, dead-letter, retry, post, in one ledger transaction.

Runs on an executor over the Arrow batches of the micro-batch's ``body`` column, in batch
order (the whole micro-batch is one partition, so a duplicate is seen without a shuffle).
For every message, in this order:

1. not decodable / not accepted (poison, unsupported) -> DLQ with the exact bytes kept
   (:func:`~babelq.envelope.poison_record`);
2. a URN other than ``transfer.requested`` -> DLQ ``unknown_urn``;
3. a copy of a ``meta.id`` *at the same attempts* already seen earlier in the same micro-batch
   -> dropped (a message without a usable id is never taken for a copy). Two attempts of one
   message are not copies: a redelivered original and the retry an earlier run published for
   it can meet in one batch, and dropping the retry would lose the message;
4. ``meta.id`` already in the processed-ids table (redelivery, replay, redrive) -> dropped;
5. ``meta.expire_at`` passed -> DLQ (``failed``, cause ``expired``);
6. data breaking the URN's JSON Schema or not validated by ingest -> DLQ (cause ``invalid``);
7. core banking refuses -> re-published with attempts+1 after a delay, or DLQ (cause
   ``max_attempts``) once ``max_attempts`` is reached; attempts are the binding's
   reconciliation, ``max(body attempts, broker_attempts)`` (the source's column: SQS's receive
   count - 1, 0 where the body is authoritative);
8. otherwise posted. The ledger refuses a second posting of the same payment under another
   ``meta.id`` (its ``payment_reference`` is the business key: dropped as a duplicate), and
   dead-letters a posting it cannot store or a different payment reusing a posted reference.

One message can never stop the batch: anything that goes wrong while settling one message
(a handler bug, a body that cannot be re-encoded) dead-letters that message alone, with its
original bytes (cause ``unprocessable``). Infrastructure failures
(:class:`~babelq.errors.UnavailableError`: ledger, broker) are not the message's fault: they
fail the micro-batch, which is then delivered again.

Every dead letter and retry is claimed in the ledger's outbox in the same transaction as the
postings, keyed by message and attempt (:func:`~babelq.pipelines.ledger.outbox_key`), then
published and marked. A micro-batch delivered again after a crash finds its keys and its
processed ids: nothing is posted, dead-lettered or retried twice. Rows a crash left between
the commit and the publish are published by the next run (:func:`publish_outbound`).
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from babelq.envelope import Envelope, annotate, decode, dlq_name, now_ms, poison_record
from babelq.errors import DecodeError, UnavailableError
from babelq.pipelines import TRANSFER_URN
from babelq.pipelines.core_banking import CoreBankingSimulator
from babelq.pipelines.failpoints import failpoint
from babelq.pipelines.ledger import Ledger, Outbound, Posting, open_ledger, outbox_key
from babelq.pipelines.transfer_schema import schema_errors
from babelq.transports import Outgoing, open_transport

log = logging.getLogger(__name__)

#: DDL of what :func:`settle_partition` yields: how many messages of the partition had each outcome.
OUTCOME_SCHEMA = "outcome STRING, cause STRING, n BIGINT"

POSTED = "posted"
DUPLICATE = "duplicate"
RETRIED = "retried"
DEAD_LETTERED = "dead_lettered"

#: Cause of a message whose own settling failed (a bug, an envelope that cannot be re-encoded).
UNPROCESSABLE = "unprocessable"
#: Cause of a duplicate whose dead letter or retry an earlier run already wrote.
ALREADY_SETTLED = "already_settled"


@dataclass(frozen=True, slots=True)
class SettleConfig:
    url: str
    queue: str
    ledger: str
    ledger_prefix: str = ""
    max_attempts: int = 3
    retry_delay_ms: int = 1_000
    bank: CoreBankingSimulator = field(default_factory=CoreBankingSimulator)

    @property
    def dlq(self) -> str:
        return dlq_name(self.queue)


@dataclass(slots=True)
class _Accepted:
    """A transfer that passed the frame checks, waiting for the ledger's verdict."""

    env: Envelope
    raw: bytes
    message_id: str | None
    body_attempts: int
    floor: int


class _Batch:
    """The decisions of one micro-batch: outbox rows with their labels, postings, counts."""

    def __init__(self, config: SettleConfig, now: int) -> None:
        self.config = config
        self.now = now
        self.outbound: list[Outbound] = []
        self.labels: dict[str, tuple[str, str | None]] = {}  # outbox key -> (outcome, cause)
        self.postings: list[Posting] = []
        self.items: dict[str, _Accepted] = {}  # message id -> its transfer, for the ledger's refusals
        self.counts: Counter[tuple[str, str | None]] = Counter()
        self._copies: Counter[str] = Counter()

    # -- keys ----------------------------------------------------------------------------
    def raw_key(self, raw: bytes) -> str:
        """The key of a body without a trustworthy id: its bytes, and which copy of them in the batch."""
        digest = hashlib.sha256(raw).hexdigest()
        self._copies[digest] += 1
        return outbox_key(f"bytes:{digest}#{self._copies[digest]}")

    # -- outcomes ------------------------------------------------------------------------
    def out(self, row: Outbound, outcome: str, cause: str | None) -> None:
        self.outbound.append(row)
        self.labels[row.key] = (outcome, cause)

    def poison(self, raw: bytes, error: str, cause: str | None = None) -> None:
        record = poison_record(raw, original_queue=self.config.queue, error=error, cause=cause)
        self.out(Outbound(self.raw_key(raw), self.config.dlq, record), DEAD_LETTERED, cause or "poison")

    def dead_letter(self, item: _Accepted, key: str, reason: str, cause: str, *, error: str,
                    attempts: int | None = None) -> Outbound:
        """The dead letter of an accepted envelope; if its record cannot be built, of its original bytes."""
        try:
            record = annotate(item.env, reason, original_queue=self.config.queue, cause=cause, error=error,
                              attempts=attempts).encode()
        except Exception as exc:  # the envelope cannot be re-encoded: keep what was received
            record = poison_record(item.raw, original_queue=self.config.queue, cause=cause,
                                   error=f"{error} (its dead letter could not be written: {exc})")
        self.labels[key] = (DEAD_LETTERED, cause)
        return Outbound(key, self.config.dlq, record)

    def dead(self, item: _Accepted, key: str, reason: str, cause: str, *, error: str,
             attempts: int | None = None) -> None:
        self.outbound.append(self.dead_letter(item, key, reason, cause, error=error, attempts=attempts))

    def key_of(self, item: _Accepted) -> str:
        """The outbox key of an accepted transfer: its id and attempt, else its bytes."""
        if item.message_id:
            return outbox_key(f"{item.message_id}@{item.body_attempts}")
        return self.raw_key(item.raw)


def _posting(
    env: Envelope, now: int, data: dict[str, Any] | None = None, message_id: str | None = None
) -> Posting:
    """The ledger posting of a transfer (``data`` and ``message_id`` when the caller already has them)."""
    d = env.data if data is None else data
    meta = env.meta
    correlation = meta.get("correlation_id")
    return Posting(
        message_id=env.id if message_id is None else message_id,
        payment_reference=d["payment_reference"], amount_cents=d["amount_cents"],
        currency=d["currency"], debtor_bsb=d["debtor_bsb"], debtor_account=d["debtor_account"],
        creditor_bsb=d["creditor_bsb"], creditor_account=d["creditor_account"],
        correlation_id=correlation if type(correlation) is str else None, trace_id=env.trace_id,
        attempts=env.attempts, posted_at=now,
    )


def _usable_id(env: Envelope) -> str | None:
    value = env.meta.get("id")
    return value if type(value) is str and value else None


def _frame(batch: _Batch, raw: bytes, floor: int, seen: set[tuple[str, int]]) -> _Accepted | None:
    """Steps 1-3 for one body: the accepted transfer, or None when it was settled here."""
    try:
        env = decode(raw)
    except DecodeError as exc:
        batch.poison(raw, str(exc))
        return None
    if not env.accepts():
        batch.poison(raw, env.rejection() or "not accepted", cause="unsupported")
        return None
    mid = _usable_id(env)
    item = _Accepted(env, raw, mid, env.attempts, floor)
    if env.urn != TRANSFER_URN:
        batch.dead(item, batch.key_of(item), "unknown_urn", "unknown_urn", error=f"no handler for {env.urn}")
        return None
    if mid is not None:
        if (mid, item.body_attempts) in seen:
            batch.counts[DUPLICATE, "in_batch"] += 1
            return None
        seen.add((mid, item.body_attempts))
    return item


def _decide(batch: _Batch, item: _Accepted, processed: set[str]) -> None:
    """Steps 4-7 for one accepted transfer: drop, dead-letter, retry, or queue its posting."""
    config, env, mid = batch.config, item.env, item.message_id
    if mid is not None and mid in processed:
        batch.counts[DUPLICATE, "already_processed"] += 1
        return
    if env.is_expired(batch.now):
        batch.dead(item, batch.key_of(item), "failed", "expired", error=f"expired at {env.expire_at}")
        return
    data = env.data
    problems = schema_errors(data)
    if not problems and data["validation_result"].get("passed") is not True:
        problems = ["validation_result.passed is not true"]
    if problems:
        batch.dead(item, batch.key_of(item), "failed", "invalid", error="; ".join(problems))
        return
    if item.floor and item.floor > env.attempts:  # the broker counted more deliveries (SQS, SPEC 4)
        env = item.env = env.with_attempts(item.floor)
    failure = config.bank.failure(data, env.attempts)
    if failure is None:
        posting = _posting(env, batch.now, data, mid or "")
        batch.postings.append(posting)
        batch.items[posting.message_id] = item
        return
    if env.attempts + 1 >= config.max_attempts:
        batch.dead(item, batch.key_of(item), "failed", "max_attempts", error=failure,
                   attempts=env.attempts + 1)
        return
    body = env.with_attempts(env.attempts + 1).encode()
    retry = Outbound(batch.key_of(item), config.queue, body, config.retry_delay_ms)
    batch.out(retry, RETRIED, "core_banking")


def _isolated(batch: _Batch, raw: bytes, step: Any, *args: Any) -> Any:
    """Run one message's ``step``; anything but an infrastructure failure dead-letters it alone."""
    try:
        return step(batch, *args)
    except UnavailableError:
        raise
    except Exception as exc:
        log.exception("settle: dead-lettering a message its settling failed on")
        why = f"settle could not process this message: {type(exc).__name__}: {exc}"
        batch.poison(raw, why, UNPROCESSABLE)
        return None


def settle_partition(batches: Iterator[Any], config: SettleConfig) -> Iterator[Any]:
    """Settle a micro-batch (one partition); yields one Arrow batch of :data:`OUTCOME_SCHEMA` rows."""
    batch = _Batch(config, now_ms())
    accepted: list[_Accepted] = []
    seen: set[tuple[str, int]] = set()
    for arrow in batches:
        names = arrow.schema.names
        bodies = arrow.column(names.index("body")).to_pylist()
        floors = (
            arrow.column(names.index("broker_attempts")).to_pylist()
            if "broker_attempts" in names
            else [0] * len(bodies)
        )
        for raw, floor in zip(bodies, floors, strict=True):
            item = _isolated(batch, raw, _frame, raw, floor or 0, seen)
            if item is not None:
                accepted.append(item)
    ledger = open_ledger(config.ledger, prefix=config.ledger_prefix)
    try:
        processed = ledger.already_processed([i.message_id for i in accepted if i.message_id])
        for item in accepted:
            _isolated(batch, item.raw, _decide, item, processed)
        _commit(batch, ledger)
    finally:
        ledger.close()
    yield _arrow(batch.counts)


def _commit(batch: _Batch, ledger: Ledger) -> None:
    """One ledger transaction for the micro-batch, then its outbox rows published and marked."""
    config, counts = batch.config, batch.counts

    def refusal(posting: Posting, cause: str, why: str) -> Outbound:
        item = batch.items[posting.message_id]
        return batch.dead_letter(item, batch.key_of(item), "failed", cause, error=why)

    settled = ledger.settle(batch.postings, batch.outbound, refusal, at=batch.now)
    failpoint("settle.after_ledger_commit")
    counts[POSTED, None] += len(settled.posted)
    counts[DUPLICATE, "already_processed"] += settled.duplicate_ids
    counts[DUPLICATE, "already_posted"] += settled.duplicate_payments
    counts[DUPLICATE, ALREADY_SETTLED] += settled.repeated
    for row in settled.outbound:
        counts[batch.labels[row.key]] += 1
    publish_outbound(config.url, ledger, settled.outbound)


def publish_outbound(url: str, ledger: Ledger, rows: Sequence[Outbound]) -> int:
    """Publish outbox ``rows`` (grouped by queue, in order), then mark them; returns how many."""
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
    failpoint("settle.after_outbox_publish")
    ledger.mark_published([row.key for row in rows])
    return len(rows)


def _arrow(counts: Counter[tuple[str, str | None]]) -> Any:
    import pyarrow as pa

    keys = [k for k, n in counts.items() if n]
    return pa.RecordBatch.from_arrays(
        [pa.array([k[0] for k in keys], pa.string()), pa.array([k[1] for k in keys], pa.string()),
         pa.array([counts[k] for k in keys], pa.int64())],
        names=["outcome", "cause", "n"],
    )


def process_batch(df: Any, batch_id: int, *, config: SettleConfig, stats: Any, **_: Any) -> None:
    """The old foreachBatch body: one partition, settled by one task in batch order."""
    from functools import partial

    settled = df.select("body", "broker_attempts").coalesce(1)
    rows = settled.mapInArrow(partial(settle_partition, config=config), OUTCOME_SCHEMA).collect()
    counts: dict[tuple[str, str], int] = {}
    for r in rows:
        key = (r["outcome"], r["cause"] or "")
        counts[key] = counts.get(key, 0) + int(r["n"])
    stats.record(counts)
