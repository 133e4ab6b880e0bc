"""RabbitMQ binding: properties/headers projection and body-authoritative attempts."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from babelq.bindings import rabbitmq
from babelq.envelope import decode, make


def test_projection_carries_routing_fields_as_native_types() -> None:
    env = make("urn:babel:orders:created", {"order_id": 1}, queue="orders").with_attempts(3)
    props = rabbitmq.project(env)
    assert props == {
        "type": "urn:babel:orders:created",
        "correlation_id": env.trace_id,
        "message_id": env.id,
        "app_id": "babelqueue",
        "content_type": "application/json",
        "content_encoding": "utf-8",
        "delivery_mode": 2,
        "headers": {"x-schema-version": 1, "x-source-lang": "python", "x-attempts": 3},
    }
    assert type(props["headers"]["x-attempts"]) is int


def test_priority_only_when_set() -> None:
    assert "priority" not in rabbitmq.project(make("urn:babel:a:b", {}))
    assert rabbitmq.project(make("urn:babel:a:b", {}, priority=9))["priority"] == 9


def test_mapping_and_envelope_project_the_same() -> None:
    env = make("urn:babel:a:b", {"x": 1})
    assert rabbitmq.project(env) == rabbitmq.project(env.to_dict())


def test_urn_alias_is_the_type() -> None:
    doc = {"urn": "urn:babel:a:b", "trace_id": "t", "data": {}, "meta": {"schema_version": 1}, "attempts": 0}
    assert rabbitmq.project(doc)["type"] == "urn:babel:a:b"


def test_poison_document_projects_only_what_it_has() -> None:
    props = rabbitmq.project(decode(b'{"raw":"x","dead_letter":{"reason":"poison"}}'))
    assert "type" not in props and "message_id" not in props
    assert props["headers"] == {"x-attempts": 0}  # no count in the body: the counter's start
    assert props["delivery_mode"] == 2


@settings(max_examples=200, deadline=None)
@given(body=st.integers(min_value=0, max_value=10**6), header=st.one_of(st.none(), st.integers(0, 10**6)))
def test_body_attempts_are_authoritative(body: int, header: int | None) -> None:
    headers = None if header is None else {"x-attempts": header}
    assert rabbitmq.reconcile_attempts(body, headers) == body
