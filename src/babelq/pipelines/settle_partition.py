"""Service B's work on one Spark partition of a micro-batch: classify, dead-letter, retry, post.

Runs on an executor over Arrow batches of ``body`` (plus the ``dup_in_batch`` flag the
driver computed). For every message, in this order:

1. not decodable / not accepted (poison, unsupported) -> DLQ with the exact bytes kept
   (:func:`~babelq.envelope.poison_record`);
2. a URN other than ``transfer.requested`` -> DLQ ``unknown_urn``;
3. a duplicate of another message in the same micro-batch -> dropped;
4. ``meta.expire_at`` passed -> DLQ (``failed``, cause ``expired``);
5. data breaking the URN's JSON Schema or not validated by Service A -> DLQ (cause ``invalid``);
6. ``meta.id`` already in the processed-ids table (redelivery, replay, redrive) -> dropped;
7. core banking refuses -> re-published with attempts+1 after a delay, or DLQ (cause
   ``max_attempts``) once ``max_attempts`` is reached;
8. otherwise posted: the ledger rows and processed ids of the partition in one transaction.

DLQ and retry messages are published before the micro-batch commits, so a crash in
between redelivers the original; the ledger's processed-ids absorb it.
"""

from __future__ import annotations

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

#: DDL of the per-message outcome rows.
OUTCOME_SCHEMA = "outcome STRING, cause STRING, message_id STRING"

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
    """Per-message outcomes, plus the DLQ and retry messages to publish for the partition."""

    def __init__(self) -> None:
        self.dead: list[Outgoing] = []
        self.retries: list[Outgoing] = []
        self.outcome: list[str] = []
        self.cause: list[str | None] = []
        self.ids: list[str | None] = []

    def add(self, outcome: str, cause: str | None, message_id: str | None) -> None:
        self.outcome.append(outcome)
        self.cause.append(cause)
        self.ids.append(message_id)

    def arrow(self) -> Any:
        import pyarrow as pa

        return pa.RecordBatch.from_arrays(
            [pa.array(self.outcome, pa.string()), pa.array(self.cause, pa.string()),
             pa.array(self.ids, pa.string())],
            names=["outcome", "cause", "message_id"],
        )


def _posting(env: Envelope, now: int) -> Posting:
    d = env.data
    return Posting(
        message_id=env.id, payment_reference=d["payment_reference"], amount_cents=d["amount_cents"],
        currency=d["currency"], debtor_bsb=d["debtor_bsb"], debtor_account=d["debtor_account"],
        creditor_bsb=d["creditor_bsb"], creditor_account=d["creditor_account"],
        correlation_id=env.correlation_id, trace_id=env.trace_id, attempts=env.attempts, posted_at=now,
    )


def _usable_id(env: Envelope) -> str | None:
    value = env.meta.get("id")
    return value if type(value) is str and value else None


def settle_partition(batches: Iterator[Any], config: SettleConfig) -> Iterator[Any]:
    """Process one partition; yields one Arrow batch of :data:`OUTCOME_SCHEMA` rows."""
    now = now_ms()
    out = _Outcomes()
    dead = out.dead
    candidates: list[Envelope] = []
    queue = config.queue
    for batch in batches:
        names = batch.schema.names
        bodies = batch.column(names.index("body")).to_pylist()
        dups = batch.column(names.index("dup_in_batch")).to_pylist()
        for body, dup in zip(bodies, dups, strict=True):
            raw = bytes(body)
            try:
                env = decode(raw)
            except DecodeError as exc:
                dead.append(Outgoing(poison_record(raw, original_queue=queue, error=str(exc))))
                out.add(DEAD_LETTERED, "poison", None)
                continue
            problem = env.rejection()
            if problem is not None:
                dead.append(Outgoing(poison_record(raw, original_queue=queue, error=problem,
                                                   cause="unsupported")))
                out.add(DEAD_LETTERED, "unsupported", _usable_id(env))
                continue
            if env.urn != TRANSFER_URN:
                dead.append(Outgoing(annotate(env, "unknown_urn", original_queue=queue,
                                              error=f"no handler for {env.urn}").encode()))
                out.add(DEAD_LETTERED, "unknown_urn", _usable_id(env))
                continue
            if dup:
                out.add(DUPLICATE, "in_batch", _usable_id(env))
                continue
            if env.is_expired(now):
                dead.append(Outgoing(annotate(env, "failed", original_queue=queue, cause="expired",
                                              error=f"expired at {env.expire_at}").encode()))
                out.add(DEAD_LETTERED, "expired", _usable_id(env))
                continue
            problems = schema_errors(env.data)
            if not problems and env.data["validation_result"].get("passed") is not True:
                problems = ["validation_result.passed is not true"]
            if problems:
                dead.append(Outgoing(annotate(env, "failed", original_queue=queue, cause="invalid",
                                              error="; ".join(problems)).encode()))
                out.add(DEAD_LETTERED, "invalid", _usable_id(env))
                continue
            candidates.append(env)
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


def _settle_candidates(candidates: list[Envelope], config: SettleConfig, now: int, out: _Outcomes) -> None:
    if not candidates:
        return
    ledger = open_ledger(config.ledger, prefix=config.ledger_prefix)
    try:
        done = ledger.already_processed([e.id for e in candidates if _usable_id(e)])
        to_post: list[Envelope] = []
        for env in candidates:
            if env.id in done:
                out.add(DUPLICATE, "already_processed", env.id)
                continue
            failure = config.bank.failure(env.data, env.attempts)
            if failure is None:
                to_post.append(env)
            elif env.attempts + 1 >= config.max_attempts:
                final = annotate(env, "failed", original_queue=config.queue, cause="max_attempts",
                                 attempts=env.attempts + 1, error=failure)
                out.dead.append(Outgoing(final.encode()))
                out.add(DEAD_LETTERED, "max_attempts", env.id)
            else:
                out.retries.append(Outgoing(env.with_attempts(env.attempts + 1).encode(),
                                        delay_ms=config.retry_delay_ms))
                out.add(RETRIED, "core_banking", env.id)
        posted = set(ledger.post([_posting(e, now) for e in to_post]))
        for env in to_post:
            if env.id in posted:
                out.add(POSTED, None, env.id)
            else:  # another worker posted it between our check and our transaction
                out.add(DUPLICATE, "already_processed", env.id)
    finally:
        ledger.close()
