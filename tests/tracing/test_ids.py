"""The envelope trace_id <-> OTel trace id mapping, against the babelqueue package's (differential)."""

from __future__ import annotations

import uuid

import pytest

from babelq.tracing.ids import otel_trace_id, parent_span_id, trace_id_uuid

otel = pytest.importorskip("babelqueue.otel")

CASES = [
    "4bf92f35-77b3-4da6-a3ce-929d0e0e4736",
    "4BF92F3577B34DA6A3CE929D0E0E4736",
    "00000000-0000-0000-0000-000000000000",  # zero is OTel's invalid id: hashed instead
    "not-a-uuid",
    "trace é/ñ",
    "x",
]


@pytest.mark.parametrize("trace_id", CASES)
def test_same_otel_trace_id_as_the_babelqueue_package(trace_id: str) -> None:
    assert otel_trace_id(trace_id) == otel.trace_id_of(trace_id)
    assert otel_trace_id(trace_id) != 0


def test_a_uuid_maps_to_its_own_bits_and_back() -> None:
    for _ in range(100):
        u = str(uuid.uuid4())
        assert otel_trace_id(u) == uuid.UUID(u).int
        assert trace_id_uuid(otel_trace_id(u)) == u
        assert trace_id_uuid(otel_trace_id(u)) == otel.uuid_of(otel_trace_id(u))


def test_the_stand_in_parent_span_id_is_stable_and_valid() -> None:
    assert parent_span_id("a") == parent_span_id("a") != parent_span_id("b")
    assert 0 < parent_span_id("a") < 1 << 64
