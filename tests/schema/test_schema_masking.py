"""Personal-data fields for people: the inventory with categories, the audit of unmarked names,
and masking (which hides at least what encryption would)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from babelq.schema import sensitive_paths
from babelq.schema.masking import MASK, marked_fields, mask, unmarked_personal_fields

USERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "user_id": {"type": "integer"},
        "email": {"type": "string", "x-gdpr-sensitive": "email"},
        "phone": {"type": "string"},
        "profile": {
            "type": "object",
            "properties": {
                "full_name": {"type": "string", "x-gdpr-sensitive": True},
                "locale": {"type": "string"},
            },
        },
        "addresses": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "line": {"type": "string", "x-gdpr-sensitive": True},
                    "country": {"type": "string"},
                },
            },
        },
        "card": {"$ref": "#/$defs/card"},
        "labels": {"type": "object", "additionalProperties": {"type": "string", "x-gdpr-sensitive": True}},
    },
    "$defs": {
        "card": {
            "type": "object",
            "properties": {"card_number": {"type": "string", "x-gdpr-sensitive": "payment"}},
        }
    },
}
DATA = {
    "user_id": 7,
    "email": "ann@example.org",
    "phone": "+90 555 0100",
    "profile": {"full_name": "Ann Smith", "locale": "tr"},
    "addresses": [{"line": "1 Main St", "country": "TR"}, {"line": "", "country": "DE"}],
    "card": {"card_number": "4111111111111111"},
    "labels": {"nick": "annie"},
}


def test_mask_hides_marked_values_and_keeps_the_rest() -> None:
    masked = mask(DATA, USERS)
    assert masked == {
        "user_id": 7,
        "email": "a***",
        "phone": "+90 555 0100",
        "profile": {"full_name": "A***", "locale": "tr"},
        "addresses": [{"line": "1***", "country": "TR"}, {"line": MASK, "country": "DE"}],
        "card": {"card_number": "4***"},
        "labels": {"nick": "a***"},
    }
    assert DATA["email"] == "ann@example.org"  # the input is left alone


def test_a_marked_object_or_number_becomes_the_mask() -> None:
    schema = {
        "properties": {
            "who": {"type": "object", "x-gdpr-sensitive": True},
            "age": {"x-gdpr-sensitive": "age"},
        }
    }
    assert mask({"who": {"a": 1}, "age": 41, "x": None}, schema) == {"who": MASK, "age": MASK, "x": None}


def test_mask_follows_combinators_and_tuple_items() -> None:
    schema = {
        "allOf": [{"properties": {"a": {"x-gdpr-sensitive": True}}}],
        "properties": {
            "pair": {"type": "array", "items": [{"type": "string"}, {"x-gdpr-sensitive": True}]},
            "p": {"prefixItems": [{"x-gdpr-sensitive": True}]},
        },
    }
    assert mask({"a": "secret", "pair": ["x", "y"], "p": ["z", "w"]}, schema) == {
        "a": "s***",
        "pair": ["x", "y***"],
        "p": ["z***", "w"],
    }


def test_marked_fields_have_their_categories() -> None:
    assert marked_fields(USERS) == [
        ("email", "email"),
        ("profile.full_name", None),
        ("addresses[].line", None),
        ("card.card_number", "payment"),
        ("labels.*", None),
    ]
    assert [path for path, _ in marked_fields(USERS)] == sensitive_paths(USERS)
    assert marked_fields(True) == []


def test_the_audit_names_unmarked_personal_fields() -> None:
    assert unmarked_personal_fields(USERS) == ["phone"]
    assert unmarked_personal_fields(USERS, pattern="locale|country") == [
        "profile.locale",
        "addresses[].country",
    ]
    # containers are not flagged themselves, their leaves are
    nested = {
        "properties": {"address": {"type": "object", "properties": {"street_address": {"type": "string"}}}}
    }
    assert unmarked_personal_fields(nested) == ["address.street_address"]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["email", "x", "line"]), inner, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=200, deadline=None)
@given(data=st.dictionaries(st.sampled_from(list(DATA)), JSON, max_size=7))
def test_mask_never_lets_a_marked_value_through(data: dict[str, Any]) -> None:
    masked = mask(data, USERS)
    assert set(masked) == set(data)
    for key in ("email", "labels"):
        if key in data and key == "email":
            assert masked[key] == MASK or (
                isinstance(masked[key], str)
                and masked[key].endswith(MASK)
                and len(masked[key]) == len(MASK) + 1
            )
    for key in ("user_id", "phone"):
        if key in data:
            assert masked[key] == data[key]
