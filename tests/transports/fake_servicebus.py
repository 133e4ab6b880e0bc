"""A recording, in-memory fake of the azure-servicebus API that babelq and babelqueue use.

There is no Service Bus namespace (nor emulator) here, so the ``sb://`` transport is tested
against this fake. It replaces only the *network side* of the real library; what crosses the
wire is the real library's own work:

* senders take real ``ServiceBusMessage`` / ``ServiceBusMessageBatch`` objects and turn them into
  AMQP bytes with the SDK's own converter and encoder (``to_outgoing_amqp_message`` +
  ``encode_payload``), so anything the real SDK cannot send (an int beyond int32 in the
  application properties, a non-string key...) fails here too;
* receivers decode those bytes with the SDK's decoder, add what Service Bus adds (the 0-based
  AMQP ``delivery-count`` header, ``x-opt-sequence-number``, ``x-opt-enqueued-time``,
  ``x-opt-locked-until``, the lock token as the delivery tag) and hand out real
  ``ServiceBusReceivedMessage`` objects, so ``delivery_count``, ``locked_until_utc``,
  ``application_properties`` (bytes keys and string values, as the SDK returns them) etc. are
  computed by the SDK's code;
* settling follows the SDK's client-side checks (peeked / already settled / lock expired) and
  the broker's (the lock token must be the message's current one).

The broker model: queues with a lock duration (5 s .. 5 min, as Service Bus allows) and a
MaxDeliveryCount; PeekLock and ReceiveAndDelete; a lock lapses at its deadline (DeliveryCount
+1, back in sequence-number order); Abandon also raises DeliveryCount; past MaxDeliveryCount a
message moves to the queue's ``$DeadLetterQueue``; scheduled messages stay invisible until due.
Every client call is recorded on :attr:`Namespace.calls`.

Install with :func:`install` (a pytest ``monkeypatch``): it swaps ``ServiceBusClient`` and
``ServiceBusAdministrationClient`` on the real modules, so any code that imports them lazily
(babelq's transport, babelqueue's ``AsbTransport``) talks to the fake.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any, ClassVar

import azure.servicebus
import azure.servicebus.management
from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
)
from azure.servicebus import (
    ServiceBusMessage,
    ServiceBusMessageBatch,
    ServiceBusMessageState,
    ServiceBusReceivedMessage,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)
from azure.servicebus import exceptions as sb
from azure.servicebus._pyamqp._decode import decode_payload
from azure.servicebus._pyamqp._encode import encode_payload
from azure.servicebus._pyamqp.message import Header
from azure.servicebus._transport._pyamqp_transport import PyamqpTransport

HOST = "babelq-fake.servicebus.windows.net"
KEY_NAME = "RootManageSharedAccessKey"
KEY = "c2VjcmV0LWtleS1mb3ItdGVzdHM="
MIN_LOCK = timedelta(seconds=5)
MAX_LOCK = timedelta(minutes=5)
DEFAULT_WAIT = 60.0  # the SDK's DEFAULT_RECEIVE_WAIT_TIME_SECS
MAX_MESSAGE_BYTES = 262_144  # standard tier


def connection_string(host: str = HOST, key_name: str = KEY_NAME, key: str = KEY) -> str:
    return f"Endpoint=sb://{host}/;SharedAccessKeyName={key_name};SharedAccessKey={key}"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


@dataclass
class Call:
    """One recorded client call."""

    op: str
    queue: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Stored:
    seq: int
    wire: bytes
    enqueued_ms: int
    due_ms: int  # scheduled messages are invisible until then
    delivery_count: int = 0  # the AMQP header: 0 on the first delivery
    token: uuid.UUID | None = None
    locked_until_ms: int = 0
    dead_letter: dict[str, str] | None = None


@dataclass
class _Queue:
    name: str
    lock_duration: timedelta
    max_delivery_count: int
    messages: dict[int, _Stored] = field(default_factory=dict)
    dead_letters: dict[int, _Stored] = field(default_factory=dict)


def snapshot(message: ServiceBusMessage) -> dict[str, Any]:
    """What a test compares of an outgoing message: its fields as set, and its AMQP bytes."""
    wire = encode_payload(bytearray(), PyamqpTransport.to_outgoing_amqp_message(message.raw_amqp_message))
    return {
        "body": b"".join(message.body),
        "subject": message.subject,
        "correlation_id": message.correlation_id,
        "message_id": message.message_id,
        "content_type": message.content_type,
        "session_id": message.session_id,
        "application_properties": message.application_properties,
        "scheduled_enqueue_time_utc": message.scheduled_enqueue_time_utc,
        "wire": bytes(wire),
    }


class Namespace:
    """One fake Service Bus namespace: its queues, its keys and the calls made to it."""

    registry: ClassVar[dict[str, Namespace]] = {}

    def __init__(self, host: str = HOST, *, keys: dict[str, str] | None = None) -> None:
        self.host = host
        self.keys = dict(keys if keys is not None else {KEY_NAME: KEY})
        #: key names with the Manage right (the administration API); the others can send and listen
        self.manage = {KEY_NAME}
        self.sas_tokens: set[str] = set()
        self.cond = threading.Condition()
        self.queues: dict[str, _Queue] = {}
        self.calls: list[Call] = []
        self._seq = 0
        Namespace.registry[host] = self

    # -- inspection -------------------------------------------------------------------------
    def record(
        self, op: str, queue: str, messages: list[dict[str, Any]] | None = None, **detail: Any
    ) -> None:
        with self.cond:
            self.calls.append(Call(op, queue, messages or [], detail))

    def calls_of(self, *ops: str, queue: str | None = None) -> list[Call]:
        with self.cond:
            return [c for c in self.calls if (not ops or c.op in ops) and (queue is None or c.queue == queue)]

    def dead_lettered(self, queue: str) -> list[_Stored]:
        with self.cond:
            return list(self.queues[queue].dead_letters.values())

    # -- auth -------------------------------------------------------------------------------
    def authenticate(self, credential: Any) -> None:
        if isinstance(credential, AzureNamedKeyCredential):
            name, key = credential.named_key
            if self.keys.get(name) == key:
                return
        elif isinstance(credential, AzureSasCredential) and credential.signature in self.sas_tokens:
            return
        raise sb.ServiceBusAuthenticationError(
            message=f"Unauthorized access. 'Listen,Send' claim(s) are required to perform this operation. "
            f"Resource: 'sb://{self.host}/'."
        )

    # -- broker -----------------------------------------------------------------------------
    def queue(self, name: str) -> _Queue:
        q = self.queues.get(name)
        if q is None:
            raise sb.MessagingEntityNotFoundError(
                message=f"The messaging entity 'sb://{self.host}/{name}' could not be found."
            )
        return q

    def _sweep(self, q: _Queue, now: int) -> None:
        """Lapse expired locks: DeliveryCount +1, and past MaxDeliveryCount into the DLQ."""
        for stored in list(q.messages.values()):
            if stored.token is not None and stored.locked_until_ms <= now:
                stored.token = None
                self._counted(q, stored, "MaxDeliveryCountExceeded")

    def _counted(self, q: _Queue, stored: _Stored, reason: str) -> None:
        stored.delivery_count += 1
        if stored.delivery_count >= q.max_delivery_count:
            del q.messages[stored.seq]
            stored.dead_letter = {"DeadLetterReason": reason}
            q.dead_letters[stored.seq] = stored

    def enqueue(self, name: str, wire: bytes, due_ms: int | None) -> int:
        with self.cond:
            q = self.queue(name)
            self._seq += 1
            now = _now_ms()
            q.messages[self._seq] = _Stored(self._seq, wire, now, due_ms if due_ms is not None else now)
            self.cond.notify_all()
            return self._seq

    def take(
        self, name: str, count: int, mode: str, sub_queue: Any
    ) -> list[tuple[_Stored, uuid.UUID | None]]:
        with self.cond:
            q = self.queue(name)
            now = _now_ms()
            self._sweep(q, now)
            source = q.dead_letters if sub_queue == ServiceBusSubQueue.DEAD_LETTER else q.messages
            ready = [
                s for s in sorted(source.values(), key=lambda s: s.seq) if s.token is None and s.due_ms <= now
            ]
            out: list[tuple[_Stored, uuid.UUID | None]] = []
            for stored in ready[:count]:
                if mode == ServiceBusReceiveMode.RECEIVE_AND_DELETE:
                    del source[stored.seq]
                    out.append((stored, None))
                else:
                    stored.token = uuid.uuid4()
                    stored.locked_until_ms = now + int(q.lock_duration.total_seconds() * 1000)
                    out.append((stored, stored.token))
            return out

    def holder(
        self, name: str, token: uuid.UUID, sub_queue: Any
    ) -> tuple[_Queue, dict[int, _Stored], _Stored]:
        """The message whose current lock is ``token``; MessageLockLostError otherwise (broker side)."""
        q = self.queue(name)
        self._sweep(q, _now_ms())
        source = q.dead_letters if sub_queue == ServiceBusSubQueue.DEAD_LETTER else q.messages
        for stored in source.values():
            if stored.token == token:
                return q, source, stored
        raise sb.MessageLockLostError(
            message="The lock supplied is invalid. Either the lock expired, or the message has already "
            "been removed from the queue."
        )

    def wait(self, timeout: float) -> None:
        with self.cond:
            self.cond.wait(timeout)


def _namespace(host: str) -> Namespace:
    ns = Namespace.registry.get(host)
    if ns is None:
        raise sb.ServiceBusConnectionError(
            message=f"Failed to initiate the connection: [Errno -2] {host} not found"
        )
    return ns


def _parse_connection_string(conn_str: str) -> tuple[str, AzureNamedKeyCredential]:
    """Like the SDK: ``Endpoint``, ``SharedAccessKeyName`` and ``SharedAccessKey`` are required."""
    parts = dict(p.split("=", 1) for p in conn_str.strip(";").split(";") if "=" in p)
    endpoint = parts.get("Endpoint", "")
    if (
        not endpoint.startswith("sb://")
        or "SharedAccessKeyName" not in parts
        or "SharedAccessKey" not in parts
    ):
        raise ValueError("Connection string is either blank or malformed.")
    host = endpoint[len("sb://") :].strip("/")
    return host, AzureNamedKeyCredential(parts["SharedAccessKeyName"], parts["SharedAccessKey"])


class ServiceBusClient:
    """azure.servicebus.ServiceBusClient: hands out senders and receivers of one namespace."""

    def __init__(self, fully_qualified_namespace: str, credential: Any, **kwargs: Any) -> None:
        self.fully_qualified_namespace = fully_qualified_namespace
        self._credential = credential
        self._handlers: list[Any] = []

    @classmethod
    def from_connection_string(cls, conn_str: str, **kwargs: Any) -> ServiceBusClient:
        host, credential = _parse_connection_string(conn_str)
        return cls(host, credential, **kwargs)

    def _open(self) -> Namespace:
        ns = _namespace(self.fully_qualified_namespace)
        ns.authenticate(self._credential)
        return ns

    def get_queue_sender(self, queue_name: str, **kwargs: Any) -> ServiceBusSender:
        sender = ServiceBusSender(self, queue_name)
        self._handlers.append(sender)
        return sender

    def get_queue_receiver(
        self,
        queue_name: str,
        *,
        receive_mode: ServiceBusReceiveMode | str = ServiceBusReceiveMode.PEEK_LOCK,
        max_wait_time: float | None = None,
        prefetch_count: int = 0,
        sub_queue: ServiceBusSubQueue | str | None = None,
        **kwargs: Any,
    ) -> ServiceBusReceiver:
        receiver = ServiceBusReceiver(
            self, queue_name, ServiceBusReceiveMode(receive_mode), max_wait_time, sub_queue
        )
        self._handlers.append(receiver)
        return receiver

    def close(self) -> None:
        for handler in self._handlers:
            handler.close()

    def __enter__(self) -> ServiceBusClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Handler:
    def __init__(self, client: ServiceBusClient, queue: str) -> None:
        self._client = client
        self.entity_name = queue
        self.fully_qualified_namespace = client.fully_qualified_namespace
        self._running = True

    def _check_live(self) -> Namespace:
        if not self._running:
            raise ValueError(
                "The handler has already been shutdown. Please use ServiceBusClient to create a new instance."
            )
        return self._client._open()

    def close(self) -> None:
        self._running = False

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _outgoing(messages: Any) -> list[ServiceBusMessage]:
    if isinstance(messages, ServiceBusMessageBatch):
        return list(messages._messages)
    if isinstance(messages, ServiceBusMessage):
        return [messages]
    out = list(messages)
    for message in out:
        if not isinstance(message, ServiceBusMessage):
            raise TypeError(f"Only ServiceBusMessage can be sent, got {type(message).__name__}")
    return out


class ServiceBusSender(_Handler):
    """azure.servicebus.ServiceBusSender."""

    def send_messages(self, message: Any, *, timeout: float | None = None, **kwargs: Any) -> None:
        ns = self._check_live()
        outgoing = _outgoing(message)
        snaps = [snapshot(m) for m in outgoing]
        for snap in snaps:
            if len(snap["wire"]) > MAX_MESSAGE_BYTES:
                raise sb.MessageSizeExceededError(message="Message is too large.")
        ns.queue(self.entity_name)  # the link attach fails for a missing entity
        for m, snap in zip(outgoing, snaps, strict=True):
            due = m.scheduled_enqueue_time_utc
            ns.enqueue(self.entity_name, snap["wire"], _ms(due) if due is not None else None)
        ns.record("send_messages", self.entity_name, snaps, batch=isinstance(message, ServiceBusMessageBatch))

    def schedule_messages(
        self, messages: Any, schedule_time_utc: datetime, *, timeout: float | None = None, **kwargs: Any
    ) -> list[int]:
        ns = self._check_live()
        outgoing = _outgoing(messages)
        ns.queue(self.entity_name)
        for m in outgoing:  # what the SDK does before it sends the schedule request
            m.scheduled_enqueue_time_utc = schedule_time_utc
        snaps = [snapshot(m) for m in outgoing]
        seqs = [ns.enqueue(self.entity_name, s["wire"], _ms(schedule_time_utc)) for s in snaps]
        ns.record(
            "schedule_messages", self.entity_name, snaps, schedule_time_utc=schedule_time_utc, seqs=seqs
        )
        return seqs

    def cancel_scheduled_messages(self, sequence_numbers: int | list[int], **kwargs: Any) -> None:
        ns = self._check_live()
        seqs = [sequence_numbers] if isinstance(sequence_numbers, int) else list(sequence_numbers)
        with ns.cond:
            q = ns.queue(self.entity_name)
            now = _now_ms()
            for seq in seqs:
                stored = q.messages.get(seq)
                if stored is not None and stored.due_ms > now:  # only what is still scheduled
                    del q.messages[seq]
        ns.record("cancel_scheduled_messages", self.entity_name, seqs=seqs)

    def create_message_batch(self, max_size_in_bytes: int | None = None) -> ServiceBusMessageBatch:
        self._check_live()
        return ServiceBusMessageBatch(max_size_in_bytes=max_size_in_bytes or MAX_MESSAGE_BYTES)


class ServiceBusReceiver(_Handler):
    """azure.servicebus.ServiceBusReceiver (non-session)."""

    def __init__(
        self,
        client: ServiceBusClient,
        queue: str,
        receive_mode: ServiceBusReceiveMode,
        max_wait_time: float | None,
        sub_queue: Any,
    ) -> None:
        super().__init__(client, queue)
        self._receive_mode = receive_mode
        self._max_wait_time = max_wait_time
        self._sub_queue = ServiceBusSubQueue(sub_queue) if sub_queue is not None else None
        self.session = None
        self._delivery_id = 0

    def _received(
        self, stored: _Stored, token: uuid.UUID | None, *, peeked: bool = False
    ) -> ServiceBusReceivedMessage:
        message = decode_payload(memoryview(stored.wire))
        annotations = dict(message.message_annotations or {})
        annotations[b"x-opt-sequence-number"] = stored.seq
        annotations[b"x-opt-enqueued-time"] = stored.enqueued_ms
        if token is not None:
            annotations[b"x-opt-locked-until"] = stored.locked_until_ms
        if peeked:
            annotations[b"x-opt-message-state"] = (
                ServiceBusMessageState.SCHEDULED
                if stored.due_ms > _now_ms()
                else ServiceBusMessageState.ACTIVE
            )
        if stored.dead_letter:
            props = dict(message.application_properties or {})
            props.update({k.encode(): v.encode() for k, v in stored.dead_letter.items()})
            message = message._replace(application_properties=props)
        message = message._replace(
            message_annotations=annotations, header=Header(delivery_count=stored.delivery_count, durable=True)
        )
        self._delivery_id += 1
        frame = None if token is None else (None, self._delivery_id, token.bytes_le)
        return ServiceBusReceivedMessage(
            message, receive_mode=self._receive_mode, frame=frame, receiver=self, is_peeked_message=peeked
        )

    def receive_messages(
        self, max_message_count: int | None = 1, max_wait_time: float | None = None
    ) -> list[ServiceBusReceivedMessage]:
        ns = self._check_live()
        if max_wait_time is not None and max_wait_time <= 0:
            raise ValueError("The max_wait_time must be greater than 0.")
        if max_message_count is not None and max_message_count <= 0:
            raise ValueError("The max_message_count must be greater than 0")
        if max_message_count is None:
            return []
        wait = max_wait_time if max_wait_time is not None else (self._max_wait_time or DEFAULT_WAIT)
        deadline = time.monotonic() + wait
        while True:
            taken = ns.take(self.entity_name, max_message_count, self._receive_mode, self._sub_queue)
            remaining = deadline - time.monotonic()
            if taken or remaining <= 0:
                break
            ns.wait(min(remaining, 0.02))
        out = [self._received(stored, token) for stored, token in taken]
        if out:  # empty polls are not recorded: how often a consumer polls is its own business
            ns.record(
                "receive_messages",
                self.entity_name,
                seqs=[m.sequence_number for m in out],
                mode=str(self._receive_mode.value),
            )
        return out

    def peek_messages(
        self,
        max_message_count: int = 1,
        *,
        sequence_number: int = 0,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> list[ServiceBusReceivedMessage]:
        ns = self._check_live()
        with ns.cond:
            q = ns.queue(self.entity_name)
            ns._sweep(q, _now_ms())
            source = q.dead_letters if self._sub_queue == ServiceBusSubQueue.DEAD_LETTER else q.messages
            chosen = [s for s in sorted(source.values(), key=lambda s: s.seq) if s.seq >= sequence_number]
            chosen = chosen[:max_message_count]
        return [self._received(s, None, peeked=True) for s in chosen]

    # -- settling -------------------------------------------------------------------------
    def _check_message(self, message: Any, action: str) -> Namespace:
        """The SDK's client-side checks, in its order."""
        if not isinstance(message, ServiceBusReceivedMessage):
            raise TypeError("Parameter 'message' must be of type ServiceBusReceivedMessage")
        if message._is_peeked_message:
            raise ValueError(f"The operation {action} is not supported for peeked messages.")
        if self._receive_mode == ServiceBusReceiveMode.RECEIVE_AND_DELETE:
            raise ValueError(f"The operation {action} is not supported in 'RECEIVE_AND_DELETE' receive mode.")
        if message._settled:
            raise sb.MessageAlreadySettled(action=action)
        if not self._running:
            raise ValueError(f"Failed to {action} the message as the handler has already been shutdown.")
        return self._client._open()

    def _settle(self, message: ServiceBusReceivedMessage, action: str, **detail: Any) -> None:
        ns = self._check_message(message, action)
        if message._lock_expired:
            raise sb.MessageLockLostError(message="The lock on the message lock has expired.")
        token = message.lock_token
        assert isinstance(token, uuid.UUID)
        with ns.cond:
            q, source, stored = ns.holder(self.entity_name, token, self._sub_queue)
            if action == "complete":
                del source[stored.seq]
            elif action == "abandon":
                stored.token = None
                ns._counted(q, stored, "MaxDeliveryCountExceeded")
            elif action == "deadletter":
                del source[stored.seq]
                stored.token = None
                stored.dead_letter = {
                    "DeadLetterReason": detail.get("reason") or "",
                    "DeadLetterErrorDescription": detail.get("error_description") or "",
                }
                q.dead_letters[stored.seq] = stored
            ns.cond.notify_all()
        message._settled = True
        ns.record(f"{action}_message", self.entity_name, sequence_number=stored.seq, **detail)

    def complete_message(self, message: ServiceBusReceivedMessage) -> None:
        self._settle(message, "complete")

    def abandon_message(self, message: ServiceBusReceivedMessage) -> None:
        self._settle(message, "abandon")

    def dead_letter_message(
        self,
        message: ServiceBusReceivedMessage,
        reason: str | None = None,
        error_description: str | None = None,
    ) -> None:
        self._settle(message, "deadletter", reason=reason, error_description=error_description)

    def renew_message_lock(
        self, message: ServiceBusReceivedMessage, *, timeout: float | None = None
    ) -> datetime:
        ns = self._check_message(message, "renew_message_lock")
        token = message.lock_token
        if not token:
            raise ValueError("Unable to renew lock - no lock token found.")
        assert isinstance(token, uuid.UUID)
        with ns.cond:
            q, _source, stored = ns.holder(self.entity_name, token, self._sub_queue)
            stored.locked_until_ms = _now_ms() + int(q.lock_duration.total_seconds() * 1000)
            until = datetime.fromtimestamp(stored.locked_until_ms / 1000, UTC)
        message._expiry = until
        ns.record("renew_message_lock", self.entity_name, sequence_number=stored.seq)
        return until


class ServiceBusAdministrationClient:
    """azure.servicebus.management.ServiceBusAdministrationClient (the queue calls)."""

    def __init__(self, fully_qualified_namespace: str, credential: Any, **kwargs: Any) -> None:
        self.fully_qualified_namespace = fully_qualified_namespace
        self._credential = credential

    @classmethod
    def from_connection_string(cls, conn_str: str, **kwargs: Any) -> ServiceBusAdministrationClient:
        host, credential = _parse_connection_string(conn_str)
        return cls(host, credential, **kwargs)

    def _open(self) -> Namespace:
        ns = _namespace(self.fully_qualified_namespace)
        try:
            ns.authenticate(self._credential)
        except sb.ServiceBusAuthenticationError as exc:
            raise ClientAuthenticationError(message=f"401 Unauthorized: {exc}") from None
        name = (
            self._credential.named_key[0] if isinstance(self._credential, AzureNamedKeyCredential) else None
        )
        if name not in ns.manage:
            refused = HttpResponseError(message="403 Forbidden: Manage claim is required for this operation.")
            refused.status_code = 403
            raise refused
        return ns

    def create_queue(
        self,
        queue_name: str,
        *,
        lock_duration: timedelta | None = None,
        max_delivery_count: int | None = None,
        requires_session: bool | None = None,
        **kwargs: Any,
    ) -> SimpleNamespace:
        ns = self._open()
        lock = lock_duration if lock_duration is not None else timedelta(minutes=1)
        if not MIN_LOCK <= lock <= MAX_LOCK:
            raise HttpResponseError(
                message=f"400 Bad Request: LockDuration {lock} is outside 00:00:05 - 00:05:00"
            )
        with ns.cond:
            if queue_name in ns.queues:
                raise ResourceExistsError(message=f"409 Conflict: the entity {queue_name} already exists")
            ns.queues[queue_name] = _Queue(queue_name, lock, max_delivery_count or 10)
        ns.record("create_queue", queue_name, lock_duration=lock, max_delivery_count=max_delivery_count)
        return self.get_queue(queue_name)

    def _queue(self, queue_name: str) -> tuple[Namespace, _Queue]:
        ns = self._open()
        q = ns.queues.get(queue_name)
        if q is None:
            raise ResourceNotFoundError(message=f"404 Not Found: queue {queue_name}")
        return ns, q

    def get_queue(self, queue_name: str, **kwargs: Any) -> SimpleNamespace:
        _ns, q = self._queue(queue_name)
        return SimpleNamespace(
            name=q.name,
            lock_duration=q.lock_duration,
            max_delivery_count=q.max_delivery_count,
            requires_session=False,
        )

    def get_queue_runtime_properties(self, queue_name: str, **kwargs: Any) -> SimpleNamespace:
        ns, q = self._queue(queue_name)
        with ns.cond:
            now = _now_ms()
            ns._sweep(q, now)
            scheduled = sum(1 for s in q.messages.values() if s.due_ms > now)
            active = len(q.messages) - scheduled  # locked messages included, as Service Bus counts them
            dead = len(q.dead_letters)
        return SimpleNamespace(
            name=q.name,
            active_message_count=active,
            scheduled_message_count=scheduled,
            dead_letter_message_count=dead,
            total_message_count=active + scheduled + dead,
        )

    def delete_queue(self, queue_name: str, **kwargs: Any) -> None:
        ns, _q = self._queue(queue_name)
        with ns.cond:
            del ns.queues[queue_name]

    def close(self) -> None:
        return None


def install(monkeypatch: Any) -> None:
    """Point ``azure.servicebus.ServiceBusClient`` and the administration client at the fake."""
    monkeypatch.setattr(azure.servicebus, "ServiceBusClient", ServiceBusClient)
    monkeypatch.setattr(
        azure.servicebus.management, "ServiceBusAdministrationClient", ServiceBusAdministrationClient
    )
