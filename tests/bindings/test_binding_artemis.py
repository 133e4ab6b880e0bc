"""Artemis (AMQP 1.0) binding: JMS slots, underscore string properties, delivery-count."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from babelq.bindings import artemis
from babelq.envelope import make


def test_projection() -> None:
    env = make("urn:babel:orders:created", {}, created_at=1749132727000).with_attempts(1)
    assert artemis.project(env) == {
        "message_annotations": {"x-opt-jms-type": "urn:babel:orders:created"},
        "correlation_id": env.trace_id,
        "message_id": env.id,
        "creation_time": 1749132727000,
        "application_properties": {
            "bq_schema_version": "1",
            "bq_source_lang": "python",
            "bq_attempts": "1",
            "bq_app_id": "babelqueue",
        },
    }


def test_property_names_are_java_identifiers() -> None:
    names = artemis.project(make("urn:babel:a:b", {}))["application_properties"]
    assert all(name.isidentifier() for name in names)


@settings(max_examples=300, deadline=None)
@given(body=st.integers(0, 10**6), count=st.one_of(st.none(), st.integers(0, 10**6)))
def test_reconcile_is_max_without_minus_one(body: int, count: int | None) -> None:
    got = artemis.reconcile_attempts(body, count)
    assert got >= body
    assert got == (body if count is None else max(body, count))
