"""Settle's background acks: the last micro-batch counts as acked only once its own ack is done.

The acks run in a thread (:class:`babelq.pipelines.consume.query.BatchAcks`), so an older batch's
ack can finish while the next batch is already settling; settle's drain check reads
``stats.last_batch_acked``, and a stale ``True`` there would let it call a queue drained while
the latest batch's messages are still held. The ack itself is real in the settle tests (SQLite,
Redis, the SIGKILL tests); here it is replaced by one that waits for the test's signal, to put
the two batches in the order that matters.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import babelq.pipelines.consume.query as consume_query
from babelq.pipelines.consume.partition import ConsumeConfig
from babelq.pipelines.consume.query import BatchAcks
from babelq.pipelines.settle import SettleConfig, SettleStats


class _GatedAck:
    """ack_committed's stand-in: every batch's ack waits until the test opens its gate."""

    def __init__(self) -> None:
        self.gates: dict[int, threading.Event] = {}
        self.started: dict[int, threading.Event] = {}
        self.done: list[int] = []

    def __call__(self, config: ConsumeConfig, checkpoint: str | Path, batch_id: int) -> bool:
        self.started.setdefault(batch_id, threading.Event()).set()
        self.gates.setdefault(batch_id, threading.Event()).wait(30)
        self.done.append(batch_id)
        return True

    def open(self, batch_id: int) -> None:
        self.gates.setdefault(batch_id, threading.Event()).set()


@pytest.fixture
def gated(monkeypatch: pytest.MonkeyPatch) -> _GatedAck:
    ack = _GatedAck()
    monkeypatch.setattr(consume_query, "ack_committed", ack)
    return ack


def _acks(tmp_path: Path) -> tuple[BatchAcks, SettleStats]:
    stats = SettleStats()
    config = SettleConfig(url=f"sqlite://{tmp_path}/q.db", queue="payments", ledger=str(tmp_path / "l.db"))
    return BatchAcks(config.consume(config.pipeline()), tmp_path / "ck", stats), stats


def test_an_older_batch_ack_does_not_mark_the_latest_batch_acked(gated: _GatedAck, tmp_path: Path) -> None:
    acks, stats = _acks(tmp_path)
    try:
        acks.expect(0)
        stats.record({("posted", ""): 10})
        acks.submit(0)
        assert gated.started.setdefault(0, threading.Event()).wait(10)
        acks.expect(1)  # batch 1 starts settling while batch 0's ack is still running
        stats.record({("posted", ""): 5})
        gated.open(0)
        acks.submit(1)  # queued behind batch 0's ack: one thread, in order
        assert gated.started.setdefault(1, threading.Event()).wait(10)
        assert gated.done == [0]
        assert not stats.last_batch_acked  # batch 0's ack says nothing about batch 1
        gated.open(1)
    finally:
        acks.close()
    assert gated.done == [0, 1]
    assert stats.last_batch_acked


def test_close_waits_for_the_acks_asked_for(gated: _GatedAck, tmp_path: Path) -> None:
    acks, stats = _acks(tmp_path)
    acks.expect(3)
    stats.record({("posted", ""): 1})
    acks.submit(3)
    assert gated.started.setdefault(3, threading.Event()).wait(10)
    threading.Timer(0.3, gated.open, args=(3,)).start()
    acks.close()
    assert gated.done == [3]
    assert stats.last_batch_acked


def test_a_failing_ack_is_logged_and_leaves_the_batch_unacked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(config: ConsumeConfig, checkpoint: str | Path, batch_id: int) -> bool:
        raise RuntimeError("the offset log cannot be read")

    monkeypatch.setattr(consume_query, "ack_committed", broken)
    acks, stats = _acks(tmp_path)
    acks.expect(0)
    stats.record({("posted", ""): 1})
    acks.submit(0)
    acks.close()
    assert not stats.last_batch_acked  # the source acks it when Spark commits the batch
    assert "settle batch 0: acking its messages failed" in caplog.text


def test_a_batch_that_ends_after_close_is_acked_at_once(gated: _GatedAck, tmp_path: Path) -> None:
    acks, stats = _acks(tmp_path)
    acks.close()  # the run stopped while the batch was still settling
    acks.expect(7)
    stats.record({("posted", ""): 1})
    gated.open(7)
    acks.submit(7)
    assert gated.done == [7]
    assert stats.last_batch_acked
