"""Differential tests: babelq and the babelqueue SDK must put the same bytes on the wire.

docs/standard.md §2.3 makes byte equality the interoperability contract: for the same
logical message (same ids, times and insertion order) every SDK writes the same bytes.
babelqueue is used strictly as a black box through its public ``EnvelopeCodec``.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from babelqueue import EnvelopeCodec
from envelope_strategies import (
    AWKWARD_FLOATS,
    AWKWARD_STRINGS,
    GOOD_URNS,
    epoch_ms,
    floats,
    json_objects,
    json_values,
    queues,
    text,
    uuids,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from babelq.envelope import decode, make, wire
from babelq.envelope.constants import CORE_META_KEYS, EXTENSION_META_KEYS, FORBIDDEN_META
from babelq.envelope.payload import check_json
from babelq.errors import UnsafeIntegerWarning

_RESERVED = set(CORE_META_KEYS) | set(FORBIDDEN_META) | set(EXTENSION_META_KEYS)

extension_values = st.fixed_dictionaries(
    {},
    optional={
        "correlation_id": st.text(min_size=1, max_size=10).filter(lambda s: s.isprintable()),
        "sharding_key": st.text(min_size=1, max_size=10).filter(lambda s: s.isprintable()),
        "deliver_at": epoch_ms,
        "expire_at": epoch_ms,
        "priority": st.integers(min_value=1, max_value=10),
        "transaction_id": uuids,
    },
)
extra_meta = st.dictionaries(text.filter(lambda k: k not in _RESERVED), json_values(8), max_size=4)


@pytest.fixture(autouse=True)
def _quiet_unsafe_integers() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnsafeIntegerWarning)
        yield


def _both(
    urn: str,
    data: dict[str, Any],
    *,
    queue: str,
    trace_id: str,
    message_id: str,
    created_at: int,
    extensions: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> tuple[bytes, bytes]:
    """(babelq bytes, babelqueue bytes) for one logical message."""
    extensions = extensions or {}
    extra = extra or {}
    ours = make(
        urn, data, queue=queue, trace_id=trace_id, message_id=message_id, created_at=created_at,
        meta=extra, **extensions,
    )
    ordered_ext: dict[str, Any] = {key: extensions[key] for key in EXTENSION_META_KEYS if key in extensions}
    their_meta: dict[str, Any] | None = {**ordered_ext, **extra} or None
    theirs = EnvelopeCodec.make(urn, data, queue=queue, trace_id=trace_id, meta=their_meta)
    theirs["meta"]["id"] = message_id
    theirs["meta"]["created_at"] = created_at
    return ours.encode(), EnvelopeCodec.encode(theirs).encode("utf-8")


@settings(max_examples=400, deadline=None)
@given(
    urn=st.sampled_from(GOOD_URNS),
    data=json_objects(),
    queue=queues,
    trace_id=uuids,
    message_id=uuids,
    created_at=epoch_ms,
)
def test_same_bytes_as_babelqueue(  # noqa: PLR0917 (hypothesis passes the drawn values by name)
    urn: str, data: dict[str, Any], queue: str, trace_id: str, message_id: str, created_at: int
) -> None:
    ours, theirs = _both(
        urn, data, queue=queue, trace_id=trace_id, message_id=message_id, created_at=created_at
    )
    assert ours == theirs


@settings(max_examples=250, deadline=None)
@given(
    data=json_objects(10),
    extensions=extension_values,
    extra=extra_meta,
    trace_id=uuids,
    message_id=uuids,
    created_at=epoch_ms,
)
def test_same_bytes_with_extension_and_extra_meta_keys(  # noqa: PLR0917
    data: dict[str, Any],
    extensions: dict[str, Any],
    extra: dict[str, Any],
    trace_id: str,
    message_id: str,
    created_at: int,
) -> None:
    ours, theirs = _both(
        GOOD_URNS[1], data, queue="orders", trace_id=trace_id, message_id=message_id,
        created_at=created_at, extensions=extensions, extra=extra,
    )
    assert ours == theirs


@settings(max_examples=300, deadline=None)
@given(data=json_objects(), trace_id=uuids, message_id=uuids, created_at=epoch_ms)
def test_each_side_reads_the_others_bytes(
    data: dict[str, Any], trace_id: str, message_id: str, created_at: int
) -> None:
    ours_bytes, theirs_bytes = _both(
        GOOD_URNS[0], data, queue="orders", trace_id=trace_id, message_id=message_id, created_at=created_at
    )
    ours_reading = decode(theirs_bytes)
    assert ours_reading.accepts()
    assert ours_reading.data == data
    assert (ours_reading.urn, ours_reading.id, ours_reading.trace_id) == (GOOD_URNS[0], message_id, trace_id)
    assert ours_reading.created_at == created_at
    assert ours_reading.encode() == theirs_bytes  # re-encoding a received message is canonical

    theirs_reading = EnvelopeCodec.decode(ours_bytes.decode("utf-8"))
    assert EnvelopeCodec.accepts(theirs_reading)
    assert theirs_reading == decode(ours_bytes).to_dict()


@settings(max_examples=500, deadline=None)
@given(value=st.one_of(floats, st.sampled_from(AWKWARD_FLOATS)), text_value=st.sampled_from(AWKWARD_STRINGS))
def test_fast_encoder_matches_the_standard_library(value: float, text_value: str) -> None:
    """The encoder choice (orjson unless a float needs repr's form) never changes the bytes."""
    doc = {"x": value, "s": text_value, "l": [value, -value]}
    needs_std = check_json(doc)
    expected = json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    assert wire.dumps(doc, has_floats=needs_std) == expected
    assert wire.dumps_document(doc) == expected


def test_benchmark_style_payment_is_identical() -> None:
    data = {
        "reference": "INV-2025-004211/7",
        "amount_cents": 1_254_990,
        "creditor_name": "Zoë Ōtsuka-Müller — Café Ψ",
        "validation_result": {"status": "passed", "checks": ["bsb", "account"], "confidence": 0.987},
        "tiny": 1e-7,
        "big": 2**63 - 1,
    }
    ours, theirs = _both(
        GOOD_URNS[2], data, queue="payments", trace_id="5f0c6a1e-2b7d-4c39-8e51-0a9d3b7f6c24",
        message_id="c1d2e3f4-a5b6-4c7d-8e9f-0a1b2c3d4e5f", created_at=1_749_132_727_000,
    )
    assert ours == theirs
    assert b'"tiny":1e-07' in ours and "Zoë".encode() in ours and b"INV-2025-004211/7" in ours
