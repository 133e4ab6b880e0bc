"""Service B's work on a micro-batch: classify, dead-letter, retry, post.

Runs on an executor over the Arrow batches of the micro-batch's ``body`` column, in batch
order (the whole micro-batch is one partition, so a duplicate is seen without a shuffle).
For every message, in this order:

1. not decodable / not accepted (poison, unsupported) -> DLQ with the exact bytes kept
   (:func:`~babelq.envelope.poison_record`);
2. a URN other than ``transfer.requested`` -> DLQ ``unknown_urn``;
3. a copy of a ``meta.id`` already seen earlier in the same micro-batch -> dropped (a message
   without a usable id is never taken for a copy);
4. ``meta.expire_at`` passed -> DLQ (``failed``, cause ``expired``);
5. data breaking the URN's JSON Schema or not validated by Service A -> DLQ (cause ``invalid``);
6. ``meta.id`` already in the processed-ids table (redelivery, replay, redrive) -> dropped;
7. core banking refuses -> re-published with attempts+1 after a delay, or DLQ (cause
   ``max_attempts``) once ``max_attempts`` is reached; attempts are the binding's
   reconciliation, ``max(body attempts, broker_attempts)`` (the source's column: SQS's receive
   count - 1, 0 where the body is authoritative);
8. otherwise posted: the ledger rows and processed ids of the micro-batch in one transaction.

DLQ and retry messages are published before the micro-batch commits, so a crash in
between redelivers the original; the ledger's processed-ids absorb it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from babelq.envelope import Envelope, annotate, decode, dlq_name, now_ms, poison_record
from babelq.errors import DecodeError
from babelq.pipelines import TRANSFER_URN
from babelq.pipelines.core_banking import CoreBankingSimulator
from babelq.pipelines.ledger import Posting, open_ledger
from babelq.pipelines.transfer_schema import schema_errors
from babelq.transports import Outgoing, open_transport

#: DDL of what :func:`settle_partition` yields: how many messages of the partition had each outcome.
OUTCOME_SCHEMA = "outcome STRING, cause STRING, n BIGINT"

POSTED = "posted"
DUPLICATE = "duplicate"
RETRIED = "retried"
DEAD_LETTERED = "dead_lettered"


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


class _Outcomes:
    """Outcome counts, plus the DLQ and retry messages to publish for the partition."""

    def __init__(self) -> None:
        self.dead: list[Outgoing] = []
        self.retries: list[Outgoing] = []
        self.counts: Counter[tuple[str, str | None]] = Counter()

    def arrow(self) -> Any:
        import pyarrow as pa

        keys = [k for k, n in self.counts.items() if n]
        return pa.RecordBatch.from_arrays(
            [pa.array([k[0] for k in keys], pa.string()), pa.array([k[1] for k in keys], pa.string()),
             pa.array([self.counts[k] for k in keys], pa.int64())],
            names=["outcome", "cause", "n"],
        )


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


def settle_partition(batches: Iterator[Any], config: SettleConfig) -> Iterator[Any]:
    """Settle a micro-batch (one partition); yields one Arrow batch of :data:`OUTCOME_SCHEMA` rows."""
    now = now_ms()
    out = _Outcomes()
    dead = out.dead
    counts = out.counts
    candidates: list[tuple[Envelope, dict[str, Any], str | None]] = []
    seen: set[str] = set()
    queue = config.queue
    for batch in batches:
        names = batch.schema.names
        bodies = batch.column(names.index("body")).to_pylist()
        floors = (
            batch.column(names.index("broker_attempts")).to_pylist()
            if "broker_attempts" in names
            else [0] * len(bodies)
        )
        for raw, floor in zip(bodies, floors, strict=True):
            try:
                env = decode(raw)
            except DecodeError as exc:
                dead.append(Outgoing(poison_record(raw, original_queue=queue, error=str(exc))))
                counts[DEAD_LETTERED, "poison"] += 1
                continue
            if not env.accepts():
                problem = env.rejection() or "not accepted"
                dead.append(Outgoing(poison_record(raw, original_queue=queue, error=problem,
                                                   cause="unsupported")))
                counts[DEAD_LETTERED, "unsupported"] += 1
                continue
            if env.urn != TRANSFER_URN:
                dead.append(Outgoing(annotate(env, "unknown_urn", original_queue=queue,
                                              error=f"no handler for {env.urn}").encode()))
                counts[DEAD_LETTERED, "unknown_urn"] += 1
                continue
            mid = _usable_id(env)
            if mid is not None:
                if mid in seen:
                    counts[DUPLICATE, "in_batch"] += 1
                    continue
                seen.add(mid)
            if env.is_expired(now):
                dead.append(Outgoing(annotate(env, "failed", original_queue=queue, cause="expired",
                                              error=f"expired at {env.expire_at}").encode()))
                counts[DEAD_LETTERED, "expired"] += 1
                continue
            data = env.data
            problems = schema_errors(data)
            if not problems and data["validation_result"].get("passed") is not True:
                problems = ["validation_result.passed is not true"]
            if problems:
                dead.append(Outgoing(annotate(env, "failed", original_queue=queue, cause="invalid",
                                              error="; ".join(problems)).encode()))
                counts[DEAD_LETTERED, "invalid"] += 1
                continue
            if floor and floor > env.attempts:  # the broker counted more deliveries (SQS, SPEC 4)
                env = env.with_attempts(floor)
            candidates.append((env, data, mid))
    _settle_candidates(candidates, config, now, out)
    retries = out.retries
    if dead or retries:
        transport = open_transport(config.url)
        try:
            if dead:
                transport.publish_many(config.dlq, dead)
            if retries:
                transport.publish_many(queue, retries)
        finally:
            transport.close()
    yield out.arrow()


def _settle_candidates(
    candidates: list[tuple[Envelope, dict[str, Any], str | None]], config: SettleConfig, now: int,
    out: _Outcomes,
) -> None:
    if not candidates:
        return
    counts = out.counts
    ledger = open_ledger(config.ledger, prefix=config.ledger_prefix)
    try:
        done = ledger.already_processed([mid for _, _, mid in candidates if mid])
        to_post: list[Posting] = []
        for env, data, mid in candidates:
            message_id = mid or ""
            if message_id in done:
                counts[DUPLICATE, "already_processed"] += 1
                continue
            failure = config.bank.failure(data, env.attempts)
            if failure is None:
                to_post.append(_posting(env, now, data, message_id))
            elif env.attempts + 1 >= config.max_attempts:
                final = annotate(env, "failed", original_queue=config.queue, cause="max_attempts",
                                 attempts=env.attempts + 1, error=failure)
                out.dead.append(Outgoing(final.encode()))
                counts[DEAD_LETTERED, "max_attempts"] += 1
            else:
                out.retries.append(Outgoing(env.with_attempts(env.attempts + 1).encode(),
                                            delay_ms=config.retry_delay_ms))
                counts[RETRIED, "core_banking"] += 1
        posted = len(ledger.post(to_post))
        counts[POSTED, None] += posted
        if len(to_post) > posted:  # another worker posted them between our check and our transaction
            counts[DUPLICATE, "already_processed"] += len(to_post) - posted
    finally:
        ledger.close()
