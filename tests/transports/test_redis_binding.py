"""The Redis key layout and member format, without a broker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from babelq.bindings import redis as layout

CONFORMANCE = Path(__file__).resolve().parent.parent / "conformance"


def test_key_layout_without_prefix() -> None:
    keys = layout.keys_for("orders")
    assert keys.ready == "orders"  # SPEC: the queue key is the logical queue name
    assert keys.processing == "orders:processing"
    assert keys.deadlines == "orders:processing:deadlines"
    assert keys.delayed == "orders:delayed"
    assert keys.deliveries == "orders:deliveries"
    assert keys.all() == (keys.ready, keys.processing, keys.deadlines, keys.delayed, keys.deliveries)


def test_key_layout_with_prefix() -> None:
    assert layout.queue_key("orders", "app:") == "app:orders"
    assert layout.processing_key("orders", "app:") == "app:orders:processing"
    assert layout.deadlines_key("orders", "app:") == "app:orders:processing:deadlines"
    assert layout.delayed_key("orders", "app:") == "app:orders:delayed"
    assert layout.deliveries_key("orders", "app:") == "app:orders:deliveries"


def test_dead_letter_queue_is_just_another_queue() -> None:
    assert layout.queue_key("orders.dlq") == "orders.dlq"


def test_element_is_the_body_byte_for_byte() -> None:
    # conformance: redis.payload_identity -- no wrapping, no added fields.
    manifest = json.loads((CONFORMANCE / "manifest.json").read_text())
    raw = (CONFORMANCE / manifest["redis"]["payload_identity"]["envelope_file"]).read_bytes()
    assert layout.element(raw) == raw


def test_attempts_come_from_the_body() -> None:
    assert layout.reconcile_attempts(0) == 0
    assert layout.reconcile_attempts(4) == 4


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=200))
def test_member_round_trips_any_body(body: bytes) -> None:
    token = "0123456789abcdef" * 2
    value = layout.member(token, body)
    assert value.startswith(token.encode() + b":")
    assert layout.split_member(value) == (token, body)


def test_member_rejects_a_short_token() -> None:
    with pytest.raises(ValueError):
        layout.member("abc", b"{}")


@pytest.mark.parametrize("value", [b"", b"short:body", b"0" * 32 + b"-body"])
def test_split_member_rejects_foreign_values(value: bytes) -> None:
    with pytest.raises(ValueError):
        layout.split_member(value)
