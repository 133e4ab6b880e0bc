"""Settle never stalls on one message and never doubles an effect when a micro-batch comes back.

These run :func:`~babelq.pipelines.settle.settle_frame` on a batch DataFrame of bodies: it is what
every micro-batch of the streaming query runs (decode and classification on the JVM, the
partitions in Python), and a micro-batch delivered again after a crash is the same call with the
same bodies.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from babelq.envelope import decode, original_bytes
from babelq.pipelines.core_banking import CoreBankingSimulator
from babelq.pipelines.ledger import Posting, open_ledger
from babelq.pipelines.settle import SettleConfig
from babelq.transports import open_transport
from conftest import require_service
from payment_fixtures import transfer

pytestmark = [pytest.mark.spark]

PG = "postgresql://postgres@127.0.0.1:5432/test"


def _run(spark: Any, config: SettleConfig, bodies: list[bytes]) -> dict[tuple[str, str], int]:
    """One micro-batch of ``bodies``, settled by two partitions as the streaming query does."""
    from babelq.pipelines.consume.classify import decoded
    from babelq.pipelines.settle import settle_frame

    df = spark.createDataFrame([(b, 0) for b in bodies], "body binary, broker_attempts int")
    return settle_frame(decoded(df), config)


def _config(tmp_path: Path, queue: str, **extra: Any) -> SettleConfig:
    return SettleConfig(url=f"sqlite://{tmp_path}/q.db", queue=queue, ledger=str(tmp_path / "ledger.db"),
                        **extra)


def _drain(url: str, queue: str) -> list[bytes]:
    transport = open_transport(url)
    try:
        got = transport.reserve(queue, max_messages=10_000)
        transport.ack_many(got)
        return [d.body for d in got]
    finally:
        transport.close()


def _deep_transfer(queue: str, depth: int) -> bytes:
    """A transfer envelope whose data is an array nested ``depth`` deep: it decodes, its data is
    not a valid transfer, so settle must dead-letter it (re-encoding it on the way)."""
    env = transfer("PAY-DEEP", queue)
    head, _, tail = env.encode().partition(b'"data":{')
    _, _, after_data = tail.partition(b'},"meta"')
    return head + b'"data":{"deep":' + b"[" * depth + b"]" * depth + b'},"meta"' + after_data


@pytest.mark.parametrize("depth", [400, 990, 1020])
def test_a_message_that_cannot_be_re_encoded_does_not_stop_the_batch(
    spark: Any, tmp_path: Path, unique_queue: str, depth: int
) -> None:
    config = _config(tmp_path, unique_queue)
    good = [transfer(f"PAY-{i}", unique_queue).encode() for i in range(50)]
    deep = _deep_transfer(unique_queue, depth)
    counts = _run(spark, config, [*good[:25], deep, *good[25:]])
    assert counts.get(("posted", ""), 0) == 50
    assert sum(n for (o, _), n in counts.items() if o == "dead_lettered") == 1
    [dead] = _drain(config.url, config.dlq)
    assert original_bytes(dead) == deep or decode(dead).id == decode(deep).id  # kept, one way or the other


@dataclass(frozen=True)
class _BuggyBank(CoreBankingSimulator):
    """Core banking whose client crashes on one reference (a bug, not a refusal)."""

    def post(self, payment: Posting) -> None:
        if payment.payment_reference == "PAY-BOOM":
            raise KeyError("creditor_name")
        CoreBankingSimulator.post(self, payment)


def test_a_bank_that_raises_on_one_message_fails_that_message_alone(
    spark: Any, tmp_path: Path, unique_queue: str
) -> None:
    """Whatever core banking raises is a failed attempt of that message, as a worker handler's
    exception is: at its last attempt it is dead-lettered with the error; the rest are posted."""
    import sys

    from pyspark import cloudpickle

    # the buggy bank travels to Spark's Python workers by value (they cannot import this test file)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    config = _config(tmp_path, unique_queue, bank=_BuggyBank())
    boom = transfer("PAY-BOOM", unique_queue).with_attempts(2)
    bodies = [transfer(f"PAY-{i}", unique_queue).encode() for i in range(20)] + [boom.encode()]
    counts = _run(spark, config, bodies)
    assert counts == {("posted", ""): 20, ("dead_lettered", "max_attempts"): 1}
    [dead] = _drain(config.url, config.dlq)
    assert decode(dead).id == boom.id
    assert orjson.loads(dead)["dead_letter"]["error"] == "core banking: KeyError: 'creditor_name'"


def test_a_redelivered_micro_batch_dead_letters_and_retries_nothing_twice(
    spark: Any, tmp_path: Path, unique_queue: str
) -> None:
    """A crash after the ledger commit redelivers the whole micro-batch: the second run of it
    must publish no second dead letter and no second retry (per message and attempt)."""
    config = _config(tmp_path, unique_queue, retry_delay_ms=0)
    bodies = [
        *[transfer(f"PAY-{i}", unique_queue).encode() for i in range(10)],
        transfer("PAY-CLOSED", unique_queue, creditor_account="12349999").encode(),  # retried
        transfer("PAY-EXP", unique_queue, expire_at=1).encode(),  # dead-lettered: expired
        transfer("PAY-BAD", unique_queue, amount_cents="12.50").encode(),  # dead-lettered: invalid
        transfer("PAY-LAST", unique_queue, creditor_account="12349999").with_attempts(2).encode(),  # max
        b"{not json",  # poison
        b"\xff\xfe poison",
    ]
    first = _run(spark, config, bodies)
    assert first == {
        ("posted", ""): 10, ("retried", "core_banking"): 1, ("dead_lettered", "expired"): 1,
        ("dead_lettered", "invalid"): 1, ("dead_lettered", "max_attempts"): 1, ("dead_lettered", "poison"): 2,
    }
    again = _run(spark, config, bodies)  # the same micro-batch, delivered again
    assert again == {("duplicate", "already_processed"): 10, ("duplicate", "already_settled"): 6}
    assert len(_drain(config.url, config.dlq)) == 5
    [retry] = _drain(config.url, unique_queue)
    assert decode(retry).attempts == 1
    ledger = open_ledger(config.ledger)
    try:
        assert ledger.totals() == (10, 10, 10)
        assert ledger.outbox_counts() == (6, 0)
    finally:
        ledger.close()


def test_the_same_payment_under_a_new_meta_id_is_not_posted_again(
    spark: Any, tmp_path: Path, unique_queue: str
) -> None:
    """The business key: an ingest re-run (or another producer) sending the same payment with a
    fresh meta.id is a duplicate; a different payment reusing a posted reference is refused."""
    config = _config(tmp_path, unique_queue)
    first = [transfer(f"PAY-{i}", unique_queue).encode() for i in range(5)]
    assert _run(spark, config, first) == {("posted", ""): 5}
    again = [transfer(f"PAY-{i}", unique_queue).encode() for i in range(5)]  # same payments, new ids
    reused = transfer("PAY-0", unique_queue, amount_cents=999_999).encode()  # another payment, same reference
    counts = _run(spark, config, [*again, reused])
    assert counts == {("duplicate", "already_posted"): 5, ("dead_lettered", "reference_conflict"): 1}
    [dead] = _drain(config.url, config.dlq)
    block = orjson.loads(dead)["dead_letter"]
    assert block["cause"] == "reference_conflict" and "PAY-0" in block["error"]
    ledger = open_ledger(config.ledger)
    try:
        entries, refs, _ = ledger.totals()
        assert (entries, refs) == (5, 5)
    finally:
        ledger.close()


@pytest.fixture
def pg_ledger() -> Iterator[tuple[str, str]]:
    require_service("postgres")
    import psycopg

    prefix = f"t_{uuid.uuid4().hex[:8]}_"
    yield PG, prefix
    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {prefix}processed_ids, {prefix}ledger_entries, {prefix}outbox")


@pytest.mark.live
def test_postgres_refuses_one_posting_and_posts_the_rest(
    spark: Any, tmp_path: Path, unique_queue: str, pg_ledger: tuple[str, str]
) -> None:
    url, prefix = pg_ledger
    config = SettleConfig(
        url=f"sqlite://{tmp_path}/q.db", queue=unique_queue, ledger=url, ledger_prefix=prefix
    )
    nul = transfer("PAY-\u0000-NUL", unique_queue).encode()  # PostgreSQL text cannot hold U+0000
    bodies = [transfer(f"PAY-{i}", unique_queue).encode() for i in range(30)]
    counts = _run(spark, config, [*bodies[:10], nul, *bodies[10:]])
    assert counts == {("posted", ""): 30, ("dead_lettered", "unpostable"): 1}
    [dead] = _drain(config.url, config.dlq)
    assert decode(dead).id == decode(nul).id
    assert "refused" in orjson.loads(dead)["dead_letter"]["error"]
    again = _run(spark, config, [*bodies, nul])
    assert again == {("duplicate", "already_processed"): 30, ("duplicate", "already_settled"): 1}
    ledger = open_ledger(url, prefix=prefix)
    try:
        assert ledger.totals() == (30, 30, 30)
    finally:
        ledger.close()


def test_a_retry_meeting_its_redelivered_original_in_one_batch_is_not_dropped(
    spark: Any, tmp_path: Path, unique_queue: str
) -> None:
    """Found by the SIGKILL test: a killed run retried a message (attempts 1 published, key of
    attempt 0 claimed) but never acked the original. The original comes back with the retry in
    one micro-batch: the original is already settled, the retry must still be settled."""
    config = _config(tmp_path, unique_queue, retry_delay_ms=0)
    closed = transfer("PAY-CLOSED", unique_queue, creditor_account="12349999")
    transient = transfer("PAY-T", unique_queue, creditor_account="12340000")
    first = _run(spark, config, [closed.encode(), transient.encode()])
    assert first == {("retried", "core_banking"): 2}
    retries = _drain(config.url, unique_queue)
    assert sorted(decode(b).attempts for b in retries) == [1, 1]
    # the originals, never acked, come back in the same batch as their retries
    again = _run(spark, config, [closed.encode(), transient.encode(), *retries])
    # the originals are duplicates: already settled (their retry's outbox key), or already
    # processed when the partition holding the transient's retry posted it first
    assert {k: n for k, n in again.items() if k[0] != "duplicate"} == {
        ("retried", "core_banking"): 1, ("posted", ""): 1,
    }
    assert sum(n for k, n in again.items() if k[0] == "duplicate") == 2
    assert {cause for outcome, cause in again if outcome == "duplicate"} <= {"already_settled",
                                                                           "already_processed"}
    [second_retry] = _drain(config.url, unique_queue)
    assert decode(second_retry).attempts == 2
    assert _run(spark, config, [second_retry]) == {("dead_lettered", "max_attempts"): 1}
