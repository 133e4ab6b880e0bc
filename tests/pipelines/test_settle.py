"""Settle: exactly-once posting under redelivery and replay, expiry, poison, unknown URNs, retries to DLQ."""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

import orjson
import pytest

from babelq.envelope import decode, make, now_ms, original_bytes
from babelq.pipelines.ledger import Posting, open_ledger
from babelq.transports import Outgoing, open_transport
from payment_fixtures import transfer

pytestmark = [pytest.mark.spark, pytest.mark.slow]

POISON = [b"\xff\xfe\x80 not utf-8", b"{not json", b'["array"]']
UNSUPPORTED = (
    b'{"job":"urn:babel:payments:transfer.requested","trace_id":"t","data":{},'
    b'"meta":{"schema_version":2},"attempts":0}'
)


def _dlq(url: str, queue: str) -> list[bytes]:
    transport = open_transport(url)
    return [d.body for d in transport.reserve(queue + ".dlq", max_messages=1000)]


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "queue"))
            out[(sample.name, labels)] = sample.value
    return out


def test_a_settle_prepared_before_the_queue_is_filled_settles_what_came_after(
    spark: Any, tmp_path: Path, unique_queue: str
) -> None:
    """The demo prepares settle while ingest publishes: the ledger is opened and the stream built
    before there is anything on the queue; the run then settles all of it once."""
    from babelq.errors import BabelqError
    from babelq.pipelines.settle import prepare_settle

    url, queue, ledger_path = f"sqlite://{tmp_path}/q.db", unique_queue, tmp_path / "ledger.db"
    with pytest.raises(BabelqError, match="ledger"):  # a bad ledger fails while preparing, not in a task
        prepare_settle(spark, url=url, queue=queue, ledger="postgresql://127.0.0.1:1/nowhere")
    prepared = prepare_settle(spark, url=url, queue=queue, ledger=ledger_path, max_messages_per_batch=50)
    assert ledger_path.exists() and prepared.republished == 0
    payments = [transfer(f"PAY-{i}", queue) for i in range(120)]
    open_transport(url).publish_many(queue, [Outgoing(p.encode()) for p in payments])
    run = prepared.run(tmp_path / "ck", timeout=240)
    assert run.drained and run.stats.count("posted") == 120 and run.stats.batches >= 3
    ledger = open_ledger(ledger_path)
    try:
        assert ledger.totals() == (120, 120, 120)
    finally:
        ledger.close()


def test_a_mistyped_setting_of_settle_is_refused_by_name(tmp_path: Path) -> None:
    from babelq.pipelines.settle import settle

    with pytest.raises(TypeError, match=r"argument\(s\): max_attempt$"):
        settle(None, url=f"sqlite://{tmp_path}/q.db", queue="q", ledger=tmp_path / "l.db",
               checkpoint=tmp_path / "ck", max_attempt=3)  # type: ignore[call-arg]


def test_settle_posts_each_payment_once_and_dead_letters_the_rest(
    spark: Any, tmp_path: Path, unique_queue: str
) -> None:
    pytest.importorskip("prometheus_client")
    from babelq.pipelines.settle import SettleStats, settle
    from babelq.pipelines.settle.metrics import serve_settle_metrics

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

    stats = SettleStats()  # what `babelq settle --metrics-port` serves, updated per micro-batch
    exporter = serve_settle_metrics(stats, 0, url=url, queue=queue, addr="127.0.0.1")
    try:
        run = settle(
            spark,
            url=url,
            queue=queue,
            ledger=ledger_path,
            checkpoint=tmp_path / "ck",
            retry_delay_ms=100,
            max_attempts=3,
            timeout=240,
            stats=stats,
        )
        scraped = _scrape(exporter.port)
    finally:
        exporter.close()

    assert run.drained
    stats = run.stats
    # settle acked its last micro-batch itself: it ended without the source's empty flush batch
    assert stats.last_batch_rows > 0 and stats.last_batch_acked
    assert stats.count("posted") == 41  # 40 good + the transient one after its retry
    assert stats.count("duplicate") == 3  # two redelivered copies + the replayed one
    assert stats.count("retried") == 1 + 2  # transient once, closed twice
    assert stats.count("dead_lettered", "max_attempts") == 1
    assert stats.count("dead_lettered", "expired") == 1
    assert stats.count("dead_lettered", "invalid") == 1
    assert stats.count("dead_lettered", "unknown_urn") == 1
    assert stats.count("dead_lettered", "poison") == 3
    assert stats.count("dead_lettered", "unsupported") == 1

    # the worker's metric names, equal to this run's outcomes
    assert scraped[("babelq_messages_received_total", ())] == stats.messages == len(bodies) + 3  # + 3 retries
    assert scraped[("babelq_messages_handled_total", ())] == 41
    assert scraped[("babelq_messages_retried_total", ())] == 3
    assert scraped[("babelq_messages_failed_total", ())] == 3 + 1  # core banking refused: retried, then max
    assert scraped[("babelq_messages_released_total", ())] == 0
    dead = {labels[0][1]: value for (name, labels), value in scraped.items()
            if name == "babelq_messages_dead_lettered_total"}
    assert dead == {"failed": 3, "unknown_urn": 1, "poison": 4}  # expired + invalid + max attempts
    assert sum(dead.values()) == stats.count("dead_lettered")
    duplicates = [value for (name, labels), value in scraped.items()
                  if name == "babelq_settle_outcomes_total" and ("outcome", "duplicate") in labels]
    assert sum(duplicates) == 3  # settle's own counter keeps what the worker's names fold away
    assert scraped[("babelq_settle_micro_batches_total", ())] == stats.batches
    assert scraped[("babelq_queue_ready", ())] == 0
    assert ("babelq_leases_lost_total", ()) not in scraped  # settle cannot observe it: not exported

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
