"""sensitive_paths: dotted paths of x-gdpr-sensitive nodes."""

from __future__ import annotations

from babelq.schema import sensitive_paths

S = {"x-gdpr-sensitive": True}


def test_spec_examples() -> None:
    schema = {
        "type": "object",
        "properties": {
            "email": {"type": "string", **S},
            "order_id": {"type": "integer"},
            "profile": {"type": "object", "properties": {"full_name": {"type": "string", **S}, "age": {}}},
            "addresses": {"type": "array", "items": {"properties": {"line": S, "country": {}}}},
        },
    }
    assert sensitive_paths(schema) == ["email", "profile.full_name", "addresses[].line"]


def test_whole_object_and_nested_arrays() -> None:
    schema = {
        "properties": {
            "card": {"type": "object", **S, "properties": {"pan": S}},
            "matrix": {"items": {"items": S}},
        }
    }
    assert sensitive_paths(schema) == ["card", "card.pan", "matrix[][]"]


def test_refs_and_combinators_are_followed() -> None:
    schema = {
        "$defs": {"person": {"properties": {"name": S, "friend": {"$ref": "#/$defs/person"}}}},
        "properties": {
            "owner": {"$ref": "#/$defs/person"},
            "contact": {"anyOf": [{"properties": {"phone": S}}, {"properties": {"email": S}}]},
            "legacy": {"$ref": "#/definitions/old"},
        },
        "definitions": {"old": {"allOf": [{"properties": {"ssn": S}}]}},
    }
    # the recursive friend -> person reference is not expanded again (paths would be endless)
    assert sensitive_paths(schema) == ["owner.name", "contact.phone", "contact.email", "legacy.ssn"]


def test_maps_and_tuples() -> None:
    schema = {
        "properties": {
            "labels": {"additionalProperties": S},
            "notes": {"patternProperties": {"^n": {"properties": {"text": S}}}},
            "pair": {"prefixItems": [{}, S]},
        }
    }
    assert sensitive_paths(schema) == ["labels.*", "notes.*.text", "pair[]"]


def test_false_marks_root_marks_and_booleans_are_ignored() -> None:
    assert sensitive_paths({"x-gdpr-sensitive": True, "properties": {"a": {"x-gdpr-sensitive": False}}}) == []
    unmarked = {"properties": {"a": {"x-gdpr-sensitive": ""}, "b": {"x-gdpr-sensitive": 1}}}
    assert sensitive_paths(unmarked) == []
    assert sensitive_paths(True) == []
    assert sensitive_paths({"properties": {"a": True}}) == []


def test_a_category_string_marks_like_true_as_the_other_sdks_read_it() -> None:
    """A shared schema may mark ``"x-gdpr-sensitive": "contact"``: the babelqueue package (and
    its Go mirror) protect such a field, so babelq must too, or it would publish it in clear."""
    from babelqueue.schema import sensitive_paths as package_paths

    schema = {
        "properties": {
            "email": {"type": "string", "x-gdpr-sensitive": "contact"},
            "name": {"type": "string", "x-gdpr-sensitive": True},
            "city": {"type": "string", "x-gdpr-sensitive": ""},
            "plan": {"type": "string"},
        }
    }
    assert sensitive_paths(schema) == ["email", "name"]
    assert sorted(p.path for p in package_paths(schema)) == sorted(sensitive_paths(schema))
