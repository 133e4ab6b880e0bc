"""The envelope's limits hold the same on every side: producer, consumer and re-encoder (issue 10).

A message decode accepts must survive every change a worker makes to it (retry, dead letter,
redrive): otherwise it can neither be retried nor dead-lettered and comes back forever. So
decode, make and encode share one nesting limit (512 levels, the envelope itself included),
decode calls anything deeper poison, and encode writes anything decode accepts whatever the
caller's stack depth. The integer members the standard types as int64 are poison outside it,
as the ``babelqueue`` package says, and the producer trims a URN and a trace id the way that
package does, so one call routes the same through both SDKs.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from babelqueue import EnvelopeCodec
from babelqueue.exceptions import BabelQueueError
from envelope_strategies import json_values
from hypothesis import given, settings
from hypothesis import strategies as st

from babelq.envelope import annotate, decode, make, poison_record, redrive, wire
from babelq.envelope.constants import INT64_MAX, INT64_MIN
from babelq.errors import DecodeError, EnvelopeError, URNError, URNFormatWarning

LIMIT = 512  # the documented limit (docs/envelope.md, "Limits")

T = TypeVar("T")


def _canonical(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _body(depth: int, *, number: str = "0", attempts: str = "0") -> bytes:
    """An accepted-looking envelope nested ``depth`` levels deep, the envelope itself included."""
    lists = depth - 2  # the envelope is level 1, data level 2
    inner = "[" * lists + number + "]" * lists
    return (
        '{"job":"urn:babel:deep:nested","trace_id":"t","data":{"d":' + inner + "},"
        '"meta":{"id":"m","queue":"q","lang":"go","schema_version":1,"created_at":1},'
        '"attempts":' + attempts + "}"
    ).encode()


def _at_stack_depth(frames: int, fn: Callable[[], T]) -> T:
    """``fn()`` called ``frames`` Python frames deep: what a deep caller (a framework) leaves."""
    if frames <= 0:
        return fn()
    return _at_stack_depth(frames - 1, fn)


def _nested_dicts(levels: int) -> dict[str, Any]:
    """``levels`` dicts, each the value of key ``a`` of the one above."""
    value: dict[str, Any] = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


@pytest.fixture(autouse=True)
def _quiet_babelqueue_logger() -> Iterator[None]:
    logger = logging.getLogger("babelqueue")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


# -- nesting depth -------------------------------------------------------------------------------


def test_the_limit_is_one_constant() -> None:
    from babelq.envelope import constants

    assert constants.MAX_DEPTH == LIMIT


@pytest.mark.parametrize(
    "depth", [3, 254, 255, 256, 300, 511, 512, 513, 600, 990, 1000, 1023, 1024, 1025, 4000]
)
def test_decode_accepts_exactly_what_retry_and_dead_letter_can_write(depth: int) -> None:
    body = _body(depth)
    if depth > LIMIT:
        reason = rf"^body is not JSON: nested too deeply \(more than {LIMIT} levels\)$"
        with pytest.raises(DecodeError, match=reason):
            decode(body)
        assert not wire.is_json_object(body)
        record = poison_record(body, original_queue="q", error="too deep")
        assert decode(record).dead_letter is not None  # the poison record itself is readable
        return
    env = decode(body)
    assert env.accepts()
    retry = env.with_attempts(1).encode()
    assert retry == body.replace(b'"attempts":0', b'"attempts":1')
    assert decode(retry).attempts == 1
    dead = decode(annotate(env.with_attempts(3), "failed", error="boom").encode())
    assert dead.dead_letter is not None and dead.dead_letter["attempts"] == 3
    assert redrive(dead).encode() == body
    assert env.to_dict() == json.loads(body)


@pytest.mark.parametrize("depth", [LIMIT, LIMIT + 1])
def test_deep_bodies_behave_the_same_under_a_deep_caller(depth: int) -> None:
    """The limit is not the interpreter's recursion limit: a caller 700 frames deep changes nothing."""

    def everything() -> bytes | None:
        try:
            env = decode(_body(depth))
        except DecodeError:
            return None
        env.data  # noqa: B018 (reading data runs the exact-integer check)
        return annotate(env.with_attempts(1), "failed", error="x").encode()

    assert sys.getrecursionlimit() <= 1000 + 100  # the default, give or take a test runner's bump
    record = _at_stack_depth(700, everything)
    assert (record is None) is (depth > LIMIT)
    if record is not None:
        assert decode(record).attempts == 1


@pytest.mark.parametrize("depth", [LIMIT - 1, LIMIT])
def test_a_deep_body_the_standard_library_reads_stays_exact(depth: int) -> None:
    """A 25-digit integer is one orjson widens to a float; the standard library reads it exactly,
    deep or not (a 400-digit one, beyond a double, is poison: see below)."""
    big = "9" * 25
    body = _body(depth, number=big)
    for frames in (0, 750):
        env = _at_stack_depth(frames, lambda: decode(body))
        leaf: Any = env.data["d"]
        for _ in range(depth - 2):
            leaf = leaf[0]
        assert leaf == int(big)
        assert _at_stack_depth(frames, lambda env=env: env.with_attempts(2).encode()) == body.replace(
            b'"attempts":0', b'"attempts":2'
        )
    with pytest.raises(DecodeError, match=r"^body is not JSON: nested too deeply"):
        decode(_body(LIMIT + 1, number=big))


def test_depth_is_counted_outside_strings_only() -> None:
    text = "[" * 2000 + "{" * 2000 + '\\"[' * 300
    env = decode(make("urn:babel:deep:nested", {"s": text, "d": [[[]]]}).encode())
    assert env.data["s"] == text
    brackets_in_keys = {"[" * 600: 1}
    assert decode(make("urn:babel:deep:nested", brackets_in_keys).encode()).data == brackets_in_keys


@pytest.mark.parametrize("frames", [0, 800])
def test_make_takes_the_deepest_payload_decode_accepts(frames: int) -> None:
    data = _nested_dicts(LIMIT - 1)  # data is level 2, so its innermost dict is level 512
    env = _at_stack_depth(frames, lambda: make("urn:babel:deep:nested", data, trace_id="t"))
    assert decode(env.encode()).data == data


@pytest.mark.parametrize("frames", [0, 800])
def test_make_refuses_deeper_naming_the_path(frames: int) -> None:
    data = _nested_dicts(LIMIT)
    with pytest.raises(EnvelopeError) as caught:
        _at_stack_depth(frames, lambda: make("urn:babel:deep:nested", data))
    assert caught.value.path == "data" + ".a" * (LIMIT - 1)
    assert caught.value.problem.startswith(f"nested too deeply: more than {LIMIT} levels")

    listed: dict[str, Any] = {"l": []}
    leaf: list[Any] = listed["l"]
    for _ in range(LIMIT - 2):
        leaf.append([])
        leaf = leaf[0]
    with pytest.raises(EnvelopeError) as caught:
        make("urn:babel:deep:nested", {"x": 1}, meta={"deep": listed})
    assert caught.value.path == "meta.deep.l" + "[0]" * (LIMIT - 3)


def test_make_refuses_a_payload_that_contains_itself() -> None:
    data: dict[str, Any] = {"a": 1}
    data["self"] = data
    with pytest.raises(EnvelopeError) as caught:
        make("urn:babel:deep:nested", data)
    assert caught.value.path in ("data.self", "data.self.self")  # make keeps a shallow copy of data
    assert caught.value.problem == "nested too deeply: the value contains itself"


def test_re_encoding_refuses_what_decode_would_call_poison() -> None:
    """An Envelope built by hand from a too-deep document never reaches the wire."""
    from babelq.envelope import Envelope

    doc = json.loads(_body(LIMIT))
    doc["data"]["extra"] = _nested_dicts(LIMIT)
    with pytest.raises(EnvelopeError, match="nested too deeply"):
        Envelope(doc).encode()


@settings(max_examples=300, deadline=None)
@given(value=json_values(), wrap=st.integers(min_value=0, max_value=3000), dicts=st.booleans())
def test_the_iterative_encoder_writes_the_canonical_bytes(value: Any, wrap: int, dicts: bool) -> None:
    expected = _canonical(value)
    assert wire.dumps_iterative(value) == expected
    for _ in range(wrap):
        value = {"k": value} if dicts else [value]
    prefix, suffix = ('{"k":', "}") if dicts else ("[", "]")
    deep = prefix.encode() * wrap + expected + suffix.encode() * wrap
    assert wire.dumps_iterative(value) == deep
    assert wire.dumps_std(value) == deep


def test_the_iterative_encoder_refuses_what_json_refuses() -> None:
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    for bad, error in ((float("nan"), ValueError), ({"a": object()}, TypeError), (cyclic, ValueError)):
        with pytest.raises(error):
            wire.dumps_iterative(bad)
    assert wire.dumps_iterative({1: True, None: [1.5, -0.0, 2**70, "é\n"]}) == _canonical(
        {1: True, None: [1.5, -0.0, 2**70, "é\n"]}
    )


def test_reading_a_deep_body_is_thread_safe() -> None:
    """The standard library fallback may run on a helper thread; many callers at once still agree."""
    body = _body(LIMIT, number="9" * 100)
    results: list[bool] = []

    def worker() -> None:
        results.append(_at_stack_depth(800, lambda: decode(body).data["d"] is not None))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [True] * 8


# -- int64 members ------------------------------------------------------------------------------------


def _frame(**members: str) -> str:
    """A body with an accepted frame whose members are replaced or added as JSON text."""
    parts = {
        "job": '"urn:babel:orders:created"',
        "trace_id": '"t"',
        "data": "{}",
        "meta": '{"id":"m","queue":"q","lang":"go","schema_version":1,"created_at":1}',
        "attempts": "0",
    }
    parts.update(members)
    return "{" + ",".join(f'"{key}":{value}' for key, value in parts.items()) + "}"


def _meta(created_at: str) -> str:
    return '{"id":"m","queue":"q","lang":"go","schema_version":1,"created_at":' + created_at + "}"


def _block(**members: str) -> str:
    fields = {"reason": '"failed"', "failed_at": "1", "original_queue": '"q"', "attempts": "3",
              "lang": '"go"'}  # fmt: skip
    fields.update(members)
    return "{" + ",".join(f'"{key}":{value}' for key, value in fields.items()) + "}"


INT64_CASES = [
    (_frame(attempts=str(INT64_MAX)), True),
    (_frame(attempts=str(INT64_MIN)), True),
    (_frame(attempts=str(INT64_MAX + 1)), False),
    (_frame(attempts=str(2**64)), False),
    (_frame(attempts=str(2**64 - 1)), False),
    (_frame(attempts=str(INT64_MIN - 1)), False),
    (_frame(attempts="1" + "0" * 30), False),
    (_frame(meta=_meta(str(INT64_MAX))), True),
    (_frame(meta=_meta("null")), True),
    (_frame(meta='{"schema_version":1}'), True),
    (_frame(meta=_meta(str(INT64_MAX + 1))), False),
    (_frame(meta=_meta(str(-(2**70)))), False),
    (_frame(meta=_meta('"1749132727000"')), False),
    (_frame(meta=_meta("1.5")), False),
    (_frame(meta=_meta("1.0")), False),
    (_frame(meta=_meta("true")), False),
    (_frame(meta=_meta("[]")), False),
    (_frame(dead_letter="null"), True),
    (_frame(dead_letter="{}"), True),
    (_frame(dead_letter=_block()), True),
    (_frame(dead_letter='"failed"'), False),
    (_frame(dead_letter="[]"), False),
    (_frame(dead_letter="5"), False),
    (_frame(dead_letter=_block(failed_at="null", attempts="null")), True),
    (_frame(dead_letter=_block(failed_at=str(INT64_MAX), attempts=str(INT64_MIN))), True),
    (_frame(dead_letter=_block(failed_at=str(INT64_MAX + 1))), False),
    (_frame(dead_letter=_block(failed_at='"yesterday"')), False),
    (_frame(dead_letter=_block(failed_at="1.5")), False),
    (_frame(dead_letter=_block(attempts=str(2**64))), False),
    (_frame(dead_letter=_block(attempts='"3"')), False),
    (_frame(dead_letter=_block(attempts="false")), False),
]


def _babelqueue_hands_it_over(text: str) -> bool:
    """Whether the babelqueue package would give this body to a handler."""
    return EnvelopeCodec.poison_cause(text) is None and EnvelopeCodec.accepts(
        EnvelopeCodec.decode_lenient(text)
    )


@pytest.mark.parametrize(("text", "ok"), INT64_CASES)
def test_int64_members_agree_with_babelqueue(text: str, ok: bool) -> None:
    assert _babelqueue_hands_it_over(text) is ok
    env = decode(text.encode())
    assert env.accepts() is ok
    assert (env.rejection() is None) is ok
    fresh = decode(text.encode())
    assert (fresh.rejection() is None) is ok  # the reason without the verdict's earlier look
    if not ok:
        assert "64-bit" in (fresh.rejection() or "") or "not an integer" in (fresh.rejection() or "") or (
            "dead_letter is" in (fresh.rejection() or "")
        )


@pytest.mark.parametrize(
    ("member", "value", "reason"),
    [
        ("attempts", str(2**63), "attempts is an integer outside signed 64-bit"),
        ("attempts", "1" * 40, "attempts is an integer outside signed 64-bit"),
        ("attempts", "1.5", "attempts is float, not an integer"),
        ("meta", _meta(str(2**64)), "meta.created_at is an integer outside signed 64-bit"),
        ("meta", _meta('"x"'), "meta.created_at is str, not an integer"),
        ("dead_letter", "[]", "dead_letter is list, not an object"),
        ("dead_letter", _block(failed_at="1e3"), "dead_letter.failed_at is float, not an integer"),
        (
            "dead_letter",
            _block(attempts=str(-(2**63) - 1)),
            "dead_letter.attempts is an integer outside signed 64-bit",
        ),
    ],
)
def test_rejection_names_the_member(member: str, value: str, reason: str) -> None:
    assert decode(_frame(**{member: value}).encode()).rejection() == reason


_pool = st.sampled_from(
    [None, True, False, 0, 1, -1, 1.0, 1.5, "1", "", [], {}, INT64_MAX, INT64_MIN, INT64_MAX + 1,
     INT64_MIN - 1, 2**64 - 1, 2**64, 10**30, -(10**30)]
)  # fmt: skip
_absent = object()


@settings(max_examples=400, deadline=None)
@given(
    attempts=_pool,
    created_at=st.one_of(st.just(_absent), _pool),
    dead_letter=st.one_of(
        st.just(_absent),
        _pool,
        st.fixed_dictionaries(
            {"reason": st.just("failed")}, optional={"failed_at": _pool, "attempts": _pool}
        ),
    ),
)
def test_integer_members_get_babelqueues_verdict(attempts: Any, created_at: Any, dead_letter: Any) -> None:
    meta: dict[str, Any] = {"id": "m", "queue": "q", "lang": "go", "schema_version": 1}
    if created_at is not _absent:
        meta["created_at"] = created_at
    doc: dict[str, Any] = {"job": "urn:babel:orders:created", "trace_id": "t", "data": {}, "meta": meta,
                           "attempts": attempts}  # fmt: skip
    if dead_letter is not _absent:
        doc["dead_letter"] = dead_letter
    text = json.dumps(doc)
    assert decode(text.encode()).accepts() is _babelqueue_hands_it_over(text), text


def test_with_attempts_never_writes_beyond_int64() -> None:
    env = decode(_frame(attempts=str(INT64_MAX)).encode())
    assert env.accepts() and env.attempts == INT64_MAX
    assert decode(env.with_attempts(INT64_MAX).encode()).attempts == INT64_MAX
    with pytest.raises(EnvelopeError, match="64-bit"):
        env.with_attempts(INT64_MAX + 1)


# -- producer trimming, as babelqueue does --------------------------------------------------------


def _pair(urn: str, trace_id: str) -> tuple[bytes, bytes]:
    ours = make(urn, {"n": 1}, queue="q", trace_id=trace_id, message_id="m", created_at=1)
    theirs = EnvelopeCodec.make(urn, {"n": 1}, queue="q", trace_id=trace_id)
    theirs["meta"]["id"] = "m"
    theirs["meta"]["created_at"] = 1
    return ours.encode(), EnvelopeCodec.encode(theirs).encode("utf-8")


@pytest.mark.parametrize(
    "urn",
    [" urn:babel:orders:created", "urn:babel:orders:created\t\n", "\x0b\x0curn:babel:orders:created\r "],
)
def test_producer_trims_ascii_whitespace_around_the_urn_like_babelqueue(urn: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # trimmed, the URN is well formed: nothing to warn about
        ours, theirs = _pair(urn, "t")
    assert ours == theirs
    assert decode(ours).urn == "urn:babel:orders:created"


@pytest.mark.parametrize("trace_id", [" t-1", "t-1 \n", "\tt-1\x0b"])
def test_producer_trims_ascii_whitespace_around_the_trace_id_like_babelqueue(trace_id: str) -> None:
    ours, theirs = _pair("urn:babel:orders:created", trace_id)
    assert ours == theirs
    assert decode(ours).trace_id == "t-1"


@pytest.mark.parametrize(
    ("urn", "trace_id"),
    [("\u00a0urn:babel:orders:created", "t"), ("urn:babel:orders:created\u3000", "t"),
     ("urn:babel:orders:created", "\u2003t\u00a0"), ("\u00a0", "t"), ("\x85", "t"), ("\u200b", "t")],
)  # fmt: skip
def test_unicode_spaces_are_kept_on_both_sides_like_babelqueue(urn: str, trace_id: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", URNFormatWarning)  # not ASCII: warned, still produced
        ours, theirs = _pair(urn, trace_id)
    assert ours == theirs
    env = decode(ours)
    assert env.accepts() and env.urn == urn and env.trace_id == trace_id
    assert EnvelopeCodec.accepts(EnvelopeCodec.decode(theirs.decode()))


def test_a_non_ascii_blank_urn_warns_and_is_refused_in_strict_mode() -> None:
    with pytest.warns(URNFormatWarning):
        make("\u00a0", {})
    with pytest.raises(URNError):
        make("\u00a0", {}, strict=True)


@pytest.mark.parametrize("urn", ["", " ", "\t\n\r\x0b\x0c "])
def test_an_ascii_blank_urn_is_refused_on_both_sides(urn: str) -> None:
    with pytest.raises(URNError):
        make(urn, {})
    with pytest.raises(BabelQueueError):
        EnvelopeCodec.make(urn, {})


def test_a_blank_trace_id_is_refused_rather_than_replaced() -> None:
    """Deliberate difference: babelqueue mints a new trace for a blank one, which silently breaks
    the trace a caller meant to continue; babelq refuses it (pass None to start a trace)."""
    with pytest.raises(EnvelopeError) as caught:
        make("urn:babel:orders:created", {}, trace_id=" \t")
    assert caught.value.path == "trace_id"


@pytest.mark.parametrize("depth", [3, 254, 255, 300, LIMIT])
def test_long_bodies_keep_integers_exact_through_the_depth_check(depth: int) -> None:
    """A body over 1,025 bytes is re-encoded by orjson for the depth check; the envelope reuses
    that for the exact-integer check, which must still find a 30-digit integer orjson widened."""
    wide = "1" + "0" * 30
    body = _body(depth, number=wide).replace(b'"trace_id":"t"', b'"trace_id":"' + b"t" * 1100 + b'"')
    assert len(body) > 1025
    env = decode(body)
    assert env.accepts()
    leaf: Any = env.data["d"]
    for _ in range(depth - 2):
        leaf = leaf[0]
    assert type(leaf) is int and leaf == int(wide)
    assert env.with_attempts(1).encode() == body.replace(b'"attempts":0', b'"attempts":1')


def _reference_depth(data: bytes) -> int:
    """The depth as a plain state machine, the way babelq's JVM scanner counts it."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in data:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:
                escaped = True
            elif byte == 0x22:
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        elif byte in b"]}":
            depth -= 1
    return deepest


_pieces = st.sampled_from([b"[", b"]", b"{", b"}", b'"', b"\\", b'\\"', b"a", b",", b"[" * 600, b"]" * 600])


@settings(max_examples=500, deadline=None)
@given(parts=st.lists(_pieces, max_size=40))
def test_the_depth_measure_is_one_definition(parts: list[bytes]) -> None:
    """Every shortcut (quote splitting, pair deletion, the bracket count) gives the plain state
    machine's answer, on JSON and on any other bytes."""
    from babelq.envelope.limits import nesting_depth, too_deep

    data = b"".join(parts)
    expected = _reference_depth(data)
    assert nesting_depth(data) == expected
    assert too_deep(data) is (expected > LIMIT)


@settings(max_examples=200, deadline=None)
@given(value=json_values(), wrap=st.integers(min_value=0, max_value=LIMIT + 2))
def test_the_depth_measure_on_json_texts(value: Any, wrap: int) -> None:
    from babelq.envelope.limits import nesting_depth, too_deep

    for _ in range(wrap):
        value = [value]
    data = wire.dumps_iterative(value)
    expected = _reference_depth(data)
    assert nesting_depth(data) == expected
    assert too_deep(data) is (expected > LIMIT)


@pytest.mark.parametrize("digits", [19, 20, 308, 309, 400, 4300])
@pytest.mark.parametrize("sign", ["", "-"])
def test_an_integer_only_infinity_could_hold_is_poison_as_1e400_is(digits: int, sign: str) -> None:
    """Seed 004, data rules: "Numbers. Integers must fit signed 64-bit"; every SDK reads a JSON
    number as a double somewhere, and an integer literal beyond a double's range (309 digits and
    more) is poison, as ``1e400`` is (the babelqueue package: "a number inside data must be a
    finite double"). Shorter ones decode; ``make`` never writes one beyond 64 bits."""
    from babelq.envelope import decode
    from babelq.errors import DecodeError

    literal = sign + "9" * digits
    body = ('{"job":"urn:babel:a:b","trace_id":"t","data":{"n":' + literal + '},'
            '"meta":{"schema_version":1},"attempts":0}').encode()  # fmt: skip
    if digits < 309:
        assert decode(body).accepts()
        return
    with pytest.raises(DecodeError) as info:
        decode(body)
    assert str(info.value).startswith("body is not usable JSON")
