"""The artemis transport's own reader of received AMQP 1.0 messages (``read_message``) against
proton's ``Message.decode``.

The consumer reads a message's sections straight from its bytes and hands anything unusual to
proton. What must hold, checked on generated messages encoded by proton itself: whenever the
reader answers, its body, headers, delivery count, first-acquirer flag and ingress time are
exactly what the proton path (``body_bytes``/``message_headers``/``stored_at_of`` after
``Message.decode``) gives; the messages babelq and the ``babelqueue`` package publish are read
by the reader (not handed over); and a truncated or corrupted message is never read into
something proton would not decode the same way.
"""

from __future__ import annotations

import uuid
from typing import Any

import proton
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from babelq.envelope import make
from babelq.transports import artemis
from babelq.transports.artemis import _received_by_proton, build_message, read_message

_ascii = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=20)
_text = st.text(max_size=40)
_u32 = st.integers(0, 2**32 - 1)

#: every primitive type proton writes, wrapped so proton picks that exact AMQP encoding
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    _text,
    _ascii.map(proton.symbol),
    st.binary(max_size=40),
    st.uuids(),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(0, 2**64 - 1).map(proton.ulong),
    _u32.map(proton.uint),
    st.integers(0, 2**16 - 1).map(proton.ushort),
    st.integers(0, 255).map(proton.ubyte),
    st.integers(-128, 127).map(proton.byte),
    st.integers(-(2**15), 2**15 - 1).map(proton.short),
    st.integers(-(2**31), 2**31 - 1).map(proton.int32),
    st.integers(-(2**62), 2**62).map(proton.timestamp),
    st.floats(allow_nan=False),
    st.floats(width=32, allow_nan=False).map(proton.float32),
    st.characters().map(proton.char),
)
_values = st.one_of(
    _scalars,
    st.lists(_scalars, max_size=4),
    st.dictionaries(_ascii, _scalars, max_size=3),
)
_ids = st.one_of(
    st.none(), _text.filter(bool), st.uuids(), st.binary(min_size=1, max_size=16),
    st.integers(1, 2**64 - 1).map(proton.ulong),
)  # fmt: skip
_bodies = st.one_of(
    _text.map(lambda t: (t, False)),
    st.binary(max_size=60).map(lambda b: (b, True)),  # a data section
    st.binary(max_size=60).map(lambda b: (b, False)),  # binary amqp-value
    st.none().map(lambda n: (n, False)),
    st.integers(-(2**63), 2**63 - 1).map(lambda i: (i, False)),  # another amqp-value type: proton's business
    st.lists(_text, max_size=3).map(lambda v: (v, True)),  # amqp-sequence: proton's business
)


@st.composite
def messages(draw: Any) -> bytes:
    """A message as proton encodes it, with any subset of the sections and fields set."""
    body, inferred = draw(_bodies)
    message = proton.Message(body=body, inferred=inferred)
    if draw(st.booleans()):
        message.durable = draw(st.booleans())
        message.first_acquirer = draw(st.booleans())
        message.delivery_count = draw(_u32)
        message.priority = draw(st.integers(0, 255))
        message.ttl = draw(st.integers(0, 2**31)) / 1000.0
    if draw(st.booleans()):
        message.id = draw(_ids)
        message.correlation_id = draw(_ids)
        message.user_id = draw(st.binary(max_size=8))
        message.address = draw(st.one_of(st.none(), _text))
        message.subject = draw(st.one_of(st.none(), _text))
        message.reply_to = draw(st.one_of(st.none(), _text))
        message.content_type = draw(st.one_of(st.none(), _ascii.map(proton.symbol)))
        message.creation_time = draw(st.integers(-(2**40), 2**42)) / 1000.0
        message.expiry_time = draw(st.integers(0, 2**42)) / 1000.0
        message.group_id = draw(st.one_of(st.none(), _text))
        message.group_sequence = draw(st.integers(0, 2**31 - 1))
    if draw(st.booleans()):
        keys = st.one_of(_ascii.map(proton.symbol), st.integers(0, 2**64 - 1).map(proton.ulong))
        message.annotations = draw(st.dictionaries(keys, _values, max_size=4))
    if draw(st.booleans()):
        message.instructions = draw(st.dictionaries(_ascii.map(proton.symbol), _values, max_size=3))
    if draw(st.booleans()):
        message.properties = draw(st.dictionaries(_text, _scalars, max_size=5))
    return bytes(message.encode())


def _proton_or_none(raw: bytes) -> artemis.Received | None:
    try:
        return _received_by_proton(raw)
    except Exception:  # proton refuses it
        return None


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages())
def test_reader_equals_proton_decode(raw: bytes) -> None:
    ours = read_message(raw)
    if ours is not None:
        assert ours == _received_by_proton(raw)
        assert type(ours.body) is bytes


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages(), st.data())
def test_reader_never_reads_a_broken_message_differently(raw: bytes, data: Any) -> None:
    """Truncated or with a byte changed: the reader hands it over, or reads what proton reads."""
    broken = [raw[:cut] for cut in range(len(raw))]
    if raw:
        at = data.draw(st.integers(0, len(raw) - 1))
        broken.append(raw[:at] + bytes([data.draw(st.integers(0, 255))]) + raw[at + 1 :])
    for candidate in broken:
        ours = read_message(candidate)
        if ours is not None:
            assert ours == _proton_or_none(candidate), candidate.hex()


def test_babelq_and_babelqueue_messages_take_the_reader() -> None:
    """What the two SDKs publish (a string body, a poison record's data section, the delay
    annotation) is read without proton, and reads as proton reads it."""
    env = make("urn:babel:orders:created", {"n": 1, "note": "ça/va"})
    ours = [
        build_message(env.encode(), env),
        build_message(b"\xff\xfe\x00 poison"),
        build_message(env.encode(), env, delay_ms=1500, now_ms=1_000),
        build_message(env.encode(), env, carried={"traceparent": "00-ab-cd-01"})
        if "carried" in build_message.__code__.co_varnames
        else build_message(env.encode(), env),
    ]
    for message in ours:
        message.delivery_count = 2
        raw = bytes(message.encode())
        got = read_message(raw)
        assert got is not None
        assert got == _received_by_proton(raw)
    theirs = _babelqueue_message(env.encode().decode())
    got = read_message(theirs)
    assert got is not None and got == _received_by_proton(theirs)
    assert got.headers["message_annotations"] == {"x-opt-jms-type": env.urn}


def _babelqueue_message(body: str) -> bytes:
    """The message the babelqueue package's Artemis transport sends for ``body`` (its own
    builder, on a transport given a placeholder connection so nothing connects)."""
    from babelqueue.artemis_transport import ArtemisTransport as Theirs

    return bytes(Theirs(connection=object())._message(body).encode())


def test_repeated_sections_are_read_once_and_handed_out_as_copies() -> None:
    env = make("urn:babel:orders:created", {"n": 1})
    raw = bytes(build_message(env.encode(), env).encode())
    first = read_message(raw)
    assert first is not None
    first.headers["application_properties"]["bq_attempts"] = "99"
    first.headers["message_annotations"].clear()
    again = read_message(raw)
    assert again is not None and again == _received_by_proton(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b"",  # no sections: an empty message, as proton reads it
        bytes.fromhex("005377a105") + b"hello",  # a string amqp-value
        bytes.fromhex("005375a003") + b"\x00\x01\x02",  # one data section
    ],
)
def test_minimal_messages(raw: bytes) -> None:
    assert read_message(raw) == _received_by_proton(raw)


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (bytes.fromhex("005377a102") + b"\xff\xfe", "a string that is not UTF-8"),
        (bytes.fromhex("005375a0010a005375a0010b"), "two data sections"),
        (bytes.fromhex("0053770053770040"), "a described value as the body"),
        (bytes.fromhex("00a30d") + b"amqp:data:bin" + bytes.fromhex("a0010a"), "a symbolic descriptor"),
        (bytes.fromhex("005377a105") + b"hel", "truncated"),
        (bytes.fromhex("005377a101") + b"hello", "trailing bytes"),
        (bytes.fromhex("005377e00201a1"), "an array"),
        (bytes.fromhex("0053740040005373c0020140"), "sections out of order"),
    ],
)
def test_unusual_encodings_are_left_to_proton(raw: bytes, why: str) -> None:
    assert read_message(raw) is None, why


def test_uuid_ids_read_as_uuids() -> None:
    message = proton.Message(body="x", id=uuid.UUID(int=7), correlation_id=proton.ulong(9))
    got = read_message(bytes(message.encode()))
    assert got is not None
    assert got.headers["message_id"] == uuid.UUID(int=7) and got.headers["correlation_id"] == 9


def test_live_consumer_takes_deliveries_off_the_collector() -> None:
    """Over RabbitMQ's AMQP 1.0 plugin: the consumer link's deliveries are taken by the
    transport's collector (no per-message proton Event), in order, bytes and headers intact;
    a proton without what that needs would fall back to the event path and fail this test."""
    from babelq.transports import Outgoing
    from babelq.transports.artemis import ArtemisTransport
    from transports.test_artemis_contract import URL, require_amqp10

    require_amqp10()
    transport = ArtemisTransport.from_url(URL, heartbeat=0)
    queue = f"reader-{uuid.uuid4().hex[:8]}"
    try:
        envs = [make("urn:babel:orders:created", {"n": i}) for i in range(30)]
        transport.publish_many(queue, [Outgoing(e.encode(), e) for e in envs] + [Outgoing(b"\xff raw")])
        got = []
        while len(got) < 31:
            batch = transport.reserve(queue, max_messages=10, timeout=5)
            assert batch
            got += batch
        collector = transport._conn.container._collector
        assert type(collector).__name__ == "DeliveryCollector" and collector.inboxes
        assert [d.body for d in got] == [e.encode() for e in envs] + [b"\xff raw"]
        assert got[0].headers["message_annotations"] == {"x-opt-jms-type": "urn:babel:orders:created"}
        assert got[0].headers["message_id"] == envs[0].meta["id"] and got[0].delivery_count == 1
        transport.ack_many(got)
        assert transport.size(queue) == 0
    finally:
        transport.delete_queue(queue)
        transport.close()
