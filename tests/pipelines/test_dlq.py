"""DLQ triage counts by reason/cause/URN/queue; redrive resets attempts, keeps ids, refuses poison."""

from __future__ import annotations

from pathlib import Path

from babelq.envelope import annotate, decode, make, poison_record
from babelq.pipelines.dlq import redrive_messages, selector, triage
from babelq.transports import Outgoing, open_transport
from payment_fixtures import transfer


def test_triage_and_redrive(tmp_path: Path, unique_queue: str) -> None:
    transport = open_transport(f"sqlite://{tmp_path}/q.db")
    dlq = unique_queue + ".dlq"
    expired = [
        annotate(
            transfer(f"E{i}", unique_queue).with_attempts(0), "failed", cause="expired", error="expired at 1"
        )
        for i in range(3)
    ]
    failed = annotate(
        transfer("F", unique_queue).with_attempts(2),
        "failed",
        cause="max_attempts",
        attempts=3,
        error="core banking: closed",
    )
    unknown = annotate(make("urn:babel:payments:refund.requested", {}, queue=unique_queue), "unknown_urn")
    poison = poison_record(b"{not json", original_queue=unique_queue, error="not JSON")
    transport.publish_many(
        dlq, [Outgoing(e.encode()) for e in [*expired, failed, unknown]] + [Outgoing(poison)]
    )

    report = triage(transport, dlq)
    assert report.total == 6 and report.distinct_ids == 5
    assert report.by(1) == {"expired": 3, "max_attempts": 1, "": 2}
    assert report.by(0) == {"failed": 4, "unknown_urn": 1, "poison": 1}
    assert report.by(4) == {unique_queue: 6}
    assert "urn:babel:payments:refund.requested" in report.table()
    assert transport.size(dlq) == 6  # triage does not consume

    result = redrive_messages(transport, dlq, selector(cause="max_attempts"))
    assert (result.redriven, result.poison_kept) == (1, 0)
    back = decode(transport.reserve(unique_queue, max_messages=5)[0].body)
    original = failed.without_dead_letter()
    assert back.attempts == 0 and back.dead_letter is None
    assert (back.id, back.trace_id, back.data) == (original.id, original.trace_id, original.data)

    refused = redrive_messages(transport, dlq, selector(reason="poison"))
    assert (refused.redriven, refused.poison_kept) == (0, 1)
    assert transport.size(dlq) == 5  # the poison record is still there, byte for byte
    assert poison in [d.body for d in transport.reserve(dlq, max_messages=10)]


def test_triage_sums_the_value_on_the_dlq_once_per_payment(tmp_path: Path, unique_queue: str) -> None:
    from babelq.pipelines.money import Tally

    transport = open_transport(f"sqlite://{tmp_path}/q.db")
    dlq = unique_queue + ".dlq"
    expired = [annotate(transfer(f"E{i}", unique_queue, amount_cents=1000 + i), "failed", cause="expired",
                        error="expired", failed_at=1_795_000_000_000 + i) for i in range(3)]
    closed = transfer("F", unique_queue, amount_cents=2500, currency="USD")
    twice = [annotate(closed.with_attempts(n), "failed", cause="max_attempts", attempts=3, error="closed")
             for n in (2, 1)]  # one payment dead-lettered at two attempts: two failures, one value
    unknown = annotate(make("urn:babel:payments:refund.requested", {}, queue=unique_queue), "unknown_urn")
    poison = poison_record(b"{not json", original_queue=unique_queue, error="not JSON")
    bodies = [e.encode() for e in [*expired, *twice, unknown]] + [poison, expired[0].encode()]  # + a copy
    transport.publish_many(dlq, [Outgoing(b) for b in bodies])

    report = triage(transport, dlq)

    assert (report.total, report.distinct_messages, report.without_id) == (8, 7, 1)
    assert report.value_by_currency() == {"AUD": Tally(3, 3003), "USD": Tally(1, 2500)}
    (expired_key,) = [k for k in report.rows if k[1] == "expired"]
    assert report.rows[expired_key] == 4 and report.messages[expired_key] == 3
    assert report.value_by_currency([expired_key]) == {"AUD": Tally(3, 3003)}
    assert report.failed_at[expired_key] == (1_795_000_000_000, 1_795_000_000_002)
    assert sum(report.unvalued.values()) == 2  # the unknown URN's empty data and the poison record
    assert transport.size(dlq) == 8
