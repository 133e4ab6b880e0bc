"""Producers refuse non-JSON values with an error naming the exact path (docs/standard.md §2)."""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import uuid
import warnings
from collections import OrderedDict
from typing import Any

import pytest
from envelope_strategies import json_objects
from hypothesis import given, settings
from hypothesis import strategies as st

from babelq.envelope import check_json, make
from babelq.envelope.payload import format_path
from babelq.errors import EnvelopeError, UnsafeIntegerWarning, URNError

URN = "urn:babel:orders:created"


class Colour(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


class Kind(enum.StrEnum):
    CARD = "card"


class Opaque:
    pass


def _error(data: Any, **kwargs: Any) -> EnvelopeError:
    with pytest.raises(EnvelopeError) as info:
        make(URN, data, **kwargs)
    return info.value


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        (float("nan"), "NaN is not allowed"),
        (float("inf"), "Infinity is not allowed"),
        (float("-inf"), "-Infinity is not allowed"),
        (2**63, "integer 9223372036854775808 is outside signed 64-bit; send it as a string"),
        (-(2**63) - 1, "integer -9223372036854775809 is outside signed 64-bit; send it as a string"),
        (b"\x00", "bytes is not allowed in JSON; base64-encode it into a string"),
        (bytearray(b"x"), "bytearray is not allowed in JSON; base64-encode it into a string"),
        (dt.datetime(2025, 6, 5, tzinfo=dt.UTC), "datetime is not allowed; use Unix epoch milliseconds"),
        (dt.date(2025, 6, 5), "date is not allowed; use Unix epoch milliseconds"),
        (decimal.Decimal("12.50"), "Decimal is not allowed; use integer minor units (cents) or a string"),
        ({1, 2}, "set is not allowed; use a list"),
        (frozenset({1}), "frozenset is not allowed; use a list"),
        (Colour.RED, "Enum member Colour.RED is not a JSON value; pass its .value"),
        (Level.HIGH, "Enum member Level.HIGH is not a JSON value; pass its .value"),
        (Kind.CARD, "Enum member Kind.CARD is not a JSON value; pass its .value"),
        (Opaque(), "Opaque is not a JSON type"),
        (uuid.UUID(int=1), "uuid.UUID is not a JSON type"),
        ("ab\ud800c", "string holds a lone surrogate '\\ud800' at index 2, which is not valid UTF-8"),
        ("\udfff", "string holds a lone surrogate '\\udfff' at index 0"),
    ],
)
def test_bad_value_error_names_the_path(bad: Any, problem: str) -> None:
    data = {"items": [{"price": 1}, {"price": 2}, {"price": 3}, {"sku": "A", "price": bad}]}
    error = _error(data)
    assert error.path == "data.items[3].price"
    assert problem in error.problem
    assert str(error).startswith("data.items[3].price: ")
    with pytest.raises(EnvelopeError) as info:
        check_json(data)
    assert info.value.path == "data.items[3].price"


def test_first_example_from_the_spec_reads_exactly() -> None:
    error = _error({"items": [{}, {}, {}, {"price": float("nan")}]})
    assert str(error) == "data.items[3].price: NaN is not allowed"


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        (1, "key 1 (int) is not a string"),
        (None, "key None (NoneType) is not a string"),
        ((1, 2), "key (1, 2) (tuple) is not a string"),
        (Kind.CARD, "(Kind) is not a string"),
        ("bad\ud800key", "lone surrogate"),
    ],
)
def test_bad_keys_are_refused_at_the_containing_object(key: Any, problem: str) -> None:
    error = _error({"customer": {"address": {key: "x"}}})
    assert error.path == "data.customer.address"
    assert problem in error.problem


def test_odd_keys_are_quoted_in_paths() -> None:
    error = _error({"a b": {'q"k': {"x.y": [float("nan")]}}})
    assert error.path == 'data["a b"]["q\\"k"]["x.y"][0]'


def test_paths_in_meta_extras() -> None:
    error = _error({}, meta={"ext": {"acme": [1, float("inf")]}})
    assert error.path == "meta.ext.acme[1]"


@pytest.mark.parametrize(
    ("kwargs", "path"),
    [
        ({"queue": ""}, "meta.queue"),
        ({"queue": 5}, "meta.queue"),
        ({"priority": 0}, "meta.priority"),
        ({"priority": 11}, "meta.priority"),
        ({"priority": True}, "meta.priority"),
        ({"priority": "5"}, "meta.priority"),
        ({"deliver_at": -1}, "meta.deliver_at"),
        ({"expire_at": 1.5}, "meta.expire_at"),
        ({"created_at": "now"}, "meta.created_at"),
        ({"message_id": ""}, "meta.id"),
        ({"trace_id": ""}, "trace_id"),
        ({"trace_id": 7}, "trace_id"),
        ({"correlation_id": ""}, "meta.correlation_id"),
        ({"sharding_key": 3}, "meta.sharding_key"),
        ({"transaction_id": ""}, "meta.transaction_id"),
        ({"meta": {"id": "x"}}, "meta.id"),
        ({"meta": {"schema_version": 2}}, "meta.schema_version"),
        ({"meta": {"max_retries": 3}}, "meta.max_retries"),
        ({"meta": {"attempts": 3}}, "meta.attempts"),
        ({"meta": {"source": "x"}}, "meta.source"),
        ({"meta": {"ts": 1}}, "meta.ts"),
        ({"meta": {"priority": 5}}, "meta.priority"),
        ({"meta": {1: "x"}}, "meta"),
        ({"queue": "q\ud800"}, "meta.queue"),
        ({"trace_id": "t\udc00"}, "trace_id"),
    ],
)
def test_bad_frame_arguments(kwargs: dict[str, Any], path: str) -> None:
    assert _error({"ok": 1}, **kwargs).path == path


@pytest.mark.parametrize("urn", ["", "   ", "\t\n", None, 5, b"urn:babel:a:b", ["urn"]])
def test_empty_or_non_string_urn(urn: Any) -> None:
    with pytest.raises(URNError) as info:
        make(urn, {})
    assert info.value.path == "job"


def test_urn_with_lone_surrogate_is_refused() -> None:
    with pytest.raises(URNError):
        make("urn:babel:a:b\ud800", {})


@pytest.mark.parametrize("data", [[1, 2], "x", 5, (("a", 1),)])
def test_data_must_be_an_object(data: Any) -> None:
    assert _error(data).path == "data"


def test_self_containing_value_is_refused() -> None:
    data: dict[str, Any] = {"a": []}
    data["a"].append(data)
    error = _error(data)
    assert error.path.startswith("data.a[0]")  # where the value meets itself again
    assert error.problem == "nested too deeply: the value contains itself"


def test_unsafe_integer_warns_with_path_and_points_at_the_caller() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make(URN, {"ids": [1, 2**53]})
    assert [str(w.message).split(":")[0] for w in caught] == ["data.ids[1]"]
    assert caught[0].category is UnsafeIntegerWarning
    assert caught[0].filename == __file__


def test_safe_integers_do_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make(URN, {"n": 2**53 - 1, "m": -(2**53) + 1})


def test_mappings_tuples_and_dict_subclasses_are_json() -> None:
    env = make(URN, OrderedDict(a=(1, 2), b=OrderedDict(c=[True, None])), message_id="m", trace_id="t",
               created_at=1)
    assert b'"data":{"a":[1,2],"b":{"c":[true,null]}}' in env.encode()


def test_made_envelope_does_not_follow_later_changes_to_the_callers_dict() -> None:
    data: dict[str, Any] = {"a": 1}
    env = make(URN, data)
    data["a"] = 2
    data["b"] = float("nan")
    assert env.data == {"a": 1}
    assert b'"data":{"a":1}' in env.encode()


# -- one bad value injected anywhere: the path is exactly where it was put -----------------------

BAD_VALUES = [
    float("nan"), float("inf"), 2**64, b"x", dt.date(2020, 1, 1), decimal.Decimal(1), {1}, Colour.RED,
    Opaque(), "\ud800",
]


@st.composite
def payload_with_a_bad_value(draw: st.DrawFn) -> tuple[dict[str, Any], str, Any]:
    data = draw(json_objects(15))
    containers: list[tuple[Any, list[str | int]]] = []

    def collect(node: Any, trail: list[str | int]) -> None:
        containers.append((node, trail))
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in items:
            if isinstance(child, dict | list):
                collect(child, [*trail, key])

    collect(data, [])
    node, trail = draw(st.sampled_from(containers))
    bad = draw(st.sampled_from(BAD_VALUES))
    if isinstance(node, dict):
        key = draw(st.text(max_size=6))
        node[key] = bad
        trail = [*trail, key]
    else:
        index = draw(st.integers(min_value=0, max_value=len(node)))
        node.insert(index, bad)
        trail = [*trail, index]
    return data, format_path("data", trail), bad


@settings(max_examples=300, deadline=None)
@given(case=payload_with_a_bad_value())
def test_injected_bad_value_is_reported_at_its_path(case: tuple[dict[str, Any], str, Any]) -> None:
    data, path, _ = case
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnsafeIntegerWarning)
        error = _error(data)
    assert error.path == path


@st.composite
def payload_with_a_bad_key(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    data = draw(json_objects(15))
    dicts: list[tuple[dict[str, Any], list[str | int]]] = []

    def collect(node: Any, trail: list[str | int]) -> None:
        if isinstance(node, dict):
            dicts.append((node, trail))
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in items:
            if isinstance(child, dict | list):
                collect(child, [*trail, key])

    collect(data, [])
    node, trail = draw(st.sampled_from(dicts))
    node[draw(st.sampled_from([1, None, 2.5, "k\udc80"]))] = "v"
    return data, format_path("data", trail)


@settings(max_examples=200, deadline=None)
@given(case=payload_with_a_bad_key())
def test_injected_bad_key_is_reported_at_its_object(case: tuple[dict[str, Any], str]) -> None:
    data, path = case
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnsafeIntegerWarning)
        assert _error(data).path == path


def _nested(depth: int) -> dict[str, Any]:
    data: dict[str, Any] = {"leaf": 1e-5}
    for _ in range(depth):
        data = {"d": [data]}
    return data


def test_deep_but_reasonable_nesting_encodes_canonically() -> None:
    """Deeper than orjson encodes (255): the standard encoder takes over, same bytes."""
    import json

    data = _nested(150)  # 300 levels of containers
    env = make(URN, data, trace_id="t", message_id="m", created_at=1)
    expected = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()
    assert b'"data":' + expected + b',"meta"' in env.encode()


def test_absurd_nesting_is_refused_not_crashed() -> None:
    """The path names the first container beyond the envelope's 512 levels (data is level 2)."""
    error = _error(_nested(5000))
    assert error.path == "data" + ".d[0]" * 255 + ".d"
    assert error.problem.startswith("nested too deeply: more than 512 levels")
