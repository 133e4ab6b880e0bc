"""Every message the runtime was given can be retried or dead-lettered: nothing loops (issue 10).

The fault: a body decode accepted but encode could not write (data nested ~1000 deep) failed
on both the retry and the dead-letter path, so the disposer logged an error and the message came
back after every visibility timeout with ``attempts`` still 0 and the DLQ empty. Settling must
never fail on a message: what cannot be annotated or re-encoded goes to the DLQ as the poison
record of its original bytes, and ``attempts`` never goes beyond signed 64-bit.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from babelq.envelope import Envelope, decode, original_bytes
from babelq.envelope.constants import INT64_MAX, INT64_MIN
from babelq.envelope.limits import nesting_depth
from babelq.errors import DecodeError
from babelq.runtime import App, Backoff, Message
from babelq.runtime.counters import Counters
from babelq.runtime.disposition import Disposer, FailurePolicy
from babelq.runtime.message import Message as RuntimeMessage
from babelq.runtime.outcome import Outcome
from babelq.runtime.pipeline import Processed
from babelq.transports.memory import MemoryTransport

from .support import RecordingTransport, dlq

LIMIT = 512
URN = "urn:babel:deep:nested"


def _deep_data(levels: int) -> dict[str, Any]:
    """``data`` whose innermost list is ``levels`` levels below the envelope (data itself is 2)."""
    inner: Any = 0
    for _ in range(levels - 2):
        inner = [inner]
    return {"d": inner}


def _body(doc: dict[str, Any]) -> bytes:
    """The canonical bytes of ``doc``, written by the standard library with room to recurse."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 5000))
    try:
        return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    finally:
        sys.setrecursionlimit(limit)


def _doc(data: dict[str, Any], attempts: int = 0, **extra: Any) -> dict[str, Any]:
    return {"job": URN, "trace_id": "t", "data": data,
            "meta": {"id": "m", "queue": "q", "lang": "go", "schema_version": 1, "created_at": 1},
            "attempts": attempts, **extra}  # fmt: skip


def _settle(body: bytes, outcome: Outcome, *, max_attempts: int = 3) -> tuple[MemoryTransport, Counters]:
    """Publish ``body``, reserve it, and settle it once with ``outcome`` as the runtime would."""
    transport = MemoryTransport(visibility_timeout=30.0)
    transport.publish("q", body)
    [delivery] = transport.reserve("q")
    message = RuntimeMessage.of(decode(delivery.body), delivery)
    counters = Counters()
    policy = FailurePolicy(max_attempts=max_attempts, backoff=Backoff(base_ms=0, jitter=False))
    disposer = Disposer(transport, counters, policy, logging.getLogger("test.settle"))
    acks: list[Any] = []
    disposer.settle(Processed(delivery, message, outcome), acks)
    disposer.flush(acks)
    return transport, counters


def _settled_cleanly(transport: MemoryTransport, counters: Counters) -> tuple[list[bytes], list[bytes]]:
    """(retried bodies, dead letters); asserts the reservation was settled and nothing failed."""
    assert counters.snapshot().get("disposition_errors", 0) == 0
    assert transport.reserved("q") == 0
    retried, dead = transport.peek_all("q"), transport.peek_all("q.dlq")
    assert len(retried) + len(dead) == 1
    return retried, dead


# -- the fault as reported ---------------------------------------------------------------------------


def test_a_body_nested_too_deep_for_the_old_encoder_is_dead_lettered_not_looped(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    app = make_app(max_attempts=3)
    runs: list[int] = []

    def handler(message: Message) -> None:
        runs.append(message.attempts)
        raise RuntimeError("handler failed")

    app.register(URN, handler)
    for levels in (LIMIT, 1000):
        transport.publish("q", _body(_doc(_deep_data(levels))))
    app.run_until_empty(wait_delayed=True, timeout=10)

    assert runs == [0, 1, 2]  # the 512-deep one ran three times; the 1000-deep one is poison
    assert transport.reserved_count("q") == 0 and transport.peek_all("q") == []
    records = dlq(transport)
    assert len(records) == 2
    failed = [decode(r) for r in records if decode(r).dead_letter["reason"] == "failed"]  # type: ignore[index]
    assert [env.attempts for env in failed] == [3]
    poison = [r for r in records if decode(r).dead_letter["reason"] == "poison"]  # type: ignore[index]
    assert original_bytes(poison[0]) == _body(_doc(_deep_data(1000)))
    assert app.stats().get("disposition_errors", 0) == 0


# -- attempts at the edge of int64 ------------------------------------------------------------------


def test_a_message_at_int64_max_that_fails_is_dead_lettered_not_retried_with_2_63() -> None:
    body = _body(_doc({"n": 1}, attempts=INT64_MAX))
    transport, counters = _settle(body, Outcome.failed(RuntimeError("x")), max_attempts=2**80)
    retried, [record] = _settled_cleanly(transport, counters)
    assert retried == []
    dead = decode(record)
    assert dead.accepts() and dead.attempts == INT64_MAX
    assert dead.dead_letter is not None and dead.dead_letter["attempts"] == INT64_MAX


def test_a_negative_attempts_counts_as_zero_on_retry() -> None:
    transport, counters = _settle(_body(_doc({"n": 1}, attempts=-5)), Outcome.failed(RuntimeError("x")))
    [retry], _ = _settled_cleanly(transport, counters)
    assert decode(retry).attempts == 1


# -- the fallback when annotating or encoding fails ---------------------------------------------------


@pytest.mark.parametrize("outcome", [Outcome.failed(RuntimeError("x")), Outcome.dead_letter("unknown_urn")])
@pytest.mark.parametrize("max_attempts", [1, 5])
def test_a_message_that_cannot_be_re_encoded_goes_to_the_dlq_as_its_original_bytes(
    monkeypatch: pytest.MonkeyPatch, outcome: Outcome, max_attempts: int
) -> None:
    body = _body(_doc({"n": 1}, attempts=1, unknown_key=[1, 2]))

    def broken(self: Envelope) -> bytes:
        raise ValueError("simulated: this envelope cannot be encoded")

    monkeypatch.setattr(Envelope, "encode", broken)
    transport, counters = _settle(body, outcome, max_attempts=max_attempts)
    monkeypatch.undo()
    retried, [record] = _settled_cleanly(transport, counters)
    assert retried == []
    assert original_bytes(record) == body
    block = decode(record).dead_letter
    assert block is not None and block["original"] == "in_place"
    assert "cannot be encoded" in block["error"]
    assert counters.snapshot().get("dead_lettered", 0) == 1


# -- the property: anything decode accepts settles -------------------------------------------------------

_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=INT64_MIN, max_value=INT64_MAX),
    st.integers(min_value=-(10**40), max_value=10**40), st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
_json = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=12,
)
_attempts = st.one_of(
    st.integers(min_value=0, max_value=10),
    st.sampled_from([INT64_MAX, INT64_MAX - 1, INT64_MIN, -1]),
    st.integers(min_value=INT64_MIN, max_value=INT64_MAX),
)


@st.composite
def accepted_bodies(draw: st.DrawFn) -> bytes:
    data = draw(st.dictionaries(st.text(max_size=6), _json, max_size=5))
    levels = draw(st.one_of(st.just(0), st.just(LIMIT), st.integers(min_value=3, max_value=LIMIT)))
    if levels:  # data is level 2, so its "deep" list nests down to level ``levels``
        data = {**data, "deep": _deep_data(levels)["d"]}
    extra = draw(
        st.dictionaries(
            st.sampled_from(["future", "timestamp", "urn", "dead_letter"]),
            st.one_of(st.none(), st.just({"reason": "failed"}), st.just(URN)),
            max_size=2,
        )
    )
    doc = _doc(data, draw(_attempts), **extra)
    if draw(st.booleans()):
        doc["meta"]["max_retries"] = 3  # a forbidden key, dropped on re-encoding
    body = _body(doc)
    try:
        accepted = decode(body).accepts()
    except DecodeError:
        accepted = False
    if not accepted:
        body = _body(_doc(data, 0))
    return body


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=accepted_bodies(), max_attempts=st.sampled_from([1, 2, 3, 2**70]), dead_letter_now=st.booleans())
def test_every_body_decode_accepts_can_be_retried_and_dead_lettered(
    body: bytes, max_attempts: int, dead_letter_now: bool
) -> None:
    assert decode(body).accepts()
    assert nesting_depth(body) <= LIMIT
    error = RuntimeError("x")
    outcome = Outcome.dead_letter("failed", error=error) if dead_letter_now else Outcome.failed(error)
    transport, counters = _settle(body, outcome, max_attempts=max_attempts)
    retried, dead = _settled_cleanly(transport, counters)
    env = decode(body)
    for retry in retried:
        again = decode(retry)
        assert again.accepts() and again.attempts == max(env.attempts, 0) + 1 <= INT64_MAX
        assert again.data == env.data
    for record in dead:
        back = decode(record)
        assert back.accepts() and back.dead_letter is not None
        assert back.data == env.data and -(2**63) <= back.attempts <= INT64_MAX
