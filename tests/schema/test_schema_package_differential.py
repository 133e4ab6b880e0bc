"""Differential: on schemas written only with the keywords the babelqueue package validates,
babelq's check and the package's give the same verdict on generated data."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from babelq.schema import SchemaRegistry

babelqueue_schema = pytest.importorskip("babelqueue.schema")

URN = "urn:babel:orders:created"
#: only type, required, properties, additionalProperties, items, enum, const, minLength, minimum
SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["order_id"],
    "properties": {
        "order_id": {"type": "integer", "minimum": 1},
        "amount": {"type": "number", "minimum": 0},
        "currency": {"enum": ["USD", "EUR", "TRY"]},
        "kind": {"const": "sale"},
        "note": {"type": "string", "minLength": 2},
        "paid": {"type": "boolean"},
        "void": {"type": "null"},
        "lines": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["sku"],
                "properties": {
                    "sku": {"type": "string", "minLength": 1},
                    "qty": {"type": "integer", "minimum": 1},
                },
                "additionalProperties": False,
            },
        },
    },
    "additionalProperties": False,
}

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=3),
    st.floats(min_value=-2, max_value=2, allow_nan=False),
    st.sampled_from(["", "x", "sale", "USD", "GBP", "ab"]),
)
line = st.dictionaries(st.sampled_from(["sku", "qty", "extra"]), scalars, max_size=3)
data = st.dictionaries(
    st.sampled_from(["order_id", "amount", "currency", "kind", "note", "paid", "void", "lines", "extra"]),
    st.one_of(scalars, st.lists(st.one_of(line, scalars), max_size=3)),
    max_size=6,
)


@settings(max_examples=600, deadline=None)
@given(data)
def test_same_verdict_as_the_package(value: dict[str, Any]) -> None:
    registry = _registry()
    ours = registry.is_valid(URN, value)
    theirs = babelqueue_schema.validate_schema(SCHEMA, value) is None
    assert ours == theirs, (value, registry.validate(URN, value))


_REGISTRY: list[SchemaRegistry] = []


def _registry() -> SchemaRegistry:
    if not _REGISTRY:
        reg = SchemaRegistry()
        reg.register(URN, SCHEMA)
        _REGISTRY.append(reg)
    return _REGISTRY[0]
