"""The payments application on the consume engine settles as ``babelq settle`` does.

The same micro-batches of transfers go once through settle (:func:`~babelq.pipelines.settle.settle_frame`)
and once through the consume engine running :func:`~babelq.pipelines.payments.payments_pipeline`
(:func:`~babelq.pipelines.consume.query.consume_frame`, what every micro-batch of ``babelq consume``
runs), each into a ledger and a broker of its own. Everything either leaves must agree: the outcome
counts, the ledger's entries, sums and processed ids, the outbox, the dead letters (reason, cause,
error, attempts) and the retries. A batch delivered again (after a crash) must do nothing twice on
either side.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from payment_fixtures import transfer

from babelq.envelope import decode
from babelq.pipelines.core_banking import CoreBankingSimulator
from babelq.pipelines.ledger import Posting, open_ledger
from babelq.transports import open_transport

pytestmark = [pytest.mark.spark]


@dataclass(frozen=True)
class _PickyBank(CoreBankingSimulator):
    """The simulator, refusing one reference for good and crashing on another (a client's bug)."""

    def post(self, payment: Posting) -> None:
        from babelq.runtime import PermanentError

        if payment.payment_reference == "PAY-REFUSED":
            raise PermanentError("account closed at the bank", cause="account_closed")
        if payment.payment_reference == "PAY-BOOM":
            raise KeyError("creditor_name")
        CoreBankingSimulator.post(self, payment)


class _Side:
    """One side of the comparison: its own broker, ledger and settling code."""

    def __init__(self, spark: Any, root: Path, queue: str, engine: str, bank: Any) -> None:
        root.mkdir()
        self.spark, self.queue, self.engine = spark, queue, engine
        self.url = f"sqlite://{root}/q.db"
        self.ledger = str(root / "ledger.db")
        self.bank = bank

    def run(self, bodies: Sequence[bytes]) -> dict[tuple[str, str], int]:
        from babelq.pipelines.settle.classify import decoded

        df = decoded(self.spark.createDataFrame([(b, 0) for b in bodies], "body binary, broker_attempts int"))
        if self.engine == "settle":
            from babelq.pipelines.settle import settle_frame
            from babelq.pipelines.settle.partition import SettleConfig

            config = SettleConfig(url=self.url, queue=self.queue, ledger=self.ledger, retry_delay_ms=0,
                                  bank=self.bank)
            return settle_frame(df, config)
        from babelq.pipelines.consume.partition import ConsumeConfig
        from babelq.pipelines.consume.query import consume_frame
        from babelq.pipelines.consume.sinks import open_sink
        from babelq.pipelines.payments import payments_pipeline
        from babelq.pipelines.settle.classify import Classifier

        pipeline = payments_pipeline(self.queue, bank=self.bank, retry_delay_ms=0)
        sink = open_sink(self.ledger, prefix="")
        try:
            sink.run_setup(pipeline.setups)
        finally:
            sink.close()
        consume = ConsumeConfig(url=self.url, queue=self.queue, sink=self.ledger, pipeline=pipeline,
                                prefix="", retry_delay_ms=0)
        by_urn = consume_frame(df, consume, Classifier(urns=pipeline.urns, policy=consume.policy))
        counts: dict[tuple[str, str], int] = {}
        for (_, outcome, cause), n in by_urn.items():
            counts[outcome, cause] = counts.get((outcome, cause), 0) + n
        return counts

    def drained(self, queue: str) -> list[tuple[Any, ...]]:
        """What waits on ``queue`` (the DLQ: each record's id, reason, cause, error, attempts;
        the queue: each retry's id and attempts), sorted, and taken off it."""
        transport = open_transport(self.url)
        try:
            got = transport.reserve(queue, max_messages=10_000)
            transport.ack_many(got)
        finally:
            transport.close()
        out: list[tuple[Any, ...]] = []
        for delivery in got:
            record = orjson.loads(delivery.body)
            block = record.get("dead_letter")
            if block is None:
                env = decode(delivery.body)
                out.append((env.id, env.attempts))
            else:
                # an expiry's error says how long ago: the two runs are seconds apart
                error = re.sub(r"passed \d+ ms", "passed N ms", str(block.get("error")))
                out.append((record.get("meta", {}).get("id", ""), block["reason"], block.get("cause"), error,
                            block.get("attempts")))
        return sorted(out, key=repr)

    def book(self) -> tuple[Any, ...]:
        ledger = open_ledger(self.ledger)
        try:
            return (ledger.totals(), ledger.totals_by_currency(), sorted(ledger.references()),
                    ledger.outbox_counts())
        finally:
            ledger.close()


def _sides(spark: Any, tmp_path: Path, queue: str, bank: Any = None) -> tuple[_Side, _Side]:
    if bank is not None:
        # the bank travels to Spark's Python workers by value (they cannot import this test file)
        from pyspark import cloudpickle

        cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return (_Side(spark, tmp_path / "settle", queue, "settle", bank),
            _Side(spark, tmp_path / "consume", queue, "consume", bank))


def _agree(settle: _Side, consume: _Side, bodies: Sequence[bytes]) -> dict[tuple[str, str], int]:
    counts = settle.run(bodies)
    assert consume.run(bodies) == counts
    dlq = f"{settle.queue}.dlq"
    assert consume.drained(dlq) == settle.drained(dlq)
    assert consume.drained(settle.queue) == settle.drained(settle.queue)
    assert consume.book() == settle.book()
    return counts


def test_payments_on_the_consume_engine_settle_as_settle_does(
    spark: Any, tmp_path: Path, unique_queue: str
) -> None:
    settle, consume = _sides(spark, tmp_path, unique_queue, _PickyBank())
    q = unique_queue
    bodies = [
        *[transfer(f"PAY-{i}", q).encode() for i in range(12)],
        transfer("PAY-CLOSED", q, creditor_account="12349999").encode(),  # retried
        transfer("PAY-T", q, creditor_account="12340000").encode(),  # fails once: retried
        transfer("PAY-EXP", q, expire_at=1).encode(),  # expired
        transfer("PAY-BAD", q, amount_cents="12.50").encode(),  # invalid
        transfer("PAY-LAST", q, creditor_account="12349999").with_attempts(2).encode(),  # max_attempts
        transfer("PAY-REFUSED", q).encode(),  # the bank refuses it for good
        transfer("PAY-BOOM", q).with_attempts(2).encode(),  # the bank's client crashes: last attempt
        transfer("PAY-ODD", q).with_attempts(0).encode(),
        b"{not json",  # poison
        b"\xff\xfe poison",
    ]
    first = _agree(settle, consume, bodies)
    assert first[("posted", "")] == 13
    assert first[("dead_lettered", "rejected")] == 1
    assert first[("retried", "core_banking")] == 2
    # the same micro-batch again, as after a crash: nothing posted, dead-lettered or retried twice
    again = _agree(settle, consume, bodies)
    assert {outcome for outcome, _ in again} == {"duplicate"}


def test_the_business_key_and_redelivered_retries_agree(
    spark: Any, tmp_path: Path, unique_queue: str
) -> None:
    settle, consume = _sides(spark, tmp_path, unique_queue)
    q = unique_queue
    _agree(settle, consume, [transfer(f"PAY-{i}", q).encode() for i in range(5)])
    # the same payments under new ids (a duplicate each), and another payment reusing a reference
    counts = _agree(settle, consume, [*(transfer(f"PAY-{i}", q).encode() for i in range(5)),
                                      transfer("PAY-0", q, amount_cents=999_999).encode()])
    assert counts == {("duplicate", "already_posted"): 5, ("dead_lettered", "reference_conflict"): 1}
    # a retry meeting its redelivered original in one batch (found by settle's SIGKILL test)
    closed = transfer("PAY-CLOSED", q, creditor_account="12349999")
    transient = transfer("PAY-T", q, creditor_account="12340000")
    _agree(settle, consume, [closed.encode(), transient.encode()])
    retries = [closed.with_attempts(1).encode(), transient.with_attempts(1).encode()]
    in_one = [closed.encode(), transient.encode(), *retries]
    ours, theirs = settle.run(in_one), consume.run(in_one)
    # which copy a partition meets first decides between two duplicate causes: compare the rest
    settled = {("retried", "core_banking"): 1, ("posted", ""): 1}
    assert {k: n for k, n in theirs.items() if k[0] != "duplicate"} == settled
    assert {k: n for k, n in ours.items() if k[0] != "duplicate"} == settled
    assert sum(n for k, n in theirs.items() if k[0] == "duplicate") == 2
    assert consume.drained(q) == settle.drained(q)
    assert consume.book() == settle.book()


def test_babelq_consume_runs_the_payments_app_into_a_ledger(
    spark: Any, tmp_path: Path, unique_queue: str
) -> None:
    """The app as ``babelq consume --app babelq.pipelines.payments:pipeline`` runs it: a streaming
    query until the queue is drained, its ledger read by settle's own ledger code."""
    from babelq.pipelines.consume import consume, load_pipeline
    from babelq.transports import Outgoing

    pipeline = load_pipeline("babelq.pipelines.payments:pipeline")
    url = f"sqlite://{tmp_path}/q.db"
    q = unique_queue
    transport = open_transport(url)
    try:
        transport.publish_many(q, [Outgoing(transfer(f"PAY-{i}", q).encode()) for i in range(40)]
                               + [Outgoing(transfer("PAY-C", q, creditor_account="12349999").encode())])
    finally:
        transport.close()
    run = consume(spark, pipeline, url=url, sink=str(tmp_path / "ledger.db"), checkpoint=tmp_path / "cp",
                  queue=q, timeout=240)
    assert run.drained
    assert run.stats.count("posted") == 40
    assert run.stats.count("retried", "core_banking") == 2  # attempts 0 and 1, then the DLQ
    assert run.stats.count("dead_lettered", "max_attempts") == 1
    ledger = open_ledger(tmp_path / "ledger.db")
    try:
        assert ledger.totals() == (40, 40, 40)
        assert ledger.outbox_counts() == (3, 0)
    finally:
        ledger.close()
