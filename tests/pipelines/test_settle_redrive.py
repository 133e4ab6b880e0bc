"""A message redriven from the DLQ is settled anew: it never meets its first life's outbox keys.

A redrive puts the same meta.id back with attempts 0, so "meta.id@attempts" names the redriven
message exactly as it named the original. Its new outcome (a dead letter again, a retry) must be
published, not taken for the first life's decision replayed, or the message is acked and lost."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from babelq.envelope import decode, dlq_name
from babelq.pipelines.dlq import redrive_messages
from babelq.transports import Outgoing, open_transport
from payment_fixtures import transfer

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def dead_letter_ids(transport: Any, dlq: str) -> list[str]:
    """The meta.ids on the DLQ now (read, then put back)."""
    held = transport.reserve(dlq, max_messages=100)
    transport.release_many(held)
    return sorted(decode(d.body).id for d in held)


def test_a_redriven_message_that_fails_again_is_dead_lettered_again_not_lost(
    spark: Any, tmp_path: Path, unique_queue: str
) -> None:
    from babelq.pipelines.settle import settle

    url = f"sqlite://{tmp_path}/q.db"
    dlq = dlq_name(unique_queue)
    closed = transfer("PAY-CLOSED", unique_queue, creditor_account="555559999")  # the simulator refuses it
    good = transfer("PAY-GOOD", unique_queue)
    transport = open_transport(url)
    transport.publish_many(unique_queue, [Outgoing(closed.encode()), Outgoing(good.encode())])
    common = {"url": url, "queue": unique_queue, "ledger": tmp_path / "ledger.db",
              "checkpoint": tmp_path / "ck", "timeout": 120}

    first = settle(spark, **common)
    assert first.drained
    assert dead_letter_ids(transport, dlq) == [closed.id]

    moved = redrive_messages(transport, dlq, lambda dead: True)
    assert moved.redriven == 1 and transport.size(unique_queue) == 1 and transport.size(dlq) == 0

    second = settle(spark, **{**common, "checkpoint": tmp_path / "ck2"})
    assert second.drained
    assert transport.size(unique_queue) == 0
    # refused again, so dead-lettered again: the redriven copy is on the DLQ, not acked into nothing
    assert dead_letter_ids(transport, dlq) == [closed.id]
    transport.close()
