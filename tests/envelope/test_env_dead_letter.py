"""Dead letters and poison records (docs/standard.md §5): nothing is lost, every SDK can still read it."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from envelope_strategies import json_objects
from hypothesis import given, settings
from hypothesis import strategies as st

from babelq.envelope import (
    annotate,
    dead_letter_block,
    decode,
    dlq_name,
    exception_name,
    make,
    original_bytes,
    poison_record,
    record_or_poison,
    redrive,
)
from babelq.errors import EnvelopeError

CONFORMANCE = Path(__file__).resolve().parent.parent / "conformance"
SCHEMA = json.loads((CONFORMANCE / "schema" / "message-envelope.schema.json").read_text(encoding="utf-8"))
VALIDATOR = jsonschema.Draft7Validator(SCHEMA, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)


class GatewayTimeoutError(RuntimeError):
    pass


def _valid(body: bytes) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(body)
    VALIDATOR.validate(doc)
    return doc


def test_annotate_keeps_the_original_intact_and_validates() -> None:
    env = make("urn:babel:orders:created", {"order_id": 1042, "ratio": 1e-6}, queue="orders",
               meta={"ext": {"acme": 1}}).with_attempts(3)
    before = env.encode()
    error = GatewayTimeoutError("gateway timed out")
    dead = annotate(env, "failed", error=error, failed_at=1_749_132_730_000)
    assert env.encode() == before and env.dead_letter is None  # the original is untouched
    doc = _valid(dead.encode())
    block = doc.pop("dead_letter")
    assert doc == json.loads(before)  # the whole original message sits inside, unchanged
    assert list(json.loads(dead.encode()))[-1] == "dead_letter"
    assert block == {
        "reason": "failed", "error": "gateway timed out",
        "exception": f"{__name__}.GatewayTimeoutError", "failed_at": 1_749_132_730_000,
        "original_queue": "orders", "attempts": 3, "lang": "python",
    }
    assert decode(dead.encode()).dead_letter == block


def test_annotate_a_message_from_another_sdk() -> None:
    env = decode((CONFORMANCE / "fixtures" / "urn-alias.json").read_bytes())
    dead = annotate(env, "unknown_urn", original_queue="orders.in", attempts=5, cause="no_handler")
    doc = _valid(dead.encode())
    assert doc["meta"]["lang"] == "go" and doc["dead_letter"]["lang"] == "python"
    assert doc["job"] == "urn:babel:orders:created" and "urn" not in doc
    assert doc["dead_letter"]["cause"] == "no_handler" and doc["dead_letter"]["attempts"] == 5
    assert doc["dead_letter"]["error"] is None and doc["dead_letter"]["exception"] is None


def test_re_annotating_replaces_the_block() -> None:
    env = decode((CONFORMANCE / "fixtures" / "dead-lettered.json").read_bytes())
    again = annotate(env, "failed", error="still failing", exception=ValueError, failed_at=7)
    doc = _valid(again.encode())
    assert doc["dead_letter"]["error"] == "still failing" and doc["dead_letter"]["exception"] == "ValueError"
    assert doc["dead_letter"]["attempts"] == 3 and doc["dead_letter"]["original_queue"] == "orders"


def test_redrive_removes_the_block_and_resets_attempts_keeping_ids() -> None:
    env = make("urn:babel:orders:created", {"a": 1}, queue="orders", meta={"x": 1}).with_attempts(4)
    dead = annotate(env, "failed", error="boom")
    again = redrive(decode(dead.encode()))
    doc = _valid(again.encode())
    assert "dead_letter" not in doc and doc["attempts"] == 0
    assert (again.id, again.trace_id, again.meta["x"]) == (env.id, env.trace_id, 1)
    assert again.encode() == env.with_attempts(0).encode()


@pytest.mark.parametrize("reason", ["expired", "", "FAILED", None])
def test_reason_stays_within_the_schema(reason: Any) -> None:
    with pytest.raises(EnvelopeError) as info:
        annotate(make("urn:babel:a:b", {}), reason)
    assert info.value.path == "dead_letter.reason"


def test_block_text_with_lone_surrogates_is_made_encodable() -> None:
    block = dead_letter_block("failed", original_queue="q", attempts=0, error="bad \ud800 text", failed_at=1)
    assert block["error"] == "bad \\ud800 text"
    _valid(annotate(make("urn:babel:a:b", {}), "failed", error="x\udc00").encode())


def test_with_dead_letter_refuses_a_non_json_block() -> None:
    with pytest.raises(EnvelopeError) as info:
        make("urn:babel:a:b", {}).with_dead_letter({"reason": "failed", "at": {1, 2}})
    assert info.value.path == "dead_letter.at"


def test_names() -> None:
    assert dlq_name("orders") == "orders.dlq"
    assert exception_name(KeyError("x")) == "KeyError"
    assert exception_name(GatewayTimeoutError) == f"{__name__}.GatewayTimeoutError"


# -- poison ---------------------------------------------------------------------------------------


def _check_record(body: bytes, record: bytes) -> dict[str, Any]:
    assert original_bytes(record) == body
    doc: dict[str, Any] = json.loads(record)  # valid JSON, whatever the body was
    block = doc["dead_letter"]
    assert (block["reason"], block["original_queue"], block["error"]) == ("poison", "orders", "unreadable")
    return doc


@settings(max_examples=500, deadline=None)
@given(body=st.binary(max_size=200))
def test_any_bytes_survive_a_poison_record(body: bytes) -> None:
    record = poison_record(body, original_queue="orders", error="unreadable", attempts=1)
    doc = _check_record(body, record)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        assert doc["raw_encoding"] == "base64" and base64.b64decode(doc["raw"]) == body
        assert doc["dead_letter"]["original"] == "raw_base64"
    else:
        if doc["dead_letter"]["original"] == "raw":
            assert doc["raw"] == text


@settings(max_examples=300, deadline=None)
@given(
    data=json_objects(10),
    indent=st.sampled_from([None, 0, 2]),
    pad=st.sampled_from(["", " ", "\n", "\t\r\n "]),
)
def test_json_object_bodies_keep_every_byte(data: dict[str, Any], indent: int | None, pad: str) -> None:
    body = (pad + json.dumps(data, ensure_ascii=False, indent=indent) + pad).encode("utf-8")
    record = poison_record(body, original_queue="orders", error="unreadable")
    doc = _check_record(body, record)
    assert doc["dead_letter"]["original"] == "in_place"
    end = len(body.rstrip(b" \t\r\n")) - 1
    assert record.startswith(body[:end]) and record.endswith(body[end:])  # only a member was added
    assert {k: v for k, v in doc.items() if k != "dead_letter"} == {
        k: v for k, v in json.loads(body).items() if k != "dead_letter"}


@pytest.mark.parametrize(
    "body",
    [
        b"{}",
        b"{ }",
        b'{"a":"{"}',
        b'{"a":{}}',
        b'{"dead_letter":{"reason":"failed","original":"raw","raw":"x"}}',  # an earlier DLQ block
        b'{"job":"urn:babel:a:b","meta":{"schema_version":2}}',  # unsupported version: poison too
        b'{"n":' + b"9" * 400 + b"}",  # a JSON object, even if its number is wide
        b'\xef\xbb\xbf{"a":1}',  # a BOM: text, not a JSON object
        b"[1,2]",
        b'{"a":NaN}',
        b"",
        b"\xff\x00{",
    ],
)
def test_poison_record_shapes(body: bytes) -> None:
    record = poison_record(body, original_queue="orders", error="unreadable", failed_at=5, cause="schema")
    doc = _check_record(body, record)
    assert doc["dead_letter"]["failed_at"] == 5 and doc["dead_letter"]["cause"] == "schema"


def test_poison_record_of_text_with_lone_surrogate() -> None:
    record = poison_record("{\ud800}", original_queue="orders", error="unreadable")
    assert original_bytes(record) == "{\ud800}".encode("utf-8", "surrogatepass")


@pytest.mark.parametrize(
    "record",
    [b"not json", b"[]", b'{"a":1}', b'{"dead_letter":{"reason":"poison"}}',
     b'{"raw":"!!","raw_encoding":"base64","dead_letter":{"original":"raw_base64"}}',
     b'{"a":1, "dead_letter": {"original": "in_place"}}'],  # not the bytes poison_record writes
)
def test_original_bytes_of_something_else_is_none(record: bytes) -> None:
    assert original_bytes(record) is None


_WRITE_FAILURES = [ValueError("deep"), OverflowError("int64"), RecursionError()]


@given(st.binary(max_size=200), st.sampled_from(_WRITE_FAILURES))
def test_record_or_poison_keeps_the_original_bytes_when_the_record_cannot_be_written(
    body: bytes, failure: Exception
) -> None:
    def build() -> bytes:
        raise failure

    record, unwritable = record_or_poison(build, body, original_queue="payments", error="core banking down",
                                          attempts=2**70, cause="max_attempts")
    assert unwritable is failure
    assert original_bytes(record) == body
    block = json.loads(record)["dead_letter"]
    assert block["reason"] == "poison" and block["cause"] == "max_attempts"
    assert block["attempts"] == 2**63 - 1  # clamped into int64, never written as 2**70
    assert block["error"].startswith("core banking down; the message cannot be re-encoded")


def test_record_or_poison_returns_what_build_writes() -> None:
    assert record_or_poison(lambda: b"{}", b"x", original_queue="q", error=None) == (b"{}", None)
