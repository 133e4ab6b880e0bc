"""The AMQP 0-9-1 codec: round trips of field tables, properties and methods, and byte equality with pika.

pika is used here only as an independent encoder/decoder (a black box): if our bytes equal
its bytes and each side reads the other's, a pika-based SDK and RabbitMQ read what we write.
"""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from babelq.transports import amqp_protocol as wire

pika_spec = pytest.importorskip("pika.spec")
pika_data = pytest.importorskip("pika.data")

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
SHORTSTR = st.text(max_size=40).filter(lambda s: len(s.encode("utf-8")) <= 255)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    INT64,
    st.floats(allow_nan=False),
    st.text(max_size=60),
    st.binary(max_size=60).filter(lambda b: not _is_utf8(b)),  # utf-8 bytes would come back as x, still bytes
    st.decimals(allow_nan=False, allow_infinity=False, places=3, min_value=-(10**5), max_value=10**5),
    st.datetimes(
        min_value=dt.datetime(1970, 1, 2), max_value=dt.datetime(2200, 1, 1), timezones=st.just(dt.UTC)
    ).map(lambda moment: moment.replace(microsecond=0)),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(SHORTSTR, inner, max_size=4),
    max_leaves=12,
)
TABLES = st.dictionaries(SHORTSTR, VALUES, max_size=6)


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# -- field tables -------------------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(TABLES)
def test_field_tables_round_trip(table: dict[str, Any]) -> None:
    encoded = wire.encode_table(table)
    decoded, end = wire.decode_table(encoded, 0)
    assert end == len(encoded)
    assert decoded == table


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(SHORTSTR, st.one_of(st.booleans(), INT64, st.text(max_size=30)), max_size=6))
def test_integers_stay_integers_of_the_same_value(table: dict[str, Any]) -> None:
    decoded, _ = wire.decode_table(wire.encode_table(table), 0)
    for key, value in table.items():
        assert type(decoded[key]) is type(value)
        assert decoded[key] == value


def test_integer_width_follows_rabbitmq_type_letters() -> None:
    assert wire.encode_value(7) == b"I\x00\x00\x00\x07"  # signed 32-bit
    assert wire.encode_value(-1) == b"I\xff\xff\xff\xff"
    assert wire.encode_value(2**31) == b"l" + struct.pack(">q", 2**31)  # signed 64-bit
    assert wire.encode_value(True) == b"t\x01"
    with pytest.raises(wire.ProtocolError, match="64-bit"):
        wire.encode_value(2**63)


@pytest.mark.parametrize(
    ("encoded", "expected"),
    [
        (b"b\xfe", -2),
        (b"B\xfe", 254),
        (b"s\xff\xfe", -2),
        (b"u\xff\xfe", 65534),
        (b"i\xff\xff\xff\xfe", 2**32 - 2),
        (b"L" + struct.pack(">Q", 2**64 - 1), 2**64 - 1),
        (b"f" + struct.pack(">f", 1.5), 1.5),
        (b"D\x02\x00\x00\x01\x2c", Decimal("3.00")),
        (b"S\x00\x00\x00\x02\xff\xfe", b"\xff\xfe"),  # not UTF-8: stays bytes
        (b"V", None),
    ],
)
def test_every_rabbitmq_field_type_decodes(encoded: bytes, expected: object) -> None:
    value, end = wire.decode_value(encoded, 0)
    assert value == expected
    assert type(value) is type(expected)
    assert end == len(encoded)


@pytest.mark.parametrize(
    "broken",
    [
        b"\x00\x00\x00\x10\x01a",  # length says 16, 2 bytes follow
        b"\x00\x00\x00\x03\x01aQ",  # unknown type letter Q
        b"\x00\x00\x00\x04\x05abcd",  # key runs past the end
    ],
)
def test_broken_tables_raise_protocol_errors(broken: bytes) -> None:
    with pytest.raises(wire.ProtocolError):
        wire.decode_table(broken, 0)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        SHORTSTR,
        st.one_of(
            st.booleans(),
            INT64,
            st.text(max_size=30),
            st.lists(st.one_of(INT64, st.text(max_size=10)), max_size=3),
            st.dictionaries(SHORTSTR, INT64, max_size=3),
        ),
        max_size=6,
    )
)
def test_field_tables_are_byte_identical_to_pika(table: dict[str, Any]) -> None:
    # (pika cannot encode floats, so they are left out here; they round-trip above)
    ours = wire.encode_table(table)
    pieces: list[bytes] = []
    pika_data.encode_table(pieces, table)
    assert ours == b"".join(pieces)
    theirs, _ = pika_data.decode_table(ours, 0)
    assert theirs == table


# -- properties ---------------------------------------------------------------------------------
PROPERTIES = st.builds(
    wire.BasicProperties,
    content_type=st.none() | SHORTSTR,
    content_encoding=st.none() | SHORTSTR,
    headers=st.none() | st.dictionaries(SHORTSTR, st.one_of(INT64, st.text(max_size=20)), max_size=4),
    delivery_mode=st.none() | st.sampled_from([1, 2]),
    priority=st.none() | st.integers(0, 255),
    correlation_id=st.none() | SHORTSTR,
    reply_to=st.none() | SHORTSTR,
    expiration=st.none() | SHORTSTR,
    message_id=st.none() | SHORTSTR,
    timestamp=st.none() | st.integers(0, 2**63 - 1),
    type=st.none() | SHORTSTR,
    user_id=st.none() | SHORTSTR,
    app_id=st.none() | SHORTSTR,
    cluster_id=st.none() | SHORTSTR,
)


@settings(max_examples=300, deadline=None)
@given(PROPERTIES)
def test_properties_round_trip_and_match_pika_bytes(props: wire.BasicProperties) -> None:
    encoded = props.encode()
    assert wire.BasicProperties.decode(encoded) == props
    theirs = pika_spec.BasicProperties(**props.as_dict()).encode()
    assert encoded == (b"".join(theirs) if isinstance(theirs, list) else theirs)
    decoded_by_pika = pika_spec.BasicProperties()
    decoded_by_pika.decode(encoded)
    assert {k: v for k, v in vars(decoded_by_pika).items() if v is not None} == props.as_dict()


def test_the_projection_headers_keep_native_types_through_pika() -> None:
    props = wire.BasicProperties(
        type="urn:babel:orders:created",
        app_id="babelqueue",
        content_type="application/json",
        delivery_mode=2,
        headers={"x-schema-version": 1, "x-source-lang": "python", "x-attempts": 0},
    )
    theirs = pika_spec.BasicProperties()
    theirs.decode(props.encode())
    assert theirs.headers == {"x-schema-version": 1, "x-source-lang": "python", "x-attempts": 0}
    assert [type(v) for v in theirs.headers.values()] == [int, str, int]


def test_empty_properties_are_two_zero_flag_bytes() -> None:
    assert wire.BasicProperties().encode() == b"\x00\x00"
    assert wire.BasicProperties.decode(b"\x00\x00") == wire.BasicProperties()
    with pytest.raises(wire.ProtocolError):
        wire.BasicProperties.decode(b"\x80\x00\x05ab")  # content_type says 5 bytes, 2 follow


# -- methods ------------------------------------------------------------------------------------
_ARGUMENT_VALUES = {
    "octet": st.integers(0, 255),
    "short": st.integers(0, 2**16 - 1),
    "long": st.integers(0, 2**32 - 1),
    "longlong": st.integers(0, 2**64 - 1),
    "timestamp": st.integers(0, 2**64 - 1),
    "shortstr": SHORTSTR,
    "longstr": st.binary(max_size=40),
    "bit": st.booleans(),
    "table": st.dictionaries(SHORTSTR, st.one_of(INT64, st.text(max_size=10)), max_size=3),
}


@st.composite
def _method_with_arguments(draw: st.DrawFn) -> tuple[wire.MethodSpec, dict[str, Any]]:
    spec = draw(st.sampled_from(sorted(wire.METHODS.values(), key=lambda s: s.key)))
    args = {name: draw(_ARGUMENT_VALUES[kind]) for name, kind in spec.arguments}
    return spec, args


@settings(max_examples=400, deadline=None)
@given(_method_with_arguments())
def test_every_method_round_trips(method: tuple[wire.MethodSpec, dict[str, Any]]) -> None:
    spec, args = method
    payload = spec.encode(**args)
    decoded_spec, decoded = wire.decode_method(payload)
    assert decoded_spec is spec
    assert decoded == args


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (
            wire.QUEUE_DECLARE.encode(queue="orders", durable=True, arguments={"x-max-priority": 10}),
            pika_spec.Queue.Declare(queue="orders", durable=True, arguments={"x-max-priority": 10}),
        ),
        (
            wire.QUEUE_DECLARE.encode(queue="orders", passive=True),
            pika_spec.Queue.Declare(queue="orders", passive=True),
        ),
        (
            wire.BASIC_PUBLISH.encode(routing_key="orders", mandatory=True),
            pika_spec.Basic.Publish(routing_key="orders", mandatory=True),
        ),
        (
            wire.BASIC_CONSUME.encode(queue="orders", consumer_tag="babelq.1"),
            pika_spec.Basic.Consume(queue="orders", consumer_tag="babelq.1"),
        ),
        (wire.BASIC_QOS.encode(prefetch_count=256), pika_spec.Basic.Qos(prefetch_count=256)),
        (
            wire.BASIC_ACK.encode(delivery_tag=2**40, multiple=True),
            pika_spec.Basic.Ack(delivery_tag=2**40, multiple=True),
        ),
        (
            wire.BASIC_NACK.encode(delivery_tag=9, requeue=True),
            pika_spec.Basic.Nack(delivery_tag=9, requeue=True, multiple=False),
        ),
        (wire.BASIC_REJECT.encode(delivery_tag=9), pika_spec.Basic.Reject(delivery_tag=9, requeue=False)),
        (wire.BASIC_GET.encode(queue="q"), pika_spec.Basic.Get(queue="q")),
        (
            wire.BASIC_DELIVER.encode(consumer_tag="c", delivery_tag=5, redelivered=True, routing_key="q"),
            pika_spec.Basic.Deliver(
                consumer_tag="c", delivery_tag=5, redelivered=True, exchange="", routing_key="q"
            ),
        ),
        (
            wire.CONNECTION_TUNE_OK.encode(channel_max=2047, frame_max=131072, heartbeat=30),
            pika_spec.Connection.TuneOk(channel_max=2047, frame_max=131072, heartbeat=30),
        ),
        (
            wire.CONNECTION_START_OK.encode(
                client_properties={"product": "babelq"}, mechanism="PLAIN", response=b"\0u\0p", locale="en_US"
            ),
            pika_spec.Connection.StartOk(
                client_properties={"product": "babelq"}, mechanism="PLAIN", response=b"\0u\0p", locale="en_US"
            ),
        ),
        (wire.CONNECTION_OPEN.encode(virtual_host="/"), pika_spec.Connection.Open(virtual_host="/")),
        (wire.QUEUE_PURGE.encode(queue="q"), pika_spec.Queue.Purge(queue="q")),
        (wire.QUEUE_DELETE.encode(queue="q"), pika_spec.Queue.Delete(queue="q")),
        (wire.CONFIRM_SELECT.encode(), pika_spec.Confirm.Select()),
        (wire.BASIC_CANCEL.encode(consumer_tag="c"), pika_spec.Basic.Cancel(consumer_tag="c")),
    ],
    ids=lambda value: getattr(value, "NAME", None) or "ours",
)
def test_client_methods_are_byte_identical_to_pika(ours: bytes, theirs: Any) -> None:
    assert ours == struct.pack(">I", theirs.INDEX) + b"".join(theirs.encode())


def test_server_methods_encoded_by_pika_decode() -> None:
    start = pika_spec.Connection.Start(
        server_properties={"product": "RabbitMQ", "capabilities": {"publisher_confirms": True}},
        mechanisms="PLAIN AMQPLAIN",
        locales="en_US",
    )
    spec, args = wire.decode_method(struct.pack(">I", start.INDEX) + b"".join(start.encode()))
    assert spec is wire.CONNECTION_START
    assert args["server_properties"]["capabilities"] == {"publisher_confirms": True}
    assert args["mechanisms"] == b"PLAIN AMQPLAIN"
    close = pika_spec.Channel.Close(406, "PRECONDITION_FAILED - inequivalent arg", 50, 10)
    spec, args = wire.decode_method(struct.pack(">I", close.INDEX) + b"".join(close.encode()))
    assert (spec, args) == (
        wire.CHANNEL_CLOSE,
        {
            "reply_code": 406,
            "reply_text": "PRECONDITION_FAILED - inequivalent arg",
            "class_id": 50,
            "method_id": 10,
        },
    )


def test_unknown_and_truncated_methods_raise() -> None:
    with pytest.raises(wire.ProtocolError, match="unsupported"):
        wire.decode_method(struct.pack(">HH", 99, 1))
    with pytest.raises(wire.ProtocolError, match="truncated"):
        wire.decode_method(wire.BASIC_ACK.encode(delivery_tag=1)[:-3])
    with pytest.raises(wire.ProtocolError, match="unknown argument"):
        wire.BASIC_ACK.encode(delivery_tag=1, bogus=True)
    with pytest.raises(wire.ProtocolError, match="255"):
        wire.shortstr("x" * 256)


# -- frames -------------------------------------------------------------------------------------
@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=20_000), st.sampled_from([4096, 5000, 131072]))
def test_content_is_split_to_frame_max_and_reassembles(body: bytes, frame_max: int) -> None:
    props = wire.BasicProperties(content_type="application/json").encode()
    method = wire.BASIC_PUBLISH.encode(routing_key="q")
    frames = wire.content_frames(3, method, props, body, frame_max)
    parsed = []
    for raw in frames:
        kind, channel, size = wire.FRAME_HEAD.unpack_from(raw)
        assert (channel, len(raw), raw[-1]) == (3, size + 8, wire.FRAME_END)
        assert len(raw) <= frame_max
        parsed.append((kind, raw[7:-1]))
    assert [kind for kind, _ in parsed[:2]] == [wire.FRAME_METHOD, wire.FRAME_HEADER]
    assert parsed[0][1] == method
    class_id, weight, size = struct.unpack_from(">HHQ", parsed[1][1])
    assert (class_id, weight, size) == (60, 0, len(body))
    assert parsed[1][1][12:] == props
    assert all(kind == wire.FRAME_BODY for kind, _ in parsed[2:])
    assert b"".join(payload for _, payload in parsed[2:]) == body
    assert len(parsed) - 2 == -(-len(body) // (frame_max - wire.FRAME_OVERHEAD))


def test_frames_match_pika_framing() -> None:
    from pika import frame as pika_frame

    method = pika_spec.Basic.Ack(delivery_tag=7, multiple=True)
    assert wire.frame(wire.FRAME_METHOD, 1, wire.BASIC_ACK.encode(delivery_tag=7, multiple=True)) == (
        pika_frame.Method(1, method).marshal()
    )
    assert pika_frame.Heartbeat().marshal() == wire.HEARTBEAT_FRAME
