"""AMQP 0-9-1 wire codec: frames, methods, field tables and basic properties. No I/O.

Why our own: the RabbitMQ transport spends most of its consumer CPU decoding frames. This
module keeps the codec small and flat (``struct`` over ``bytes``, no per-frame objects) so
the client in :mod:`babelq.transports.amqp_client` can parse whole socket reads at once,
and it covers only the methods that client speaks. Field-table integers stay integers
(RabbitMQ's type letters: ``I`` signed 32-bit, ``l`` signed 64-bit), which the
conformance manifest needs for the native-typed ``x-*`` headers other SDKs read.
"""

from __future__ import annotations

import datetime as _dt
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from decimal import Decimal
from typing import Any, Final

from babelq.errors import ProtocolError as ProtocolError

PROTOCOL_HEADER: Final = b"AMQP\x00\x00\x09\x01"
FRAME_METHOD: Final = 1
FRAME_HEADER: Final = 2
FRAME_BODY: Final = 3
FRAME_HEARTBEAT: Final = 8
FRAME_END: Final = 0xCE
FRAME_END_BYTE: Final = b"\xce"
#: type octet, channel, payload size
FRAME_HEAD: Final = struct.Struct(">BHI")
#: bytes a frame adds around its payload (7 head + 1 end)
FRAME_OVERHEAD: Final = 8
#: the smallest frame_max a peer may negotiate (spec: 4096)
MIN_FRAME_MAX: Final = 4096
HEARTBEAT_FRAME: Final = b"\x08\x00\x00\x00\x00\x00\x00\xce"

_INT32: Final = (-(2**31), 2**31 - 1)
_INT64: Final = (-(2**63), 2**63 - 1)


# -- primitive encoders -----------------------------------------------------------------------
def shortstr(value: str | bytes) -> bytes:
    """An AMQP short string: one length octet, then at most 255 bytes."""
    raw = value.encode("utf-8") if isinstance(value, str) else value
    if len(raw) > 255:
        raise ProtocolError(f"short string longer than 255 bytes: {raw[:40]!r}...")
    return bytes((len(raw),)) + raw


def longstr(value: str | bytes) -> bytes:
    raw = value.encode("utf-8") if isinstance(value, str) else value
    return struct.pack(">I", len(raw)) + raw


def _read_shortstr(buf: bytes, pos: int) -> tuple[str, int]:
    size = buf[pos]
    end = pos + 1 + size
    if end > len(buf):
        raise ProtocolError("short string runs past the end of the frame")
    return buf[pos + 1 : end].decode("utf-8", "surrogateescape"), end


def _read_longstr(buf: bytes, pos: int) -> tuple[bytes, int]:
    (size,) = struct.unpack_from(">I", buf, pos)
    end = pos + 4 + size
    if end > len(buf):
        raise ProtocolError("long string runs past the end of the frame")
    return buf[pos + 4 : end], end


# -- field tables -------------------------------------------------------------------------------
def encode_table(table: Mapping[str, Any] | None) -> bytes:
    """A field table: a 32-bit byte length, then ``shortstr key, type octet, value`` pairs."""
    if not table:
        return b"\x00\x00\x00\x00"
    parts = [shortstr(key) + encode_value(value) for key, value in table.items()]
    body = b"".join(parts)
    return struct.pack(">I", len(body)) + body


def encode_value(value: Any) -> bytes:
    """One typed field value. Integers become ``I`` (32-bit) or ``l`` (64-bit), never strings."""
    if value is None:
        return b"V"
    if isinstance(value, bool):
        return b"t\x01" if value else b"t\x00"
    if isinstance(value, int):
        if _INT32[0] <= value <= _INT32[1]:
            return b"I" + struct.pack(">i", value)
        if _INT64[0] <= value <= _INT64[1]:
            return b"l" + struct.pack(">q", value)
        raise ProtocolError(f"integer {value} does not fit a signed 64-bit AMQP field")
    if isinstance(value, str):
        return b"S" + longstr(value)
    if isinstance(value, bytes | bytearray):
        return b"x" + longstr(bytes(value))
    if isinstance(value, float):
        return b"d" + struct.pack(">d", value)
    if isinstance(value, Decimal):
        return b"D" + _encode_decimal(value)
    if isinstance(value, _dt.datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=_dt.UTC)
        return b"T" + struct.pack(">Q", int(moment.timestamp()))
    if isinstance(value, Mapping):
        return b"F" + encode_table(value)
    if isinstance(value, list | tuple):
        body = b"".join(encode_value(item) for item in value)
        return b"A" + struct.pack(">I", len(body)) + body
    raise ProtocolError(f"no AMQP field type for {type(value).__name__}")


def _encode_decimal(value: Decimal) -> bytes:
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):
        raise ProtocolError(f"decimal {value} is not finite")
    unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
    if exponent > 0:
        unscaled, exponent = unscaled * 10**exponent, 0
    scale = -exponent
    if scale > 255 or not _INT32[0] <= unscaled <= _INT32[1]:
        raise ProtocolError(f"decimal {value} does not fit an AMQP decimal")
    return struct.pack(">Bi", scale, unscaled)


_FIXED: Final[dict[int, tuple[struct.Struct, int]]] = {
    ord("b"): (struct.Struct(">b"), 1),
    ord("B"): (struct.Struct(">B"), 1),
    ord("s"): (struct.Struct(">h"), 2),
    ord("U"): (struct.Struct(">h"), 2),  # pika's letter for a signed 16-bit value
    ord("u"): (struct.Struct(">H"), 2),
    ord("I"): (struct.Struct(">i"), 4),
    ord("i"): (struct.Struct(">I"), 4),
    ord("l"): (struct.Struct(">q"), 8),
    ord("L"): (struct.Struct(">Q"), 8),
    ord("f"): (struct.Struct(">f"), 4),
    ord("d"): (struct.Struct(">d"), 8),
}


def decode_value(buf: bytes, pos: int) -> tuple[Any, int]:
    """The typed value at ``buf[pos]`` (its type octet) and the offset after it."""
    kind = buf[pos]
    pos += 1
    fixed = _FIXED.get(kind)
    if fixed is not None:
        codec, size = fixed
        return codec.unpack_from(buf, pos)[0], pos + size
    if kind == 0x53:  # S: long string, text when it is UTF-8
        raw, pos = _read_longstr(buf, pos)
        try:
            return raw.decode("utf-8"), pos
        except UnicodeDecodeError:
            return raw, pos
    if kind == 0x74:  # t
        return buf[pos] != 0, pos + 1
    if kind == 0x46:  # F
        return decode_table(buf, pos)
    if kind == 0x41:  # A
        (size,) = struct.unpack_from(">I", buf, pos)
        pos += 4
        end = pos + size
        items: list[Any] = []
        while pos < end:
            item, pos = decode_value(buf, pos)
            items.append(item)
        return items, pos
    if kind == 0x78:  # x
        return _read_longstr(buf, pos)
    if kind == 0x54:  # T
        (seconds,) = struct.unpack_from(">Q", buf, pos)
        return _dt.datetime.fromtimestamp(seconds, _dt.UTC), pos + 8
    if kind == 0x44:  # D
        scale, unscaled = struct.unpack_from(">Bi", buf, pos)
        return Decimal(unscaled).scaleb(-scale), pos + 5
    if kind == 0x56:  # V
        return None, pos
    raise ProtocolError(f"unknown field type {chr(kind)!r}")


def decode_table(buf: bytes, pos: int) -> tuple[dict[str, Any], int]:
    """The field table at ``buf[pos]`` (its 32-bit length) and the offset after it."""
    (size,) = struct.unpack_from(">I", buf, pos)
    pos += 4
    end = pos + size
    if end > len(buf):
        raise ProtocolError("field table runs past the end of the frame")
    table: dict[str, Any] = {}
    while pos < end:
        key, pos = _read_shortstr(buf, pos)
        table[key], pos = decode_value(buf, pos)
    if pos != end:
        raise ProtocolError("field table length does not match its content")
    return table, end


# -- methods ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class MethodSpec:
    """One AMQP method: ids, name and argument list as ``(name, type)`` pairs.

    Types: ``octet short long longlong shortstr longstr bit table timestamp``; consecutive
    bits share octets (low bit first), as the spec packs them.
    """

    class_id: int
    method_id: int
    name: str
    arguments: tuple[tuple[str, str], ...] = ()
    content: bool = False

    @property
    def key(self) -> int:
        return (self.class_id << 16) | self.method_id

    def encode(self, **values: Any) -> bytes:
        """The method frame payload (class id, method id, arguments); missing arguments are zero."""
        out = [struct.pack(">HH", self.class_id, self.method_id)]
        bits: list[bool] = []
        for name, kind in self.arguments:
            value = values.get(name)
            if kind == "bit":
                bits.append(bool(value))
                continue
            if bits:
                out.append(_pack_bits(bits))
                bits = []
            out.append(_encode_argument(kind, value))
        if bits:
            out.append(_pack_bits(bits))
        unknown = set(values) - {name for name, _ in self.arguments}
        if unknown:
            raise ProtocolError(f"{self.name}: unknown argument(s) {sorted(unknown)}")
        return b"".join(out)

    def decode(self, payload: bytes, pos: int = 4) -> dict[str, Any]:
        """The arguments of a method frame payload (``pos`` skips the class and method ids)."""
        out: dict[str, Any] = {}
        bit_octet = 0
        bit_index = 8
        try:
            for name, kind in self.arguments:
                if kind == "bit":
                    if bit_index == 8:
                        bit_octet = payload[pos]
                        pos += 1
                        bit_index = 0
                    out[name] = bool(bit_octet & (1 << bit_index))
                    bit_index += 1
                    continue
                bit_index = 8
                out[name], pos = _decode_argument(kind, payload, pos)
        except (IndexError, struct.error) as exc:
            raise ProtocolError(f"{self.name}: truncated method frame") from exc
        return out


def _pack_bits(bits: Sequence[bool]) -> bytes:
    out = bytearray()
    for start in range(0, len(bits), 8):
        octet = 0
        for index, bit in enumerate(bits[start : start + 8]):
            if bit:
                octet |= 1 << index
        out.append(octet)
    return bytes(out)


_INTEGER_CODECS: Final = {
    "octet": struct.Struct(">B"),
    "short": struct.Struct(">H"),
    "long": struct.Struct(">I"),
    "longlong": struct.Struct(">Q"),
    "timestamp": struct.Struct(">Q"),
}


def _encode_argument(kind: str, value: Any) -> bytes:
    codec = _INTEGER_CODECS.get(kind)
    if codec is not None:
        try:
            return codec.pack(value or 0)
        except struct.error as exc:
            raise ProtocolError(f"{value!r} does not fit an AMQP {kind}") from exc
    if kind == "shortstr":
        return shortstr(value or "")
    if kind == "longstr":
        return longstr(value or b"")
    if kind == "table":
        return encode_table(value)
    raise ProtocolError(f"unknown argument type {kind!r}")


def _decode_argument(kind: str, payload: bytes, pos: int) -> tuple[Any, int]:
    codec = _INTEGER_CODECS.get(kind)
    if codec is not None:
        return codec.unpack_from(payload, pos)[0], pos + codec.size
    if kind == "shortstr":
        return _read_shortstr(payload, pos)
    if kind == "longstr":
        return _read_longstr(payload, pos)
    if kind == "table":
        return decode_table(payload, pos)
    raise ProtocolError(f"unknown argument type {kind!r}")


def _spec(class_id: int, method_id: int, name: str, arguments: str = "", content: bool = False) -> MethodSpec:
    pairs = tuple(tuple(item.split(":")) for item in arguments.split())
    return MethodSpec(class_id, method_id, name, pairs, content)  # type: ignore[arg-type]


CONNECTION_START = _spec(
    10, 10, "Connection.Start",
    "version_major:octet version_minor:octet server_properties:table mechanisms:longstr locales:longstr",
)  # fmt: skip
CONNECTION_START_OK = _spec(
    10, 11, "Connection.StartOk",
    "client_properties:table mechanism:shortstr response:longstr locale:shortstr",
)  # fmt: skip
CONNECTION_SECURE = _spec(10, 20, "Connection.Secure", "challenge:longstr")
CONNECTION_SECURE_OK = _spec(10, 21, "Connection.SecureOk", "response:longstr")
CONNECTION_TUNE = _spec(10, 30, "Connection.Tune", "channel_max:short frame_max:long heartbeat:short")
CONNECTION_TUNE_OK = _spec(10, 31, "Connection.TuneOk", "channel_max:short frame_max:long heartbeat:short")
CONNECTION_OPEN = _spec(10, 40, "Connection.Open", "virtual_host:shortstr capabilities:shortstr insist:bit")
CONNECTION_OPEN_OK = _spec(10, 41, "Connection.OpenOk", "known_hosts:shortstr")
CONNECTION_CLOSE = _spec(
    10, 50, "Connection.Close", "reply_code:short reply_text:shortstr class_id:short method_id:short"
)
CONNECTION_CLOSE_OK = _spec(10, 51, "Connection.CloseOk")
CONNECTION_BLOCKED = _spec(10, 60, "Connection.Blocked", "reason:shortstr")
CONNECTION_UNBLOCKED = _spec(10, 61, "Connection.Unblocked")
CHANNEL_OPEN = _spec(20, 10, "Channel.Open", "out_of_band:shortstr")
CHANNEL_OPEN_OK = _spec(20, 11, "Channel.OpenOk", "channel_id:longstr")
CHANNEL_FLOW = _spec(20, 20, "Channel.Flow", "active:bit")
CHANNEL_FLOW_OK = _spec(20, 21, "Channel.FlowOk", "active:bit")
CHANNEL_CLOSE = _spec(
    20, 40, "Channel.Close", "reply_code:short reply_text:shortstr class_id:short method_id:short"
)
CHANNEL_CLOSE_OK = _spec(20, 41, "Channel.CloseOk")
QUEUE_DECLARE = _spec(
    50, 10, "Queue.Declare",
    "ticket:short queue:shortstr passive:bit durable:bit exclusive:bit auto_delete:bit nowait:bit "
    "arguments:table",
)  # fmt: skip
QUEUE_DECLARE_OK = _spec(50, 11, "Queue.DeclareOk", "queue:shortstr message_count:long consumer_count:long")
QUEUE_PURGE = _spec(50, 30, "Queue.Purge", "ticket:short queue:shortstr nowait:bit")
QUEUE_PURGE_OK = _spec(50, 31, "Queue.PurgeOk", "message_count:long")
QUEUE_DELETE = _spec(
    50, 40, "Queue.Delete", "ticket:short queue:shortstr if_unused:bit if_empty:bit nowait:bit"
)
QUEUE_DELETE_OK = _spec(50, 41, "Queue.DeleteOk", "message_count:long")
BASIC_QOS = _spec(60, 10, "Basic.Qos", "prefetch_size:long prefetch_count:short global_:bit")
BASIC_QOS_OK = _spec(60, 11, "Basic.QosOk")
BASIC_CONSUME = _spec(
    60, 20, "Basic.Consume",
    "ticket:short queue:shortstr consumer_tag:shortstr no_local:bit no_ack:bit exclusive:bit nowait:bit "
    "arguments:table",
)  # fmt: skip
BASIC_CONSUME_OK = _spec(60, 21, "Basic.ConsumeOk", "consumer_tag:shortstr")
BASIC_CANCEL = _spec(60, 30, "Basic.Cancel", "consumer_tag:shortstr nowait:bit")
BASIC_CANCEL_OK = _spec(60, 31, "Basic.CancelOk", "consumer_tag:shortstr")
BASIC_PUBLISH = _spec(
    60, 40, "Basic.Publish",
    "ticket:short exchange:shortstr routing_key:shortstr mandatory:bit immediate:bit", content=True,
)  # fmt: skip
BASIC_RETURN = _spec(
    60, 50, "Basic.Return",
    "reply_code:short reply_text:shortstr exchange:shortstr routing_key:shortstr", content=True,
)  # fmt: skip
BASIC_DELIVER = _spec(
    60, 60, "Basic.Deliver",
    "consumer_tag:shortstr delivery_tag:longlong redelivered:bit exchange:shortstr routing_key:shortstr",
    content=True,
)  # fmt: skip
BASIC_GET = _spec(60, 70, "Basic.Get", "ticket:short queue:shortstr no_ack:bit")
BASIC_GET_OK = _spec(
    60, 71, "Basic.GetOk",
    "delivery_tag:longlong redelivered:bit exchange:shortstr routing_key:shortstr message_count:long",
    content=True,
)  # fmt: skip
BASIC_GET_EMPTY = _spec(60, 72, "Basic.GetEmpty", "cluster_id:shortstr")
BASIC_ACK = _spec(60, 80, "Basic.Ack", "delivery_tag:longlong multiple:bit")
BASIC_REJECT = _spec(60, 90, "Basic.Reject", "delivery_tag:longlong requeue:bit")
BASIC_NACK = _spec(60, 120, "Basic.Nack", "delivery_tag:longlong multiple:bit requeue:bit")
CONFIRM_SELECT = _spec(85, 10, "Confirm.Select", "nowait:bit")
CONFIRM_SELECT_OK = _spec(85, 11, "Confirm.SelectOk")

#: every method this codec knows, by ``class_id << 16 | method_id``
METHODS: Final[dict[int, MethodSpec]] = {
    spec.key: spec for spec in list(globals().values()) if isinstance(spec, MethodSpec)
}


def decode_method(payload: bytes) -> tuple[MethodSpec, dict[str, Any]]:
    """The method and its arguments from a method frame payload."""
    if len(payload) < 4:
        raise ProtocolError("method frame shorter than its ids")
    class_id, method_id = struct.unpack_from(">HH", payload)
    spec = METHODS.get((class_id << 16) | method_id)
    if spec is None:
        raise ProtocolError(f"unsupported method {class_id}.{method_id}")
    return spec, spec.decode(payload)


# -- frames -------------------------------------------------------------------------------------
def frame(kind: int, channel: int, payload: bytes) -> bytes:
    """One complete frame: head, payload, frame end octet."""
    return FRAME_HEAD.pack(kind, channel, len(payload)) + payload + FRAME_END_BYTE


_CONTENT_HEADER: Final = struct.Struct(">HHQ")


def content_frames(
    channel: int, method_payload: bytes, properties: bytes, body: bytes, frame_max: int
) -> list[bytes]:
    """The frames of a content-bearing method: method, content header, body split to ``frame_max``."""
    out = [
        frame(FRAME_METHOD, channel, method_payload),
        frame(FRAME_HEADER, channel, _CONTENT_HEADER.pack(60, 0, len(body)) + properties),
    ]
    chunk = frame_max - FRAME_OVERHEAD
    for start in range(0, len(body), chunk):
        out.append(frame(FRAME_BODY, channel, body[start : start + chunk]))
    return out


# -- basic properties ---------------------------------------------------------------------------
@dataclass(slots=True)
class BasicProperties:
    """The 14 AMQP basic properties, in wire (flag) order; ``None`` means absent."""

    content_type: str | None = None
    content_encoding: str | None = None
    headers: dict[str, Any] | None = None
    delivery_mode: int | None = None
    priority: int | None = None
    correlation_id: str | None = None
    reply_to: str | None = None
    expiration: str | None = None
    message_id: str | None = None
    timestamp: int | None = None
    type: str | None = None
    user_id: str | None = None
    app_id: str | None = None
    cluster_id: str | None = None

    def encode(self) -> bytes:
        """The property flags then the present values: the tail of a content header frame."""
        flags = 0
        parts: list[bytes] = []
        for bit, (name, kind) in zip(range(15, 1, -1), _PROPERTY_TYPES, strict=True):
            value = getattr(self, name)
            if value is None:
                continue
            flags |= 1 << bit
            if kind == "shortstr":
                parts.append(shortstr(value))
            elif kind == "table":
                parts.append(encode_table(value))
            elif kind == "octet":
                parts.append(_OCTET.pack(value))
            else:
                parts.append(_LONGLONG.pack(value))
        return _SHORT.pack(flags) + b"".join(parts)

    @classmethod
    def decode(cls, raw: bytes, pos: int = 0) -> BasicProperties:
        """Properties from ``raw[pos:]`` (flags first). Continuation flags are refused."""
        try:
            (flags,) = _SHORT.unpack_from(raw, pos)
            if flags & 1:
                raise ProtocolError("property flag continuation is not used by AMQP 0-9-1 basic")
            pos += 2
            props = cls()
            for bit, (name, kind) in zip(range(15, 1, -1), _PROPERTY_TYPES, strict=True):
                if not flags & (1 << bit):
                    continue
                value: Any
                if kind == "shortstr":
                    value, pos = _read_shortstr(raw, pos)
                elif kind == "table":
                    value, pos = decode_table(raw, pos)
                elif kind == "octet":
                    value = raw[pos]
                    pos += 1
                else:
                    (value,) = _LONGLONG.unpack_from(raw, pos)
                    pos += 8
                setattr(props, name, value)
        except (IndexError, struct.error) as exc:
            raise ProtocolError("truncated content header properties") from exc
        return props

    def as_dict(self) -> dict[str, Any]:
        """The properties that are set, keyed by name."""
        return {f.name: v for f in fields(self) if (v := getattr(self, f.name)) is not None}


_SHORT: Final = struct.Struct(">H")
_OCTET: Final = struct.Struct(">B")
_LONGLONG: Final = struct.Struct(">Q")
_PROPERTY_TYPES: Final = (
    ("content_type", "shortstr"),
    ("content_encoding", "shortstr"),
    ("headers", "table"),
    ("delivery_mode", "octet"),
    ("priority", "octet"),
    ("correlation_id", "shortstr"),
    ("reply_to", "shortstr"),
    ("expiration", "shortstr"),
    ("message_id", "shortstr"),
    ("timestamp", "timestamp"),
    ("type", "shortstr"),
    ("user_id", "shortstr"),
    ("app_id", "shortstr"),
    ("cluster_id", "shortstr"),
)
