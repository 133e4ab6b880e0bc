"""Settle of one micro-batch: the broker's delivery count raises attempts, never lowers them.

The ``babelq`` source reads ``broker_attempts`` (SQS: ApproximateReceiveCount - 1) beside each
body; settle takes ``max(body attempts, broker_attempts)`` as docs/standard.md §4 asks, so a message
SQS has handed out three times is not given three more tries because its body still says 0.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from babelq.envelope import decode
from babelq.pipelines.settle import SettleConfig
from babelq.transports import open_transport
from payment_fixtures import transfer

pytestmark = [pytest.mark.spark]


def _settle(
    spark: Any, tmp_path: Path, queue: str, rows: list[tuple[bytes, int]]
) -> dict[tuple[str, str], int]:
    from babelq.pipelines.consume.classify import decoded
    from babelq.pipelines.settle import settle_frame

    config = SettleConfig(
        url=f"sqlite://{tmp_path}/q.db", queue=queue, ledger=str(tmp_path / "ledger.db"), max_attempts=3
    )
    df = spark.createDataFrame(rows, "body binary, broker_attempts int")
    return settle_frame(decoded(df), config)


def test_broker_attempts_raise_the_body_count(spark: Any, tmp_path: Path, unique_queue: str) -> None:
    closed_fresh = transfer("PAY-C0", unique_queue, creditor_account="12349999")
    closed_seen = transfer("PAY-C2", unique_queue, creditor_account="12349999")
    transient_seen = transfer("PAY-T1", unique_queue, creditor_account="12340000")
    counts = _settle(
        spark,
        tmp_path,
        unique_queue,
        [(closed_fresh.encode(), 0), (closed_seen.encode(), 2), (transient_seen.encode(), 1)],
    )
    # fresh closed account: attempt 0 fails -> retried with attempts 1; the one SQS delivered
    # three times (broker_attempts 2) has used its tries -> DLQ; the transient failure only
    # fails attempt 0, and broker_attempts 1 says this is attempt 1 -> posted
    assert counts == {("retried", "core_banking"): 1, ("dead_lettered", "max_attempts"): 1, ("posted", ""): 1}
    transport = open_transport(f"sqlite://{tmp_path}/q.db")
    try:
        [retry] = [decode(d.body) for d in transport.reserve(unique_queue, max_messages=10, timeout=2)]
        [dead] = [decode(d.body) for d in transport.reserve(unique_queue + ".dlq", max_messages=10)]
    finally:
        transport.close()
    assert (retry.id, retry.attempts) == (closed_fresh.id, 1)
    assert dead.id == closed_seen.id and dead.dead_letter is not None
    assert dead.dead_letter["attempts"] == 3


def test_a_lower_broker_count_never_lowers_the_body_attempts(
    spark: Any, tmp_path: Path, unique_queue: str
) -> None:
    closed = transfer("PAY-C", unique_queue, creditor_account="12349999").with_attempts(2)
    counts = _settle(spark, tmp_path, unique_queue, [(closed.encode(), 0)])
    assert counts == {("dead_lettered", "max_attempts"): 1}


def test_a_row_is_judged_at_the_time_the_broker_handed_it_over(
    spark: Any, tmp_path: Path, unique_queue: str
) -> None:
    """A streamed row carries ``reserved_at``: expiry and deferral are decided at that time (a
    value in the data, so every micro-batch runs the same generated code), and the partition's
    postings are stamped with it."""
    from babelq.envelope import now_ms
    from babelq.pipelines.consume.classify import decoded
    from babelq.pipelines.settle import settle_frame

    handed_over = now_ms() - 3_600_000  # an hour ago
    # expired now, not when the broker handed it over
    late = transfer("PAY-L1", unique_queue, expire_at=handed_over + 1_800_000)
    expired = transfer("PAY-X1", unique_queue, expire_at=handed_over - 1)
    config = SettleConfig(url=f"sqlite://{tmp_path}/q.db", queue=unique_queue,
                          ledger=str(tmp_path / "ledger.db"))
    df = spark.createDataFrame([(late.encode(), 0, handed_over), (expired.encode(), 0, handed_over)],
                               "body binary, broker_attempts int, reserved_at bigint")

    counts = settle_frame(decoded(df), config)

    assert counts == {("posted", ""): 1, ("dead_lettered", "expired"): 1}
    with closing(sqlite3.connect(tmp_path / "ledger.db")) as db:
        rows = db.execute("SELECT payment_reference, posted_at FROM ledger_entries").fetchall()
    assert rows == [("PAY-L1", handed_over)]


def test_a_row_without_a_reserved_at_is_judged_at_the_current_time(
    spark: Any, tmp_path: Path, unique_queue: str
) -> None:
    """A DataFrame whose ``reserved_at`` is null for a row is not let off its expiry."""
    from babelq.envelope import now_ms
    from babelq.pipelines.consume.classify import decoded
    from babelq.pipelines.settle import settle_frame

    expired = transfer("PAY-X2", unique_queue, expire_at=now_ms() - 1)
    config = SettleConfig(url=f"sqlite://{tmp_path}/q.db", queue=unique_queue,
                          ledger=str(tmp_path / "ledger.db"))
    df = spark.createDataFrame([(expired.encode(), 0, None)],
                               "body binary, broker_attempts int, reserved_at bigint")

    assert settle_frame(decoded(df), config) == {("dead_lettered", "expired"): 1}
