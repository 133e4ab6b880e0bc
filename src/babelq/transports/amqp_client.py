"""A lean, blocking AMQP 0-9-1 client: one socket, a few channels, only what the transport uses.

Why not pika: pika decodes every frame into objects and sends every frame with its own
``send``; on a consumer that is most of the CPU (three frames and a property table per
message). This client reads large socket chunks and walks them with ``struct.unpack_from``,
keeps a delivery's properties as raw bytes (decoded only when someone asks), appends
deliveries straight to a per-consumer ``deque``, and writes a batch of publishes or acks with
one ``sendall``.

It is synchronous and not thread-safe (the transport serialises calls with a lock). Nothing
happens in the background: frames are read, heartbeats sent and missed server heartbeats
detected only while a method of the connection runs (``process``, an RPC, a confirm wait);
the transport calls ``process`` from a thread of its own between its other calls. Heartbeats
are negotiated by default (the broker's proposal), because without them a network that goes
silent -- no FIN, no RST -- leaves a consumer waiting forever on a connection that is gone.

Errors say what kind of failure they are: :class:`AMQPConnectionError` (an
:class:`~babelq.errors.UnavailableError`) when the broker or the network failed,
:class:`AMQPAccessRefusedError` or a :class:`~babelq.errors.ConfigurationError` when the
settings can never work (login, vhost, certificates). Their text names the URL with its
password masked and fits on one line.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import ssl
import struct
import time
import uuid
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final
from urllib.parse import unquote

from babelq.errors import AMQPAccessRefusedError as AMQPAccessRefusedError
from babelq.errors import AMQPConnectionError as AMQPConnectionError
from babelq.errors import AMQPError as AMQPError
from babelq.errors import BrokerUnreachableError as BrokerUnreachableError
from babelq.errors import ChannelClosedByBrokerError as ChannelClosedByBrokerError
from babelq.errors import ChannelStateError as ChannelStateError
from babelq.errors import ConfigurationError
from babelq.errors import ConnectionClosedByBrokerError as ConnectionClosedByBrokerError
from babelq.transports import amqp_protocol as wire
from babelq.transports.url_options import TransportURL, URLOptions
from babelq.urls import redact_text

log = logging.getLogger(__name__)

_READ_SIZE: Final = 1 << 18
_DELIVER: Final = wire.BASIC_DELIVER.key
_GET_OK: Final = wire.BASIC_GET_OK.key
_RETURN: Final = wire.BASIC_RETURN.key
_ACK: Final = wire.BASIC_ACK.key
_NACK: Final = wire.BASIC_NACK.key
_CHANNEL_CLOSE: Final = wire.CHANNEL_CLOSE.key
_CONNECTION_CLOSE: Final = wire.CONNECTION_CLOSE.key
_U32: Final = struct.Struct(">I")
_DELIVERY_TAG: Final = struct.Struct(">QB")
_GET_OK_TAIL: Final = struct.Struct(">I")
_CONTENT_HEADER: Final = struct.Struct(">HHQ")
_ACK_FRAME: Final = struct.Struct(">BHIHHQBB")  # method frame of Basic.Ack/Nack/Reject, end octet included
_CONFIRM: Final = struct.Struct(">QB")
_BODY_SIZE: Final = struct.Struct(">Q")


#: Connection.Close codes during the handshake that mean "these settings will never work"
_REFUSALS: Final = (403, 530)
#: TLS errors that are a broken connection, not a refusal
_TLS_TRANSIENT: Final = (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError, ssl.SSLWantReadError)


@dataclass(frozen=True, slots=True)
class AMQPConnectionOptions(URLOptions):
    """The connection options an ``amqp://`` / ``amqps://`` query may carry (defaults: ours).

    The TLS ones (``cafile`` ... ``verify``) apply to ``amqps://`` only.
    """

    transport: ClassVar[str] = "amqp"

    heartbeat: int | None = None
    """Seconds; ``None`` takes the broker's proposal (RabbitMQ: 60), ``0`` turns them off."""
    frame_max: int = 131072
    """Largest frame we offer (the smaller of ours and the broker's is used)."""
    channel_max: int = 2047
    """Most channels we offer."""
    connection_attempts: int = 1
    """Connects tried before the broker counts as unreachable."""
    retry_delay: float = 2.0
    """Seconds between those attempts."""
    socket_timeout: float = 10.0
    """Seconds a connect and the handshake may take."""
    rpc_timeout: float = 60.0
    """Seconds a method's reply may take."""
    locale: str = "en_US"
    """The locale sent in ``Connection.StartOk``."""
    cafile: str | None = None
    """PEM file of the CA(s) that signed the broker's certificate (else the system's)."""
    certfile: str | None = None
    """PEM file of the client certificate."""
    keyfile: str | None = None
    """PEM file of the client certificate's key (needs ``certfile``)."""
    server_hostname: str | None = None
    """Name to check the broker's certificate against and send as SNI (else the host)."""
    verify: bool = True
    """Check the broker's certificate chain and host name."""


@dataclass(frozen=True, slots=True)
class ConnectionParameters(AMQPConnectionOptions):
    """Where and how to connect; built from an ``amqp://`` / ``amqps://`` URL by :meth:`from_url`.

    The connection options are :class:`AMQPConnectionOptions`'; ``where`` is the URL with its
    password masked, for error messages.
    """

    host: str = "127.0.0.1"
    port: int = 5672
    virtual_host: str = "/"
    username: str = "guest"
    password: str = field(default="guest", repr=False)
    tls: bool = False
    where: str = ""

    _TLS: ClassVar[tuple[str, ...]] = ("cafile", "certfile", "keyfile", "server_hostname", "verify")

    @property
    def display(self) -> str:
        """How errors name this broker: the redacted URL, else ``host:port``."""
        return self.where or f"{self.host}:{self.port}"

    @classmethod
    def from_url(cls, url: str) -> ConnectionParameters:
        """``amqp[s]://user:pass@host:port/vhost?heartbeat=30&frame_max=131072...``.

        The vhost is the percent-decoded path (``%2F`` is ``/``; an empty path is ``/``). Every
        error names the option and the URL, with its password masked.
        """
        link = TransportURL.split(url)
        where = link.shown()
        if link.scheme not in ("amqp", "amqps"):
            raise ConfigurationError(f"url: not an amqp:// or amqps:// URL: {where!r}")
        tls = link.scheme == "amqps"
        if not tls:
            for key, _ in link.query:
                if key in cls._TLS:
                    raise ConfigurationError(f"{key}: a TLS option, needs an amqps:// URL: {where}")
        options = AMQPConnectionOptions.parse(link)
        path = link.parts.path.removeprefix("/")
        params = cls(
            **{name: getattr(options, name) for name in AMQPConnectionOptions.names()},
            host=link.hostname or "127.0.0.1",
            port=link.port or (5671 if tls else 5672),
            virtual_host=unquote(path) if path else "/",
            username=link.username if link.username is not None else "guest",
            password=link.password if link.password is not None else "guest",
            tls=tls,
            where=where,
        )
        if params.heartbeat is not None and params.heartbeat < 0:
            raise ConfigurationError(f"heartbeat: must be >= 0, got {params.heartbeat} in {where}")
        if params.connection_attempts < 1:
            raise ConfigurationError(
                f"connection_attempts: must be >= 1, got {params.connection_attempts} in {where}"
            )
        if params.frame_max and params.frame_max < wire.MIN_FRAME_MAX:
            raise ConfigurationError(
                f"frame_max: must be >= {wire.MIN_FRAME_MAX}, got {params.frame_max} in {where}"
            )
        if params.keyfile and not params.certfile:
            raise ConfigurationError(f"keyfile: needs certfile (the client certificate) in {where}")
        return params

    def tls_context(self) -> ssl.SSLContext:
        """The client's TLS context: the system's trust store or ``cafile``, the client certificate
        (``certfile``, ``keyfile``) when given, and certificate plus hostname checks unless
        ``verify`` is off. A file that cannot be read is a :class:`ConfigurationError` naming it."""
        try:
            context = ssl.create_default_context(cafile=self.cafile)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigurationError(
                f"cafile: cannot load {self.cafile!r}: {_reason(exc)} ({self.display})"
            ) from None
        if not self.verify:
            log.warning("amqp: %s: TLS without certificate verification (verify=false)", self.display)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.certfile:
            try:
                context.load_cert_chain(self.certfile, self.keyfile)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigurationError(
                    f"certfile/keyfile: cannot load {self.certfile!r}"
                    f"{f' with {self.keyfile!r}' if self.keyfile else ''}: {_reason(exc)} ({self.display})"
                ) from None
        return context


def _tls_alert_behind(sock: socket.socket, exc: OSError) -> OSError:
    """The TLS alert a broker sent before closing, when a send failed on a cut TLS stream.

    Under TLS 1.3 the client finishes its handshake before the broker has checked the client's
    certificate; a broker that then refuses it sends an alert ("certificate required") and
    closes. Whether our next send fails first (a bare EOF) or our next read sees the alert is a
    race; reading what is left on the socket turns the EOF back into the broker's reason."""
    if not isinstance(sock, ssl.SSLSocket) or not isinstance(exc, (*_TLS_TRANSIENT, ConnectionError)):
        return exc
    try:
        sock.settimeout(0.5)
        sock.recv(1)
    except ssl.SSLError as alert:
        if not isinstance(alert, _TLS_TRANSIENT):
            return alert
    except OSError:
        pass
    return exc


def _reason(exc: BaseException) -> str:
    """The short, human part of an OS or TLS error (no errno tuple, no C source location)."""
    if isinstance(exc, ssl.SSLCertVerificationError) and exc.verify_message:
        return str(exc.verify_message)
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason).replace("_", " ").lower()
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return redact_text(str(exc)) or type(exc).__name__


class Message:
    """A delivered message: delivery facts, the raw property bytes and the body."""

    __slots__ = (
        "body",
        "consumer_tag",
        "delivery_tag",
        "exchange",
        "properties",
        "redelivered",
        "routing_key",
    )

    def __init__(
        self,
        delivery_tag: int,
        redelivered: bool,
        exchange: str,
        routing_key: str,
        consumer_tag: str = "",
        *,
        properties: bytes = b"\x00\x00",
        body: bytes = b"",
    ) -> None:
        self.delivery_tag = delivery_tag
        self.redelivered = redelivered
        self.exchange = exchange
        self.routing_key = routing_key
        self.consumer_tag = consumer_tag
        self.properties = properties
        self.body = body

    def decoded_properties(self) -> wire.BasicProperties:
        return wire.BasicProperties.decode(self.properties)


class _Partial:
    """A content-bearing method whose header/body frames are still arriving."""

    __slots__ = ("chunks", "key", "message", "received", "size")

    def __init__(self, key: int, message: Message | None) -> None:
        self.key = key
        self.message = message
        self.size = -1
        self.received = 0
        self.chunks: list[bytes] = []


class Channel:
    """One AMQP channel. Create through :meth:`Connection.channel`."""

    def __init__(self, connection: Connection, number: int) -> None:
        self.connection = connection
        self.number = number
        self.is_open = False
        #: delivery tags handed to us (Deliver/GetOk) and not yet acked/nacked/rejected by us
        self.unsettled: set[int] = set()
        self.consumers: dict[str, deque[Message]] = {}
        self._partial: _Partial | None = None
        self._reply: tuple[int, Any] | None = None
        self._closed_by: ChannelClosedByBrokerError | None = None
        self._confirming = False
        self._next_seq = 1
        self._pending: set[int] = set()
        self.nacked = 0
        self.returned = 0

    # -- plumbing -----------------------------------------------------------------------------
    def _check(self) -> None:
        if not self.is_open:
            if self._closed_by is not None:
                raise ChannelStateError(f"channel {self.number} is closed ({self._closed_by})")
            raise ChannelStateError(f"channel {self.number} is closed")

    def _rpc(self, spec: wire.MethodSpec, replies: Iterable[wire.MethodSpec], **args: Any) -> Any:
        """Send ``spec`` and wait for one of ``replies`` on this channel (its arguments or Message)."""
        self._check()
        wanted = {r.key for r in replies}
        self._reply = None
        self.connection.send(wire.frame(wire.FRAME_METHOD, self.number, spec.encode(**args)))
        deadline = time.monotonic() + self.connection.params.rpc_timeout
        while self._reply is None:
            if self._closed_by is not None:
                raise self._closed_by
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.connection.abort()
                raise AMQPConnectionError(
                    f"no reply to {spec.name} within {self.connection.params.rpc_timeout}s"
                )
            self.connection.process(remaining)
        key, value = self._reply
        self._reply = None
        if key not in wanted:
            raise wire.ProtocolError(f"unexpected reply {wire.METHODS[key].name} to {spec.name}")
        return key, value

    def _on_method(self, key: int, payload: bytes) -> None:
        """A non-content method for this channel (called by the connection's frame loop)."""
        if key in (_ACK, _NACK):
            tag, bits = _CONFIRM.unpack_from(payload, 4)
            pending = self._pending
            before = len(pending)
            if not bits & 1:
                pending.discard(tag)
            elif tag >= self._next_seq - 1:
                pending.clear()  # the usual "everything so far" confirm: no scan
            else:
                pending.difference_update([s for s in pending if s <= tag])
            if key == _NACK:
                self.nacked += before - len(pending)
            return
        _, args = wire.decode_method(payload)
        if key == _CHANNEL_CLOSE:
            self.connection.send(wire.frame(wire.FRAME_METHOD, self.number, wire.CHANNEL_CLOSE_OK.encode()))
            self._closed_by = ChannelClosedByBrokerError(args["reply_code"], args["reply_text"])
            log.debug("amqp: channel %d closed by broker: %s", self.number, self._closed_by)
            self._forget()
            return
        if key == wire.BASIC_CANCEL.key:  # the broker cancelled a consumer (its queue was deleted)
            self.consumers.pop(args["consumer_tag"], None)
            log.warning("amqp: consumer %s cancelled by the broker", args["consumer_tag"])
            if not args["nowait"]:
                reply = wire.BASIC_CANCEL_OK.encode(consumer_tag=args["consumer_tag"])
                self.connection.send(wire.frame(wire.FRAME_METHOD, self.number, reply))
            return
        if key == wire.CHANNEL_FLOW.key:
            reply = wire.CHANNEL_FLOW_OK.encode(active=args["active"])
            self.connection.send(wire.frame(wire.FRAME_METHOD, self.number, reply))
            return
        self._reply = (key, args)

    def _on_message(self, key: int, message: Message) -> None:
        if key == _DELIVER:
            self.unsettled.add(message.delivery_tag)
            buffer = self.consumers.get(message.consumer_tag)
            if buffer is not None:
                buffer.append(message)
            return
        if key == _RETURN:
            self.returned += 1
            log.error(
                "amqp: message returned by broker: %s (routing key %r)",
                message.consumer_tag,
                message.routing_key,
            )
            return
        self.unsettled.add(message.delivery_tag)  # Basic.GetOk
        self._reply = (key, message)

    def _forget(self) -> None:
        self.is_open = False
        self.consumers.clear()
        self.unsettled.clear()
        self._pending.clear()
        self._partial = None
        self.connection.forget_channel(self)

    # -- methods ------------------------------------------------------------------------------
    def open(self) -> None:
        self.is_open = True
        try:
            self._rpc(wire.CHANNEL_OPEN, [wire.CHANNEL_OPEN_OK])
        except BaseException:
            self.is_open = False
            raise

    def close(self) -> None:
        if not self.is_open:
            return
        try:
            self._rpc(wire.CHANNEL_CLOSE, [wire.CHANNEL_CLOSE_OK], reply_code=200, reply_text="bye")
        finally:
            self._forget()

    def qos(self, prefetch_count: int) -> None:
        self._rpc(wire.BASIC_QOS, [wire.BASIC_QOS_OK], prefetch_count=prefetch_count)

    def confirm_select(self) -> None:
        """Publisher confirms from now on: :meth:`wait_for_confirms` waits for the broker's acks."""
        self._rpc(wire.CONFIRM_SELECT, [wire.CONFIRM_SELECT_OK])
        self._confirming = True

    def queue_declare(
        self,
        queue: str,
        *,
        durable: bool = True,
        passive: bool = False,
        arguments: Mapping[str, Any] | None = None,
    ) -> tuple[str, int, int]:
        """Declare ``queue``: its name, ready message count and consumer count."""
        _, args = self._rpc(
            wire.QUEUE_DECLARE, [wire.QUEUE_DECLARE_OK],
            queue=queue, durable=durable, passive=passive, arguments=arguments,
        )  # fmt: skip
        return str(args["queue"]), int(args["message_count"]), int(args["consumer_count"])

    def queue_purge(self, queue: str) -> int:
        _, args = self._rpc(wire.QUEUE_PURGE, [wire.QUEUE_PURGE_OK], queue=queue)
        return int(args["message_count"])

    def queue_delete(self, queue: str, *, if_unused: bool = False, if_empty: bool = False) -> int:
        _, args = self._rpc(
            wire.QUEUE_DELETE, [wire.QUEUE_DELETE_OK], queue=queue, if_unused=if_unused, if_empty=if_empty
        )
        return int(args["message_count"])

    def basic_consume(self, queue: str, *, consumer_tag: str = "") -> tuple[str, deque[Message]]:
        """Start a manual-ack consumer; deliveries are appended to the returned deque."""
        # The tag is ours, so the buffer exists before the first Deliver, which may arrive in the
        # same read as ConsumeOk.
        tag = consumer_tag or f"babelq.{uuid.uuid4().hex}"
        buffer: deque[Message] = deque()
        self.consumers[tag] = buffer
        try:
            self._rpc(wire.BASIC_CONSUME, [wire.BASIC_CONSUME_OK], queue=queue, consumer_tag=tag)
        except BaseException:
            self.consumers.pop(tag, None)
            raise
        return tag, buffer

    def basic_cancel(self, consumer_tag: str) -> None:
        """Stop a consumer; messages it already delivered stay unsettled until acked or requeued."""
        self._rpc(wire.BASIC_CANCEL, [wire.BASIC_CANCEL_OK], consumer_tag=consumer_tag)
        self.consumers.pop(consumer_tag, None)

    def basic_get(self, queue: str) -> Message | None:
        """One message with manual ack, or ``None`` when the queue is empty."""
        key, value = self._rpc(wire.BASIC_GET, [wire.BASIC_GET_OK, wire.BASIC_GET_EMPTY], queue=queue)
        return value if key == _GET_OK else None

    def _settle(self, method_id: int, tags: Iterable[int], bits: int) -> None:
        self._check()
        number = self.number
        frames = [_ACK_FRAME.pack(1, number, 13, 60, method_id, tag, bits, wire.FRAME_END) for tag in tags]
        if frames:
            self.connection.send(b"".join(frames))

    def ack(self, delivery_tag: int, *, multiple: bool = False) -> None:
        self._settle(80, (delivery_tag,), int(multiple))
        self._settled(delivery_tag, multiple)

    def ack_each(self, delivery_tags: Sequence[int]) -> None:
        """One ``Basic.Ack`` per tag, all in one write."""
        self._settle(80, delivery_tags, 0)
        self.unsettled.difference_update(delivery_tags)

    def nack(self, delivery_tag: int, *, multiple: bool = False, requeue: bool = True) -> None:
        self._settle(120, (delivery_tag,), int(multiple) | (int(requeue) << 1))
        self._settled(delivery_tag, multiple)

    def reject(self, delivery_tag: int, *, requeue: bool = True) -> None:
        self._settle(90, (delivery_tag,), int(requeue))
        self._settled(delivery_tag, False)

    def _settled(self, tag: int, multiple: bool) -> None:
        if multiple:
            self.unsettled.difference_update([t for t in self.unsettled if t <= tag])
        else:
            self.unsettled.discard(tag)

    def publish_many(
        self,
        items: Iterable[tuple[str, bytes, bytes]],
        *,
        exchange: str = "",
        mandatory: bool = False,
    ) -> int:
        """Publish ``(routing_key, body, encoded properties)`` items with one write; returns the count.

        In confirm mode each publish gets the next sequence number; :meth:`wait_for_confirms`
        waits for all of them.
        """
        self._check()
        frame_max = self.connection.frame_max
        number = self.number
        prefix = wire.BASIC_PUBLISH.encode(exchange=exchange)[:-2]  # ids, ticket, exchange
        flag = b"\x01" if mandatory else b"\x00"
        out: list[bytes] = []
        count = 0
        for routing_key, body, properties in items:
            out += wire.content_frames(
                number, prefix + wire.shortstr(routing_key) + flag, properties, body, frame_max
            )
            count += 1
        if self._confirming:
            seq = self._next_seq
            self._pending.update(range(seq, seq + count))
            self._next_seq = seq + count
        self.connection.send(b"".join(out))
        return count

    def wait_for_confirms(self, timeout: float) -> tuple[int, int]:
        """Wait until the broker confirmed every publish; ``(nacked, returned)`` since the last wait.

        Raises :class:`TimeoutError` when confirms are still missing after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while self._pending:
            if self._closed_by is not None:
                raise self._closed_by
            self._check()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"{len(self._pending)} message(s) not confirmed in {timeout}s")
            self.connection.process(remaining)
        result = (self.nacked, self.returned)
        self.nacked = self.returned = 0
        return result


class Connection:
    """A blocking AMQP 0-9-1 connection (handshake done in the constructor)."""

    def __init__(self, params: ConnectionParameters) -> None:
        self.params = params
        self.frame_max = params.frame_max or wire.MIN_FRAME_MAX
        self.heartbeat = 0
        self.is_open = False
        self._sock: socket.socket | None = None
        self._pending = b""
        self._channels: dict[int, Channel] = {}
        self._channel0_reply: tuple[int, dict[str, Any]] | None = None
        self._closed_by: ConnectionClosedByBrokerError | None = None
        self._last_send = self._last_recv = time.monotonic()
        self.blocked = False
        #: the interval the broker proposed in Connection.Tune (what ``heartbeat=None`` takes)
        self.broker_heartbeat = 0
        # Built before any attempt: a certificate file that cannot be read is a ConfigurationError
        # whether or not the broker can be reached.
        self._tls = params.tls_context() if params.tls else None
        error: Exception | None = None
        for attempt in range(params.connection_attempts):
            if attempt:
                time.sleep(params.retry_delay)
            try:
                self._connect()
                return
            except ConnectionClosedByBrokerError as exc:
                self.abort()
                if exc.reply_code in _REFUSALS:  # the same settings will be refused again
                    raise AMQPAccessRefusedError(
                        params.display, exc.reply_code, redact_text(exc.reply_text)
                    ) from None
                error = exc
            except ssl.SSLCertVerificationError as exc:
                self.abort()
                raise ConfigurationError(
                    f"{params.display}: TLS: the broker's certificate was not accepted: {_reason(exc)} "
                    f"(cafile={params.cafile or 'the system trust store'}, "
                    f"server_hostname={params.server_hostname or params.host})"
                ) from None
            except (OSError, AMQPConnectionError) as exc:
                self.abort()
                refusal = exc if isinstance(exc, ssl.SSLError) else exc.__cause__
                if isinstance(refusal, ssl.SSLError) and not isinstance(refusal, _TLS_TRANSIENT):
                    # a TLS alert (no or unknown client certificate, no common protocol...): these
                    # settings will not do, whereas a cut TLS stream is just a lost connection
                    raise ConfigurationError(
                        f"{params.display}: TLS: the broker refused the handshake: {_reason(refusal)} "
                        f"(certfile={params.certfile or 'none'})"
                    ) from None
                error = exc
            except BaseException:  # a protocol error...
                self.abort()
                raise
        reason = error if isinstance(error, AMQPConnectionError) else _reason(error or OSError())
        raise BrokerUnreachableError(f"{params.display}: cannot connect: {reason}") from error

    # -- handshake ----------------------------------------------------------------------------
    def _connect(self) -> None:
        params = self.params
        sock = socket.create_connection((params.host, params.port), timeout=params.socket_timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if params.tls:
            try:
                assert self._tls is not None
                sock = self._tls.wrap_socket(
                    sock, server_hostname=params.server_hostname or params.host
                )
            except BaseException:
                sock.close()
                raise
        sock.settimeout(params.rpc_timeout)  # bounds a blocked sendall; reads wait in select
        self._sock = sock
        self._pending = b""
        self._closed_by = None
        self._last_send = self._last_recv = time.monotonic()
        self.is_open = True
        self.send(wire.PROTOCOL_HEADER)
        key, start = self._wait_channel0()
        if key != wire.CONNECTION_START.key:
            raise wire.ProtocolError(f"expected Connection.Start, got {wire.METHODS[key].name}")
        if b"PLAIN" not in bytes(start["mechanisms"]).split():
            raise AMQPConnectionError(f"broker does not offer PLAIN auth: {start['mechanisms']!r}")
        client_properties = {
            "product": "babelq",
            "platform": "Python",
            "capabilities": {
                "publisher_confirms": True,
                "basic.nack": True,
                "consumer_cancel_notify": True,
                "connection.blocked": True,
                "authentication_failure_close": True,
            },
        }
        response = b"\x00" + params.username.encode() + b"\x00" + params.password.encode()
        self._send_method(
            0, wire.CONNECTION_START_OK,
            client_properties=client_properties, mechanism="PLAIN", response=response, locale=params.locale,
        )  # fmt: skip
        key, tune = self._wait_channel0()
        if key != wire.CONNECTION_TUNE.key:
            raise wire.ProtocolError(f"expected Connection.Tune, got {wire.METHODS[key].name}")
        self.frame_max = _negotiate(params.frame_max, tune["frame_max"])
        channel_max = _negotiate(params.channel_max, tune["channel_max"])
        self.broker_heartbeat = int(tune["heartbeat"])
        self.heartbeat = self.broker_heartbeat if params.heartbeat is None else params.heartbeat
        self._send_method(
            0,
            wire.CONNECTION_TUNE_OK,
            channel_max=channel_max,
            frame_max=self.frame_max,
            heartbeat=self.heartbeat,
        )
        self._send_method(0, wire.CONNECTION_OPEN, virtual_host=params.virtual_host)
        key, _ = self._wait_channel0()
        if key != wire.CONNECTION_OPEN_OK.key:
            raise wire.ProtocolError(f"expected Connection.OpenOk, got {wire.METHODS[key].name}")

    def _wait_channel0(self) -> tuple[int, dict[str, Any]]:
        deadline = time.monotonic() + self.params.socket_timeout
        while self._channel0_reply is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AMQPConnectionError("handshake with the broker timed out")
            self.process(remaining)
        reply, self._channel0_reply = self._channel0_reply, None
        return reply

    def _send_method(self, channel: int, spec: wire.MethodSpec, **args: Any) -> None:
        self.send(wire.frame(wire.FRAME_METHOD, channel, spec.encode(**args)))

    # -- channels -----------------------------------------------------------------------------
    def channel(self) -> Channel:
        """Open a new channel."""
        self._check()
        number = next(n for n in range(1, 65536) if n not in self._channels)
        channel = Channel(self, number)
        self._channels[number] = channel
        try:
            channel.open()
        except BaseException:
            self._channels.pop(number, None)
            raise
        return channel

    def forget_channel(self, channel: Channel) -> None:
        if self._channels.get(channel.number) is channel:
            del self._channels[channel.number]

    # -- I/O ----------------------------------------------------------------------------------
    def _check(self) -> None:
        if not self.is_open:
            if self._closed_by is not None:
                raise AMQPConnectionError(f"connection is closed ({self._closed_by})")
            raise AMQPConnectionError("connection is closed")

    def send(self, data: bytes) -> None:
        self._check()
        assert self._sock is not None
        try:
            self._sock.sendall(data)
        except OSError as exc:
            cause = _tls_alert_behind(self._sock, exc)
            self.abort()
            raise AMQPConnectionError(f"connection lost while sending: {cause}") from cause
        self._last_send = time.monotonic()

    def process(self, timeout: float = 0.0) -> bool:
        """Read what the broker sent (waiting up to ``timeout`` s for the first bytes) and dispatch it.

        Returns whether anything arrived. Sends a heartbeat when one is due and raises
        :class:`AMQPConnectionError` when the broker has been silent for two heartbeat intervals.
        """
        self._check()
        sock = self._sock
        assert sock is not None
        heartbeat = self.heartbeat
        if heartbeat:
            timeout = min(timeout, heartbeat / 2)
        ready = (isinstance(sock, ssl.SSLSocket) and sock.pending() > 0) or bool(
            select.select([sock], [], [], max(timeout, 0.0))[0]
        )
        now = time.monotonic()
        if ready:
            try:
                data = sock.recv(_READ_SIZE)
            except OSError as exc:
                self.abort()
                raise AMQPConnectionError(f"connection lost: {exc}") from exc
            if not data:
                self.abort()
                raise AMQPConnectionError("connection closed by the broker (end of stream)")
            self._last_recv = now
            self._dispatch(self._pending + data if self._pending else data)
        if heartbeat:
            if now - self._last_recv > 2 * heartbeat:
                self.abort()
                raise AMQPConnectionError(f"missed broker heartbeats for {now - self._last_recv:.0f}s")
            if now - self._last_send >= heartbeat / 2 and self.is_open:
                self.send(wire.HEARTBEAT_FRAME)
        return ready

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` while dispatching whatever arrives."""
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            self.process(remaining)

    def _dispatch(self, data: bytes) -> None:
        """Walk every complete frame in ``data``; keep the incomplete tail for the next read."""
        pos = 0
        size_all = len(data)
        head = wire.FRAME_HEAD.unpack_from
        u32 = _U32.unpack_from
        channels = self._channels
        while size_all - pos >= 8:
            kind, number, size = head(data, pos)
            end = pos + 7 + size
            if end >= size_all:
                break
            if data[end] != wire.FRAME_END:
                self.abort()
                raise wire.ProtocolError("frame does not end with 0xCE")
            start = pos + 7
            pos = end + 1
            if kind == wire.FRAME_BODY:
                channel = channels.get(number)
                partial = channel._partial if channel is not None else None
                if partial is None:
                    continue  # content for a channel we have forgotten
                partial.chunks.append(data[start:end])
                partial.received += size
                if partial.received >= partial.size:
                    self._complete(channel, partial)  # type: ignore[arg-type]
                continue
            if kind == wire.FRAME_METHOD:
                (key,) = u32(data, start)
                if key == _DELIVER:
                    channel = channels.get(number)
                    if channel is None:
                        continue
                    p = start + 4
                    ctag_end = p + 1 + data[p]
                    ctag = data[p + 1 : ctag_end].decode()
                    tag, bits = _DELIVERY_TAG.unpack_from(data, ctag_end)
                    p = ctag_end + 9
                    ex_end = p + 1 + data[p]
                    rk_end = ex_end + 1 + data[ex_end]
                    message = Message(
                        tag,
                        bool(bits & 1),
                        data[p + 1 : ex_end].decode(),
                        data[ex_end + 1 : rk_end].decode(),
                        ctag,
                    )
                    # Fast path: the header and a single body frame are already here (the usual case).
                    if size_all - pos >= 8:
                        h_kind, h_number, h_size = head(data, pos)
                        h_end = pos + 7 + h_size
                        if h_kind == wire.FRAME_HEADER and h_number == number and h_end < size_all:
                            (body_size,) = _BODY_SIZE.unpack_from(data, pos + 11)
                            b_end = b_size = -1
                            if body_size and size_all - h_end > 8:
                                b_kind, b_number, b_size = head(data, h_end + 1)
                                b_end = h_end + 8 + b_size
                                if b_kind != wire.FRAME_BODY or b_number != number or b_end >= size_all:
                                    b_size = -1
                            if body_size in (0, b_size) and data[h_end] == wire.FRAME_END:
                                message.properties = data[pos + 19 : h_end]
                                if body_size:
                                    if data[b_end] != wire.FRAME_END:
                                        self.abort()
                                        raise wire.ProtocolError("frame does not end with 0xCE")
                                    message.body = data[h_end + 8 : b_end]
                                    pos = b_end + 1
                                else:
                                    pos = h_end + 1
                                channel.unsettled.add(tag)
                                buffer = channel.consumers.get(ctag)
                                if buffer is not None:
                                    buffer.append(message)
                                continue
                    channel._partial = _Partial(key, message)
                    continue
                if number == 0:
                    self._on_connection_method(key, data[start:end])
                    continue
                channel = channels.get(number)
                if channel is None:
                    continue
                if key in (_GET_OK, _RETURN):
                    _, args = wire.decode_method(data[start:end])
                    if key == _GET_OK:
                        message = Message(
                            args["delivery_tag"], args["redelivered"], args["exchange"], args["routing_key"]
                        )
                    else:
                        reason = f"{args['reply_code']} {args['reply_text']}"  # logged by the channel
                        message = Message(0, False, args["exchange"], args["routing_key"], reason)
                    channel._partial = _Partial(key, message)
                    continue
                channel._on_method(key, data[start:end])
                continue
            if kind == wire.FRAME_HEADER:
                channel = channels.get(number)
                partial = channel._partial if channel is not None else None
                if partial is None or partial.message is None:
                    continue
                partial.size = _CONTENT_HEADER.unpack_from(data, start)[2]
                partial.message.properties = data[start + 12 : end]
                if partial.size == 0:
                    self._complete(channel, partial)  # type: ignore[arg-type]
                continue
            if kind == wire.FRAME_HEARTBEAT:
                continue
            self.abort()
            raise wire.ProtocolError(f"unknown frame type {kind}")
        self._pending = data[pos:] if pos < size_all else b""

    @staticmethod
    def _complete(channel: Channel, partial: _Partial) -> None:
        message = partial.message
        assert message is not None
        chunks = partial.chunks
        message.body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        channel._partial = None
        channel._on_message(partial.key, message)

    def _on_connection_method(self, key: int, payload: bytes) -> None:
        _, args = wire.decode_method(payload)
        if key == _CONNECTION_CLOSE:
            with contextlib.suppress(AMQPConnectionError):
                self._send_method(0, wire.CONNECTION_CLOSE_OK)
            self._closed_by = ConnectionClosedByBrokerError(args["reply_code"], args["reply_text"])
            self.abort()
            raise self._closed_by
        if key == wire.CONNECTION_BLOCKED.key:
            self.blocked = True
            log.warning("amqp: broker blocked the connection: %s", args["reason"])
            return
        if key == wire.CONNECTION_UNBLOCKED.key:
            self.blocked = False
            log.info("amqp: broker unblocked the connection")
            return
        self._channel0_reply = (key, args)

    # -- closing ------------------------------------------------------------------------------
    def close(self) -> None:
        """Close politely (``Connection.Close``, wait briefly for ``CloseOk``), then drop the socket."""
        if not self.is_open:
            return
        try:
            self._send_method(0, wire.CONNECTION_CLOSE, reply_code=200, reply_text="bye")
            deadline = time.monotonic() + min(self.params.socket_timeout, 2.0)
            while self.is_open and (remaining := deadline - time.monotonic()) > 0:
                self.process(remaining)
                if (
                    self._channel0_reply is not None
                    and self._channel0_reply[0] == wire.CONNECTION_CLOSE_OK.key
                ):
                    break
        except (AMQPError, wire.ProtocolError, OSError):
            log.debug("amqp: error while closing the connection", exc_info=True)
        finally:
            self.abort()

    def abort(self) -> None:
        """Drop the socket without a handshake; every channel is closed."""
        self.is_open = False
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()
        for channel in list(self._channels.values()):
            channel.is_open = False
            channel.consumers.clear()
            channel._pending.clear()
        self._channels.clear()


def _negotiate(ours: int, theirs: int) -> int:
    """The smaller non-zero limit (0 means "no limit" on either side)."""
    if not ours:
        return theirs
    if not theirs:
        return ours
    return min(ours, theirs)
