"""Settle says "drained" only when nothing is waiting, delayed or reserved, and checks its ledger first."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from babelq.pipelines.ledger import open_ledger
from babelq.transports import Outgoing, open_transport
from payment_fixtures import transfer

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_settle_waits_for_what_a_killed_run_still_holds(
    spark: Any, tmp_path: Path, unique_queue: str
) -> None:
    from babelq.pipelines.settle import settle

    url, ledger_path = f"sqlite://{tmp_path}/q.db", tmp_path / "ledger.db"
    envs = [transfer(f"PAY-{i:02d}", unique_queue) for i in range(50)]
    producer = open_transport(url)
    producer.publish_many(unique_queue, [Outgoing(e.encode()) for e in envs])
    killed = open_transport(url, visibility_timeout=6.0)  # a settle run killed mid-batch: never acks
    held = killed.reserve(unique_queue, max_messages=20)
    assert len(held) == 20
    assert producer.reserved(unique_queue) == 20

    started = time.monotonic()
    run = settle(spark, url=url, queue=unique_queue, ledger=ledger_path, checkpoint=tmp_path / "ck",
                 visibility_timeout=5.0, timeout=120)
    assert run.drained, run
    assert time.monotonic() - started >= 4  # it waited for the leases instead of stopping at 30 of 50
    assert run.stats.count("posted") == 50
    ledger = open_ledger(ledger_path)
    try:
        assert ledger.totals() == (50, 50, 50)
    finally:
        ledger.close()
    assert producer.size(unique_queue) == 0 and producer.reserved(unique_queue) == 0


def test_settle_reports_what_is_left_when_it_times_out(spark: Any, tmp_path: Path, unique_queue: str) -> None:
    from babelq.pipelines.settle import settle

    url = f"sqlite://{tmp_path}/q.db"
    producer = open_transport(url)
    bodies = [Outgoing(transfer(f"PAY-{i}", unique_queue).encode()) for i in range(5)]
    producer.publish_many(unique_queue, bodies)
    killed = open_transport(url, visibility_timeout=600.0)
    assert len(killed.reserve(unique_queue, max_messages=3)) == 3
    # the timeout counts from the query's start: on a loaded machine the first micro-batch alone
    # took more than 8 s, and the run ended before the two free messages were posted
    run = settle(spark, url=url, queue=unique_queue, ledger=tmp_path / "ledger.db",
                 checkpoint=tmp_path / "ck", timeout=20)
    assert not run.drained
    assert (run.waiting, run.reserved) == (0, 3)
    assert run.stats.count("posted") == 2


def test_a_bad_ledger_fails_before_any_message_arrives(spark: Any, tmp_path: Path, unique_queue: str) -> None:
    from babelq.errors import BabelqError
    from babelq.pipelines.settle import settle

    started = time.monotonic()
    with pytest.raises(BabelqError) as caught:
        settle(spark, url=f"sqlite://{tmp_path}/q.db", queue=unique_queue,
               ledger="postgresql://app:s3cret@127.0.0.1:1/ledger", checkpoint=tmp_path / "ck", timeout=60)
    assert time.monotonic() - started < 30
    text = str(caught.value)
    assert "127.0.0.1" in text and "s3cret" not in text and "\n" not in text
