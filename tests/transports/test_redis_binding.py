"""The Redis key layout and member format, without a broker."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from babelq.bindings import redis as layout
from babelq.errors import ConfigurationError

CONFORMANCE = Path(__file__).resolve().parent.parent / "conformance"


def test_key_layout_without_prefix() -> None:
    keys = layout.keys_for("orders")
    assert keys.ready == "orders"  # docs/standard.md §4: the queue key is the logical queue name
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


# -- queue names that would reach another queue's keys (issue 10) -------------------------

#: Keys the ``babelqueue`` SDK writes for a queue ``q`` under ``prefix``, observed on a live
#: Redis (see ``test_redis.py::test_reserved_suffixes_cover_every_key_either_sdk_writes``) and
#: listed here independently of the rule under test: its default layout and its
#: Laravel-compatible one (whose ready list is ``queues:<q>``).
def _babelqueue_keys(queue: str, prefix: str) -> tuple[str, ...]:
    legacy = (queue, f"{queue}:processing", f"{queue}:processing:deadlines")
    ready = f"{prefix}{queue}"
    laravel = (ready, f"{ready}:reserved", f"{ready}:delayed", f"{ready}:notify")
    return legacy + laravel


@pytest.mark.parametrize(
    ("queue", "suffix"),
    [
        ("orders:processing", ":processing"),
        ("orders:processing:deadlines", ":processing:deadlines"),
        ("orders:delayed", ":delayed"),
        ("orders:deliveries", ":deliveries"),
        ("orders:reserved", ":reserved"),
        ("orders:notify", ":notify"),
        (":processing", ":processing"),
        ("orders:delayed.dlq", ":delayed"),
        ("orders:processing.dlq.dlq", ":processing"),
    ],
)
def test_a_name_ending_in_a_reserved_suffix_is_refused(queue: str, suffix: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        layout.keys_for(queue)
    text = str(caught.value)
    assert "\n" not in text
    assert repr(queue) in text and repr(suffix) in text


@pytest.mark.parametrize(
    "key_of",
    [
        layout.queue_key, layout.processing_key, layout.deadlines_key, layout.delayed_key,
        layout.deliveries_key,
    ],
)
def test_every_key_function_applies_the_rule(key_of: Callable[[str, str], str]) -> None:
    with pytest.raises(ConfigurationError):
        key_of("orders:delayed", "")


@pytest.mark.parametrize(
    "queue",
    [
        "orders", "orders.dlq", "orders:processing:eu", "orders:delayed-ones", "orders:Processing",
        "processing", "orders:",
    ],
)
def test_other_names_are_accepted(queue: str) -> None:
    assert layout.check_queue(queue) == queue
    assert layout.keys_for(queue).ready == queue


def test_reserved_suffixes_are_ours_and_babelqueues() -> None:
    assert set(layout.RESERVED_SUFFIXES) == {
        ":processing", ":processing:deadlines", ":delayed", ":deliveries", ":reads", ":reserved", ":notify"
    }


def test_a_tagged_reservations_record_key() -> None:
    tag = "0123456789abcdef0123456789abcdef"
    assert layout.reads_key("orders", tag, "app:") == f"app:orders:{tag}:reads"
    with pytest.raises(ConfigurationError):
        layout.reads_key("orders:reads", tag)
    with pytest.raises(ValueError, match="tag"):
        layout.reads_key("orders", "0123:reads")


#: tags whose record keys the property below includes (a queue name may contain them too)
_TAGS = ("0123456789abcdef0123456789abcdef", "ffffffffffffffffffffffffffffffff")

_PIECES = st.sampled_from(
    ["a", "b", ":", ".", "processing", "deadlines", "delayed", "deliveries", "reserved", "notify",
     "dlq", ".dlq", ":processing", ":deadlines", ":delayed", ":deliveries", ":reserved", ":notify",
     "reads", ":reads", _TAGS[0], _TAGS[1]]
)
_NAMES = st.lists(_PIECES, max_size=6).map("".join)


@settings(max_examples=400, deadline=None)
@given(
    names=st.lists(_NAMES, min_size=2, max_size=8, unique=True),
    prefix=st.sampled_from(["", "app:", "queues:"]),
)
def test_no_two_accepted_names_share_a_key(names: list[str], prefix: str) -> None:
    """Across our layout and both of babelqueue's, a key belongs to at most one accepted name."""
    owner: dict[str, str] = {}
    for queue in names:
        try:
            ours = (
                *layout.keys_for(queue, prefix).all(),
                *(layout.reads_key(queue, tag, prefix) for tag in _TAGS),
            )
        except ConfigurationError:
            continue
        for key in {*ours, *_babelqueue_keys(queue, prefix)}:
            assert owner.setdefault(key, queue) == queue, f"{queue!r} and {owner[key]!r} share {key!r}"
