"""The payments application is a consume pipeline: ``babelq consume --app`` runs it into a ledger.

``babelq settle`` runs the same pipeline (:mod:`babelq.pipelines.settle`), so settle's own tests
are its behaviour on every path; here it runs as any user's pipeline would, from its
``MODULE:ATTR`` through :func:`~babelq.pipelines.consume.consume`, and settle's ledger code reads
what it posted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from babelq.pipelines.ledger import open_ledger
from babelq.transports import open_transport
from payment_fixtures import transfer

pytestmark = [pytest.mark.spark]


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
