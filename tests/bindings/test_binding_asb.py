"""Azure Service Bus binding: native fields, typed application properties, DeliveryCount."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from babelq.bindings import asb
from babelq.envelope import make


def test_projection() -> None:
    env = make("urn:babel:orders:created", {}, created_at=1749132727000)
    assert asb.project(env) == {
        "subject": "urn:babel:orders:created",
        "correlation_id": env.trace_id,
        "message_id": env.id,
        "content_type": "application/json",
        "application_properties": {
            "bq-schema-version": 1,
            "bq-source-lang": "python",
            "bq-created-at": 1749132727000,
        },
    }


def test_session_id_is_opt_in() -> None:
    """Seed 000: "An optional SessionId (FIFO) is opt-in and not a contract field"."""
    keyed = make("urn:babel:a:b", {}, sharding_key="k1")
    assert "session_id" not in asb.project(keyed)
    assert asb.project(keyed, session_by="sharding_key")["session_id"] == "k1"
    assert "session_id" not in asb.project(make("urn:babel:a:b", {}), session_by="sharding_key")


@settings(max_examples=300, deadline=None)
@given(body=st.integers(0, 10**6), count=st.one_of(st.none(), st.integers(0, 10**6)))
def test_reconcile_is_max_of_body_and_count_minus_one(body: int, count: int | None) -> None:
    got = asb.reconcile_attempts(body, count)
    assert got >= body
    assert got == (body if count is None else max(body, count - 1))


def test_scheduled_enqueue_time_is_utc_aware_and_exact() -> None:
    when = asb.scheduled_enqueue_time(1749132727123)
    assert when.tzinfo is not None and when.utcoffset().total_seconds() == 0  # type: ignore[union-attr]
    assert when == datetime(2025, 6, 5, 14, 12, 7, 123000, tzinfo=UTC)
