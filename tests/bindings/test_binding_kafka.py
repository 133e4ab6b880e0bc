"""Kafka binding: byte headers, timestamp, key, header-authoritative attempts, topics."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from babelq.bindings import kafka
from babelq.envelope import make


def test_headers_are_utf8_bytes() -> None:
    env = make("urn:babel:catalog:item.indexed", {}).with_attempts(4)
    assert kafka.headers(env) == [
        ("bq-job", b"urn:babel:catalog:item.indexed"),
        ("bq-trace-id", env.trace_id.encode()),
        ("bq-message-id", env.id.encode()),
        ("bq-schema-version", b"1"),
        ("bq-source-lang", b"python"),
        ("bq-attempts", b"4"),
    ]


def test_timestamp_and_key() -> None:
    env = make("urn:babel:a:b", {}, created_at=1749132727000, sharding_key="müller")
    assert kafka.record_timestamp(env) == 1749132727000
    assert kafka.record_key(env) == "müller".encode()
    assert kafka.record_key(make("urn:babel:a:b", {})) is None


@settings(max_examples=300, deadline=None)
@given(body=st.integers(0, 10**6), header=st.one_of(st.none(), st.integers(0, 10**6)))
def test_header_is_authoritative_when_present(body: int, header: int | None) -> None:
    pairs = [] if header is None else [("bq-attempts", str(header).encode())]
    expected = body if header is None else header
    assert kafka.reconcile_attempts(body, pairs) == expected
    as_map = {} if header is None else {"bq-attempts": str(header).encode()}
    assert kafka.reconcile_attempts(body, as_map) == expected


@pytest.mark.parametrize("bad", [None, b"", b"x", b"-1", b"\xff"])
def test_unusable_header_falls_back_to_body(bad: bytes | None) -> None:
    assert kafka.reconcile_attempts(3, [("bq-attempts", bad)]) == 3
    assert kafka.reconcile_attempts(3, None) == 3


def test_last_repeated_header_wins() -> None:
    assert kafka.reconcile_attempts(0, [("bq-attempts", b"1"), ("other", b"9"), ("bq-attempts", b"2")]) == 2


def test_topics() -> None:
    assert kafka.retry_topic("orders", 1) == "orders.retry.1"
    assert kafka.dlq_topic("orders") == "orders.dlq"
    with pytest.raises(ValueError):
        kafka.retry_topic("orders", 0)
