"""Pulsar binding: string properties, topics, key, delay mirror, RedeliveryCount."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from babelq.bindings import pulsar
from babelq.envelope import make


def test_projection_is_all_strings() -> None:
    env = make("urn:babel:orders:created", {}).with_attempts(2)
    props = pulsar.project(env)
    assert props == {
        "bq-job": "urn:babel:orders:created",
        "bq-trace-id": env.trace_id,
        "bq-message-id": env.id,
        "bq-schema-version": "1",
        "bq-source-lang": "python",
        "bq-attempts": "2",
    }


def test_delay_is_mirrored_in_ms_by_the_send_not_the_projection() -> None:
    env = make("urn:babel:a:b", {}, deliver_at=1749132727000)
    assert "bq-delay" not in pulsar.project(env)  # the send knows the delay; the envelope only an epoch
    assert pulsar.delay_properties(5) == {"bq-delay": "5"}


def test_topics_subscription_and_key() -> None:
    assert pulsar.topic("orders") == "persistent://public/default/orders"
    assert pulsar.dlq_topic("orders") == "persistent://public/default/orders.dlq"
    assert pulsar.SUBSCRIPTION == "babelqueue"
    assert pulsar.partition_key(make("urn:babel:a:b", {}, sharding_key="c-1")) == "c-1"
    assert pulsar.partition_key(make("urn:babel:a:b", {})) is None


@settings(max_examples=300, deadline=None)
@given(body=st.integers(0, 10**6), count=st.one_of(st.none(), st.integers(0, 10**6)))
def test_reconcile_is_max_without_minus_one(body: int, count: int | None) -> None:
    got = pulsar.reconcile_attempts(body, count)
    assert got >= body
    assert got == (body if count is None else max(body, count))
