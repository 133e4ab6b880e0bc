"""Apache Kafka transport (``kafka://``) with confluent-kafka.

Why it looks the way it does:

* **Contract.** A queue is a topic. The record value is the envelope bytes, untouched; every
  record carries the docs/standard.md §4 headers from :mod:`babelq.bindings.kafka` (``bq-job``,
  ``bq-trace-id``, ``bq-message-id``, ``bq-schema-version``, ``bq-source-lang``, ``bq-attempts``,
  UTF-8 bytes), the record timestamp is ``meta.created_at`` and the record key is
  ``meta.sharding_key`` (so one key keeps its order on one partition). On consume ``bq-attempts``
  is authoritative (``Delivery.attempts``), because Kafka counts no deliveries.
* **Process, then commit.** Consumers join the consumer group ``group`` (default ``babelqueue``,
  the reference SDK's, so mixed fleets share one group) with auto-commit off. A record is
  committed only once its outcome is settled: ``ack``, or the retry / release / dead-letter copy
  confirmed by the broker, then the commit. Kafka's commit is a position per partition, so it
  only ever moves to the lowest record of that partition still in flight: a record acked after
  an unsettled one is committed when that one settles. A consumer that dies with records in
  flight leaves them uncommitted, and the group hands them out again (at least once).
* **Connection-bound reservations.** A record stays with the consumer that polled it until it
  is settled or the consumer leaves the group (``leased_reservations`` is False: nothing lapses,
  there is nothing to renew, no tags). When a rebalance takes a partition away, its unsettled
  deliveries become stale: settling one later does nothing (logged) and its new owner
  re-reads it from the committed offset.
* **Delays and retries: tier topics**, the reference SDK's layout so both share them. A delay
  parks the record on the smallest tier ``<queue>.retry.<n>`` whose delay (``retry_tiers``, ms)
  covers it, with the headers ``bq-delay`` (ms) and ``bq-original-topic``; a re-inject step
  moves it back to the work topic once due (without those two headers). This transport runs
  that step itself inside ``reserve`` (``reinject``, consumer group ``reinject_group``, default
  the reference's ``babelqueue-retry-reinject``, so a reference ``RetryReinjector`` and babelq
  workers share the work instead of moving a record twice). ``release`` re-produces the same
  bytes, headers and key (to the tail of the topic, or to a tier when delayed), then commits the
  original: Kafka cannot put one record back in place. A delay longer than the largest tier is
  refused (never delivered early).
* **Threads.** One producer per transport, one consumer per queue; bookkeeping under one lock,
  never held while a consumer waits in ``poll``.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal
from urllib.parse import unquote

from babelq.bindings import kafka as binding
from babelq.bindings import schema_gate
from babelq.envelope import Envelope, decode
from babelq.errors import ConfigurationError, DecodeError, PublishNotConfirmedError, UnavailableError
from babelq.extras import optional_import
from babelq.transports.base import BaseTransport, Delivery, Outgoing
from babelq.transports.url_options import TransportURL, URLOptions, option
from babelq.urls import redact_text

log = logging.getLogger(__name__)

DEFAULT_URL = "kafka://localhost:9092"
DEFAULT_PORT = 9092
DEFAULT_GROUP = "babelqueue"
DEFAULT_REINJECT_GROUP = "babelqueue-retry-reinject"
#: The reference SDK's recommended tiers: 5 s, 30 s, 5 min, 30 min.
DEFAULT_RETRY_TIERS_MS: tuple[int, ...] = (5_000, 30_000, 300_000, 1_800_000)
#: Headers a parked record carries on its tier topic (the re-inject step removes them).
DELAY_HEADER = "bq-delay"
ORIGINAL_TOPIC_HEADER = "bq-original-topic"
_TIER_HEADERS = frozenset({DELAY_HEADER, ORIGINAL_TOPIC_HEADER})
_TIER_TOPIC = re.compile(r"^(?P<work>.+)\.retry\.(?P<n>[1-9][0-9]*)$")
#: Longest single wait inside ``reserve``: records parked meanwhile are looked at this often.
_POLL_SLICE = 0.1
#: confluent-kafka's timestamp types / special offsets (module constants of the library)
_LOG_APPEND_TIME = 2
_OFFSET_INVALID = -1001
#: commit errors that mean "this consumer no longer holds the partition"
_STALE_CODES = frozenset({22, 25, 27})  # ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS

#: URL/keyword option -> librdkafka property (passed to both clients)
_CLIENT_OPTIONS = {
    "client_id": "client.id",
    "security_protocol": "security.protocol",
    "sasl_mechanism": "sasl.mechanism",
    "sasl_username": "sasl.username",
    "sasl_password": "sasl.password",
    "ssl_ca_location": "ssl.ca.location",
}

Headers = list[tuple[str, bytes | None]]


#: The broker did not confirm a write (an error report, or none within ``delivery_timeout``);
#: the name the Kafka docs use for the one class every transport raises.
KafkaDeliveryError = PublishNotConfirmedError


def tier_topic(queue: str, n: int) -> str:
    """Tier ``n`` (1-based) of ``queue``: ``<queue>.retry.<n>`` (the binding's name)."""
    return binding.retry_topic(queue, n)


def tier_list(value: object) -> tuple[int, ...]:
    """``retry_tiers``: milliseconds, strictly ascending; ``""``/``none`` turns tiers off.
    A value that is none of that is a ``ValueError`` saying why."""
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in ("", "none", "off"):
            return ()
        items: list[object] = [part.strip() for part in text.split(",")]
    elif isinstance(value, Sequence):
        items = list(value)
    elif value is None:
        return ()
    else:
        raise ValueError(f"expected comma-separated milliseconds, got {value!r}")
    out: list[int] = []
    for item in items:
        try:
            tier = int(str(item)) if not isinstance(item, bool) else -1
        except ValueError:
            tier = -1
        if tier <= 0:
            raise ValueError(f"{item!r} is not a positive number of milliseconds")
        if out and tier <= out[-1]:
            raise ValueError(f"must be strictly ascending, got {list(items)!r}")
        out.append(tier)
    return tuple(out)


def _tier_text(tiers: tuple[int, ...]) -> str:
    return ",".join(map(str, tiers)) or "none"


def _tiers(value: object, where: str) -> tuple[int, ...]:
    try:
        return tier_list(value)
    except ValueError as exc:
        raise ConfigurationError(f"retry_tiers: {exc} ({where})") from None


@dataclass(frozen=True, slots=True)
class KafkaOptions(URLOptions):
    """The options of ``kafka://`` (query or keywords; docs/transports-kafka.md says why each)."""

    transport: ClassVar[str] = "kafka"

    group: str = DEFAULT_GROUP
    """Consumer group of the workers."""
    retry_tiers: tuple[int, ...] = option(DEFAULT_RETRY_TIERS_MS, parse=tier_list, format=_tier_text)
    """Delays of the tier topics ``<queue>.retry.<n>``, ms, strictly ascending; ``none``: no delays."""
    tier_policy: Literal["delay", "attempts"] = "delay"
    """How ``retry`` picks a tier: by the runtime's delay or by attempts."""
    reinject: bool = True
    """Run the re-inject step of the tier topics inside ``reserve``."""
    reinject_group: str = DEFAULT_REINJECT_GROUP
    """Consumer group of that step."""
    delivery_timeout: float = 30.0
    """Seconds a write waits for the broker's delivery report."""
    auto_offset_reset: Literal["earliest", "latest"] = "earliest"
    """Where a group with no committed offset starts."""
    assignment_strategy: str = "cooperative-sticky"
    """librdkafka's ``partition.assignment.strategy``."""
    client_id: str | None = None
    """librdkafka's ``client.id``."""
    security_protocol: str | None = None
    """librdkafka's ``security.protocol`` (``SASL_SSL`` when the URL has credentials)."""
    sasl_mechanism: str | None = None
    """librdkafka's ``sasl.mechanism`` (``PLAIN`` when the URL has credentials)."""
    sasl_username: str | None = None
    """librdkafka's ``sasl.username`` (else the URL's user)."""
    sasl_password: str | None = None
    """librdkafka's ``sasl.password`` (else the URL's password; secret)."""
    ssl_ca_location: str | None = None
    """librdkafka's ``ssl.ca.location``."""
    config: Any = None
    """More librdkafka properties, a mapping (keyword only; they win over everything)."""
    client_module: Any = None
    """A stand-in for the ``confluent_kafka`` module (keyword only; tests)."""

    def constructor_options(self) -> dict[str, Any]:
        """Keywords for :class:`KafkaTransport`: the options, the librdkafka ones (its
        ``**client_options``) only when set."""
        unset = {name for name in _CLIENT_OPTIONS if getattr(self, name) is None}
        return self.values(without=unset)


def _brokers(netloc: str, where: str) -> tuple[str, str | None, str | None]:
    """``bootstrap.servers`` and the SASL user/password of a ``kafka://`` netloc."""
    userinfo, at, hosts = netloc.rpartition("@")
    user: str | None = None
    password: str | None = None
    if at:
        name, colon, secret = userinfo.partition(":")
        user = unquote(name) or None
        password = unquote(secret) if colon else None
    servers: list[str] = []
    for raw in hosts.split(","):
        host = raw.strip()
        if not host:
            continue
        if host.startswith("["):  # [ipv6]:port
            name, close, rest = host[1:].partition("]")
            if not close or (rest and not rest.startswith(":")):
                raise ConfigurationError(f"url: bad broker address {host!r} ({where})")
            port_text = rest[1:]
            host_text = f"[{name}]"
        else:
            host_text, _, port_text = host.partition(":")
        if not host_text:
            raise ConfigurationError(f"url: bad broker address {host!r} ({where})")
        port = DEFAULT_PORT
        if port_text:
            if not port_text.isdigit() or not 0 < int(port_text) < 65536:
                raise ConfigurationError(f"url: bad port {port_text!r} in broker address {host!r} ({where})")
            port = int(port_text)
        servers.append(f"{host_text}:{port}")
    if not servers:
        raise ConfigurationError(f"url: no broker address (kafka://host:port[,host2:port]) ({where})")
    return ",".join(servers), user, password


def _with_carried(headers: Sequence[tuple[str, bytes | None]], carried: Mapping[str, str] | None) -> Headers:
    """The binding's record ``headers`` plus a publisher's ``carried`` headers (UTF-8 values);
    a name the binding already wrote keeps the binding's value."""
    if not carried:
        return list(headers)
    taken = {name for name, _ in headers}
    extra = [(str(k), str(v).encode("utf-8")) for k, v in carried.items() if k and v and str(k) not in taken]
    return [*headers, *extra]


def _gate(headers: Headers) -> str | None:
    """The schema-version gate on the record's ``bq-schema-version`` header (the last one, if
    repeated: what a consumer reading headers into a map sees)."""
    value: object = None
    for name, raw in headers:
        if name == schema_gate.PROPERTY:
            value = raw if raw is not None else ""
    return schema_gate.refusal(value)


def _carried(raw: Sequence[tuple[str, bytes | None]]) -> dict[str, str]:
    """``Delivery.carried_headers``: UTF-8 record headers that are not the binding's ``bq-*``."""
    out: dict[str, str] = {}
    for name, value in raw:
        if name.startswith("bq-") or value is None:
            continue
        try:
            out[name] = bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            continue
    return out


def _header(headers: Sequence[tuple[str, bytes | None]] | None, name: str) -> str | None:
    """The text of the first header ``name`` (None when absent or not UTF-8)."""
    for key, value in headers or ():
        if key == name and value is not None:
            try:
                return bytes(value).decode("utf-8")
            except UnicodeDecodeError:
                return None
    return None


def _document(body: bytes, envelope: Envelope | None) -> Envelope | None:
    if envelope is not None:
        return envelope
    try:
        return decode(body)
    except DecodeError:
        return None


@dataclass(slots=True, frozen=True)
class _Receipt:
    """Where a delivered record lives and what it looked like (settling re-produces from it)."""

    topic: str
    partition: int
    offset: int
    epoch: int
    key: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int | None


@dataclass(slots=True)
class _Partition:
    """A partition this transport's consumer holds: what is in flight, and where the commit is."""

    epoch: int
    inflight: set[int] = field(default_factory=set)
    settled: set[int] = field(default_factory=set)
    next: int | None = None  # one past the highest offset handed out
    committed: int | None = None

    def target(self) -> int | None:
        """The offset the group may commit: the lowest record in flight, else past the last one."""
        return min(self.inflight) if self.inflight else self.next


@dataclass(slots=True)
class _Held:
    """A parked record the re-inject step holds until it is due."""

    message: Any
    due_ms: float


@dataclass(slots=True)
class _Reinjector:
    consumer: Any
    held: dict[tuple[str, int], deque[_Held]] = field(default_factory=dict)
    #: one step at a time: two threads releasing the same due record would move it twice
    step: threading.Lock = field(default_factory=threading.Lock)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class KafkaTransport(BaseTransport):
    """Kafka through one confluent-kafka ``Producer`` and one ``Consumer`` per queue."""

    scheme = "kafka"
    leased_reservations: ClassVar[bool] = False
    tagged_reservations: ClassVar[bool] = False

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        group: str = DEFAULT_GROUP,
        retry_tiers: Sequence[int] | str | None = DEFAULT_RETRY_TIERS_MS,
        tier_policy: str = "delay",
        reinject: bool = True,
        reinject_group: str = DEFAULT_REINJECT_GROUP,
        delivery_timeout: float = 30.0,
        auto_offset_reset: str = "earliest",
        assignment_strategy: str = "cooperative-sticky",
        config: Mapping[str, Any] | None = None,
        client_module: Any = None,
        **client_options: Any,
    ) -> None:
        link = TransportURL.split(url)
        where, parts = link.shown(), link.parts
        if link.scheme != "kafka":
            raise ConfigurationError(f"url: not a kafka:// URL ({where})")
        servers, user, password = _brokers(parts.netloc, where)
        if parts.query or parts.path.strip("/") or parts.fragment:
            raise ConfigurationError(
                f"url: the constructor takes kafka://hosts only; options go through from_url / "
                f"open_transport or as keywords ({where})"
            )
        if not group:
            raise ConfigurationError(f"group: must not be empty ({where})")
        if not reinject_group:
            raise ConfigurationError(f"reinject_group: must not be empty ({where})")
        if tier_policy not in ("delay", "attempts"):
            raise ConfigurationError(
                f"tier_policy: must be 'delay' or 'attempts', got {tier_policy!r} ({where})"
            )
        if auto_offset_reset not in ("earliest", "latest"):
            raise ConfigurationError(
                f"auto_offset_reset: must be 'earliest' or 'latest', got {auto_offset_reset!r} ({where})"
            )
        if not delivery_timeout > 0:
            raise ConfigurationError(
                f"delivery_timeout: must be > 0 seconds, got {delivery_timeout!r} ({where})"
            )
        self.url = url
        self._shown = where
        self.group = group
        self.retry_tiers = _tiers(retry_tiers, where)
        self.tier_policy = tier_policy
        self.reinject = reinject
        self.reinject_group = reinject_group
        self.delivery_timeout = float(delivery_timeout)
        self.auto_offset_reset = auto_offset_reset
        client: dict[str, Any] = {"bootstrap.servers": servers}
        if user is not None:
            client["sasl.username"] = user
            client["sasl.password"] = password or ""
            client["sasl.mechanism"] = "PLAIN"
            client["security.protocol"] = "SASL_SSL"
        for key, value in client_options.items():
            prop = _CLIENT_OPTIONS.get(key)
            if prop is None:
                raise ConfigurationError(f"{key}: not an option of the kafka transport ({where})")
            client[prop] = str(value)
        client.update(config or {})
        self._client_config = client
        self._assignment_strategy = assignment_strategy
        self._module = client_module
        self._lock = threading.RLock()
        self._producer: Any = None
        self._consumers: dict[str, Any] = {}
        self._partitions: dict[str, dict[int, _Partition]] = {}
        self._reinjectors: dict[str, _Reinjector] = {}
        self._inspectors: dict[str, Any] = {}
        self._epochs = 0
        self._closed = False

    @classmethod
    def from_url(cls, url: str, **options: Any) -> KafkaTransport:
        """``kafka://[user:password@]host:9092[,host2:9092]?group=babelqueue&retry_tiers=5000,30000``.

        The options are :class:`KafkaOptions`; keywords win over the URL; ``config``
        (librdkafka properties) and ``client_module`` (a stand-in for ``confluent_kafka``) are
        keywords only.
        """
        link = TransportURL.split(url)
        parsed = KafkaOptions.parse(link, options)
        return cls(f"kafka://{link.parts.netloc}", **parsed.constructor_options())

    def __repr__(self) -> str:
        return f"KafkaTransport({self._shown!r}, group={self.group!r})"

    # -- clients ----------------------------------------------------------------------------------
    def _lib(self) -> Any:
        if self._module is None:
            self._module = optional_import("confluent_kafka", needed_for="url: the 'kafka' transport")
        return self._module

    def _check_open(self) -> None:
        if self._closed:
            raise ConfigurationError("kafka transport: used after close()")

    def _client(self, kind: str, config: Mapping[str, Any]) -> Any:
        lib = self._lib()
        try:
            return getattr(lib, kind)(dict(config))
        except lib.KafkaException as exc:
            detail = " ".join(redact_text(str(exc)).split())
            raise ConfigurationError(
                f"config: the Kafka client refused its settings: {detail} ({self._shown})"
            ) from exc

    def _producer_(self) -> Any:
        with self._lock:
            self._check_open()
            if self._producer is None:
                self._producer = self._client("Producer", self._client_config)
            return self._producer

    def _consumer_config(self, group: str) -> dict[str, Any]:
        return {
            **self._client_config,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": self.auto_offset_reset,
            "partition.assignment.strategy": self._assignment_strategy,
        }

    def _consumer(self, queue: str) -> Any:
        """The group consumer of ``queue``, subscribed with the rebalance callbacks."""
        with self._lock:
            self._check_open()
            consumer = self._consumers.get(queue)
            if consumer is None:
                consumer = self._client("Consumer", self._consumer_config(self.group))
                self._partitions[queue] = {}
                consumer.subscribe(
                    [queue],
                    on_assign=functools.partial(self._on_assign, queue),
                    on_revoke=functools.partial(self._on_revoke, queue),
                    on_lost=functools.partial(self._on_lost, queue),
                )
                self._consumers[queue] = consumer
            return consumer

    def _inspector(self, group: str) -> Any:
        """A consumer of ``group`` that never joins it: reads committed offsets and watermarks."""
        with self._lock:
            self._check_open()
            found = self._inspectors.get(group)
            if found is None:
                found = self._inspectors[group] = self._client("Consumer", self._consumer_config(group))
            return found

    def _tp(self, topic: str, partition: int, offset: int | None = None) -> Any:
        tp = self._lib().TopicPartition
        return tp(topic, partition) if offset is None else tp(topic, partition, offset)

    # -- rebalance callbacks (served inside poll) --------------------------------------------------
    def _on_assign(self, queue: str, consumer: Any, partitions: Sequence[Any]) -> None:
        with self._lock:
            book = self._partitions.setdefault(queue, {})
            for tp in partitions:
                self._epochs += 1
                book[tp.partition] = _Partition(epoch=self._epochs)

    def _on_revoke(self, queue: str, consumer: Any, partitions: Sequence[Any]) -> None:
        """Commit what is settled while the partition is still ours, then forget it: its unsettled
        deliveries are stale and its new owner re-reads them from the committed offset."""
        with self._lock:
            book = self._partitions.get(queue, {})
            for tp in partitions:
                state = book.get(tp.partition)
                if state is not None:
                    self._commit(queue, consumer, tp.partition, state, quiet=True)
                    book.pop(tp.partition, None)

    def _on_lost(self, queue: str, consumer: Any, partitions: Sequence[Any]) -> None:
        with self._lock:
            book = self._partitions.get(queue, {})
            for tp in partitions:
                book.pop(tp.partition, None)

    # -- producing --------------------------------------------------------------------------------
    def _record(
        self,
        body: bytes,
        envelope: Envelope | None,
        *,
        key: bytes | None = None,
        keep_key: bool = False,
        carried: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """``produce`` arguments for ``body``: value, the binding's headers (then ``carried``
        ones), timestamp, key."""
        doc = _document(body, envelope)
        out: dict[str, Any] = {
            "value": bytes(body),
            "headers": _with_carried(binding.headers(doc) if doc is not None else [], carried),
        }
        created_at = doc.created_at if doc is not None else None
        if type(created_at) is int and created_at > 0:
            out["timestamp"] = created_at
        record_key = key if keep_key else (binding.record_key(doc) if doc is not None else None)
        if record_key is not None:
            out["key"] = record_key
        return out

    def _tier(self, delay_ms: int) -> tuple[int, int]:
        """The smallest tier ``(n, tier_ms)`` whose delay covers ``delay_ms``."""
        if not self.retry_tiers:
            raise ConfigurationError(
                "retry_tiers: a delay on Kafka needs retry tier topics and none are configured "
                f"({self._shown})"
            )
        for n, tier_ms in enumerate(self.retry_tiers, start=1):
            if tier_ms >= delay_ms:
                return n, tier_ms
        raise ConfigurationError(
            f"retry_tiers: a delay of {delay_ms} ms exceeds the largest retry tier "
            f"({self.retry_tiers[-1]} ms); add a longer tier ({self._shown})"
        )

    @staticmethod
    def _park(queue: str, record: dict[str, Any], n: int, delay_ms: int) -> tuple[str, dict[str, Any]]:
        """Move ``record`` onto tier ``n``: ``bq-delay`` and ``bq-original-topic`` appended, and the
        timestamp set to now so the delay is measured from the parking (see docs)."""
        headers = [(k, v) for k, v in record["headers"] if k not in _TIER_HEADERS]
        headers.append((DELAY_HEADER, str(delay_ms).encode("utf-8")))
        headers.append((ORIGINAL_TOPIC_HEADER, queue.encode("utf-8")))
        return tier_topic(queue, n), {**record, "headers": headers, "timestamp": _now_ms()}

    def _place(self, queue: str, record: dict[str, Any], delay_ms: int) -> tuple[str, dict[str, Any]]:
        if delay_ms <= 0:
            return queue, record
        n, _ = self._tier(delay_ms)
        return self._park(queue, record, n, delay_ms)

    def _produce(self, writes: Sequence[tuple[str, dict[str, Any]]]) -> None:
        """Produce every write and wait for each one's delivery report; raise if any failed."""
        if not writes:
            return
        producer = self._producer_()
        lib = self._lib()
        reports: list[Any] = []
        for topic, kwargs in writes:
            slot: list[Any] = []
            reports.append(slot)

            def report(err: Any, _msg: Any = None, slot: list[Any] = slot) -> None:
                slot.append(err)

            try:
                producer.produce(topic, on_delivery=report, **kwargs)
            except BufferError:
                producer.poll(1.0)  # the local queue is full: serve reports, try once more
                producer.produce(topic, on_delivery=report, **kwargs)
            except lib.KafkaException as exc:
                raise PublishNotConfirmedError(self._why(f"produce to {topic!r}", exc)) from exc
        producer.flush(self.delivery_timeout)
        for (topic, _), slot in zip(writes, reports, strict=True):
            if not slot:
                raise PublishNotConfirmedError(
                    f"kafka: the write to {topic!r} was not confirmed within {self.delivery_timeout}s "
                    f"({self._shown})"
                )
            if slot[0] is not None:
                raise PublishNotConfirmedError(self._why(f"the write to {topic!r} failed", slot[0]))

    def _why(self, what: str, error: object) -> str:
        detail = " ".join(redact_text(str(error)).split()) or type(error).__name__
        return f"kafka: {what}: {detail} ({self._shown})"

    def publish(
        self,
        queue: str,
        body: bytes,
        *,
        envelope: Envelope | None = None,
        delay_ms: int = 0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """``headers`` ride as UTF-8 record headers after the binding's ``bq-*`` ones."""
        self._produce([self._place(queue, self._record(body, envelope, carried=headers), delay_ms)])

    def publish_many(self, queue: str, messages: Sequence[Outgoing]) -> None:
        self._produce([self._place(queue, self._record(m.body, m.envelope), m.delay_ms) for m in messages])

    # -- the re-inject step ----------------------------------------------------------------------
    def _reinjector(self, queue: str) -> _Reinjector | None:
        if not (self.reinject and self.retry_tiers):
            return None
        with self._lock:
            found = self._reinjectors.get(queue)
            if found is None:
                consumer = self._client("Consumer", self._consumer_config(self.reinject_group))
                consumer.subscribe(
                    [tier_topic(queue, n) for n in range(1, len(self.retry_tiers) + 1)],
                    on_revoke=functools.partial(self._on_tier_revoke, queue),
                    on_lost=functools.partial(self._on_tier_revoke, queue),
                )
                found = self._reinjectors[queue] = _Reinjector(consumer)
            return found

    def _on_tier_revoke(self, queue: str, consumer: Any, partitions: Sequence[Any]) -> None:
        with self._lock:
            state = self._reinjectors.get(queue)
            if state is not None:
                for tp in partitions:
                    state.held.pop((tp.topic, tp.partition), None)

    def _tier_delay(self, message: Any) -> int:
        """How long a parked record waits: its ``bq-delay`` (ms), else its tier's delay."""
        match = _TIER_TOPIC.match(message.topic())
        n = int(match.group("n")) if match else 1
        tier_ms = self.retry_tiers[min(n, len(self.retry_tiers)) - 1]
        raw = _header(message.headers(), DELAY_HEADER)
        if raw is not None and raw.strip().isdigit():
            return int(raw.strip())
        return tier_ms

    def _reinject_step(self, queue: str) -> float | None:
        """Take newly parked records, move the due ones to the work topic; returns the next due
        time (epoch ms) of what is still held, or None."""
        state = self._reinjector(queue)
        if state is None or not state.step.acquire(blocking=False):
            return None
        try:
            return self._reinject_held(queue, state)
        finally:
            state.step.release()

    def _reinject_held(self, queue: str, state: _Reinjector) -> float | None:
        consumer = state.consumer
        for _ in range(500):
            message = consumer.poll(0)
            if message is None:
                break
            if message.error() is not None:
                continue
            now = _now_ms()
            delay = self._tier_delay(message)
            kind, stamp = message.timestamp()
            # the reference re-injector's rule: timestamp + delay, never before now, never later
            # than one delay from now (a producer clock ahead cannot park it for longer)
            due = (
                now + delay
                if not kind or stamp is None or stamp < 0
                else min(max(stamp + delay, now), now + delay)
            )
            key = (message.topic(), message.partition())
            with self._lock:
                state.held.setdefault(key, deque()).append(_Held(message, due))
            consumer.pause([self._tp(*key)])
        now = _now_ms()
        with self._lock:
            due_now = [(key, held) for key, held in state.held.items() if held and held[0].due_ms <= now]
        for key, held in due_now:
            while held and held[0].due_ms <= _now_ms():
                message = held[0].message
                headers = [(k, v) for k, v in message.headers() or () if k not in _TIER_HEADERS]
                work = _header(message.headers(), ORIGINAL_TOPIC_HEADER)
                if not work:
                    match = _TIER_TOPIC.match(message.topic())
                    work = match.group("work") if match else queue
                record: dict[str, Any] = {"value": message.value(), "headers": headers}
                if message.key() is not None:
                    record["key"] = message.key()
                try:
                    self._produce([(work, record)])
                    consumer.commit(message=message, asynchronous=False)
                except Exception:
                    log.warning(
                        "kafka: re-injecting %s[%s]@%s failed; it stays parked",
                        message.topic(),
                        message.partition(),
                        message.offset(),
                        exc_info=True,
                    )
                    with self._lock:
                        state.held.pop(key, None)
                    try:
                        consumer.seek(self._tp(key[0], key[1], message.offset()))
                    finally:
                        consumer.resume([self._tp(*key)])
                    break
                held.popleft()
            if not held:
                with self._lock:
                    state.held.pop(key, None)
                consumer.resume([self._tp(*key)])
        with self._lock:
            pending = [held[0].due_ms for held in state.held.values() if held]
        return min(pending) if pending else None

    # -- reserving --------------------------------------------------------------------------------
    def reserve(self, queue: str, *, max_messages: int = 1, timeout: float = 0.0) -> list[Delivery]:
        consumer = self._consumer(queue)
        deadline = time.monotonic() + max(timeout, 0.0)
        out: list[Delivery] = []
        while len(out) < max_messages:
            next_due = self._reinject_step(queue)
            remaining = deadline - time.monotonic()
            wait = 0.0 if out or remaining <= 0 else min(remaining, _POLL_SLICE)
            if next_due is not None and wait > 0:
                wait = max(0.0, min(wait, (next_due - _now_ms()) / 1000))
            try:
                message = consumer.poll(wait)
            except self._lib().KafkaException as exc:
                raise UnavailableError(self._why(f"poll of {queue!r}", exc)) from exc
            if message is None:
                if out or time.monotonic() >= deadline:
                    break
                continue
            error = message.error()
            if error is not None:
                if getattr(error, "fatal", lambda: False)():
                    raise UnavailableError(self._why(f"consumer of {queue!r}", error))
                log.debug("kafka: %s", error)
                continue
            delivery = self._delivery(queue, message)
            if delivery is not None:
                out.append(delivery)
        return out

    def _delivery(self, queue: str, message: Any) -> Delivery | None:
        partition, offset = message.partition(), message.offset()
        with self._lock:
            book = self._partitions.setdefault(queue, {})
            state = book.get(partition)
            if state is None:  # assigned without our callback seeing it: start its bookkeeping now
                self._epochs += 1
                state = book[partition] = _Partition(epoch=self._epochs)
            if state.next is None and state.committed is None:
                # where this assignment started reading: the group's position, nothing below is ours
                state.committed = offset
            state.inflight.add(offset)
            state.next = max(state.next or 0, offset + 1)
            epoch = state.epoch
        raw: Headers = list(message.headers() or [])
        kind, stamp = message.timestamp()
        return Delivery(
            body=bytes(message.value() or b""),
            queue=queue,
            receipt=_Receipt(
                message.topic(), partition, offset, epoch, message.key(), tuple(raw), stamp if kind else None
            ),
            delivery_count=None,
            headers={name: value for name, value in raw},
            stored_at=stamp if kind == _LOG_APPEND_TIME else None,
            reconcile=functools.partial(binding.reconcile_attempts, headers=raw),
            carried_headers=_carried(raw),
            refusal=_gate(raw),
        )

    # -- settling ---------------------------------------------------------------------------------
    @staticmethod
    def _receipt(delivery: Delivery) -> _Receipt:
        receipt = delivery.receipt
        if not isinstance(receipt, _Receipt):
            raise ConfigurationError("delivery: not reserved through a Kafka transport")
        return receipt

    def _live(self, delivery: Delivery) -> _Partition | None:
        """The partition state when ``delivery`` is still ours and unsettled (caller holds the lock)."""
        receipt = self._receipt(delivery)
        state = self._partitions.get(delivery.queue, {}).get(receipt.partition)
        if state is None or state.epoch != receipt.epoch or receipt.offset not in state.inflight:
            log.warning(
                "kafka: %s[%s]@%s is no longer held here (settled, or its partition was reassigned); "
                "nothing done",
                receipt.topic,
                receipt.partition,
                receipt.offset,
            )
            return None
        return state

    def _commit(
        self, queue: str, consumer: Any, partition: int, state: _Partition, *, quiet: bool = False
    ) -> None:
        """Move the group's committed offset of ``partition`` to ``state.target()`` if it advanced."""
        target = state.target()
        if target is None or (state.committed is not None and target <= state.committed):
            return
        try:
            consumer.commit(offsets=[self._tp(queue, partition, target)], asynchronous=False)
        except self._lib().KafkaException as exc:
            error: Any = exc.args[0] if exc.args else None
            code = error.code() if hasattr(error, "code") else None
            if code in _STALE_CODES:
                # The group is moving (or has moved) the partition on: the revoke that follows in the
                # next poll forgets it, and its new owner re-reads from the last commit.
                log.warning(
                    "kafka: commit on %s[%s] refused (%s); its unsettled records will be redelivered",
                    queue,
                    partition,
                    error,
                )
                return
            if quiet:
                log.warning("kafka: commit on %s[%s] failed: %s", queue, partition, error)
                return
            raise UnavailableError(self._why(f"commit on {queue}[{partition}]", exc)) from exc
        state.committed = target
        state.settled = {o for o in state.settled if o >= target}

    def _settle(self, deliveries: Sequence[Delivery]) -> None:
        """Mark ``deliveries`` settled and commit each touched partition once (caller holds the lock)."""
        touched: dict[tuple[str, int], _Partition] = {}
        for delivery in deliveries:
            state = self._live(delivery)
            if state is None:
                continue
            receipt = self._receipt(delivery)
            state.inflight.discard(receipt.offset)
            state.settled.add(receipt.offset)
            touched[(delivery.queue, receipt.partition)] = state
        for (queue, partition), state in touched.items():
            consumer = self._consumers.get(queue)
            if consumer is not None:
                self._commit(queue, consumer, partition, state)

    def ack(self, delivery: Delivery) -> None:
        with self._lock:
            self._settle([delivery])

    def ack_many(self, deliveries: Sequence[Delivery]) -> None:
        with self._lock:
            self._settle(deliveries)

    def renew_many(self, deliveries: Sequence[Delivery]) -> int:
        """Nothing lapses on Kafka: counts the deliveries still held (unsettled, partition still ours)."""
        with self._lock:
            held = 0
            for delivery in deliveries:
                receipt = self._receipt(delivery)
                state = self._partitions.get(delivery.queue, {}).get(receipt.partition)
                if state is not None and state.epoch == receipt.epoch and receipt.offset in state.inflight:
                    held += 1
            return held

    def _copy(self, delivery: Delivery) -> dict[str, Any]:
        """The delivered record as it was: same value, key, headers and timestamp."""
        receipt = self._receipt(delivery)
        record: dict[str, Any] = {
            "value": delivery.body,
            "headers": [(k, v) for k, v in receipt.headers if k not in _TIER_HEADERS],
        }
        if receipt.key is not None:
            record["key"] = receipt.key
        if receipt.timestamp:
            record["timestamp"] = receipt.timestamp
        return record

    def _republish(self, pairs: Sequence[tuple[Delivery, tuple[str, dict[str, Any]]]]) -> None:
        """Write the settling copies (confirmed), then commit the originals: a crash in between
        duplicates, never loses. Deliveries no longer held here are left alone."""
        with self._lock:
            live = [(d, write) for d, write in pairs if self._live(d) is not None]
        if not live:
            return
        self._produce([write for _, write in live])
        with self._lock:
            self._settle([d for d, _ in live])

    def release(self, delivery: Delivery, *, delay_ms: int = 0) -> None:
        """Re-produce the same record (to the tail, or parked on a tier when delayed), then commit."""
        self._republish([(delivery, self._place(delivery.queue, self._copy(delivery), delay_ms))])

    def release_many(self, deliveries: Sequence[Delivery]) -> None:
        self._republish([(d, (d.queue, self._copy(d))) for d in deliveries])

    def retry(self, delivery: Delivery, body: bytes, *, delay_ms: int) -> None:
        """Write ``body`` (attempts+1) with the original key: to a tier topic when delayed (or always,
        with ``tier_policy=attempts``), straight to the work topic otherwise; then commit."""
        receipt = self._receipt(delivery)
        record = self._record(body, None, key=receipt.key, keep_key=True, carried=delivery.carried_headers)
        queue = delivery.queue
        if self.tier_policy == "attempts":
            before = delivery.attempts(_body_attempts(delivery.body))
            if not self.retry_tiers:
                raise ConfigurationError(
                    f"retry_tiers: tier_policy=attempts needs retry tiers ({self._shown})"
                )
            n = min(before, len(self.retry_tiers) - 1) + 1
            record["headers"] = [(k, v) for k, v in record["headers"] if k != binding.ATTEMPTS_HEADER]
            record["headers"].append((binding.ATTEMPTS_HEADER, str(before + 1).encode("utf-8")))
            write = self._park(queue, record, n, self.retry_tiers[n - 1])
        else:
            write = self._place(queue, record, delay_ms)
        self._republish([(delivery, write)])

    def dead_letter(self, delivery: Delivery, body: bytes, *, dlq: str) -> None:
        """Write ``body`` to the ``dlq`` topic with the original key (confirmed), then commit."""
        receipt = self._receipt(delivery)
        record = self._record(body, None, key=receipt.key, keep_key=True, carried=delivery.carried_headers)
        self._republish([(delivery, (dlq, record))])

    # -- inspection -------------------------------------------------------------------------------
    def _lag(self, topic: str, group: str) -> dict[int, int]:
        """Per partition of ``topic``: records after ``group``'s committed offset."""
        inspector = self._inspector(group)
        try:
            metadata = inspector.list_topics(topic=topic, timeout=self.delivery_timeout)
            found = metadata.topics.get(topic)
            if found is None or found.error is not None or not found.partitions:
                return {}
            tps = [self._tp(topic, p) for p in sorted(found.partitions)]
            committed = {
                tp.partition: tp.offset for tp in inspector.committed(tps, timeout=self.delivery_timeout)
            }
            out: dict[int, int] = {}
            for tp in tps:
                low, high = inspector.get_watermark_offsets(tp, timeout=self.delivery_timeout)
                start = committed.get(tp.partition, _OFFSET_INVALID)
                if start is None or start < 0:
                    start = low if self.auto_offset_reset == "earliest" else high
                out[tp.partition] = max(high - max(start, low), 0)
            return out
        except self._lib().KafkaException as exc:
            raise UnavailableError(self._why(f"offsets of {topic!r}", exc)) from exc

    def _own(self, queue: str) -> int:
        """Records of ``queue`` this transport handed out or settled but the group has not committed."""
        with self._lock:
            total = 0
            for state in self._partitions.get(queue, {}).values():
                floor = state.committed or 0
                total += len(state.inflight) + sum(1 for o in state.settled if o >= floor)
            return total

    def ready(self, queue: str) -> int:
        """Records after the group's committed offset, less those held or settled here (approximate:
        other consumers' in-flight records are counted as ready)."""
        return max(sum(self._lag(queue, self.group).values()) - self._own(queue), 0)

    def size(self, queue: str) -> int:
        """Ready plus parked on the queue's tier topics."""
        parked = sum(
            sum(self._lag(tier_topic(queue, n), self.reinject_group).values())
            for n in range(1, len(self.retry_tiers) + 1)
        )
        return self.ready(queue) + parked

    def reserved(self, queue: str) -> int | None:
        """None: Kafka cannot see other consumers' unsettled records."""
        return None

    def purge(self, queue: str) -> None:
        """Move the group's committed offsets of ``queue`` (and of its tiers, for the re-inject
        group) to the end: Kafka deletes nothing on request. Deliveries held here go stale."""
        self._skip_to_end(queue, self.group, self._consumers.get(queue), self._partitions.get(queue))
        state = self._reinjectors.get(queue)
        if state is not None:
            with self._lock:
                held, state.held = state.held, {}
            if held:
                state.consumer.resume([self._tp(t, p) for t, p in held])
        for n in range(1, len(self.retry_tiers) + 1):
            self._skip_to_end(
                tier_topic(queue, n), self.reinject_group, state.consumer if state else None, None
            )

    def _skip_to_end(self, topic: str, group: str, own: Any, book: dict[int, _Partition] | None) -> None:
        inspector = self._inspector(group)
        metadata = inspector.list_topics(topic=topic, timeout=self.delivery_timeout)
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            return
        mine = {tp.partition for tp in own.assignment() if tp.topic == topic} if own is not None else set()
        for p in sorted(found.partitions):
            _, high = inspector.get_watermark_offsets(self._tp(topic, p), timeout=self.delivery_timeout)
            end = self._tp(topic, p, high)
            if p in mine:
                own.commit(offsets=[end], asynchronous=False)
                own.seek(end)
                if book is not None:
                    with self._lock:
                        self._epochs += 1
                        book[p] = _Partition(epoch=self._epochs, next=high, committed=high)
            else:
                inspector.commit(offsets=[end], asynchronous=False)

    def close(self) -> None:
        """Leave the groups (what is settled gets committed on the way out), flush the producer."""
        with self._lock:
            if self._closed:
                return
            consumers = [*self._consumers.values(), *(r.consumer for r in self._reinjectors.values())]
            consumers += list(self._inspectors.values())
            producer = self._producer
        for consumer in consumers:
            try:
                consumer.close()
            except Exception:
                log.debug("kafka: closing a consumer failed", exc_info=True)
        if producer is not None:
            try:
                producer.flush(self.delivery_timeout)
            except Exception:
                log.debug("kafka: flushing the producer failed", exc_info=True)
        with self._lock:
            self._closed = True
            self._consumers.clear()
            self._reinjectors.clear()
            self._inspectors.clear()
            self._partitions.clear()
            self._producer = None


def _body_attempts(body: bytes) -> int:
    try:
        return decode(body).attempts
    except (DecodeError, AttributeError, TypeError, ValueError):
        return 0
