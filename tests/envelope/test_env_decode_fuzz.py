"""Decoding hostile bytes: decode raises DecodeError and nothing else, and never loses exactness.

A consumer calls ``decode`` on whatever a broker hands it. Anything that is not one JSON
object must come back as :class:`DecodeError` (the poison path); anything that is one must
give an Envelope whose verdict methods never raise.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from babelqueue import EnvelopeCodec
from envelope_strategies import json_objects, json_values
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from babelq.envelope import decode, make, poison_record, wire
from babelq.envelope.model import Envelope
from babelq.errors import DecodeError


def _frame(members: str) -> bytes:
    """A body with an accepted frame plus ``members`` (which override by coming last)."""
    return ('{"job":"urn:babel:a:b","trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":0,'
            + members + "}").encode("utf-8")


VALID = make(
    "urn:babel:orders:created", {"order_id": 1042, "lines": [{"sku": "A-1", "qty": 2}], "note": "é/"},
    queue="orders", trace_id="7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b",
    message_id="f1e2d3c4-b5a6-4789-90ab-cdef01234567", created_at=1_749_132_727_000,
).encode()


@pytest.fixture(autouse=True)
def _quiet_babelqueue_logger() -> Iterator[None]:
    """babelqueue logs a warning for every key it drops; the fuzz inputs make many."""
    logger = logging.getLogger("babelqueue")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


def _exercise(body: bytes | str) -> Envelope | None:
    """Decode and touch every accessor; only DecodeError may escape decode, nothing after."""
    try:
        env = decode(body)
    except DecodeError as exc:
        assert str(exc)
        return None
    assert isinstance(env.document(), dict)
    verdict = env.accepts()
    reason = env.rejection()
    assert (reason is None) == verdict
    for name in ("urn", "trace_id", "data", "meta", "attempts", "dead_letter", "id", "queue", "lang",
                 "schema_version", "created_at", "correlation_id", "sharding_key", "deliver_at",
                 "expire_at", "priority", "transaction_id"):
        getattr(env, name)
    env.is_expired(0)
    repr(env)
    return env


@settings(max_examples=500, deadline=None)
@given(body=st.binary(max_size=300))
def test_arbitrary_bytes_raise_only_decode_error(body: bytes) -> None:
    _exercise(body)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cut=st.integers(min_value=0, max_value=len(VALID)),
    length=st.integers(min_value=0, max_value=8),
    insert=st.binary(max_size=8),
)
def test_mutated_envelopes_raise_only_decode_error(cut: int, length: int, insert: bytes) -> None:
    body = VALID[:cut] + insert + VALID[cut + length :]
    env = _exercise(body)
    if env is not None:
        env.with_attempts(1).encode()  # whatever was readable re-encodes


@settings(max_examples=300, deadline=None)
@given(body=st.text(max_size=200))
def test_arbitrary_text_raises_only_decode_error(body: str) -> None:
    _exercise(body)


@pytest.mark.parametrize(
    "body",
    [
        b"\xff\xfe{}",
        b'{"a":"\xc3"}',
        b'{"a":"\xed\xa0\x80"}',  # a surrogate spelled in UTF-8 bytes (CESU-8): not UTF-8
        b'{"a":"\\ud800"}',  # an escaped lone high surrogate
        b'{"a":"\\udc00x"}',  # an escaped lone low surrogate
        b'{"\\ud800":1}',  # ... in a key
        b'{"n":' + b"9" * 400 + b',"a":"\\ud800"}',  # orjson stops at the number; the surrogate still counts
        "\ud800",
        '{"a":"\udc00"}',
        b"\xef\xbb\xbf{}",  # a byte order mark
        b"[" * 2000 + b"]" * 2000,
        b'{"a":' * 2000 + b"1" + b"}" * 2000,
        b'{"a":1e400}',
        b'{"a":-1e400}',
        b'{"a":NaN}',
        b'{"a":Infinity}',
        b'{"a":-Infinity}',
        b"{} x",
        b"{}{}",
        b'{"a":1},',
        b"[]",
        b"1",
        b'"s"',
        b"null",
        b"true",
        b"",
        b" ",
        b'{"a":1',
        b'{"a":01}',
        b"{'a':1}",
    ],
)
def test_poison_bodies_are_decode_errors(body: bytes | str) -> None:
    with pytest.raises(DecodeError):
        decode(body)
    with pytest.raises(DecodeError):
        wire.loads_document(body)


def test_non_bytes_input_is_a_decode_error() -> None:
    with pytest.raises(DecodeError):
        decode(12)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("literal", "expected"),
    [
        ("9" * 308, int("9" * 308)),
        ("-" + "9" * 308, -int("9" * 308)),
        ("18446744073709551616", 2**64),
        ("18446744073709551615", 2**64 - 1),
        ("-9223372036854775809", -(2**63) - 1),
        ("9223372036854775807", 2**63 - 1),
        ("1" + "0" * 30, 10**30),
    ],
)
def test_wide_integers_come_back_exact(literal: str, expected: int) -> None:
    body = _frame(f'"data":{{"n":{literal},"s":"{literal}"}}')
    env = decode(body)
    assert type(env.data["n"]) is int and env.data["n"] == expected
    assert env.data["s"] == literal
    assert env.accepts()
    assert wire.loads_document(body)["data"]["n"] == expected
    assert f'"n":{literal}'.encode() in env.with_attempts(1).encode()


def test_wide_integer_in_attempts_is_read_exactly_and_rejected() -> None:
    """attempts beyond signed 64-bit is poison for typed consumers (and babelqueue): rejected,
    and the reason names the integer, not the float orjson widened it to."""
    body = _frame('"attempts":' + "7" * 25)
    env = decode(body)
    assert not env.accepts() and env.attempts == int("7" * 25)
    assert decode(body).rejection() == "attempts is an integer outside signed 64-bit"


def test_large_but_finite_floats_decode() -> None:
    env = decode(_frame('"data":{"f":1.7976931348623157e308,"g":5e-324}'))
    assert env.data == {"f": 1.7976931348623157e308, "g": 5e-324}


def test_duplicate_keys_last_one_wins_like_the_standard_library() -> None:
    body = _frame('"job":"urn:babel:c:d","data":{"x":1,"x":2}')
    env = decode(body)
    expected = json.loads(body)
    assert env.urn == "urn:babel:c:d" == expected["job"]
    assert env.data == expected["data"] == {"x": 2}


def test_nesting_within_the_limit_decodes() -> None:
    body = _frame('"data":{"d":' + "[" * 500 + "]" * 500 + "}")
    assert decode(body).accepts()


def test_bytearray_memoryview_and_str_inputs_decode_alike() -> None:
    for body in (VALID, bytearray(VALID), memoryview(VALID), VALID.decode("utf-8")):
        env = decode(body)
        assert env.raw == VALID and env.encode() == VALID


# -- agreement with babelqueue's consumer verdict ----------------------------------------------

_ABSENT = object()
frame_strings = st.sampled_from(
    ["urn:babel:orders:created", "", " ", "\t\n", "\x0b\x0c", "\x1c", "\x85", "\xa0", "\u3000", "x", "\u2028"]
)
frame_values = st.one_of(frame_strings, st.just(_ABSENT), st.none(), st.booleans(),
                         st.integers(min_value=-3, max_value=3),
                         st.sampled_from([1.0, 0.5, 2**70, 2**63 - 1, 2**63, -(2**63), 2**64]),
                         st.just([]), st.just({}))


@st.composite
def envelope_like(draw: st.DrawFn) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    fields = {
        "job": draw(frame_values),
        "urn": draw(frame_values),
        "trace_id": draw(frame_values),
        "data": draw(st.one_of(json_objects(5), frame_values)),
        "meta": draw(st.one_of(
            st.fixed_dictionaries(
                {"schema_version": frame_values}, optional={"id": frame_strings, "created_at": frame_values}
            ),
            frame_values,
        )),
        "attempts": draw(frame_values),
        "extra": draw(st.one_of(st.just(_ABSENT), json_values(5))),
    }
    for key in draw(st.permutations(list(fields))):
        value = fields[key]
        if value is _ABSENT:
            continue
        if key == "meta" and isinstance(value, dict):
            value = {k: v for k, v in value.items() if v is not _ABSENT}
        doc[key] = value
    return doc


def _deliberate_divergence(doc: dict[str, Any]) -> bool:
    """babelqueue compares schema_version with ``==``, so it accepts ``1.0`` and ``true``.

    docs/standard.md §2.6 asks for a schema_version of exactly 1 (the canonical schema's integer const),
    and a Go or PHP consumer refuses a float or boolean there, so babelq rejects them.
    """
    meta = doc.get("meta")
    return isinstance(meta, dict) and type(meta.get("schema_version")) in (float, bool)


@settings(max_examples=500, deadline=None)
@given(doc=envelope_like())
def test_verdict_agrees_with_babelqueue(doc: dict[str, Any]) -> None:
    text = json.dumps(doc, ensure_ascii=False)
    ours = decode(text.encode("utf-8")).accepts()
    # what babelqueue hands to a handler: not poison (typed members, int64) and accepted
    theirs = EnvelopeCodec.poison_cause(text) is None and EnvelopeCodec.accepts(
        EnvelopeCodec.decode_lenient(text)
    )
    if ours != theirs:
        assert _deliberate_divergence(doc) and theirs and not ours


@pytest.mark.parametrize("version", ["1.0", "true"])
def test_non_integer_schema_version_is_rejected(version: str) -> None:
    body = _frame(f'"meta":{{"schema_version":{version}}}')
    env = decode(body)
    assert not env.accepts()
    assert "schema_version" in (env.rejection() or "")


def test_every_poison_body_still_gets_a_record() -> None:
    """The poison path accepts whatever decode refused (a smoke check; poison has its own tests)."""
    for body in (b"\xff", b"[]", b'{"a":NaN}', b"[" * 2000):
        with pytest.raises(DecodeError):
            decode(body)
        assert poison_record(body, original_queue="q", error="x")
