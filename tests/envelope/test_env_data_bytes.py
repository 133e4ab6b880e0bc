"""A received envelope re-emitted (retry, dead letter, redrive) keeps ``data`` as the producer spelled it.

Node writes ``1e-7`` and ``0.000001`` where Python writes ``1e-07`` and ``1e-06``; PHP escapes
``/`` and non-ASCII characters; Go and Java spell exponents with ``E``. Values are equal either
way, but the envelope promises the producer's bytes: only the frame may change."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from babelq.envelope import annotate, decode, make, redrive
from babelq.envelope.data_bytes import compact, data_span

FRAME = make("urn:babel:orders:created", {"x": 1}, queue="orders").encode().decode()


def _number(draw: Any) -> str:
    kind = draw(st.sampled_from(["int", "float", "exp"]))
    if kind == "int":
        return str(draw(st.integers(-(2**63), 2**63 - 1)))
    mantissa = draw(st.integers(1, 999_999))
    if kind == "float":
        return f"{draw(st.sampled_from(['', '-']))}0.{mantissa:06d}"
    exponent = draw(st.integers(-30, 30))
    e = draw(st.sampled_from(["e", "E"]))
    sign = "+" if exponent >= 0 and draw(st.booleans()) else ""
    return f"{mantissa / 1000:g}{e}{sign}{exponent}"


def _string(draw: Any) -> str:
    text = draw(st.text(st.characters(exclude_categories=("Cs",)), max_size=12))
    out = []
    for ch in text:
        style = draw(st.sampled_from(["raw", "u", "short"]))
        if ch in '"\\' or ord(ch) < 0x20:
            out.append(json.dumps(ch)[1:-1])
        elif style == "u" and ord(ch) <= 0xFFFF:
            out.append(f"\\u{ord(ch):04x}")
        elif style == "short" and ch == "/":
            out.append("\\/")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


@st.composite
def spelled(draw: Any, depth: int = 0) -> str:
    """JSON text of an object, each token spelled one of the ways SDKs write it."""
    keys = draw(st.lists(st.text("abcdefgh", min_size=1, max_size=4), max_size=4, unique=True))
    parts = []
    for key in keys:
        kind = draw(st.sampled_from(["number", "string", "bool", "null", "list", "object"] if depth < 2
                                    else ["number", "string", "null"]))
        if kind == "number":
            value = _number(draw)
        elif kind == "string":
            value = _string(draw)
        elif kind == "bool":
            value = draw(st.sampled_from(["true", "false"]))
        elif kind == "null":
            value = "null"
        elif kind == "list":
            value = "[" + ",".join(_number(draw) for _ in range(draw(st.integers(0, 3)))) + "]"
        else:
            value = draw(spelled(depth + 1))
        parts.append(f'"{key}":{value}')
    return "{" + ",".join(parts) + "}"


@settings(max_examples=300, deadline=None)
@given(spelled())
def test_a_retry_a_dead_letter_and_a_redrive_keep_the_producers_data_bytes(data: str) -> None:
    body = FRAME.replace('{"x":1}', data).encode()
    received = decode(body)
    assert received.accepts()
    retried = received.with_attempts(received.attempts + 1).encode()
    dead = annotate(received, "failed", original_queue="orders", error="boom").encode()
    again = redrive(decode(dead)).encode()
    for out in (retried, dead, again):
        span = data_span(out)
        assert span is not None and out[span[0] : span[1]] == data.encode()
        assert decode(out).data == received.data
    assert decode(retried).attempts == received.attempts + 1


def test_whitespace_between_a_producers_tokens_is_left_out_and_the_tokens_kept() -> None:
    data = '{ "price" : 1E+2 , "note" : "a b\\u00e9" }'
    body = FRAME.replace('{"x":1}', data).encode()
    out = decode(body).with_attempts(1).encode()
    assert b'"data":{"price":1E+2,"note":"a b\\u00e9"}' in out
    assert compact(out) == out


def test_a_repeated_data_key_is_read_as_decoders_read_it_the_last_one() -> None:
    body = FRAME.replace('"data":{"x":1}', '"data":{"x":1},"data":{"y":2e-7}').encode()
    env = decode(body)
    assert env.data == {"y": 2e-7}
    assert b'"data":{"y":2e-7}' in env.with_attempts(1).encode()


def test_data_replaced_by_a_worker_is_written_anew() -> None:
    env = decode(FRAME.replace('{"x":1}', '{"x":1e-7}').encode())
    out = env.with_data({"x": 0.5}).encode()
    assert b'"data":{"x":0.5}' in out
