"""Settle: exactly-once posting under redelivery and replay, expiry, poison, unknown URNs, retries to DLQ."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from payment_fixtures import transfer

from babelq.envelope import decode, make, now_ms, original_bytes
from babelq.pipelines.ledger import Posting, open_ledger
from babelq.transports import Outgoing, open_transport

pytestmark = [pytest.mark.spark, pytest.mark.slow]

POISON = [b"\xff\xfe\x80 not utf-8", b"{not json", b'["array"]']
UNSUPPORTED = (
    b'{"job":"urn:babel:payments:transfer.requested","trace_id":"t","data":{},'
    b'"meta":{"schema_version":2},"attempts":0}'
)


def _dlq(url: str, queue: str) -> list[bytes]:
    transport = open_transport(url)
    return [d.body for d in transport.reserve(queue + ".dlq", max_messages=1000)]


def test_settle_posts_each_payment_once_and_dead_letters_the_rest(
    spark: Any, tmp_path: Path, unique_queue: str
) -> None:
    from babelq.pipelines.settle import settle

    url, queue, ledger_path = f"sqlite://{tmp_path}/q.db", unique_queue, tmp_path / "ledger.db"
    good = [transfer(f"PAY-{i}", queue) for i in range(40)]
    transient = transfer("PAY-T", queue, creditor_account="12340000")
    closed = transfer("PAY-C", queue, creditor_account="12349999")
    expired = transfer("PAY-E", queue, expire_at=now_ms() - 1)
    invalid = transfer("PAY-I", queue, amount_cents="12.50")
    other = make("urn:babel:payments:refund.requested", {"x": 1}, queue=queue)
    replayed = transfer("PAY-R", queue)
    ledger = open_ledger(ledger_path)
    d = replayed.data
    ledger.post([Posting(  # already posted by an earlier run
        message_id=replayed.id, payment_reference=d["payment_reference"], amount_cents=d["amount_cents"],
        currency=d["currency"], debtor_bsb=d["debtor_bsb"], debtor_account=d["debtor_account"],
        creditor_bsb=d["creditor_bsb"], creditor_account=d["creditor_account"], correlation_id=None,
        trace_id=replayed.trace_id, attempts=0, posted_at=now_ms(),
    )])
    ledger.close()

    bodies = [e.encode() for e in [*good, transient, closed, expired, invalid, other, replayed]]
    bodies += [good[0].encode(), good[1].encode()]  # redelivered copies in the same run
    bodies += [*POISON, UNSUPPORTED]
    open_transport(url).publish_many(queue, [Outgoing(b) for b in bodies])

    run = settle(
        spark,
        url=url,
        queue=queue,
        ledger=ledger_path,
        checkpoint=tmp_path / "ck",
        retry_delay_ms=100,
        max_attempts=3,
        timeout=240,
    )

    assert run.drained
    stats = run.stats
    assert stats.count("posted") == 41  # 40 good + the transient one after its retry
    assert stats.count("duplicate") == 3  # two redelivered copies + the replayed one
    assert stats.count("retried") == 1 + 2  # transient once, closed twice
    assert stats.count("dead_lettered", "max_attempts") == 1
    assert stats.count("dead_lettered", "expired") == 1
    assert stats.count("dead_lettered", "invalid") == 1
    assert stats.count("dead_lettered", "unknown_urn") == 1
    assert stats.count("dead_lettered", "poison") == 3
    assert stats.count("dead_lettered", "unsupported") == 1

    ledger = open_ledger(ledger_path)
    entries, refs, ids = ledger.totals()
    assert (entries, refs, ids) == (42, 42, 42)  # 41 + the pre-posted replay, each once
    assert ledger.references_posted_more_than_once() == []
    ledger.close()

    dead = _dlq(url, queue)
    assert len(dead) == 8  # 3 poison, 1 unsupported, unknown URN, expired, invalid, max attempts
    kept = sorted(
        b for b in (original_bytes(d) for d in dead) if b is not None and b in [*POISON, UNSUPPORTED]
    )
    assert kept == sorted([*POISON, UNSUPPORTED])  # poison bytes preserved exactly
    blocks = {}
    for body in dead:
        doc = orjson.loads(body)
        if doc.get("meta", {}).get("id"):
            blocks[doc["meta"]["id"]] = doc["dead_letter"]
    assert blocks[expired.id]["cause"] == "expired" and blocks[expired.id]["reason"] == "failed"
    assert blocks[closed.id]["cause"] == "max_attempts" and blocks[closed.id]["attempts"] == 3
    assert blocks[other.id]["reason"] == "unknown_urn"
    closed_dl = decode(next(b for b in dead if closed.id.encode() in b))
    assert closed_dl.trace_id == closed.trace_id and closed_dl.data == closed.data

    # a full replay of the file's messages posts nothing new
    open_transport(url).publish_many(queue, [Outgoing(e.encode()) for e in good])
    again = settle(spark, url=url, queue=queue, ledger=ledger_path, checkpoint=tmp_path / "ck", timeout=240)
    assert again.drained and again.stats.count("posted") == 0
    assert again.stats.count("duplicate", "already_processed") == 40
    ledger = open_ledger(ledger_path)
    assert ledger.totals() == (42, 42, 42)
    ledger.close()
