"""ActiveMQ Artemis transport (``artemis://``, ``artemis+ssl://``) over AMQP 1.0 with python-qpid-proton.

Why it looks the way it does:

* **Contract.** Every publish carries the docs/standard.md §4 projection computed by
  :mod:`babelq.bindings.artemis`: the URN in the ``x-opt-jms-type`` message annotation (JMSType),
  trace_id in ``correlation-id``, meta.id in ``message-id``, meta.created_at in ``creation-time``
  and the string application properties ``bq_schema_version``, ``bq_source_lang``,
  ``bq_attempts``, ``bq_app_id``, so a JMS peer routes without parsing the body. The header is
  ``durable``. A body that is valid UTF-8 travels as an AMQP string (``amqp-value``, what the
  ``babelqueue`` SDK sends and what a JMS client reads as a TextMessage); any other body (a poison
  record) as one ``data`` section, so every byte survives. A consumer gets exactly the bytes.
* **Two brokers, one protocol.** ``broker=artemis`` (the default) addresses a queue by its bare
  name with the ``queue`` capability (Artemis then routes anycast to a durable queue of that
  name, as a JMS client's queue does), releases with ``modified`` (delivery-failed, so Artemis
  counts the return), writes the scheduled-delivery annotation for delays and asks the
  ``activemq.management`` address for queue counts. ``broker=rabbitmq`` is RabbitMQ 3.x's
  ``rabbitmq_amqp1_0`` plugin, which differs in every one of those: a bare or ``/queue/`` address
  declares a queue whose durability follows the link (and a mismatch with an existing queue kills
  the session), ``modified`` is refused (the session is closed), the delivery-count header
  always reads 0 (a redelivery only clears ``first-acquirer``), the delay annotations are stored
  and ignored, and AMQP 1.0 there has no queue management. So the transport declares the durable
  queue and counts/purges through RabbitMQ's own AMQP 0-9-1 on the same listener (babelq's
  client), links to ``/amq/queue/<name>`` (never declares, takes the queue as it is), releases
  with ``released`` and reads a redelivery from ``first-acquirer``.
* **Delivery count.** The AMQP header's ``delivery-count`` is 0-based (failed prior deliveries);
  ``Delivery.delivery_count`` is 1-based like every transport's; ``Delivery.attempts`` is the
  binding's ``max(body, delivery-count)``.
* **At-least-once, connection-bound.** A reservation is an unsettled AMQP delivery: it can only
  be settled over the link that received it and the broker takes it back when the connection
  drops (``leased_reservations`` is False). Credit is granted only while ``reserve`` asks, up to
  ``prefetch``, so one consumer does not hoard a queue.
* **Outages.** A dropped connection is reopened once per call; what the old connection held is
  already back on the broker (nothing is dead-lettered, nothing is counted as a failure by us). A
  settle of a delivery from a dead connection is ignored with a warning. A broker that stays down
  is an :class:`~babelq.errors.UnavailableError` (one line, URL redacted).
* **Threads.** Proton is not thread-safe: one transport serialises every call with a lock and a
  waiting ``reserve`` gives the lock up every 0.2 s, so threads may share it (they take turns). A
  small thread keeps heartbeats going while the caller is busy in a handler.
"""

from __future__ import annotations

import functools
import json
import logging
import struct
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, NamedTuple, get_args
from urllib.parse import quote, unquote

from babelq.bindings import artemis as binding
from babelq.bindings import schema_gate
from babelq.envelope import Envelope, decode
from babelq.errors import (
    BabelqError,
    ConfigurationError,
    DecodeError,
    PublishNotConfirmedError,
    UnavailableError,
)
from babelq.extras import optional_import
from babelq.transports.base import BaseTransport, Delivery, Outgoing
from babelq.transports.keepalive import start_keepalive
from babelq.transports.url_options import TransportURL, URLOptions
from babelq.urls import redact_text

log = logging.getLogger(__name__)

DEFAULT_URL = "artemis://guest:guest@127.0.0.1:5672"
Broker = Literal["artemis", "rabbitmq"]
ReleaseOutcome = Literal["modified", "released"]
DelayMode = Literal["delivery-time", "delivery-delay", "ignore"]
CreditMode = Literal["batch", "prefetch"]
BROKERS: tuple[str, ...] = get_args(Broker)
RELEASE_OUTCOMES: tuple[str, ...] = get_args(ReleaseOutcome)
DELAY_MODES: tuple[str, ...] = get_args(DelayMode)
CREDIT_MODES: tuple[str, ...] = get_args(CreditMode)
#: per broker: address template, release outcome, delay mode
BROKER_DEFAULTS: dict[str, tuple[str, str, str]] = {
    "artemis": ("{queue}", "modified", "delivery-time"),
    "rabbitmq": ("/amq/queue/{queue}", "released", "ignore"),
}
DELIVERY_TIME_ANNOTATION = "x-opt-delivery-time"
DELIVERY_DELAY_ANNOTATION = "x-opt-delivery-delay"
#: Artemis stamps this (epoch ms) when the address has ``enable-ingress-timestamp``
INGRESS_TIME_ANNOTATION = "x-opt-ingress-time"
MANAGEMENT_ADDRESS = "activemq.management"
#: One blocking wait inside ``reserve`` holds the lock at most this long (other threads take turns).
_WAIT_SLICE = 0.2


@dataclass(frozen=True, slots=True)
class ArtemisOptions(URLOptions):
    """The options of ``artemis://`` and ``artemis+ssl://`` (query or keywords)."""

    transport: ClassVar[str] = "artemis"

    broker: Broker = "artemis"
    """Which broker's AMQP 1.0 to expect; it sets the defaults of the next three."""
    address: str | None = None
    """The AMQP address of a queue, with ``{queue}`` once (else the broker's)."""
    release: ReleaseOutcome | None = None
    """The outcome of ``release()`` (else the broker's)."""
    delays: DelayMode | None = None
    """How a delay is annotated (else the broker's)."""
    prefetch: int = 100
    """Most credit a receiving link is granted (1..65535)."""
    heartbeat: float = 30.0
    """AMQP idle timeout, seconds (0 off)."""
    timeout: float = 10.0
    """Seconds to connect or attach a link."""
    confirm_timeout: float = 30.0
    """Seconds to wait for the broker to settle published messages."""
    linger: float = 0.001
    """Seconds (0..1) a ``reserve`` keeps collecting while messages keep arriving."""
    credit: CreditMode = "batch"
    """``batch``: credit for what a ``reserve`` asks; ``prefetch``: ``prefetch`` credit standing."""
    admin_port: int | None = None
    """``broker=rabbitmq``: the AMQP 0-9-1 port to declare, count and purge (else the URL's)."""
    ca_file: str | None = None
    """``artemis+ssl://`` only: CA bundle."""


#: The broker refused (rejected/released/modified) or never confirmed a published message;
#: the name the Artemis docs use for the one class every transport raises.
ArtemisPublishError = PublishNotConfirmedError


def _proton() -> Any:
    """The proton modules, imported on first use so ``import babelq.transports`` needs no client."""
    for module in ("proton.reactor", "proton.utils"):  # imported, they are attributes of proton
        optional_import(module, needed_for="url: the artemis transport")
    return optional_import("proton", needed_for="url: the artemis transport")


def _utf8(body: bytes) -> str | None:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return None


def body_bytes(value: object) -> bytes:
    """The message body as the bytes that were published: a string is its UTF-8, binary as is."""
    if value is None:
        return b""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    # a list of data sections, or a foreign producer's non-string amqp-value: keep its JSON text
    if isinstance(value, list) and all(isinstance(v, bytes | bytearray) for v in value):
        return b"".join(bytes(v) for v in value)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str).encode("utf-8")


def build_message(
    body: bytes,
    envelope: Envelope | None = None,
    *,
    delays: str = "delivery-time",
    delay_ms: int = 0,
    now_ms: int | None = None,
    carried: Mapping[str, str] | None = None,
) -> Any:
    """The proton ``Message`` for ``body``: the binding's projection, durable, plus the delay annotation.

    ``carried`` headers (a ``traceparent``) become string application properties under names the
    binding's ``bq_*`` properties left free.

    Pure (no connection), so the projection is tested without a broker and compared with the
    ``babelqueue`` SDK's message field by field.
    """
    proton = _proton()
    text = _utf8(body)
    message = proton.Message(body=text) if text is not None else proton.Message(body=body, inferred=True)
    message.durable = True
    doc: Envelope | Mapping[str, Any] | None = envelope
    if doc is None and text is not None:
        try:
            doc = decode(body)
        except DecodeError:
            doc = None
    annotations: dict[Any, Any] = {}
    if doc is not None:
        try:
            projected = binding.project(doc)
        except (BabelqError, ValueError, TypeError, KeyError):
            projected = {}
        for key, value in projected.get("message_annotations", {}).items():
            annotations[proton.symbol(key)] = value
        if "correlation_id" in projected:
            message.correlation_id = projected["correlation_id"]
        if "message_id" in projected:
            message.id = projected["message_id"]
        if "creation_time" in projected:
            message.creation_time = projected["creation_time"] / 1000.0
        if projected.get("application_properties"):
            message.properties = dict(projected["application_properties"])
    if carried:
        extra = {str(k): str(v) for k, v in carried.items() if k and v}
        message.properties = {**extra, **dict(message.properties or {})}
    if delay_ms > 0 and delays != "ignore":
        if delays == "delivery-delay":
            annotations[proton.symbol(DELIVERY_DELAY_ANNOTATION)] = int(delay_ms)
        else:
            now = int(time.time() * 1000) if now_ms is None else now_ms
            annotations[proton.symbol(DELIVERY_TIME_ANNOTATION)] = now + int(delay_ms)
    if annotations:
        message.annotations = annotations
    return message


def resend_message(received: Any, *, delays: str, delay_ms: int, now_ms: int | None = None) -> Any:
    """A copy of a received message to publish again (a delayed release): same body section,
    properties and annotations, a fresh delivery (so its delivery-count starts again), the new
    delay annotation instead of an old one."""
    proton = _proton()
    copy = proton.Message()
    copy.decode(received.encode())
    copy.delivery_count = 0
    copy.first_acquirer = False
    annotations = {
        k: v
        for k, v in dict(copy.annotations or {}).items()
        if str(k) not in (DELIVERY_TIME_ANNOTATION, DELIVERY_DELAY_ANNOTATION, INGRESS_TIME_ANNOTATION)
    }
    if delay_ms > 0 and delays == "delivery-delay":
        annotations[proton.symbol(DELIVERY_DELAY_ANNOTATION)] = int(delay_ms)
    elif delay_ms > 0 and delays == "delivery-time":
        now = int(time.time() * 1000) if now_ms is None else now_ms
        annotations[proton.symbol(DELIVERY_TIME_ANNOTATION)] = now + int(delay_ms)
    copy.annotations = annotations or None
    return copy


def _plain(value: object) -> object:
    """Proton's typed values (symbol, ulong, AnnotationDict...) as plain Python values."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    return value


def message_headers(message: Any) -> dict[str, Any]:
    """``Delivery.headers``: the message's sections as plain values, keyed like the binding's projection."""
    out: dict[str, Any] = {
        "durable": bool(message.durable),
        "delivery_count": int(message.delivery_count or 0),
        "first_acquirer": bool(message.first_acquirer),
        "message_annotations": _plain(dict(message.annotations or {})),
        "application_properties": _plain(dict(message.properties or {})),
    }
    if message.correlation_id is not None:
        out["correlation_id"] = _plain(message.correlation_id)
    if message.id is not None:
        out["message_id"] = _plain(message.id)
    if message.creation_time:
        out["creation_time"] = round(message.creation_time * 1000)
    return out


def delivery_count_of(message: Any, broker: str) -> int:
    """1-based hand-out count: the 0-based header plus one; on RabbitMQ, whose header stays 0,
    a cleared ``first-acquirer`` says the message was handed out before."""
    return _hand_outs(int(message.delivery_count or 0), bool(message.first_acquirer), broker)


def _hand_outs(header_count: int, first_acquirer: bool, broker: str) -> int:
    count = header_count + 1
    if broker == "rabbitmq" and not first_acquirer:
        count = max(count, 2)
    return count


def stored_at_of(message: Any) -> int | None:
    """Artemis's ingress time annotation (epoch ms) when the broker stamps it, else None."""
    for key, value in dict(message.annotations or {}).items():
        if str(key) == INGRESS_TIME_ANNOTATION and isinstance(value, int) and not isinstance(value, bool):
            return int(value)
    return None


# -- a strict, fast reader of received messages -----------------------------------------------
# proton.Message.decode builds every section through proton's Python Data layer (a call per
# value), which is most of a consumer's CPU time. A received message is read here straight from
# its encoded bytes instead, for the shapes AMQP 1.0 peers send (the spec's sections in order,
# the primitive types, lists and maps). Anything else -- a described value in a value, an array,
# a decimal, a symbolic section descriptor, repeated or out-of-order sections, a body that is
# neither a string, binary nor null -- is left to proton (``None`` below), so the result is
# always what proton's decode would give.


class _ForProton(Exception):  # noqa: N818 - not an error: a hand-over
    """An encoding this reader leaves to proton."""


_FLOAT = struct.Struct(">f").unpack_from
_DOUBLE = struct.Struct(">d").unpack_from
_U32 = struct.Struct(">I").unpack_from
_U32X2 = struct.Struct(">II").unpack_from
_I64 = struct.Struct(">q").unpack_from
_U64 = struct.Struct(">Q").unpack_from
_I32 = struct.Struct(">i").unpack_from
_I16 = struct.Struct(">h").unpack_from
_U16 = struct.Struct(">H").unpack_from
_NULL, _TRUE, _FALSE, _BOOL = 0x40, 0x41, 0x42, 0x56
#: fixed-width codes whose value is an int: code -> (width, unpack or None for an unsigned byte)
_BOOLS = frozenset((_NULL, _TRUE, _FALSE, _BOOL))
_UINTS = frozenset((_NULL, 0x43, 0x52, 0x70))
_ULONGS = frozenset((0x44, 0x53, 0x80))
_STRINGS = frozenset((_NULL, 0xA1, 0xB1))
_SYMBOLS = frozenset((_NULL, 0xA3, 0xB3))
_BINARIES = frozenset((_NULL, 0xA0, 0xB0))
_TIMESTAMPS = frozenset((_NULL, 0x83))
#: message-id/correlation-id: ulong, uuid, string. A binary id is left to proton, whose Message
#: hands it out as a memoryview (kept as is: the headers stay what they were)
_MESSAGE_IDS = _ULONGS | {_NULL, 0x98, 0xA1, 0xB1}
#: the codes each field of the header and properties lists may have (AMQP 1.0 part 3.2)
_HEADER_FIELDS = (_BOOLS, frozenset((_NULL, 0x50)), _UINTS, _BOOLS, _UINTS)
_PROPERTY_FIELDS = (
    _MESSAGE_IDS, _BINARIES, _STRINGS, _STRINGS, _STRINGS, _MESSAGE_IDS, _SYMBOLS, _SYMBOLS,
    _TIMESTAMPS, _TIMESTAMPS, _STRINGS, _UINTS, _STRINGS,
)  # fmt: skip
_HEADER, _DELIVERY_ANN, _MESSAGE_ANN, _PROPERTIES, _APP_PROPS = 0x70, 0x71, 0x72, 0x73, 0x74
_DATA, _SEQUENCE, _VALUE, _FOOTER = 0x75, 0x76, 0x77, 0x78


def _value(buf: bytes, pos: int) -> tuple[Any, int]:
    """The value encoded at ``pos`` and where the next one starts (the AMQP 1.0 type system,
    without described values, arrays and decimals)."""
    code = buf[pos]
    pos += 1
    if code in {0xA1, 0xA3, 0xA0}:  # str8, sym8, vbin8
        end = pos + 1 + buf[pos]
        if end > len(buf):
            raise _ForProton
        raw = buf[pos + 1 : end]
        if code == 0xA0:
            return raw, end
        return raw.decode("utf-8" if code == 0xA1 else "ascii"), end
    if code < 0x60:
        if code == 0x40:
            return None, pos
        if code == 0x41:
            return True, pos
        if code == 0x42:
            return False, pos
        if code in {0x43, 0x44}:
            return 0, pos
        if code == 0x45:
            return [], pos
        if code == 0x56:
            flag = buf[pos]
            if flag > 1:
                raise _ForProton
            return flag == 1, pos + 1
        if code in {0x50, 0x52, 0x53}:
            return buf[pos], pos + 1
        if code in {0x51, 0x54, 0x55}:
            byte = buf[pos]
            return (byte - 256 if byte > 127 else byte), pos + 1
        raise _ForProton
    if code == 0x70:
        if pos + 4 > len(buf):
            raise _ForProton
        return _U32(buf, pos)[0], pos + 4
    if code in {0x80, 0x81, 0x83}:
        if pos + 8 > len(buf):
            raise _ForProton
        return (_U64 if code == 0x80 else _I64)(buf, pos)[0], pos + 8
    if code in {0xC1, 0xC0}:  # map8, list8
        end = pos + 1 + buf[pos]
        return _compound(buf, pos + 2, buf[pos + 1], end, code == 0xC1)
    if code in {0xD1, 0xD0}:  # map32, list32
        if pos + 8 > len(buf):
            raise _ForProton
        size, count = _U32X2(buf, pos)
        return _compound(buf, pos + 8, count, pos + 4 + size, code == 0xD1)
    if code in {0xB1, 0xB3, 0xB0}:  # str32, sym32, vbin32
        if pos + 4 > len(buf):
            raise _ForProton
        end = pos + 4 + _U32(buf, pos)[0]
        if end > len(buf):
            raise _ForProton
        raw = buf[pos + 4 : end]
        if code == 0xB0:
            return raw, end
        return raw.decode("utf-8" if code == 0xB1 else "ascii"), end
    if pos + 2 > len(buf):
        raise _ForProton
    if code == 0x60:
        return _U16(buf, pos)[0], pos + 2
    if code == 0x61:
        return _I16(buf, pos)[0], pos + 2
    if pos + 4 > len(buf):
        raise _ForProton
    if code == 0x71:
        return _I32(buf, pos)[0], pos + 4
    if code == 0x72:
        return _FLOAT(buf, pos)[0], pos + 4
    if code == 0x73:
        return chr(_U32(buf, pos)[0]), pos + 4
    if code == 0x82:
        if pos + 8 > len(buf):
            raise _ForProton
        return _DOUBLE(buf, pos)[0], pos + 8
    if code == 0x98:
        if pos + 16 > len(buf):
            raise _ForProton
        return uuid.UUID(bytes=bytes(buf[pos : pos + 16])), pos + 16
    raise _ForProton  # decimals, arrays, described values, reserved codes: proton's business


def _compound(buf: bytes, pos: int, count: int, end: int, is_map: bool) -> tuple[Any, int]:
    """A list or map's ``count`` items from ``pos``; they must fill it exactly up to ``end``."""
    if end > len(buf):
        raise _ForProton
    items = []
    for _ in range(count):
        item, pos = _value(buf, pos)
        items.append(item)
    if pos != end:
        raise _ForProton
    if not is_map:
        return items, end
    if count % 2:
        raise _ForProton
    return dict(zip(items[::2], items[1::2], strict=True)), end


def _fields(buf: bytes, pos: int, allowed: tuple[frozenset[int], ...]) -> tuple[list[Any], int]:
    """A header or properties list, each field checked against the types the spec allows it."""
    code = buf[pos]
    if code == 0x45:
        return [], pos + 1
    if code == 0xC0:
        count, items_at, end = buf[pos + 2], pos + 3, pos + 2 + buf[pos + 1]
    elif code == 0xD0:
        size, count = _U32X2(buf, pos + 1)
        items_at, end = pos + 9, pos + 5 + size
    else:
        raise _ForProton
    if count > len(allowed) or end > len(buf):
        raise _ForProton
    out: list[Any] = []
    pos = items_at
    for index in range(count):
        code = buf[pos]
        if code == _NULL:  # most fields are absent: no call for them
            out.append(None)
            pos += 1
            continue
        if code not in allowed[index]:
            raise _ForProton
        item, pos = _value(buf, pos)
        out.append(item)
    if pos != end:
        raise _ForProton
    return out, end


#: encoded section -> what it reads as. The header, annotation and application-properties
#: sections of one producer's messages repeat byte for byte (same URN, same ``bq_*`` values), so
#: each distinct encoding is read once. Only flat maps are kept (values handed out are copies).
_SEEN: dict[bytes, Any] = {}
_SEEN_MAX = 512


def _section_end(buf: bytes, pos: int) -> int:
    """Where the list or map encoded at ``pos`` ends (from its size field)."""
    code = buf[pos]
    if code in {0xC0, 0xC1}:
        return pos + 2 + buf[pos + 1]
    if code in {0xD0, 0xD1}:
        return pos + 5 + int(_U32(buf, pos + 1)[0])
    return pos + 1  # null, list0


def _seen_map(buf: bytes, pos: int) -> tuple[dict[str, Any], int]:
    """An annotations/application-properties map section as plain values, read once per encoding."""
    end = _section_end(buf, pos)
    key = buf[pos:end]
    plain = _SEEN.get(key)
    if plain is None:
        if buf[pos] not in {_NULL, 0xC1, 0xD1}:
            raise _ForProton
        value, stop = _value(buf, pos)
        if stop != end:
            raise _ForProton
        plain = _plain_map(value)
        if not any(type(v) in (dict, list) for v in plain.values()):
            if len(_SEEN) >= _SEEN_MAX:
                _SEEN.clear()
            _SEEN[key] = dict(plain)
        return plain, end
    return dict(plain), end


def _seen_header(buf: bytes, pos: int) -> tuple[tuple[bool, int, bool], int]:
    """The header section's durable, delivery-count and first-acquirer, read once per encoding."""
    end = _section_end(buf, pos)
    key = b"h" + buf[pos:end]
    got = _SEEN.get(key)
    if got is None:
        fields, stop = _fields(buf, pos, _HEADER_FIELDS)
        if stop != end:
            raise _ForProton
        fields += [None] * (5 - len(fields))
        got = (bool(fields[0]), fields[4] or 0, bool(fields[3]))
        if len(_SEEN) >= _SEEN_MAX:
            _SEEN.clear()
        _SEEN[key] = got
    return got, end


def _plain_map(value: Any) -> dict[str, Any]:
    """An annotations/properties map as :func:`_plain` gives proton's. Only string (and symbol)
    keys, nested maps included: :func:`_plain` spells any other key through proton's own type
    (``ulong(7)``), so such a map is left to proton."""
    if value is None:
        return {}
    if type(value) is not dict:
        raise _ForProton
    for k, v in value.items():
        if type(k) is not str:
            raise _ForProton
        if type(v) is not str:
            _check_nested(v)
    return value


def _check_nested(value: Any) -> None:
    """Binary inside a map or list is left to proton, which hands it out as a memoryview."""
    if type(value) is bytes:
        raise _ForProton
    if type(value) is dict:
        _plain_map(value)
    elif type(value) is list:
        for item in value:
            _check_nested(item)


class Received(NamedTuple):
    """What a consumer needs of a received message, read from its bytes by :func:`read_message`."""

    body: bytes
    headers: dict[str, Any]
    #: the header's 0-based delivery-count and first-acquirer
    header_count: int
    first_acquirer: bool
    stored_at: int | None


def read_message(raw: bytes) -> Received | None:
    """The encoded message ``raw`` as :func:`body_bytes`, :func:`message_headers` and
    :func:`stored_at_of` would give it after ``proton.Message.decode``; None when it uses an
    encoding left to proton (the caller then decodes with proton)."""
    try:
        return _read(raw if type(raw) is bytes else bytes(raw))
    except (_ForProton, IndexError, ValueError, TypeError, struct.error, RecursionError):
        return None


def _read(buf: bytes) -> Received:
    pos, size, last = 0, len(buf), 0
    durable, count, first = False, 0, False
    props: list[Any] = []
    annotations: dict[str, Any] = {}
    app: dict[str, Any] = {}
    body: bytes = b""
    while pos < size:
        if buf[pos] != 0:
            raise _ForProton
        code = buf[pos + 1]
        if code == 0x53:
            section = buf[pos + 2]
            pos += 3
        elif code == 0x80:
            if _U32(buf, pos + 2)[0] != 0:
                raise _ForProton
            section = _U32(buf, pos + 6)[0]
            pos += 10
        else:
            raise _ForProton  # a symbolic descriptor
        if section <= last or not _HEADER <= section <= _FOOTER or (last >= _DATA and section != _FOOTER):
            raise _ForProton  # out of order, repeated, unknown, or a second body section
        last = section
        if section == _HEADER:
            (durable, count, first), pos = _seen_header(buf, pos)
        elif section == _PROPERTIES:
            props, pos = _fields(buf, pos, _PROPERTY_FIELDS)
        elif section == _DATA:
            if buf[pos] not in {0xA0, 0xB0}:
                raise _ForProton
            body, pos = _value(buf, pos)
        elif section == _VALUE:
            code = buf[pos]
            if code in {0xA1, 0xB1}:  # a string: its UTF-8 is the body (checked, as proton does)
                start = pos + (2 if code == 0xA1 else 5)
                _, pos = _value(buf, pos)
                body = buf[start:pos]
            elif code in {_NULL, 0xA0, 0xB0}:
                value, pos = _value(buf, pos)
                body = b"" if value is None else value
            else:
                raise _ForProton  # another type: proton's value, then body_bytes
        elif section == _SEQUENCE:
            raise _ForProton
        elif section == _MESSAGE_ANN:
            annotations, pos = _seen_map(buf, pos)
        elif section == _APP_PROPS:
            app, pos = _seen_map(buf, pos)
        else:  # delivery annotations, footer: checked, not kept
            if buf[pos] not in {_NULL, 0xC1, 0xD1}:
                raise _ForProton
            value, pos = _value(buf, pos)
            _plain_map(value)
    if pos != size:
        raise _ForProton
    props += [None] * (13 - len(props))
    headers: dict[str, Any] = {
        "durable": durable,
        "delivery_count": count,
        "first_acquirer": first,
        "message_annotations": annotations,
        "application_properties": app,
    }
    if props[5] is not None:
        headers["correlation_id"] = props[5]
    if props[0] is not None:
        headers["message_id"] = props[0]
    if props[9]:
        headers["creation_time"] = round(props[9] / 1000.0 * 1000)  # as proton's seconds round-trip
    stored = annotations.get(INGRESS_TIME_ANNOTATION)
    stored_at = stored if type(stored) is int else None
    return Received(bytes(body), headers, count, first, stored_at)


def proton_message(raw: bytes) -> Any:
    """``raw`` decoded by proton (the reader's fallback, and what a resend copies)."""
    message = _proton().Message()
    message.decode(raw)
    return message


def _received_by_proton(raw: bytes) -> Received:
    message = proton_message(raw)
    return Received(
        body_bytes(message.body),
        message_headers(message),
        int(message.delivery_count or 0),
        bool(message.first_acquirer),
        stored_at_of(message),
    )


class _Receipt(NamedTuple):
    generation: int
    delivery: Any
    #: the message as it arrived (encoded): a delayed release resends a copy of it
    raw: bytes


class _Inbox:
    """Proton event handler of one receiving link: keeps each complete incoming delivery."""

    def __init__(self) -> None:
        self.items: deque[tuple[bytes, Any]] = deque()

    def on_delivery(self, event: Any) -> None:
        """Keeps the encoded bytes; decoding waits until ``reserve`` hands the message out."""
        delivery = event.delivery
        if not delivery.readable or delivery.partial:
            return
        link = event.link  # the event's own wrapper: ``delivery.link`` would wrap it again
        self.items.append((link.recv(delivery.pending), delivery))
        link.advance()

    def on_unhandled(self, method: str, *args: Any) -> None:
        return None


class _SkipDeliveries:
    """The container-wide handler, minus delivery events.

    Proton hands every event to the container's global handlers (socket IO, the connector) after
    the link's own handler; none of them does anything with a delivery, and passing each of a
    consumer's deliveries down that chain is a good part of its CPU time. Every other event goes
    through unchanged.
    """

    def __init__(self, base: Any) -> None:
        self.base = base

    def on_delivery(self, event: Any) -> None:
        return None

    def on_unhandled(self, method: str, event: Any) -> None:
        event.dispatch(self.base)


@functools.cache
def _delivery_collector() -> Any:
    """A proton ``Collector`` subclass that takes a consumer's complete deliveries straight off
    the event queue, or None when this proton lacks what it needs (then every delivery goes
    through the event path, :meth:`_Inbox.on_delivery`).

    Why: proton turns every queued C event into a Python ``Event`` (five wrappers: delivery,
    link, session, connection, transport) and dispatches it through the handler chain; for a
    consumer that is one event per message and most of its CPU time. The reactor only ever asks
    its collector to ``peek`` (then dispatches what it got and pops it), so a ``peek``
    that first consumes the head events which are complete deliveries on a registered receiving
    link -- doing exactly what :meth:`_Inbox.on_delivery` does: receive the bytes, advance the
    link, keep ``(bytes, Delivery)`` -- leaves every other event, and every delivery it does not
    take (partial, other links, the management reply link), to proton as before.
    """
    try:
        import cproton  # type: ignore[import-untyped]
        from proton._delivery import Delivery as ProtonDelivery
        from proton._events import Collector, Event
    except ImportError:  # pragma: no cover - another proton layout
        return None
    names = (
        "pn_collector_peek", "pn_collector_pop", "pn_event_type", "pn_event_delivery",
        "pn_delivery_link", "pn_delivery_readable", "pn_delivery_partial", "pn_delivery_pending",
        "pn_link_advance", "pn_link_recv", "addressof", "isnull", "PN_DELIVERY",
    )  # fmt: skip
    if not all(hasattr(cproton, name) for name in names) or not hasattr(Event, "wrap"):
        return None  # pragma: no cover
    cp: Any = cproton
    peek, pop, event_type, event_delivery = (
        cp.pn_collector_peek, cp.pn_collector_pop, cp.pn_event_type, cp.pn_event_delivery,
    )  # fmt: skip
    link_of, readable, partial = cp.pn_delivery_link, cp.pn_delivery_readable, cp.pn_delivery_partial
    pending, advance, recv, address, isnull = (
        cp.pn_delivery_pending, cp.pn_link_advance, cp.pn_link_recv, cp.addressof, cp.isnull,
    )  # fmt: skip
    delivery_event: int = cp.PN_DELIVERY
    wrap_event: Any = Event.wrap
    wrap_delivery: Any = ProtonDelivery.wrap

    class DeliveryCollector(Collector):
        inboxes: dict[int, _Inbox]
        #: a link's key in ``inboxes``: the address of its C object
        key = staticmethod(address)

        def peek(self) -> Any:
            impl = self._impl
            inboxes = self.inboxes
            while True:
                event = peek(impl)
                if isnull(event):
                    return None
                if event_type(event) != delivery_event:
                    return wrap_event(event)
                delivery = event_delivery(event)
                link = link_of(delivery)
                inbox = inboxes.get(address(link))
                if inbox is None or not readable(delivery) or partial(delivery):
                    return wrap_event(event)
                size, data = recv(link, pending(delivery))
                if size < 0:  # let proton's own path raise what it means
                    return wrap_event(event)
                advance(link)
                inbox.items.append((bytes(data), wrap_delivery(delivery)))
                pop(impl)

    return DeliveryCollector


def _take_deliveries(conn: Any, link: Any, inbox: _Inbox) -> None:
    """Have ``conn``'s collector take ``link``'s complete deliveries into ``inbox`` directly."""
    fast = _delivery_collector()
    collector = getattr(getattr(conn, "container", None), "_collector", None)
    impl = getattr(link, "_impl", None)
    if fast is None or collector is None or impl is None:
        return
    if type(collector) is not fast:
        if type(collector) is not fast.__base__:
            return
        collector.__class__ = fast
        collector.inboxes = {}
    collector.inboxes[fast.key(impl)] = inbox


class _Options:
    """Link options: the ``queue`` capability on Artemis (anycast, like a JMS queue)."""

    def __init__(self, capabilities: Sequence[str]) -> None:
        self.capabilities = tuple(capabilities)

    def apply(self, link: Any) -> None:
        if not self.capabilities:
            return
        terminus = link.target if link.is_sender else link.source
        data = terminus.capabilities
        data.put_array(False, _proton().Data.SYMBOL)
        data.enter()
        for capability in self.capabilities:
            data.put_symbol(capability)
        data.exit()

    def test(self, link: Any) -> bool:
        return True



class ArtemisTransport(BaseTransport):
    """ActiveMQ Artemis (or RabbitMQ's AMQP 1.0 plugin) over one proton ``BlockingConnection``."""

    scheme = "artemis"
    leased_reservations = False

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        broker: str = "artemis",
        address: str | None = None,
        release: str | None = None,
        delays: str | None = None,
        prefetch: int = 100,
        heartbeat: float = 30.0,
        timeout: float = 10.0,
        confirm_timeout: float = 30.0,
        linger: float = 0.001,
        credit: str = "batch",
        admin_port: int | None = None,
        ca_file: str | None = None,
        connect: Callable[[ArtemisTransport], Any] | None = None,
    ) -> None:
        link = TransportURL.split(url)
        where, parts = link.shown(), link.parts
        if parts.scheme not in ("artemis", "artemis+ssl"):
            raise ConfigurationError(f"url: not an artemis:// or artemis+ssl:// URL: {where!r}")
        if broker not in BROKERS:
            raise ConfigurationError(f"broker: must be one of {BROKERS}, got {broker!r} ({where})")
        default_address, default_release, default_delays = BROKER_DEFAULTS[broker]
        address = default_address if address is None else address
        if address.count("{queue}") != 1 or address.replace("{queue}", "").count("{"):
            raise ConfigurationError(
                f"address: must contain {{queue}} exactly once (e.g. /amq/queue/{{queue}}), "
                f"got {address!r} ({where})"
            )
        release = default_release if release is None else release
        if release not in RELEASE_OUTCOMES:
            raise ConfigurationError(f"release: must be one of {RELEASE_OUTCOMES}, got {release!r} ({where})")
        if broker == "rabbitmq" and release == "modified":
            raise ConfigurationError(
                "release: RabbitMQ's AMQP 1.0 plugin closes the session on a modified outcome; "
                f"use released ({where})"
            )
        delays = default_delays if delays is None else delays
        if delays not in DELAY_MODES:
            raise ConfigurationError(f"delays: must be one of {DELAY_MODES}, got {delays!r} ({where})")
        if not 1 <= prefetch <= 65535:
            raise ConfigurationError(f"prefetch: must be within 1..65535, got {prefetch} ({where})")
        if credit not in CREDIT_MODES:
            raise ConfigurationError(f"credit: must be one of {CREDIT_MODES}, got {credit!r} ({where})")
        if not 0 <= linger <= 1:
            raise ConfigurationError(f"linger: seconds within 0..1, got {linger} ({where})")
        timings = (("heartbeat", heartbeat), ("timeout", timeout), ("confirm_timeout", confirm_timeout))
        for name, value in timings:
            if value < 0 or (name != "heartbeat" and value == 0):
                raise ConfigurationError(f"{name}: must be > 0, got {value} ({where})")
        if ca_file is not None and parts.scheme != "artemis+ssl":
            raise ConfigurationError(f"ca_file: a TLS option, needs an artemis+ssl:// URL ({where})")
        port = link.port
        path = parts.path[1:] if parts.path.startswith("/") else parts.path
        if path and broker == "artemis":
            raise ConfigurationError(
                f"url: Artemis has no virtual hosts; drop the path {parts.path!r} ({where})"
            )
        self.url = url
        self.where = where
        self.broker = broker
        self.address_template = address
        self.release_outcome = release
        self.delays = delays
        self.prefetch = prefetch
        self.heartbeat = heartbeat
        self.timeout = timeout
        self.confirm_timeout = confirm_timeout
        self.linger = linger
        self.credit = credit
        self.tls = parts.scheme == "artemis+ssl"
        self.host = parts.hostname or "127.0.0.1"
        self.port = port or (5671 if self.tls else 5672)
        self.vhost = unquote(path) if path else "/"
        self.username = unquote(parts.username) if parts.username is not None else None
        self._password = unquote(parts.password) if parts.password is not None else None
        self.ca_file = ca_file
        self.admin_port = admin_port or self.port
        self.store_host = f"{self.host}:{self.port}"
        self._connect_hook = connect
        self._lock = threading.RLock()
        self._conn: Any = None
        self._generation = 0
        self._senders: dict[str, Any] = {}
        self._receivers: dict[str, tuple[Any, _Inbox]] = {}
        self._held: dict[int, _Receipt] = {}
        self._declared: set[str] = set()
        self._admin: Any = None  # RabbitMQ: babelq's AMQP 0-9-1 channel for declare/count/purge
        self._admin_conn: Any = None
        self._mgmt: tuple[Any, Any, str] | None = None  # Artemis: management sender, reply receiver, address
        self._warned_delay = False
        self._warned_count = False
        self._closed = False
        self._keepalive: threading.Thread | None = None
        self._keepalive_stop = threading.Event()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> ArtemisTransport:
        """``artemis://user:pass@host:5672?broker=rabbitmq&prefetch=100``.

        The options are :class:`ArtemisOptions`; keywords win over the URL's query; an unknown
        option is refused, naming it.
        """
        link = TransportURL.split(url)
        parsed = ArtemisOptions.parse(link, options)
        return cls(link.with_query(()), **parsed.values())

    # -- addresses ----------------------------------------------------------------------
    def address(self, queue: str) -> str:
        """The AMQP 1.0 address of ``queue`` (the ``address`` template filled in)."""
        if not queue:
            raise ConfigurationError("queue: must not be empty")
        return self.address_template.replace("{queue}", queue)

    def _capabilities(self) -> tuple[str, ...]:
        return ("queue",) if self.broker == "artemis" else ()

    # -- connection ---------------------------------------------------------------------
    def _open(self) -> Any:
        """The live connection, opening one when needed. Caller holds the lock."""
        if self._closed:
            raise ConfigurationError("transport: this artemis transport is closed")
        if self._conn is not None:
            return self._conn
        conn = self._connect_hook(self) if self._connect_hook is not None else self._connect()
        self._conn = conn
        self._generation += 1
        if (
            self.heartbeat
            and self._connect_hook is None
            and (self._keepalive is None or not self._keepalive.is_alive())
        ):
            self._keepalive = start_keepalive(
                self, self._keepalive_stop, name=f"babelq-artemis-heartbeat-{self.store_host}", first_wait=1.0
            )
        return conn

    def _connect(self) -> Any:
        proton = _proton()
        scheme = "amqps" if self.tls else "amqp"
        kwargs: dict[str, Any] = {"timeout": self.timeout, "heartbeat": self.heartbeat or None}
        if self.username is not None:
            kwargs["user"] = self.username
            kwargs["password"] = self._password or ""
            kwargs["allow_insecure_mechs"] = True
            kwargs["allowed_mechs"] = "PLAIN"
        if self.broker == "rabbitmq" and self.vhost != "/":
            kwargs["virtual_host"] = f"vhost:{self.vhost}"
        if self.tls:
            domain = proton.SSLDomain(proton.SSLDomain.MODE_CLIENT)
            if self.ca_file:
                domain.set_trusted_ca_db(self.ca_file)
            domain.set_peer_authentication(proton.SSLDomain.VERIFY_PEER_NAME)
            kwargs["ssl_domain"] = domain
        try:
            conn = proton.utils.BlockingConnection(f"{scheme}://{self.host}:{self.port}", **kwargs)
        except Exception as exc:
            raise self.connect_error(redact_text(str(exc))) from exc
        conn.container.global_handler = _SkipDeliveries(conn.container.global_handler)
        return conn

    def connect_error(self, text: str) -> BabelqError:
        """What a failed connect means, from proton's (redacted) text: refused credentials and a
        listener that does not speak AMQP 1.0 are configuration; anything else is an outage."""
        lowered = text.lower()
        if "unauthorized-access" in lowered or "authentication failed" in lowered:
            return ConfigurationError(
                f"url: {self.where} refused the credentials (user {self.username!r}): {text}"
            )
        if "framing-error" in lowered and "protocol header" in lowered:
            return ConfigurationError(
                f"url: {self.where} does not speak AMQP 1.0 (on RabbitMQ enable the rabbitmq_amqp1_0 "
                f"plugin, or check the port): {text}"
            )
        return UnavailableError(f"artemis: cannot connect to {self.where}: {text}")

    def _reset(self) -> None:
        """Forget a broken connection: its unsettled deliveries are already back on their queues."""
        conn, self._conn = self._conn, None
        self._senders.clear()
        self._receivers.clear()
        self._held.clear()
        self._mgmt = None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # a broken connection is just dropped
                log.debug("artemis: error while closing a broken connection", exc_info=True)

    def _is_connection_error(self, exc: BaseException) -> bool:
        if isinstance(exc, OSError | ConnectionError):
            return True
        try:
            proton = _proton()
        except ConfigurationError:
            return False
        return isinstance(exc, proton.ProtonException) and not isinstance(exc, proton.utils.SendException)

    def _with_reconnect(self, operation: Callable[[], Any]) -> Any:
        """Run ``operation``; after a dropped connection or link, reconnect and run it once more.

        What the dropped connection held went back to the broker (not dead-lettered, not counted
        by us). A second failure is an :class:`UnavailableError`: the runtime puts the message back.
        """
        try:
            return operation()
        except (ConfigurationError, UnavailableError):  # a PublishNotConfirmedError is one
            raise
        except Exception as exc:
            if not self._is_connection_error(exc):
                raise
            reason = redact_text(str(exc))
            log.warning("artemis: connection to %s lost (%s); reconnecting", self.where, reason)
            self._reset()
        return self._once(operation, why="")

    def _wait(self, condition: Callable[[], bool], timeout: float) -> bool:
        """Process events until ``condition()`` or ``timeout`` seconds; False on timeout."""
        proton = _proton()
        try:
            self._open().wait(condition, timeout=max(timeout, 0.0))
        except proton.Timeout:
            return bool(condition())
        return True

    def _flush(self) -> None:
        """Write pending frames (a settlement) now instead of at the next call."""
        self._wait(lambda: False, 0.0)

    def _heartbeat_tick(self) -> float:
        """One turn of the heartbeat thread: let proton send/expect heartbeats while the caller
        is busy elsewhere (a long handler), without ever waiting for the lock."""
        interval = max(self.heartbeat / 4, 0.5) if self.heartbeat else 1.0
        if not self._lock.acquire(blocking=False):
            return interval
        try:
            if self._conn is not None:
                self._flush()
        except Exception as exc:
            log.warning("artemis: %s: %s; reconnecting on the next call", self.where, redact_text(str(exc)))
            self._reset()
        finally:
            self._lock.release()
        return interval

    # -- administration -------------------------------------------------------------------
    def _admin_channel(self) -> Any:
        """RabbitMQ: babelq's AMQP 0-9-1 channel on the same listener (declare, count, purge)."""
        from babelq.transports.amqp_client import Connection, ConnectionParameters

        if self._admin is not None and self._admin.is_open and self._admin_conn.is_open:
            return self._admin
        if self._admin_conn is not None:
            self._admin_conn.close()
        scheme = "amqps" if self.tls else "amqp"
        userinfo = ""
        if self.username is not None:
            userinfo = quote(self.username, safe="") + ":" + quote(self._password or "", safe="") + "@"
        url = f"{scheme}://{userinfo}{self.host}:{self.admin_port}/{quote(self.vhost, safe='')}"
        if self.ca_file:
            url += f"?cafile={quote(self.ca_file)}"
        from babelq.transports.amqp_client import AMQPAccessRefusedError

        try:
            self._admin_conn = Connection(ConnectionParameters.from_url(url))
            self._admin = self._admin_conn.channel()
        except AMQPAccessRefusedError as exc:
            raise ConfigurationError(
                f"url: {self.where} refused the credentials (user {self.username!r}, vhost {self.vhost!r}) "
                f"on its AMQP 0-9-1 admin port {self.admin_port}: {redact_text(str(exc))}"
            ) from exc
        except UnavailableError as exc:
            raise UnavailableError(
                f"artemis: cannot connect to {self.where} (AMQP 0-9-1 admin port {self.admin_port}): "
                f"{redact_text(str(exc))}"
            ) from exc
        return self._admin

    def _rabbit_admin(self, operation: Callable[[Any], Any]) -> Any:
        from babelq.transports.amqp_client import AMQPConnectionError, ChannelStateError

        try:
            return operation(self._admin_channel())
        except (AMQPConnectionError, ChannelStateError):
            self._admin = None
            return operation(self._admin_channel())

    def _declare(self, queue: str) -> None:
        """Make sure ``queue`` exists before linking to it (RabbitMQ: ``/amq/queue/`` never declares,
        and a publish to a missing queue is accepted and dropped). Artemis creates it on attach."""
        if queue in self._declared or self.broker != "rabbitmq":
            return
        from babelq.transports.amqp_client import ChannelClosedByBrokerError

        def declare(channel: Any) -> None:
            try:
                channel.queue_declare(queue, durable=True)
            except ChannelClosedByBrokerError as exc:
                if exc.reply_code != 406:
                    raise
                log.warning("artemis: queue %r exists with other arguments (%s); using it as is", queue, exc)
                self._admin_channel().queue_declare(queue, passive=True)

        self._rabbit_admin(declare)
        self._declared.add(queue)

    def _management(self, queue: str, operation: str) -> Any:
        """Artemis: one request to the ``activemq.management`` address; the reply's first value."""
        proton = _proton()
        conn = self._open()
        if self._mgmt is None:
            sender = conn.create_sender(MANAGEMENT_ADDRESS)
            inbox = _Inbox()
            receiver = conn.create_receiver(None, credit=10, dynamic=True, handler=inbox)
            self._mgmt = (sender, (receiver, inbox), receiver.link.remote_source.address)
        sender, (receiver, inbox), reply_to = self._mgmt
        request = proton.Message(
            body="[]",
            reply_to=reply_to,
            properties={"_AMQ_ResourceName": f"queue.{queue}", "_AMQ_OperationName": operation},
        )
        try:
            sender.send(request)
        except (proton.utils.SendException, proton.utils.LinkDetached) as exc:
            self._mgmt = None
            raise ConfigurationError(
                f"artemis: {self.where} refused a management request ({operation} on {queue!r}); "
                "counting and purging need the manage permission on activemq.management"
            ) from exc
        if not self._wait(lambda: bool(inbox.items), self.timeout):
            raise UnavailableError(f"artemis: {self.where}: no management reply for {operation} on {queue!r}")
        reply_raw, delivery = inbox.items.popleft()
        reply = proton_message(reply_raw)
        delivery.update(proton.Delivery.ACCEPTED)
        delivery.settle()
        receiver.link.flow(1)
        props = dict(reply.properties or {})
        text = body_bytes(reply.body).decode("utf-8", "replace")
        if props.get("_AMQ_OperationSucceeded") is False:
            if "not exist" in text.lower() or "AMQ229017" in text:
                return None
            raise ConfigurationError(
                f"artemis: management {operation} on {queue!r} failed: {redact_text(text)}"
            )
        values = json.loads(text) if text else [None]
        return values[0] if isinstance(values, list) and values else values

    def _waiting_on_broker(self, queue: str, *, ready_only: bool) -> int:
        """Messages on the broker not held by any consumer (RabbitMQ: ready; Artemis: count minus
        delivering, minus scheduled when ``ready_only``)."""
        if self.broker == "rabbitmq":
            from babelq.transports.amqp_client import ChannelClosedByBrokerError

            def count(channel: Any) -> int:
                try:
                    return int(channel.queue_declare(queue, passive=True)[1])
                except ChannelClosedByBrokerError as exc:
                    if exc.reply_code == 404:
                        return 0
                    raise

            return int(self._rabbit_admin(count))
        total = self._management(queue, "getMessageCount")
        if total is None:
            return 0
        delivering = int(self._management(queue, "getDeliveringCount") or 0)
        scheduled = int(self._management(queue, "getScheduledCount") or 0) if ready_only else 0
        return max(int(total) - delivering - scheduled, 0)

    # -- links ----------------------------------------------------------------------------
    def _sender(self, queue: str) -> Any:
        sender = self._senders.get(queue)
        if sender is None:
            self._declare(queue)
            sender = self._open().create_sender(self.address(queue), options=_Options(self._capabilities()))
            self._senders[queue] = sender
        return sender

    def _receiver(self, queue: str) -> tuple[Any, _Inbox]:
        entry = self._receivers.get(queue)
        if entry is None:
            self._declare(queue)
            inbox = _Inbox()
            receiver = self._open().create_receiver(
                self.address(queue), credit=0, handler=inbox, options=_Options(self._capabilities())
            )
            _take_deliveries(self._conn, receiver.link, inbox)
            entry = (receiver, inbox)
            self._receivers[queue] = entry
        return entry

    # -- publishing ---------------------------------------------------------------------
    def _effective_delay(self, delay_ms: int) -> int:
        if delay_ms > 0 and self.delays == "ignore" and not self._warned_delay:
            self._warned_delay = True
            log.warning(
                "artemis: delays=ignore (broker=%s): delayed messages are visible at once on %s",
                self.broker,
                self.where,
            )
        return 0 if self.delays == "ignore" else max(delay_ms, 0)

    def _send_confirmed(self, queue: str, messages: Sequence[Any]) -> None:
        """Send every message on ``queue``'s link, then wait until the broker settled them all."""
        proton = _proton()
        sender = self._sender(queue)
        link = sender.link
        deliveries = [link.send(message) for message in messages]

        def settled() -> bool:
            return all(d.settled or d.remote_state for d in deliveries)

        if not self._wait(settled, self.confirm_timeout):
            raise PublishNotConfirmedError(
                f"artemis: {self.where} did not confirm {len(deliveries)} message(s) to {queue!r} "
                f"within {self.confirm_timeout} s"
            )
        bad = [d.remote_state for d in deliveries if d.remote_state != proton.Delivery.ACCEPTED]
        for delivery in deliveries:
            delivery.settle()
        if bad:
            raise PublishNotConfirmedError(
                f"artemis: {self.where} refused {len(bad)} of {len(deliveries)} message(s) to {queue!r} "
                f"(outcome {bad[0]})"
            )

    def publish(
        self,
        queue: str,
        body: bytes,
        *,
        envelope: Envelope | None = None,
        delay_ms: int = 0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """``headers`` ride as string application properties beside the binding's ``bq_*``."""
        message = build_message(
            body, envelope, delays=self.delays, delay_ms=self._effective_delay(delay_ms), carried=headers
        )
        with self._lock:
            self._with_reconnect(lambda: self._send_confirmed(queue, [message]))

    def publish_many(self, queue: str, messages: Sequence[Outgoing]) -> None:
        if not messages:
            return
        built = [
            build_message(m.body, m.envelope, delays=self.delays, delay_ms=self._effective_delay(m.delay_ms))
            for m in messages
        ]
        with self._lock:
            self._with_reconnect(lambda: self._send_confirmed(queue, built))

    # -- reserving ----------------------------------------------------------------------
    def _delivery(self, queue: str, raw: bytes, proton_delivery: Any) -> Delivery:
        receipt = _Receipt(self._generation, proton_delivery, raw)
        self._held[id(proton_delivery)] = receipt
        got = read_message(raw) or _received_by_proton(raw)
        header_count = got.header_count
        headers = got.headers
        return Delivery(
            body=got.body,
            queue=queue,
            receipt=receipt,
            delivery_count=_hand_outs(header_count, got.first_acquirer, self.broker),
            headers=headers,
            carried_headers={
                k: v for k, v in headers["application_properties"].items()
                if isinstance(v, str) and not k.startswith("bq_")
            },
            stored_at=got.stored_at,
            store_host=self.store_host,
            reconcile=lambda body_attempts: binding.reconcile_attempts(body_attempts, header_count),
            refusal=schema_gate.refusal(headers["application_properties"].get(schema_gate.ARTEMIS_PROPERTY)),
        )

    def _reserve_slice(self, queue: str, max_messages: int, slice_end: float) -> list[Delivery]:
        receiver, inbox = self._receiver(queue)
        link = receiver.link
        # credit=batch: only what this call asks for, so a released message is free for other
        # consumers; credit=prefetch: keep ``prefetch`` outstanding, so the broker streams on
        # while the caller handles the batch (what AMQP 0-9-1's prefetch does)
        want = (self.prefetch if self.credit == "prefetch" else min(max_messages, self.prefetch)) - len(
            inbox.items
        )
        if want > link.credit:
            link.flow(want - link.credit)
        if not inbox.items:
            self._wait(lambda: bool(inbox.items), slice_end - time.monotonic())
        else:
            self._flush()
        if inbox.items and self.linger > 0:
            self._linger(inbox, min(max_messages, self.prefetch), slice_end)
        if link.state & _proton().Endpoint.REMOTE_CLOSED:
            raise _proton().utils.LinkDetached(link)
        take = min(len(inbox.items), max_messages)
        return [self._delivery(queue, *inbox.items.popleft()) for _ in range(take)]

    def _linger(self, inbox: _Inbox, target: int, slice_end: float) -> None:
        """While messages keep streaming in, keep taking them (up to ``target``) before handing a
        batch out: each round of waiting, settling and flushing costs about as much CPU as a dozen
        messages, and RabbitMQ's plugin streams about a dozen per socket read. Stops as soon as
        ``linger`` seconds bring nothing new, so a quiet queue's lone message waits at most that."""
        while len(inbox.items) < target:
            left = slice_end - time.monotonic()
            if left <= 0:
                return
            before = len(inbox.items)
            self._wait(lambda: len(inbox.items) >= target, min(self.linger, left))
            if len(inbox.items) == before:
                return

    def reserve(self, queue: str, *, max_messages: int = 1, timeout: float = 0.0) -> list[Delivery]:
        deadline = time.monotonic() + max(timeout, 0.0)
        confirmed = False
        while True:
            with self._lock:
                end = min(deadline, time.monotonic() + _WAIT_SLICE)
                out: list[Delivery] = self._with_reconnect(
                    functools.partial(self._reserve_slice, queue, max_messages, end)
                )
            if out:
                return out
            if time.monotonic() < deadline:
                continue
            if confirmed:
                return out
            # Empty means empty: messages may be on their way (credit was only just granted). If the
            # broker says some are waiting, give them up to a second to arrive.
            confirmed = True
            with self._lock:
                try:
                    waiting = self._with_reconnect(lambda: self._waiting_on_broker(queue, ready_only=True))
                except ConfigurationError as exc:  # no count available (e.g. no manage permission)
                    if not self._warned_count:
                        self._warned_count = True
                        log.warning("artemis: %s; an empty reserve is not double-checked", exc)
                    waiting = 0
            if not waiting:
                return out
            deadline = time.monotonic() + 1.0

    # -- settling -------------------------------------------------------------------------
    def _live(self, delivery: Delivery) -> _Receipt | None:
        receipt = delivery.receipt
        if not isinstance(receipt, _Receipt):
            raise ConfigurationError("delivery: not reserved through an artemis transport")
        stale = receipt.generation != self._generation or self._conn is None
        if stale or id(receipt.delivery) not in self._held:
            log.warning(
                "artemis: a delivery on %r belongs to a closed connection or was settled; the broker "
                "has already taken it back",
                delivery.queue,
            )
            return None
        return receipt

    def _settle(self, delivery: Delivery, outcome: str) -> bool:
        """Settle one held delivery locally (``accepted``, ``modified`` or ``released``); no flush."""
        receipt = self._live(delivery)
        if receipt is None:
            return False
        proton = _proton()
        d = receipt.delivery
        if outcome == "accepted":
            d.update(proton.Delivery.ACCEPTED)
        elif outcome == "modified":
            d.local.failed = True
            d.update(proton.Delivery.MODIFIED)
        else:
            d.update(proton.Delivery.RELEASED)
        d.settle()
        del self._held[id(d)]
        return True

    def _settle_all(self, deliveries: Sequence[Delivery], outcome: str) -> None:
        with self._lock:
            if any([self._settle(d, outcome) for d in deliveries]):
                self._with_reconnect(self._flush)

    def ack(self, delivery: Delivery) -> None:
        self._settle_all([delivery], "accepted")

    def ack_many(self, deliveries: Sequence[Delivery]) -> None:
        self._settle_all(deliveries, "accepted")

    def release(self, delivery: Delivery, *, delay_ms: int = 0) -> None:
        """Put back: the ``release`` outcome when there is no delay (or delays are ignored), else a
        delayed copy of the same message is published (confirmed) and the original accepted."""
        delay = self._effective_delay(delay_ms)
        if delay <= 0:
            self._settle_all([delivery], self.release_outcome)
            return
        with self._lock:
            receipt = self._live(delivery)
            if receipt is None:
                return
            copy = resend_message(proton_message(receipt.raw), delays=self.delays, delay_ms=delay)
            self._once(lambda: self._send_confirmed(delivery.queue, [copy]))
            self._settle(delivery, "accepted")
            self._with_reconnect(self._flush)

    def release_many(self, deliveries: Sequence[Delivery]) -> None:
        """Unprocessed reservations go back ``released`` (not a failed delivery, so no count)."""
        self._settle_all(deliveries, "released")

    def renew_many(self, deliveries: Sequence[Delivery]) -> int:
        """Nothing to extend (held until settled or the connection drops): counts the held ones."""
        with self._lock:
            return sum(
                1
                for d in deliveries
                if isinstance(d.receipt, _Receipt)
                and d.receipt.generation == self._generation
                and id(d.receipt.delivery) in self._held
            )

    def _once(
        self, operation: Callable[[], Any], *, why: str = " (the delivery went back to the broker)"
    ) -> Any:
        """Run ``operation`` with no second try on a new connection: a dropped connection is an
        :class:`UnavailableError` (``why`` is added to it). Steps that belong to a held delivery
        use it directly (the delivery went back with the old connection); :meth:`_with_reconnect`
        for its second try."""
        try:
            return operation()
        except (ConfigurationError, UnavailableError):  # a PublishNotConfirmedError is one
            raise
        except Exception as exc:
            if not self._is_connection_error(exc):
                raise
            self._reset()
            raise UnavailableError(f"artemis: {self.where}: {redact_text(str(exc))}{why}") from exc

    def _republish(self, delivery: Delivery, queue: str, message: Any) -> None:
        """Publish (confirmed) then accept: a crash in between duplicates, never loses."""
        with self._lock:
            if self._live(delivery) is None:
                return
            self._once(lambda: self._send_confirmed(queue, [message]))
            self._settle(delivery, "accepted")
            self._with_reconnect(self._flush)

    def retry(self, delivery: Delivery, body: bytes, *, delay_ms: int) -> None:
        delay = self._effective_delay(delay_ms)
        message = build_message(body, delays=self.delays, delay_ms=delay, carried=delivery.carried_headers)
        self._republish(delivery, delivery.queue, message)

    def dead_letter(self, delivery: Delivery, body: bytes, *, dlq: str) -> None:
        message = build_message(body, delays=self.delays, carried=delivery.carried_headers)
        self._republish(delivery, dlq, message)

    # -- inspection -----------------------------------------------------------------------
    def _buffered(self, queue: str) -> int:
        """Deliveries that reached this process and were not handed out (after taking in what
        arrived meanwhile: a released message comes straight back to a link that has credit)."""
        if self._conn is not None:
            self._flush()
        entry = self._receivers.get(queue)
        return len(entry[1].items) if entry is not None else 0

    def size(self, queue: str) -> int:
        """Waiting on the broker (ready, plus scheduled on Artemis) and prefetched here but not handed out."""
        with self._lock:
            return int(
                self._with_reconnect(
                    lambda: self._waiting_on_broker(queue, ready_only=False) + self._buffered(queue)
                )
            )

    def ready(self, queue: str) -> int:
        with self._lock:
            return int(
                self._with_reconnect(
                    lambda: self._waiting_on_broker(queue, ready_only=True) + self._buffered(queue)
                )
            )

    def purge(self, queue: str) -> None:
        """Delete what waits on ``queue`` and what this transport holds or prefetched from it."""
        with self._lock:

            def run() -> None:
                entry = self._receivers.get(queue)
                if entry is not None:
                    receiver, inbox = entry
                    link = receiver.link
                    link.drained()
                    for held in [r for r in self._held.values() if r.delivery.link is link]:
                        held.delivery.update(_proton().Delivery.ACCEPTED)
                        held.delivery.settle()
                        del self._held[id(held.delivery)]
                    while inbox.items:
                        _, d = inbox.items.popleft()
                        d.update(_proton().Delivery.ACCEPTED)
                        d.settle()
                    self._flush()
                if self.broker == "rabbitmq":
                    from babelq.transports.amqp_client import ChannelClosedByBrokerError

                    def purge(channel: Any) -> None:
                        try:
                            channel.queue_purge(queue)
                        except ChannelClosedByBrokerError as exc:
                            if exc.reply_code != 404:
                                raise

                    self._rabbit_admin(purge)
                else:
                    self._management(queue, "removeAllMessages")

            self._with_reconnect(run)

    def delete_queue(self, queue: str) -> None:
        """RabbitMQ only: delete ``queue`` (test clean-up); drops this transport's links and holdings."""
        if self.broker != "rabbitmq":
            raise ConfigurationError("delete_queue: only with broker=rabbitmq")
        with self._lock:
            self._reset()  # links to the queue go with the connection (RabbitMQ may not answer a detach)
            self._rabbit_admin(lambda channel: channel.queue_delete(queue))
            self._declared.discard(queue)

    def close(self) -> None:
        """Close the connections; the broker takes back every delivery that was not settled."""
        self._keepalive_stop.set()
        with self._lock:
            self._reset()
            self._closed = True
            if self._admin_conn is not None:
                self._admin_conn.close()
                self._admin_conn = None
                self._admin = None
