"""Azure Service Bus transport (``sb://`` / ``servicebus://``) with azure-servicebus (sync API).

Why it looks the way it does:

* **Contract.** The message body is the envelope bytes, untouched (one AMQP data section).
  Every send carries the docs/standard.md §4 projection of :mod:`babelq.bindings.asb`: ``subject`` =
  URN, ``correlation_id`` = trace_id, ``message_id`` = meta.id, ``content_type`` =
  ``application/json`` and the application properties ``bq-schema-version``,
  ``bq-source-lang``, ``bq-created-at``, laid out exactly as the ``babelqueue`` SDK lays them
  out, so either SDK can consume the other's messages. The SDK's AMQP encoder writes every bare
  Python ``int`` as an AMQP int32, so a value beyond int32 (``bq-created-at`` is epoch ms) is
  pinned to an AMQP long, as ``babelqueue`` does; otherwise the send fails.
* **At-least-once.** Receives are PeekLock: a message stays locked for the queue's lock
  duration; ``ack`` is Complete, ``release`` is Abandon (the broker raises DeliveryCount), a
  worker that dies lets the lock lapse and the broker hands the message out again.
* **DeliveryCount.** Service Bus counts deliveries from 1, but the AMQP header it sends is
  0-based, and azure-servicebus for Python exposes that header as ``delivery_count`` (0 on the
  first receive; its own live tests assert this). So ``Delivery.delivery_count`` is
  ``delivery_count + 1`` and attempts reconcile as ``max(body, DeliveryCount - 1)`` per docs/standard.md §4.
* **Delays.** ``ScheduledEnqueueTime`` through ``ServiceBusSender.schedule_messages``. A delayed
  ``release`` (Service Bus cannot abandon "later") schedules a copy with the same bytes and
  native fields and completes the original; the copy is a new message, so its DeliveryCount
  starts again.
* **Settling is gated.** A lock that lapsed cannot be completed, abandoned or renewed: the
  broker answers MessageLockLostError, which is logged and skipped (the message belongs to
  whoever holds the new lock). ``retry``, ``dead_letter`` and a delayed ``release`` send first
  and complete afterwards (never lost); a scheduled copy whose original turned out to be lost
  is cancelled again.
* **Leases.** ``lease_seconds`` is the queue's lock duration (asked once through the
  administration client); ``renew_many`` renews each lock (renew_message_lock). A lock belongs
  to the receiver link that took it, so reservations cannot be settled by another process:
  no tagged reservations.
* **Counting.** Service Bus reports active and scheduled counts per queue, and its active
  count includes locked messages. ``size`` and ``ready`` subtract the locks this transport
  holds; other consumers' locks cannot be seen, so ``reserved`` is ``None``.
* **Threads.** The SDK's senders and receivers are not thread-safe: one lock serialises them
  and a waiting ``reserve`` lets go of it every quarter second.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Final, get_args

from babelq.bindings import asb as binding
from babelq.bindings import schema_gate
from babelq.envelope import Envelope, decode
from babelq.errors import ConfigurationError, DecodeError, UnavailableError
from babelq.transports.base import BaseTransport, Delivery, Outgoing
from babelq.transports.url_options import TransportURL, URLOptions
from babelq.urls import MASK, redact_text

log = logging.getLogger(__name__)

#: The connection string babelqueue (and the Azure samples) read when no credential is given.
CONNECTION_STRING_ENV: Final = "AZURE_SERVICEBUS_CONNECTION_STRING"
#: Service Bus refuses a receive that does not wait: the shortest wait we ask for (seconds).
MIN_WAIT: Final = 0.1
#: Longest single wait while holding the transport's lock (seconds).
WAIT_SLICE: Final = 0.25
#: Most messages asked for in one receive call.
MAX_RECEIVE: Final = 100
#: Lock duration Service Bus gives a queue created without one (seconds).
DEFAULT_LOCK_SECONDS: Final = 60.0
#: MaxDeliveryCount of queues this transport creates: abandons raise DeliveryCount, and at the
#: broker's default (10) an outage of the handler's dependencies would move messages into
#: ``$DeadLetterQueue`` behind the runtime's back.
DEFAULT_MAX_DELIVERY_COUNT: Final = 100
_INT32: Final = range(-(2**31), 2**31)

# key=value secrets inside connection strings and SAS tokens
_CONNECTION_SECRET = re.compile(r"(?i)(SharedAccessKey|SharedAccessSignature|sig)(\s*[=\s]\s*)([^;&\s'\"]+)")


def redact_servicebus(text: str) -> str:
    """``text`` without Service Bus secrets: keys, SAS signatures, secret URL options."""
    text = _CONNECTION_SECRET.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    return redact_text(text)


def display_url(url: str) -> str:
    """``url`` fit to show a person: password, ``connection_string``, keys and SAS token masked
    (all secret parameters of :func:`babelq.urls.redact`), and any key text left in the path."""
    return redact_servicebus(TransportURL.split(url).shown())


@dataclass(frozen=True, slots=True)
class ServiceBusOptions(URLOptions):
    """The options of ``sb://`` / ``servicebus://`` (query or keywords)."""

    transport: ClassVar[str] = "sb"

    connection_string: str | None = None
    """``Endpoint=sb://...;SharedAccessKeyName=...;SharedAccessKey=...`` (secret)."""
    shared_access_key_name: str | None = None
    """A SAS policy name (else the URL's user); with ``shared_access_key``."""
    shared_access_key: str | None = None
    """That policy's key (else the URL's password; secret)."""
    sas_token: str | None = None
    """A ready ``SharedAccessSignature ...`` token (secret)."""
    visibility_timeout: float | None = None
    """Lock duration of the queues this transport creates, seconds (else the broker's 60)."""
    create_queues: bool = True
    """Create a missing queue (and its ``.dlq``) on first use."""
    max_delivery_count: int = DEFAULT_MAX_DELIVERY_COUNT
    """MaxDeliveryCount of the queues this transport creates (at least 1)."""
    session_by: binding.SessionBy = "none"
    """``sharding_key``: send ``meta.sharding_key`` as the SessionId (opt-in, as the standard
    makes sessions; babelq's receivers do not read session-enabled queues)."""
    credential: Any = None
    """Any azure-core credential (keyword only)."""
    client: Any = None
    """A ready ``ServiceBusClient`` (keyword only)."""
    admin_client: Any = None
    """A ready ``ServiceBusAdministrationClient`` (keyword only)."""


def _amqp_long(value: object) -> object:
    """An integer beyond int32 wrapped as an AMQP long (the SDK would encode it as int32 and fail)."""
    if type(value) is int and value not in _INT32:
        from azure.servicebus._pyamqp.types import TYPE, VALUE, AMQPTypes

        return {TYPE: AMQPTypes.long, VALUE: value}
    return value


def _property(props: Mapping[Any, Any], name: str) -> object:
    """An application property by name, whether the client gave its key as text or bytes."""
    value = props.get(name)
    return props.get(name.encode("utf-8")) if value is None else value


def _text(value: object) -> object:
    """Received strings arrive as bytes; give them back as text where they are UTF-8."""
    if isinstance(value, bytes | bytearray):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return bytes(value)
    return value


def _epoch_ms(moment: datetime | None) -> int | None:
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(slots=True, eq=False)
class _Receipt:
    """A locked message and the receiver link that holds its lock."""

    queue: str
    receiver: Any
    message: Any


@dataclass(slots=True, frozen=True)
class _Native:
    """Everything a ServiceBusMessage is built from."""

    body: bytes
    fields: Mapping[str, Any]
    due: datetime | None = None


class ServiceBusTransport(BaseTransport):
    """Service Bus queues through one ServiceBusClient (plus an administration client for
    creating queues, reading their lock duration and counting)."""

    scheme = "sb"
    leased_reservations = True
    tagged_reservations = False

    def __init__(
        self,
        namespace: str | None = None,
        *,
        client: Any = None,
        admin_client: Any = None,
        connection_string: str | None = None,
        shared_access_key_name: str | None = None,
        shared_access_key: str | None = None,
        sas_token: str | None = None,
        credential: Any = None,
        visibility_timeout: float | None = None,
        create_queues: bool = True,
        max_delivery_count: int = DEFAULT_MAX_DELIVERY_COUNT,
        session_by: str = "none",
        url: str | None = None,
    ) -> None:
        self.namespace = namespace
        self.visibility_timeout = visibility_timeout
        self.create_queues = create_queues
        self.max_delivery_count = max_delivery_count
        if session_by not in get_args(binding.SessionBy):
            raise ConfigurationError(f"session_by: must be none or sharding_key, got {session_by!r}")
        self.session_by: binding.SessionBy = "sharding_key" if session_by == "sharding_key" else "none"
        self._url = display_url(url) if url else f"sb://{namespace or ''}"
        self._connection_string = connection_string
        self._key_name = shared_access_key_name
        self._key = shared_access_key
        self._sas_token = sas_token
        self._credential = credential
        if visibility_timeout is not None and visibility_timeout <= 0:
            raise ConfigurationError(f"visibility_timeout: must be positive, got {visibility_timeout!r}")
        if (shared_access_key_name is None) != (shared_access_key is None):
            raise ConfigurationError(
                f"shared_access_key_name / shared_access_key: give both or neither ({self._url})"
            )
        self._client = client if client is not None else self._build_client()
        self._admin = admin_client
        self._lock = threading.RLock()
        self._senders: dict[str, Any] = {}
        self._receivers: dict[str, Any] = {}
        self._held: dict[str, dict[int, _Receipt]] = {}
        self._lock_seconds: dict[str, float] = {}
        self._known: set[str] = set()
        self._closed = False

    # -- opening ------------------------------------------------------------------------
    @classmethod
    def from_url(cls, url: str, **options: Any) -> ServiceBusTransport:
        """``sb://<namespace>.servicebus.windows.net?shared_access_key_name=...&shared_access_key=...``.

        The options are :class:`ServiceBusOptions`. Credentials, first found wins:
        ``connection_string`` (option or the ``AZURE_SERVICEBUS_CONNECTION_STRING`` environment
        variable, which babelqueue reads too); ``shared_access_key_name`` + ``shared_access_key``
        (also as the URL's user and password: ``sb://RootManageSharedAccessKey:<key>@ns.servicebus.windows.net``);
        ``sas_token``; a ``credential`` object (keyword only, e.g. azure-identity's).
        """
        link = TransportURL.split(url)
        from_userinfo = {"shared_access_key_name": link.username, "shared_access_key": link.password}
        implied = {name: value for name, value in from_userinfo.items() if value}
        parsed = ServiceBusOptions.parse(link, options, implied=implied)
        if parsed.max_delivery_count < 1:
            raise ConfigurationError(f"max_delivery_count: must be at least 1 in {display_url(url)}")
        return cls(link.hostname or None, url=url, **parsed.values())

    def _build_client(self) -> Any:
        from azure.servicebus import ServiceBusClient  # lazy: only when this transport is used

        connection_string = self._connection_string
        given = (self._key, self._sas_token, self._credential)
        if connection_string is None and all(g is None for g in given):
            connection_string = os.environ.get(CONNECTION_STRING_ENV) or None
            self._connection_string = connection_string
        if connection_string:
            try:
                return ServiceBusClient.from_connection_string(connection_string)
            except ValueError as exc:  # the SDK's message may quote the key
                raise ConfigurationError(
                    f"connection_string: not a Service Bus connection string ({redact_servicebus(str(exc))})"
                ) from None
        if not self.namespace:
            raise ConfigurationError(
                f"url: the sb transport needs a namespace host (sb://<namespace>.servicebus.windows.net) "
                f"or a connection_string, got {self._url}"
            )
        return ServiceBusClient(self.namespace, self._credential_object())

    def _credential_object(self) -> Any:
        if self._credential is not None:
            return self._credential
        if self._key_name is not None and self._key is not None:
            from azure.core.credentials import AzureNamedKeyCredential

            return AzureNamedKeyCredential(self._key_name, self._key)
        if self._sas_token is not None:
            from azure.core.credentials import AzureSasCredential

            return AzureSasCredential(self._sas_token)
        try:
            from azure.identity import DefaultAzureCredential  # type: ignore[import-untyped,import-not-found,unused-ignore]
        except ImportError:
            raise ConfigurationError(
                f"credential: {self._url} gives no connection_string, shared_access_key or sas_token, and "
                "azure-identity (for DefaultAzureCredential) is not installed"
            ) from None
        return DefaultAzureCredential()

    def _admin_client(self) -> Any:
        if self._admin is None:
            from azure.servicebus.management import ServiceBusAdministrationClient

            if self._connection_string:
                self._admin = ServiceBusAdministrationClient.from_connection_string(self._connection_string)
            else:
                self._admin = ServiceBusAdministrationClient(self.namespace or "", self._credential_object())
        return self._admin

    def __repr__(self) -> str:
        return f"ServiceBusTransport({self._url})"

    # -- errors ---------------------------------------------------------------------------
    def _translate(self, exc: Exception, what: str) -> Exception:
        """The SDK's exception as babelq's: configuration, outage, or unchanged (one line, no secrets)."""
        from azure.core.exceptions import ClientAuthenticationError, HttpResponseError, ServiceRequestError
        from azure.servicebus import exceptions as sb

        detail = redact_servicebus(" ".join(str(exc).split()))
        refused: tuple[type[Exception], ...] = (
            sb.ServiceBusAuthenticationError,
            sb.ServiceBusAuthorizationError,
            ClientAuthenticationError,
        )
        status = getattr(exc, "status_code", None)
        if isinstance(exc, refused) or (isinstance(exc, HttpResponseError) and status in (401, 403)):
            return ConfigurationError(
                f"credential: Service Bus refused {what} on {self._url}: {detail} "
                "(check the connection_string / shared_access_key and its Send, Listen or Manage rights)"
            )
        if isinstance(exc, sb.MessagingEntityNotFoundError):
            return ConfigurationError(
                f"queue: {what}: the queue does not exist on {self._url} (create it, or let the transport "
                "create it with create_queues=true)"
            )
        if isinstance(
            exc,
            sb.ServiceBusConnectionError
            | sb.ServiceBusCommunicationError
            | sb.OperationTimeoutError
            | sb.ServiceBusServerBusyError
            | ServiceRequestError,
        ):
            return UnavailableError(f"{self._url}: {what}: Service Bus is unavailable: {detail}")
        return exc

    def _missing(self, exc: Exception) -> bool:
        from azure.core.exceptions import ResourceNotFoundError
        from azure.servicebus.exceptions import MessagingEntityNotFoundError

        return isinstance(exc, MessagingEntityNotFoundError | ResourceNotFoundError)

    def _call(self, queue: str, what: str, action: Any) -> Any:
        """Run ``action()``; a missing queue is created once (``create_queues``) and tried again."""
        try:
            return action()
        except Exception as exc:
            if not (self._missing(exc) and self.create_queues):
                raise self._translate(exc, what) from exc
            self._forget_handlers(queue)
            self.create_queue(queue)
        try:
            return action()
        except Exception as exc:
            raise self._translate(exc, what) from exc

    def _forget_handlers(self, queue: str) -> None:
        for cache in (self._senders, self._receivers):
            handler = cache.pop(queue, None)
            if handler is not None:
                try:
                    handler.close()
                except Exception:  # a handler of a missing queue may be half-open
                    log.debug("servicebus: closing a handler of %s failed", queue, exc_info=True)

    # -- queues ---------------------------------------------------------------------------
    def create_queue(self, queue: str) -> None:
        """Create ``queue`` (lock duration ``visibility_timeout``, else the broker's 60 s) if missing."""
        from azure.core.exceptions import ResourceExistsError

        lock = timedelta(seconds=self.visibility_timeout or DEFAULT_LOCK_SECONDS)
        try:
            self._admin_client().create_queue(
                queue, lock_duration=lock, max_delivery_count=self.max_delivery_count
            )
            log.info("servicebus: created queue %s (lock %s)", queue, lock)
        except ResourceExistsError:
            pass
        except Exception as exc:
            raise self._translate(exc, f"create queue {queue!r}") from exc
        self._known.add(queue)

    def _sender(self, queue: str) -> Any:
        sender = self._senders.get(queue)
        if sender is None:
            sender = self._client.get_queue_sender(queue_name=queue)
            self._senders[queue] = sender
        return sender

    def _receiver(self, queue: str) -> Any:
        receiver = self._receivers.get(queue)
        if receiver is None:
            from azure.servicebus import ServiceBusReceiveMode

            receiver = self._client.get_queue_receiver(
                queue_name=queue, receive_mode=ServiceBusReceiveMode.PEEK_LOCK, prefetch_count=0
            )
            self._receivers[queue] = receiver
        return receiver

    # -- sending --------------------------------------------------------------------------
    @staticmethod
    def projection(
        body: bytes, envelope: Envelope | None = None, *, session_by: binding.SessionBy = "none"
    ) -> dict[str, Any]:
        """ServiceBusMessage keywords for ``body``: the binding's projection, longs pinned,
        empty application properties left out (as babelqueue leaves them out)."""
        doc: Any = envelope
        if doc is None:
            try:
                doc = decode(body)
            except DecodeError:
                doc = {}
        fields = binding.project(doc, session_by=session_by)
        props = fields.pop("application_properties", None) or {}
        if props:
            fields["application_properties"] = {name: _amqp_long(value) for name, value in props.items()}
        return fields

    @staticmethod
    def _message(native: _Native) -> Any:
        from azure.servicebus import ServiceBusMessage

        return ServiceBusMessage(native.body, **native.fields)

    def _native(
        self,
        body: bytes,
        envelope: Envelope | None,
        delay_ms: int,
        now: datetime | None = None,
        carried: Mapping[str, str] | None = None,
    ) -> _Native:
        due = (now or _now()) + timedelta(milliseconds=delay_ms) if delay_ms > 0 else None
        fields = self.projection(body, envelope, session_by=self.session_by)
        if carried:  # string application properties; the binding's ``bq-*`` names win
            extra = {str(k): str(v) for k, v in carried.items() if k and v}
            fields["application_properties"] = {**extra, **fields.get("application_properties", {})}
        return _Native(bytes(body), fields, due)

    def _send(self, queue: str, natives: Sequence[_Native]) -> list[int]:
        """Send ``natives`` (batched) and schedule the delayed ones; returns scheduled sequence numbers."""
        now = [n for n in natives if n.due is None]
        later = [n for n in natives if n.due is not None]

        def run() -> list[int]:
            sender = self._sender(queue)
            if len(now) == 1:
                sender.send_messages(self._message(now[0]))
            elif now:
                self._send_batched(sender, now)
            scheduled: list[int] = []
            for due, group in _by_due(later):
                scheduled += list(sender.schedule_messages([self._message(n) for n in group], due))
            return scheduled

        with self._lock:
            self._check_open()
            result: list[int] = self._call(queue, f"send to {queue!r}", run)
            return result

    def _send_batched(self, sender: Any, natives: Sequence[_Native]) -> None:
        from azure.servicebus.exceptions import MessageSizeExceededError

        batch = sender.create_message_batch()
        for native in natives:
            message = self._message(native)
            try:
                batch.add_message(message)
            except MessageSizeExceededError:
                if len(batch) == 0:
                    raise
                sender.send_messages(batch)
                batch = sender.create_message_batch()
                batch.add_message(message)
        if len(batch):
            sender.send_messages(batch)

    def publish(
        self,
        queue: str,
        body: bytes,
        *,
        envelope: Envelope | None = None,
        delay_ms: int = 0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """``headers`` ride as string application properties beside the binding's ``bq-*``."""
        self._send(queue, [self._native(body, envelope, delay_ms, carried=headers)])

    def publish_many(self, queue: str, messages: Sequence[Outgoing]) -> None:
        if messages:
            now = _now()  # one clock reading: equal delays share one schedule call
            self._send(queue, [self._native(m.body, m.envelope, m.delay_ms, now) for m in messages])

    # -- receiving ------------------------------------------------------------------------
    def reserve(self, queue: str, *, max_messages: int = 1, timeout: float = 0.0) -> list[Delivery]:
        deadline = time.monotonic() + max(timeout, 0.0)
        out: list[Delivery] = []
        while len(out) < max_messages:
            remaining = deadline - time.monotonic()
            wait = MIN_WAIT if out else max(MIN_WAIT, min(remaining, WAIT_SLICE))
            want = min(max_messages - len(out), MAX_RECEIVE)
            with self._lock:
                self._check_open()
                got = self._call(
                    queue,
                    f"receive from {queue!r}",
                    lambda n=want, w=wait: self._receiver(queue).receive_messages(
                        max_message_count=n, max_wait_time=w
                    ),
                )
                receiver = self._receivers[queue]
                for message in got:
                    out.append(self._delivery(queue, receiver, message))
            if not got and (out or time.monotonic() >= deadline):
                break
        return out

    def _delivery(self, queue: str, receiver: Any, message: Any) -> Delivery:
        receipt = _Receipt(queue, receiver, message)
        self._held.setdefault(queue, {})[id(receipt)] = receipt
        raw = message.delivery_count
        count = raw + 1 if type(raw) is int and raw >= 0 else None
        props = message.application_properties or {}
        headers: dict[str, Any] = {
            "subject": message.subject,
            "correlation_id": message.correlation_id,
            "message_id": message.message_id,
            "content_type": message.content_type,
            "session_id": message.session_id,
            "sequence_number": message.sequence_number,
            "application_properties": {_text(k): _text(v) for k, v in props.items()},
        }
        return Delivery(
            body=_body_bytes(message),
            queue=queue,
            receipt=receipt,
            delivery_count=count,
            headers=headers,
            carried_headers={
                k: v for k, v in headers["application_properties"].items()
                if isinstance(v, str) and not k.startswith("bq-")
            },
            stored_at=_epoch_ms(message.enqueued_time_utc),
            store_host=self.namespace,
            reconcile=lambda attempts: binding.reconcile_attempts(attempts, count),
            refusal=schema_gate.refusal(_property(props, schema_gate.PROPERTY)),
        )

    # -- settling -------------------------------------------------------------------------
    def _receipt(self, delivery: Delivery) -> _Receipt:
        receipt = delivery.receipt
        if not isinstance(receipt, _Receipt):
            raise ConfigurationError("delivery: not reserved through a Service Bus transport")
        return receipt

    def _let_go(self, receipt: _Receipt) -> None:
        self._held.get(receipt.queue, {}).pop(id(receipt), None)

    def _settle(self, receipt: _Receipt, operation: str) -> bool:
        """complete_message / abandon_message; False (logged) when the lock is no longer ours."""
        from azure.servicebus.exceptions import MessageAlreadySettled, MessageLockLostError

        with self._lock:
            self._let_go(receipt)
            try:
                getattr(receipt.receiver, operation)(receipt.message)
                return True
            except (MessageLockLostError, MessageAlreadySettled) as exc:
                log.warning(
                    "servicebus: %s of message %s on %s skipped: %s (its lock lapsed; it is delivered again)",
                    operation,
                    receipt.message.sequence_number,
                    receipt.queue,
                    type(exc).__name__,
                )
                return False
            except ValueError as exc:  # the receiver was closed: its locks lapse by themselves
                log.warning("servicebus: %s on %s skipped: %s", operation, receipt.queue, exc)
                return False
            except Exception as exc:
                raise self._translate(exc, f"{operation} on {receipt.queue!r}") from exc

    def _still_locked(self, receipt: _Receipt) -> bool:
        until = receipt.message.locked_until_utc
        return until is None or until > _now()

    def ack(self, delivery: Delivery) -> None:
        self._settle(self._receipt(delivery), "complete_message")

    def release(self, delivery: Delivery, *, delay_ms: int = 0) -> None:
        """Abandon now; with a delay, a scheduled copy (same bytes and fields) replaces it."""
        receipt = self._receipt(delivery)
        if delay_ms <= 0:
            self._settle(receipt, "abandon_message")
            return
        message = receipt.message
        fields: dict[str, Any] = {
            name: getattr(message, name)
            for name in ("subject", "correlation_id", "message_id", "content_type", "session_id")
            if getattr(message, name) is not None
        }
        props = message.application_properties
        if props:
            fields["application_properties"] = {_text(k): _amqp_long(_text(v)) for k, v in props.items()}
        native = _Native(delivery.body, fields, _now() + timedelta(milliseconds=delay_ms))
        self._replace(receipt, receipt.queue, native)

    def _replace(self, receipt: _Receipt, queue: str, native: _Native) -> None:
        """Send ``native`` to ``queue``, then complete the reserved message (never lost)."""
        if not self._still_locked(receipt):
            self._let_go(receipt)
            log.warning(
                "servicebus: lock of message %s on %s lapsed before it was settled; left for its new owner",
                receipt.message.sequence_number,
                receipt.queue,
            )
            return
        scheduled = self._send(queue, [native])
        if not self._settle(receipt, "complete_message") and scheduled:
            with self._lock:
                self._call(
                    queue,
                    f"cancel scheduled messages on {queue!r}",
                    lambda: self._sender(queue).cancel_scheduled_messages(scheduled),
                )

    def retry(self, delivery: Delivery, body: bytes, *, delay_ms: int) -> None:
        receipt = self._receipt(delivery)
        native = self._native(body, None, delay_ms, carried=delivery.carried_headers)
        self._replace(receipt, receipt.queue, native)

    def dead_letter(self, delivery: Delivery, body: bytes, *, dlq: str) -> None:
        """The record goes to the ordinary queue ``dlq`` (``<queue>.dlq``), as babelqueue's
        runtime sends it; the broker's own ``$DeadLetterQueue`` is not used."""
        native = self._native(body, None, 0, carried=delivery.carried_headers)
        self._replace(self._receipt(delivery), dlq, native)

    def renew_many(self, deliveries: Sequence[Delivery]) -> int:
        from azure.servicebus.exceptions import MessageAlreadySettled, MessageLockLostError

        held = 0
        for delivery in deliveries:
            receipt = self._receipt(delivery)
            with self._lock:
                try:
                    receipt.receiver.renew_message_lock(receipt.message)
                    held += 1
                except (MessageLockLostError, MessageAlreadySettled, ValueError):
                    self._let_go(receipt)
                except Exception as exc:
                    raise self._translate(exc, f"renew a lock on {receipt.queue!r}") from exc
        return held

    def lease_seconds(self, queue: str) -> float | None:
        """The queue's lock duration (asked once); ``visibility_timeout`` when it cannot be asked."""
        seconds = self._lock_seconds.get(queue)
        if seconds is not None:
            return seconds
        try:
            props = self._call(queue, f"read queue {queue!r}", lambda: self._admin_client().get_queue(queue))
            seconds = float(props.lock_duration.total_seconds())
        except ConfigurationError:
            if self.visibility_timeout is None:
                raise
            seconds = float(self.visibility_timeout)
        self._lock_seconds[queue] = seconds
        return seconds

    # -- administration -------------------------------------------------------------------
    def _runtime(self, queue: str) -> Any:
        return self._call(
            queue, f"count queue {queue!r}", lambda: self._admin_client().get_queue_runtime_properties(queue)
        )

    def _own_locks(self, queue: str) -> int:
        now = _now()
        with self._lock:
            return sum(
                1
                for r in self._held.get(queue, {}).values()
                if not r.message._settled and (r.message.locked_until_utc or now) > now
            )

    def size(self, queue: str) -> int:
        """Active plus scheduled messages, minus the locks this transport holds (see module doc)."""
        props = self._runtime(queue)
        total = int(props.active_message_count) + int(props.scheduled_message_count)
        return max(total - self._own_locks(queue), 0)

    def ready(self, queue: str) -> int:
        """Active messages minus the locks this transport holds; other consumers' locks count as ready."""
        return max(int(self._runtime(queue).active_message_count) - self._own_locks(queue), 0)

    def reserved(self, queue: str) -> int | None:
        """``None``: Service Bus does not report how many messages other receivers hold locked."""
        return None

    def purge(self, queue: str) -> None:
        """Complete what this transport holds, receive-and-delete what is ready, cancel what is
        scheduled. Locks other receivers hold are left to lapse (they then come back)."""
        from azure.servicebus import ServiceBusMessageState, ServiceBusReceiveMode

        with self._lock:
            self._check_open()
            for receipt in list(self._held.get(queue, {}).values()):
                self._settle(receipt, "complete_message")
            try:
                drain = self._client.get_queue_receiver(
                    queue_name=queue, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
                )
                try:
                    while drain.receive_messages(max_message_count=MAX_RECEIVE, max_wait_time=MIN_WAIT):
                        pass
                    scheduled: list[int] = []
                    after = 0
                    while peeked := drain.peek_messages(max_message_count=MAX_RECEIVE, sequence_number=after):
                        scheduled += [
                            m.sequence_number for m in peeked if m.state == ServiceBusMessageState.SCHEDULED
                        ]
                        after = max(m.sequence_number for m in peeked) + 1
                    if scheduled:
                        self._sender(queue).cancel_scheduled_messages(scheduled)
                finally:
                    drain.close()
            except Exception as exc:
                if self._missing(exc):
                    return
                raise self._translate(exc, f"purge {queue!r}") from exc

    def delete_queues(self, names: Iterable[str]) -> None:
        """Delete the named queues if they exist (test clean-up)."""
        from azure.core.exceptions import ResourceNotFoundError

        for name in names:
            self._forget_handlers(name)
            try:
                self._admin_client().delete_queue(name)
            except ResourceNotFoundError:
                continue

    def _check_open(self) -> None:
        if self._closed:
            raise ConfigurationError(f"{self._url}: the transport is closed")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._lock:
            handlers = [*self._senders.values(), *self._receivers.values(), self._client]
            if self._admin is not None:
                handlers.append(self._admin)
            self._senders.clear()
            self._receivers.clear()
            self._held.clear()
        for handler in handlers:
            try:
                handler.close()
            except Exception:  # best-effort clean-up of a closing transport
                log.debug("servicebus: closing %r failed", handler, exc_info=True)


def _by_due(natives: Sequence[_Native]) -> list[tuple[datetime, list[_Native]]]:
    groups: dict[datetime, list[_Native]] = {}
    for native in natives:
        assert native.due is not None
        groups.setdefault(native.due, []).append(native)
    return sorted(groups.items())


def _body_bytes(message: Any) -> bytes:
    """The received body as bytes: the data sections joined (an AMQP value body, which other
    SDKs can send, as its UTF-8 text)."""
    body = message.body
    if isinstance(body, bytes | bytearray):
        return bytes(body)
    if isinstance(body, str):
        return body.encode("utf-8")
    if body is None:
        return b""
    try:
        parts = list(body)
    except TypeError:
        return str(body).encode("utf-8")
    if all(isinstance(p, bytes | bytearray) for p in parts):
        return b"".join(bytes(p) for p in parts)
    return str(message).encode("utf-8")


__all__ = ["ServiceBusTransport", "display_url", "redact_servicebus"]
