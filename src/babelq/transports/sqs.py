"""Amazon SQS transport (``sqs://``) with boto3.

Why it looks the way it does:

* **Contract.** The MessageBody is the envelope text, untouched; every send carries the docs/standard.md
  §4 MessageAttributes from :mod:`babelq.bindings.sqs` (``bq-job``, ``bq-trace-id``...).
  FIFO queues (``.fifo``) get ``MessageGroupId`` (configured group, else the queue name; with
  ``group_by=sharding_key``, ``meta.sharding_key`` first) and ``MessageDeduplicationId`` =
  ``meta.id`` unless the queue deduplicates by content. A retry of a FIFO message uses
  ``<meta.id>-a<attempts>`` so the dedup window does not swallow it.
* **At-least-once.** A receive hides the message for the visibility timeout; ``ack`` deletes
  it; a worker that dies simply lets the timeout lapse and SQS hands the message out again.
  ``Delivery.attempts`` reconciles with ``ApproximateReceiveCount`` (max(body, count - 1)).
* **Batches.** SendMessageBatch / DeleteMessageBatch (10 entries and 256 KiB per call) and
  receives of up to 10 messages per call.
* **Delays.** ``DelaySeconds`` (at most 900 s) on standard queues. Longer delays, and any
  delay on a FIFO queue (SQS has no per-message delay there), add the attribute
  ``bq-deliver-at`` (epoch ms, a babelq extension other SDKs ignore: they deliver such a
  message early). On receipt a message whose ``bq-deliver-at`` is still ahead is not handed
  out: on a standard queue it is re-sent with the remaining delay (up to 900 s) and the old
  copy deleted; on a FIFO queue its visibility is extended to the due time (up to 12 h),
  which also raises ``ApproximateReceiveCount``. ``release(delay_ms)`` changes the
  visibility (at most 12 h).
* **Leases.** A receipt handle is valid in any process until the visibility timeout lapses,
  so whoever holds it may delete it. ``renew_many`` extends held messages with
  ChangeMessageVisibilityBatch; a delete or renewal that SQS refuses because the handle is no
  longer valid (the lease lapsed and the message went to someone else) is logged and
  skipped, like a lapsed lease on the other transports: the message is delivered again.
* **Threads.** One boto3 client per transport; boto3 clients are thread-safe, so a transport
  may be shared by threads.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, get_args

from babelq.bindings import schema_gate
from babelq.bindings import sqs as binding
from babelq.envelope import Envelope, decode
from babelq.errors import ConfigurationError, DecodeError, PublishNotConfirmedError
from babelq.errors import SQSError as SQSError
from babelq.transports.base import BaseTransport, Delivery, Outgoing
from babelq.transports.sqs_client import GuardedClient
from babelq.transports.url_options import TransportURL, URLOptions

log = logging.getLogger(__name__)

#: babelq's own attribute for delays SQS cannot express natively (epoch ms).
DELIVER_AT_ATTRIBUTE = "bq-deliver-at"
MAX_BATCH_ENTRIES = 10
#: SQS refuses a message with more message attributes than this
MAX_ATTRIBUTES = 10
#: attribute-name prefix of the binding's own projection (never a carried header)
_BINDING_PREFIX = "bq-"
MAX_BATCH_BYTES = 256 * 1024
MAX_VISIBILITY_SECONDS = 43_200
MAX_WAIT_SECONDS = 20
#: Pause between short polls when less than a second of ``timeout`` is left.
_SHORT_POLL = 0.1
#: per-entry error codes that mean "this receipt handle no longer holds the message"
_LAPSED_CODES = frozenset({"ReceiptHandleIsInvalid", "InvalidReceiptHandle", "MessageNotInflight"})


@dataclass(frozen=True, slots=True)
class SQSOptions(URLOptions):
    """The options of ``sqs://`` (query or keywords)."""

    transport: ClassVar[str] = "sqs"

    endpoint_url: str | None = None
    """Another endpoint than AWS's (LocalStack, moto)."""
    region: str | None = None
    """AWS region (else the URL's host, else boto3's configuration)."""
    visibility_timeout: float | None = None
    """Lease of a receive, seconds; ``None``: the queue's own setting."""
    create_queues: bool = True
    """Create a missing queue on first use (false: a ConfigurationError)."""
    group_id: str | None = None
    """``MessageGroupId`` of FIFO sends (else the queue name)."""
    group_by: binding.GroupBy = "group_id"
    """``sharding_key``: a message's ``meta.sharding_key`` is its FIFO group, before ``group_id``
    (beyond the standard, whose group is the configured one, else the queue name)."""
    content_based_dedup: bool = False
    """FIFO queues this transport creates deduplicate by content."""
    aws_access_key_id: str | None = None
    """Credentials (else boto3's chain)."""
    aws_secret_access_key: str | None = None
    """Credentials (secret)."""
    aws_session_token: str | None = None
    """Credentials (secret)."""
    profile: str | None = None
    """A named profile of the AWS configuration files."""
    client: Any = None
    """A ready boto3 SQS client (keyword only)."""


@dataclass(slots=True, frozen=True)
class _Receipt:
    queue_url: str
    handle: str


@dataclass(slots=True, frozen=True)
class _Entry:
    """One message ready for SendMessage / SendMessageBatch."""

    body: str
    attributes: dict[str, dict[str, str]]
    delay_seconds: int
    fifo: dict[str, str]

    def request(self) -> dict[str, Any]:
        out: dict[str, Any] = {"MessageBody": self.body, "MessageAttributes": self.attributes}
        if self.delay_seconds:
            out["DelaySeconds"] = self.delay_seconds
        out.update(self.fifo)
        return out

    def weight(self) -> int:
        size = len(self.body.encode("utf-8"))
        for name, value in self.attributes.items():
            size += len(name) + len(value["DataType"]) + len(value.get("StringValue", ""))
        return size


def physical_name(queue: str) -> str:
    """The SQS queue name for a logical queue name.

    SQS names allow only ``[A-Za-z0-9_-]`` plus one trailing ``.fifo``, so the standard's
    ``<queue>.dlq`` cannot exist there. Like the other SDKs' SQS transports, the dead-letter
    queue of ``orders`` is ``orders-dlq`` and of ``orders.fifo`` is ``orders-dlq.fifo``; any
    other dot becomes a hyphen.
    """
    dlq = queue.endswith(".dlq")
    stem = queue[:-4] if dlq else queue
    fifo = binding.is_fifo(stem)
    if fifo:
        stem = stem[: -len(binding.FIFO_SUFFIX)]
    name = stem.replace(".", "-") + ("-dlq" if dlq else "")
    return name + binding.FIFO_SUFFIX if fifo else name


def _chunks(entries: Sequence[_Entry]) -> Iterator[list[_Entry]]:
    """Batches of at most 10 entries and 256 KiB."""
    batch: list[_Entry] = []
    weight = 0
    for entry in entries:
        size = entry.weight()
        if batch and (len(batch) == MAX_BATCH_ENTRIES or weight + size > MAX_BATCH_BYTES):
            yield batch
            batch, weight = [], 0
        batch.append(entry)
        weight += size
    if batch:
        yield batch


def _add_headers(attrs: dict[str, dict[str, str]], headers: Mapping[str, str] | None) -> None:
    """Carry ``headers`` as String message attributes beside the binding's ``bq-*`` ones (which
    win a collision). SQS allows :data:`MAX_ATTRIBUTES` per message: headers that do not fit are
    refused in one line rather than silently dropped (a lost ``traceparent`` breaks a trace)."""
    clean = {str(k): str(v) for k, v in (headers or {}).items() if k and v is not None and v != ""}
    own = len(attrs)
    for name, value in clean.items():
        attrs.setdefault(name, {"DataType": "String", "StringValue": value})
    if len(attrs) > MAX_ATTRIBUTES:
        raise SQSError(
            f"headers: SQS carries at most {MAX_ATTRIBUTES} message attributes and this message "
            f"uses {own} of its own, so at most {MAX_ATTRIBUTES - own} headers fit; got {len(clean)}"
        )


def _carried(attrs: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """``Delivery.carried_headers``: the String attributes that are not the binding's ``bq-*``."""
    return {
        name: value["StringValue"]
        for name, value in attrs.items()
        if not name.startswith(_BINDING_PREFIX)
        and value.get("DataType", "").startswith("String")
        and "StringValue" in value
    }


def _attributes_read_back(raw: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """MessageAttributes as sent ({DataType, StringValue}), without the empty list fields."""
    out: dict[str, dict[str, str]] = {}
    for name, value in raw.items():
        item = {"DataType": value["DataType"]}
        if "StringValue" in value:
            item["StringValue"] = value["StringValue"]
        out[name] = item
    return out


class SQSTransport(BaseTransport):
    """SQS through one boto3 client; queue URLs are looked up by name (and created) once."""

    scheme = "sqs"
    scan_refusal = (
        "SQS cannot show a queued message without receiving it (a receive hides it and raises its "
        "receive count); expired messages are dead-lettered by the worker that receives them"
    )

    def __init__(
        self,
        *,
        client: Any = None,
        endpoint_url: str | None = None,
        region: str | None = None,
        visibility_timeout: float | None = None,
        create_queues: bool = True,
        group_id: str | None = None,
        group_by: str = "group_id",
        content_based_dedup: bool = False,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        aws_session_token: str | None = None,
        profile: str | None = None,
    ) -> None:
        if client is None:
            import boto3  # lazy: only needed when this transport is used
            from botocore.config import Config

            session = boto3.session.Session(profile_name=profile)
            client = session.client(
                "sqs",
                endpoint_url=endpoint_url,
                region_name=region,
                aws_access_key_id=aws_access_key_id,
                aws_secret_access_key=aws_secret_access_key,
                aws_session_token=aws_session_token,
                config=Config(retries={"max_attempts": 5, "mode": "standard"}),
            )
        self._client = GuardedClient(client)  # botocore's errors leave it as babelq's
        self.visibility_timeout = visibility_timeout
        self.create_queues = create_queues
        if group_by not in get_args(binding.GroupBy):
            raise ConfigurationError(f"group_by: must be group_id or sharding_key, got {group_by!r}")
        self.group_id = group_id
        self.group_by: binding.GroupBy = "sharding_key" if group_by == "sharding_key" else "group_id"
        self.content_based_dedup = content_based_dedup
        self._urls: dict[str, str] = {}
        self._queue_visibility: dict[str, int] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SQSTransport:
        """``sqs://[region]?endpoint_url=http://127.0.0.1:4566&region=eu-west-1&visibility_timeout=30``.

        The options are :class:`SQSOptions`; the URL's host is the region unless the query or a
        keyword names one. Credentials default to boto3's chain (environment, profile, instance role).
        """
        link = TransportURL.split(url)
        implied = {"region": link.hostname} if link.hostname else {}
        parsed = SQSOptions.parse(link, options, implied=implied)
        return cls(**parsed.values())

    # -- queues -----------------------------------------------------------------------
    def queue_url(self, queue: str) -> str:
        """The URL of ``queue``, created when missing (``create_queues``)."""
        url = self._urls.get(queue)
        if url is not None:
            return url
        with self._lock:
            url = self._urls.get(queue)
            if url is None:
                url = self._lookup(queue)
                self._urls[queue] = url
        return url

    def _lookup(self, logical: str) -> str:
        queue = physical_name(logical)
        try:
            found: str = self._client.get_queue_url(QueueName=queue)["QueueUrl"]
            return found
        except SQSError as exc:
            if not self._client.answered(exc, "QueueDoesNotExist"):
                raise
            if not self.create_queues:
                raise ConfigurationError(f"queue: SQS queue {queue!r} does not exist") from None
        attributes: dict[str, str] = {}
        if binding.is_fifo(queue):
            attributes["FifoQueue"] = "true"
            if self.content_based_dedup:
                attributes["ContentBasedDeduplication"] = "true"
        created: str = self._client.create_queue(QueueName=queue, Attributes=attributes)["QueueUrl"]
        log.info("sqs: created queue %s", queue)
        return created

    # -- sending ----------------------------------------------------------------------
    def _entry(
        self,
        queue: str,
        body: bytes,
        envelope: Envelope | None,
        delay_ms: int,
        *,
        dedup_suffix: str | None = None,
        attributes: dict[str, dict[str, str]] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> _Entry:
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise SQSError("body: SQS carries text only; this body is not UTF-8") from None
        if not text:
            raise SQSError("body: SQS does not accept an empty message body")
        doc: Envelope | None = envelope
        if doc is None and attributes is None:
            try:
                doc = decode(body)
            except DecodeError:
                doc = None
        attrs = (
            dict(attributes) if attributes is not None else (binding.project(doc) if doc is not None else {})
        )
        attrs.pop(DELIVER_AT_ATTRIBUTE, None)
        name = physical_name(queue)
        fifo = binding.is_fifo(name)
        native = 0 if fifo else binding.delay_seconds(delay_ms)
        if delay_ms > 0 and (fifo or delay_ms > native * 1000):
            attrs[DELIVER_AT_ATTRIBUTE] = {"DataType": "Number", "StringValue": str(_now_ms() + delay_ms)}
        if headers:
            _add_headers(attrs, headers)
        params: dict[str, str] = {}
        if fifo:
            params = binding.fifo_parameters(
                name,
                doc or {},
                group_id=self.group_id,
                group_by=self.group_by,
                content_based_dedup=self.content_based_dedup,
            )
            if not self.content_based_dedup:
                dedup = params.get("MessageDeduplicationId") or uuid.uuid4().hex
                params["MessageDeduplicationId"] = dedup + (dedup_suffix or "")
        return _Entry(text, attrs, native, params)

    def _send(self, queue: str, entries: Sequence[_Entry]) -> None:
        url = self.queue_url(queue)
        if len(entries) == 1:
            self._client.send_message(QueueUrl=url, **entries[0].request())
            return
        for chunk in _chunks(entries):
            request = [{"Id": str(i), **entry.request()} for i, entry in enumerate(chunk)]
            answer = self._client.send_message_batch(QueueUrl=url, Entries=request)
            failed = answer.get("Failed") or []
            if failed:
                text = f"SendMessageBatch to {queue!r}: {len(failed)} entries failed: {failed[:3]}"
                # SenderFault: SQS refused the request itself (a malformed entry), which sending
                # again cannot fix; otherwise SQS did not store it: the broker's failure
                if any(entry.get("SenderFault") for entry in failed):
                    raise SQSError(text)
                raise PublishNotConfirmedError(text)

    def publish(
        self,
        queue: str,
        body: bytes,
        *,
        envelope: Envelope | None = None,
        delay_ms: int = 0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """``headers`` ride as String message attributes (at most 10 attributes in all)."""
        self._send(queue, [self._entry(queue, body, envelope, delay_ms, headers=headers)])

    def publish_many(self, queue: str, messages: Sequence[Outgoing]) -> None:
        if messages:
            self._send(queue, [self._entry(queue, m.body, m.envelope, m.delay_ms) for m in messages])

    # -- receiving --------------------------------------------------------------------
    def _receive(self, url: str, count: int, wait: int) -> list[dict[str, Any]]:
        request: dict[str, Any] = {
            "QueueUrl": url,
            "MaxNumberOfMessages": count,
            "WaitTimeSeconds": wait,
            "MessageSystemAttributeNames": ["ApproximateReceiveCount", "SentTimestamp"],
            "MessageAttributeNames": ["All"],
        }
        if self.visibility_timeout is not None:
            request["VisibilityTimeout"] = math.ceil(self.visibility_timeout)
        messages: list[dict[str, Any]] = self._client.receive_message(**request).get("Messages", [])
        return messages

    def _not_yet_due(self, queue: str, url: str, message: Mapping[str, Any]) -> bool:
        """Hold back a message whose ``bq-deliver-at`` is ahead; re-delay it (see module doc)."""
        due_raw = message.get("MessageAttributes", {}).get(DELIVER_AT_ATTRIBUTE, {}).get("StringValue")
        try:
            due = int(due_raw) if due_raw is not None else 0
        except ValueError:
            return False
        remaining_ms = due - _now_ms()
        if remaining_ms <= 0:
            return False
        handle = message["ReceiptHandle"]
        if binding.is_fifo(physical_name(queue)):
            seconds = min(math.ceil(remaining_ms / 1000), MAX_VISIBILITY_SECONDS)
            self._client.change_message_visibility(
                QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=seconds
            )
            return True
        attributes = _attributes_read_back(message.get("MessageAttributes", {}))
        entry = self._entry(queue, message["Body"].encode("utf-8"), None, remaining_ms, attributes=attributes)
        self._send(queue, [entry])
        self._client.delete_message(QueueUrl=url, ReceiptHandle=handle)
        return True

    def _delivery(self, queue: str, url: str, message: Mapping[str, Any]) -> Delivery:
        system = message.get("Attributes", {})
        raw_count = system.get("ApproximateReceiveCount")
        sent = system.get("SentTimestamp")
        return Delivery(
            body=message["Body"].encode("utf-8"),
            queue=queue,
            receipt=_Receipt(url, message["ReceiptHandle"]),
            delivery_count=int(raw_count) if raw_count is not None and raw_count.isdigit() else None,
            headers=(attrs := _attributes_read_back(message.get("MessageAttributes", {}))),
            carried_headers=_carried(attrs),
            stored_at=int(sent) if sent is not None and sent.isdigit() else None,
            reconcile=functools.partial(binding.reconcile_attempts, approximate_receive_count=raw_count),
            refusal=schema_gate.refusal(attrs.get(schema_gate.PROPERTY, {}).get("StringValue")),
        )

    def reserve(self, queue: str, *, max_messages: int = 1, timeout: float = 0.0) -> list[Delivery]:
        url = self.queue_url(queue)
        deadline = time.monotonic() + timeout
        out: list[Delivery] = []
        while len(out) < max_messages:
            remaining = deadline - time.monotonic()
            # Long-poll whole seconds only, so a wait never overshoots ``timeout``; the rest is short polls.
            wait = 0 if out or remaining <= 0 else min(int(remaining), MAX_WAIT_SECONDS)
            want = min(max_messages - len(out), MAX_BATCH_ENTRIES)
            messages = self._receive(url, want, wait)
            if not messages and not out and wait == 0 and remaining > 0:
                time.sleep(min(_SHORT_POLL, remaining))
                continue
            out.extend(
                self._delivery(queue, url, m) for m in messages if not self._not_yet_due(queue, url, m)
            )
            if len(messages) < want and (out or time.monotonic() >= deadline):
                break
        return out

    # -- settling ---------------------------------------------------------------------
    @staticmethod
    def _receipt(delivery: Delivery) -> _Receipt:
        receipt = delivery.receipt
        if not isinstance(receipt, _Receipt):
            raise ConfigurationError("delivery: not reserved through an SQS transport")
        return receipt

    def ack(self, delivery: Delivery) -> None:
        receipt = self._receipt(delivery)
        self._client.delete_message(QueueUrl=receipt.queue_url, ReceiptHandle=receipt.handle)

    def _batched(self, action: str, deliveries: Sequence[Delivery], **entry: Any) -> int:
        """Run DeleteMessageBatch (``delete``) or ChangeMessageVisibilityBatch (``visibility``) over
        ``deliveries``, 10 per call; returns how many succeeded.

        Entries refused because the handle no longer holds the message (its lease lapsed) are
        logged and counted as failures; any other refusal raises :class:`SQSError`.
        """
        call = (
            self._client.delete_message_batch
            if action == "delete"
            else self._client.change_message_visibility_batch
        )
        by_queue: dict[str, list[str]] = {}
        for delivery in deliveries:
            receipt = self._receipt(delivery)
            by_queue.setdefault(receipt.queue_url, []).append(receipt.handle)
        done = 0
        for url, handles in by_queue.items():
            for start in range(0, len(handles), MAX_BATCH_ENTRIES):
                chunk = handles[start : start + MAX_BATCH_ENTRIES]
                entries = [{"Id": str(i), "ReceiptHandle": h, **entry} for i, h in enumerate(chunk)]
                failed = call(QueueUrl=url, Entries=entries).get("Failed") or []
                other = [f for f in failed if f.get("Code") not in _LAPSED_CODES]
                if other:
                    raise SQSError(f"{action} batch on {url}: {len(other)} entries failed: {other[:3]}")
                if failed:
                    log.warning(
                        "sqs: %s of %d message(s) on %s refused: their receipt handles lapsed "
                        "(visibility timeout); they will be delivered again",
                        action,
                        len(failed),
                        url,
                    )
                done += len(chunk) - len(failed)
        return done

    def ack_many(self, deliveries: Sequence[Delivery]) -> None:
        self._batched("delete", deliveries)

    def release(self, delivery: Delivery, *, delay_ms: int = 0) -> None:
        """Visible again after ``delay_ms`` (0 = now; at most 12 h)."""
        receipt = self._receipt(delivery)
        seconds = min(math.ceil(max(delay_ms, 0) / 1000), MAX_VISIBILITY_SECONDS)
        self._client.change_message_visibility(
            QueueUrl=receipt.queue_url, ReceiptHandle=receipt.handle, VisibilityTimeout=seconds
        )

    def release_many(self, deliveries: Sequence[Delivery]) -> None:
        """Visible again now, 10 per ChangeMessageVisibilityBatch call."""
        self._batched("visibility", deliveries, VisibilityTimeout=0)

    def _visibility_seconds(self, queue_url: str) -> int:
        """The lease a renewal grants: ``visibility_timeout``, else the queue's own setting."""
        if self.visibility_timeout is not None:
            return min(math.ceil(self.visibility_timeout), MAX_VISIBILITY_SECONDS)
        seconds = self._queue_visibility.get(queue_url)
        if seconds is None:
            answer = self._client.get_queue_attributes(
                QueueUrl=queue_url, AttributeNames=["VisibilityTimeout"]
            )
            seconds = int(answer.get("Attributes", {}).get("VisibilityTimeout", 30))
            self._queue_visibility[queue_url] = seconds
        return seconds

    def lease_seconds(self, queue: str) -> float | None:
        """``visibility_timeout`` when given, else the queue's own setting (asked once)."""
        return float(self._visibility_seconds(self.queue_url(queue)))

    def renew_many(self, deliveries: Sequence[Delivery]) -> int:
        """ChangeMessageVisibilityBatch to the visibility timeout, counted from now."""
        by_url: dict[str, list[Delivery]] = {}
        for delivery in deliveries:
            by_url.setdefault(self._receipt(delivery).queue_url, []).append(delivery)
        return sum(
            self._batched("visibility", held, VisibilityTimeout=self._visibility_seconds(url))
            for url, held in by_url.items()
        )

    def retry(self, delivery: Delivery, body: bytes, *, delay_ms: int) -> None:
        """Send the new body (delayed) first, then delete the old message: never lost."""
        suffix = None
        if binding.is_fifo(physical_name(delivery.queue)):
            try:
                suffix = f"-a{decode(body).attempts}"
            except DecodeError:
                suffix = f"-{uuid.uuid4().hex[:12]}"
        entry = self._entry(
            delivery.queue, body, None, delay_ms, dedup_suffix=suffix, headers=delivery.carried_headers
        )
        self._send(delivery.queue, [entry])
        self.ack(delivery)

    def dead_letter(self, delivery: Delivery, body: bytes, *, dlq: str) -> None:
        self._send(dlq, [self._entry(dlq, body, None, 0, headers=delivery.carried_headers)])
        self.ack(delivery)

    # -- administration ---------------------------------------------------------------
    def size(self, queue: str) -> int:
        names = ("ApproximateNumberOfMessages", "ApproximateNumberOfMessagesDelayed")
        answer = self._client.get_queue_attributes(QueueUrl=self.queue_url(queue), AttributeNames=list(names))
        attributes = answer.get("Attributes", {})
        return sum(int(attributes.get(name, 0)) for name in names)

    def ready(self, queue: str) -> int:
        """ApproximateNumberOfMessages: visible now (not delayed, not in flight)."""
        name = "ApproximateNumberOfMessages"
        answer = self._client.get_queue_attributes(QueueUrl=self.queue_url(queue), AttributeNames=[name])
        return int(answer.get("Attributes", {}).get(name, 0))

    def reserved(self, queue: str) -> int:
        """ApproximateNumberOfMessagesNotVisible: received and neither deleted nor timed out."""
        name = "ApproximateNumberOfMessagesNotVisible"
        answer = self._client.get_queue_attributes(QueueUrl=self.queue_url(queue), AttributeNames=[name])
        return int(answer.get("Attributes", {}).get(name, 0))

    def purge(self, queue: str) -> None:
        """PurgeQueue (everything, in flight included; AWS may take up to 60 s to finish).

        SQS allows one purge per queue per 60 s; a second one within that window drains the
        visible messages instead (receive + delete) and leaves in-flight ones alone.
        """
        url = self.queue_url(queue)
        try:
            self._client.purge_queue(QueueUrl=url)
        except SQSError as exc:
            if not self._client.answered(exc, "PurgeQueueInProgress"):
                raise
            log.info("sqs: purge of %s already in progress; draining visible messages", queue)
            while messages := self._receive(url, MAX_BATCH_ENTRIES, 0):
                entries = [
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
                ]
                self._client.delete_message_batch(QueueUrl=url, Entries=entries)

    def delete_queues(self, names: Iterable[str]) -> None:
        """Delete the named queues if they exist (test clean-up)."""
        for name in names:
            try:
                url = (
                    self._urls.pop(name, None)
                    or self._client.get_queue_url(QueueName=physical_name(name))["QueueUrl"]
                )
                self._client.delete_queue(QueueUrl=url)
            except SQSError as exc:
                if not self._client.answered(exc, "QueueDoesNotExist"):
                    raise

    def close(self) -> None:
        self._client.close()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
