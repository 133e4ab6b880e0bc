"""A recording, in-memory fake of the confluent-kafka client API (no Kafka broker runs here).

Why a fake: the Kafka transports of babelq and of the reference SDK ``babelqueue`` both talk to
Kafka only through confluent-kafka's ``Producer`` / ``Consumer`` / ``Message`` /
``TopicPartition``. This module implements that surface over an in-memory cluster so both can be
driven, and compared record for record, without a broker. It is a *fake of the client library*,
not of either transport: class names, method names, arguments and return shapes follow
confluent-kafka 2.x (``produce(topic, value=, key=, partition=, on_delivery=, timestamp=,
headers=)``, ``poll(timeout)``, ``commit(message=|offsets=, asynchronous=)``...).

What the cluster models, because the transports' correctness depends on it:

* **Logs.** One append-only list of records per topic partition; offsets start at 0. Topics
  are created on first produce or subscribe (``auto.create.topics.enable=true``) with
  ``default_partitions`` partitions. A keyed record goes to ``crc32(key) % partitions`` (not
  librdkafka's murmur2: only "same key, same partition" matters here), an unkeyed one round
  robin. Record timestamps are the producer's (CreateTime, ``0`` = now) unless the topic was
  created with ``log_append_time=True``.
* **Consumer groups.** ``subscribe`` joins the group; partitions are assigned stickily and
  balanced over the members subscribed to each topic. Rebalances are served, as librdkafka
  does, from inside ``poll``: ``on_revoke`` / ``on_assign`` (incremental with
  ``partition.assignment.strategy=cooperative-sticky``, revoke-everything otherwise). A
  partition moving between members is not fetched by the new owner before the old owner has
  given it up (the rebalance barrier). A new assignment starts at the group's committed offset,
  else per ``auto.offset.reset`` (librdkafka's default: ``latest``).
* **Commits.** Committed offsets per (group, topic, partition), the next offset to read. A
  group member may only commit partitions it holds (else ``ILLEGAL_GENERATION``); a member
  expelled by :meth:`FakeKafkaCluster.expire` gets ``UNKNOWN_MEMBER_ID`` until it polls again
  and rejoins. A consumer that never subscribed commits freely (a standalone committer).
* **Delivery reports.** ``produce`` queues a report served by ``poll`` / ``flush``;
  :meth:`FakeKafkaCluster.fail_deliveries` makes the next writes to a topic fail (not stored,
  the report carries the error) and :meth:`FakeKafkaCluster.withhold_reports` keeps reports
  back so ``flush`` times out.

Everything is recorded for assertions: :attr:`FakeKafkaCluster.produced` (every stored record),
:attr:`FakeKafkaCluster.commits` (every accepted commit) and :attr:`FakeKafkaCluster.calls`.
Plug it in with ``cluster.module()`` (a stand-in for the ``confluent_kafka`` module): pass it to
babelq's ``KafkaTransport(client_module=...)``, or ``monkeypatch.setitem(sys.modules,
"confluent_kafka", cluster.module())`` for code that imports the library itself.
"""

from __future__ import annotations

import itertools
import threading
import time
import types
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

TIMESTAMP_NOT_AVAILABLE = 0
TIMESTAMP_CREATE_TIME = 1
TIMESTAMP_LOG_APPEND_TIME = 2
OFFSET_BEGINNING = -2
OFFSET_END = -1
OFFSET_STORED = -1000
OFFSET_INVALID = -1001


class KafkaError:
    """confluent_kafka.KafkaError: an error code with a reason."""

    NO_ERROR = 0
    _PARTITION_EOF = -191
    _MSG_TIMED_OUT = -192
    _TRANSPORT = -195
    _UNKNOWN_PARTITION = -190
    _INVALID_ARG = -186
    UNKNOWN_TOPIC_OR_PART = 3
    REQUEST_TIMED_OUT = 7
    MSG_SIZE_TOO_LARGE = 10
    ILLEGAL_GENERATION = 22
    UNKNOWN_MEMBER_ID = 25
    REBALANCE_IN_PROGRESS = 27

    _NAMES: ClassVar[dict[int, str]] = {
        0: "NO_ERROR",
        -191: "_PARTITION_EOF",
        -192: "_MSG_TIMED_OUT",
        -195: "_TRANSPORT",
        -190: "_UNKNOWN_PARTITION",
        -186: "_INVALID_ARG",
        3: "UNKNOWN_TOPIC_OR_PART",
        7: "REQUEST_TIMED_OUT",
        10: "MSG_SIZE_TOO_LARGE",
        22: "ILLEGAL_GENERATION",
        25: "UNKNOWN_MEMBER_ID",
        27: "REBALANCE_IN_PROGRESS",
    }

    def __init__(self, error: int, reason: str | None = None, fatal: bool = False) -> None:
        self._code = error
        self._reason = reason or self._NAMES.get(error, f"error {error}")
        self._fatal = fatal

    def code(self) -> int:
        return self._code

    def name(self) -> str:
        return self._NAMES.get(self._code, str(self._code))

    def str(self) -> str:
        return self._reason

    def fatal(self) -> bool:
        return self._fatal

    def retriable(self) -> bool:
        return self._code in (self._TRANSPORT, self.REQUEST_TIMED_OUT, self._MSG_TIMED_OUT)

    def __str__(self) -> str:
        return f'KafkaError{{code={self.name()},val={self._code},str="{self._reason}"}}'

    __repr__ = __str__

    def __eq__(self, other: object) -> bool:
        if isinstance(other, KafkaError):
            return self._code == other._code
        return self._code == other

    def __hash__(self) -> int:
        return hash(self._code)


class KafkaException(Exception):  # noqa: N818 - the library's name
    """confluent_kafka.KafkaException: ``args[0]`` is the :class:`KafkaError`."""


class TopicPartition:
    """confluent_kafka.TopicPartition(topic, partition=-1, offset=OFFSET_INVALID)."""

    def __init__(
        self,
        topic: str,
        partition: int = -1,
        offset: int = OFFSET_INVALID,
        metadata: str | None = None,
        leader_epoch: int | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.metadata = metadata
        self.leader_epoch = leader_epoch
        self.error: KafkaError | None = None

    def __repr__(self) -> str:
        return f"TopicPartition{{topic={self.topic},partition={self.partition},offset={self.offset}}}"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TopicPartition):
            return NotImplemented
        return (self.topic, self.partition) == (other.topic, other.partition)

    def __hash__(self) -> int:
        return hash((self.topic, self.partition))


class Message:
    """confluent_kafka.Message: accessor methods, as the library exposes them."""

    def __init__(  # noqa: PLR0917 - the library's positional order
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes | None]] | None,
        timestamp: tuple[int, int],
        error: KafkaError | None = None,
    ) -> None:
        self._topic = topic
        self._partition = partition
        self._offset = offset
        self._key = key
        self._value = value
        self._headers = headers
        self._timestamp = timestamp
        self._error = error

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        # librdkafka returns None for a record without headers, and a fresh list otherwise
        return None if not self._headers else list(self._headers)

    def timestamp(self) -> tuple[int, int]:
        return self._timestamp

    def error(self) -> KafkaError | None:
        return self._error

    def __len__(self) -> int:
        return len(self._value or b"")

    def __repr__(self) -> str:
        return f"Message({self._topic}[{self._partition}]@{self._offset})"


@dataclass
class _Record:
    """One stored record (what the broker keeps)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp_type: int
    timestamp: int

    def message(self) -> Message:
        return Message(
            self.topic,
            self.partition,
            self.offset,
            self.key,
            self.value,
            list(self.headers),
            (self.timestamp_type, self.timestamp),
        )


@dataclass
class _Topic:
    partitions: list[list[_Record]]
    log_append_time: bool = False


@dataclass
class _Member:
    consumer: FakeConsumer
    topics: list[str]
    cooperative: bool
    #: what the member itself holds (it learns of changes in its next poll)
    held: set[tuple[str, int]] = field(default_factory=set)
    expelled: bool = False


def _encode(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode("utf-8")
    return bytes(value)


class FakeKafkaCluster:
    """The in-memory cluster every fake client of one :meth:`module` talks to."""

    def __init__(self, *, default_partitions: int = 1) -> None:
        self.default_partitions = default_partitions
        self._cond = threading.Condition(threading.RLock())
        self._topics: dict[str, _Topic] = {}
        self._committed: dict[tuple[str, str, int], int] = {}
        #: group -> members in join order
        self._groups: dict[str, list[_Member]] = {}
        #: (group, topic, partition) -> the member the group coordinator gave it to
        self._owner: dict[tuple[str, str, int], _Member] = {}
        self._round_robin = itertools.count()
        self._member_ids = itertools.count(1)
        self._fail: dict[str, list[int]] = {}
        self._withhold = False
        #: every stored record, in the order it was stored
        self.produced: list[_Record] = []
        #: every accepted commit: (group, topic, partition, offset)
        self.commits: list[tuple[str, str, int, int]] = []
        #: every client call worth asserting on: (method, details)
        self.calls: list[tuple[str, dict[str, Any]]] = []

    # -- test controls ---------------------------------------------------------------------------
    def module(self) -> types.ModuleType:
        """A stand-in for the ``confluent_kafka`` module whose clients use this cluster."""
        cluster = self
        module = types.ModuleType("confluent_kafka")

        class Producer(FakeProducer):
            def __init__(self, config: Mapping[str, Any], **kwargs: Any) -> None:
                super().__init__(cluster, {**config, **kwargs})

        class Consumer(FakeConsumer):
            def __init__(self, config: Mapping[str, Any], **kwargs: Any) -> None:
                super().__init__(cluster, {**config, **kwargs})

        module.Producer = Producer  # type: ignore[attr-defined]
        module.Consumer = Consumer  # type: ignore[attr-defined]
        module.Message = Message  # type: ignore[attr-defined]
        module.TopicPartition = TopicPartition  # type: ignore[attr-defined]
        module.KafkaError = KafkaError  # type: ignore[attr-defined]
        module.KafkaException = KafkaException  # type: ignore[attr-defined]
        for name in (
            "TIMESTAMP_NOT_AVAILABLE",
            "TIMESTAMP_CREATE_TIME",
            "TIMESTAMP_LOG_APPEND_TIME",
            "OFFSET_BEGINNING",
            "OFFSET_END",
            "OFFSET_STORED",
            "OFFSET_INVALID",
        ):
            setattr(module, name, globals()[name])
        module.cluster = cluster  # type: ignore[attr-defined]
        return module

    def create_topic(
        self, name: str, partitions: int | None = None, *, log_append_time: bool = False
    ) -> None:
        """Create ``name`` (a no-op when it exists)."""
        with self._cond:
            self._topic(name, partitions, log_append_time=log_append_time)

    def fail_deliveries(self, topic: str, count: int = 1, code: int = KafkaError._MSG_TIMED_OUT) -> None:
        """The next ``count`` writes to ``topic`` are not stored; their reports carry ``code``."""
        with self._cond:
            self._fail.setdefault(topic, []).extend([code] * count)

    def withhold_reports(self, on: bool = True) -> None:
        """While on, records are stored but no delivery report is ever served (flush times out)."""
        with self._cond:
            self._withhold = on

    def expire(self, consumer: FakeConsumer) -> None:
        """Expel ``consumer`` from its group as a session timeout would (it is not told yet)."""
        with self._cond:
            member = consumer._member
            if member is None:
                return
            member.expelled = True
            self._leave(consumer._group, member)

    # -- inspection ------------------------------------------------------------------------------
    def records(self, topic: str) -> list[_Record]:
        """Every record stored on ``topic``, partition by partition, in offset order."""
        with self._cond:
            found = self._topics.get(topic)
            return [r for part in found.partitions for r in part] if found else []

    def topics(self) -> list[str]:
        with self._cond:
            return sorted(self._topics)

    def committed_offset(self, group: str, topic: str, partition: int = 0) -> int | None:
        with self._cond:
            return self._committed.get((group, topic, partition))

    def end_offset(self, topic: str, partition: int = 0) -> int:
        with self._cond:
            found = self._topics.get(topic)
            return len(found.partitions[partition]) if found else 0

    # -- broker internals ------------------------------------------------------------------------
    def _topic(self, name: str, partitions: int | None = None, *, log_append_time: bool = False) -> _Topic:
        found = self._topics.get(name)
        if found is None:
            count = partitions or self.default_partitions
            found = self._topics[name] = _Topic([[] for _ in range(count)], log_append_time)
        return found

    def _append(  # noqa: PLR0917
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        partition: int,
        timestamp: int,
        headers: list[tuple[str, bytes | None]],
    ) -> _Record | KafkaError:
        with self._cond:
            failures = self._fail.get(topic)
            if failures:
                return KafkaError(failures.pop(0), "injected delivery failure")
            found = self._topic(topic)
            count = len(found.partitions)
            if partition < 0:
                partition = zlib.crc32(key) % count if key is not None else next(self._round_robin) % count
            if partition >= count:
                return KafkaError(KafkaError._UNKNOWN_PARTITION, f"{topic} has {count} partitions")
            now = time.time_ns() // 1_000_000
            if found.log_append_time:
                kind, ts = TIMESTAMP_LOG_APPEND_TIME, now
            else:
                kind, ts = TIMESTAMP_CREATE_TIME, (timestamp or now)
            log = found.partitions[partition]
            record = _Record(topic, partition, len(log), key, value, list(headers), kind, ts)
            log.append(record)
            self.produced.append(record)
            self._cond.notify_all()
            return record

    def _join(self, consumer: FakeConsumer, topics: list[str], cooperative: bool) -> _Member:
        with self._cond:
            for topic in topics:
                self._topic(topic)
            member = _Member(consumer, list(topics), cooperative)
            self._groups.setdefault(consumer._group, []).append(member)
            self._rebalance(consumer._group)
            self._cond.notify_all()
            return member

    def _leave(self, group: str, member: _Member) -> None:
        with self._cond:
            members = self._groups.get(group, [])
            if member in members:
                members.remove(member)
            for key, owner in list(self._owner.items()):
                if owner is member:
                    del self._owner[key]
            self._rebalance(group)
            self._cond.notify_all()

    def _rebalance(self, group: str) -> None:
        """Sticky, balanced assignment of every subscribed topic's partitions (caller holds the lock)."""
        members = self._groups.get(group, [])
        topics = sorted({t for m in members for t in m.topics})
        for topic in topics:
            subscribers = [m for m in members if topic in m.topics]
            parts = range(len(self._topic(topic).partitions))
            owned: dict[int, list[int]] = {id(m): [] for m in subscribers}
            for p in parts:
                owner = self._owner.get((group, topic, p))
                if owner is not None and id(owner) in owned:
                    owned[id(owner)].append(p)
                else:
                    self._owner.pop((group, topic, p), None)
            if not subscribers:
                continue
            ceiling = -(-len(parts) // len(subscribers))
            for m in subscribers:  # sticky: keep what you have, up to an even share
                while len(owned[id(m)]) > ceiling:
                    del self._owner[(group, topic, owned[id(m)].pop())]
            for p in parts:
                if (group, topic, p) not in self._owner:
                    taker = min(subscribers, key=lambda m: (len(owned[id(m)]), members.index(m)))
                    owned[id(taker)].append(p)
                    self._owner[(group, topic, p)] = taker
            while True:  # then even out: no member holds two more than another
                low = min(subscribers, key=lambda m: len(owned[id(m)]))
                high = max(subscribers, key=lambda m: len(owned[id(m)]))
                if len(owned[id(high)]) - len(owned[id(low)]) <= 1:
                    break
                moved = owned[id(high)].pop()
                owned[id(low)].append(moved)
                self._owner[(group, topic, moved)] = low

    def _owned_by(self, group: str, member: _Member) -> set[tuple[str, int]]:
        return {(t, p) for (g, t, p), owner in self._owner.items() if g == group and owner is member}

    def _barrier_free(self, group: str, member: _Member, tp: tuple[str, int]) -> bool:
        """``tp`` is not still held by another member that has not given it up yet."""
        return not any(
            other is not member and not other.expelled and tp in other.held
            for other in self._groups.get(group, [])
        )


class FakeProducer:
    """confluent_kafka.Producer over a :class:`FakeKafkaCluster`."""

    def __init__(self, cluster: FakeKafkaCluster, config: Mapping[str, Any]) -> None:
        self._cluster = cluster
        self.config = dict(config)
        self._reports: list[tuple[Callable[..., Any] | None, KafkaError | None, Message]] = []
        cluster.calls.append(("Producer", {"config": dict(config)}))

    def produce(  # noqa: PLR0917 - confluent-kafka's signature
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        on_delivery: Callable[..., Any] | None = None,
        callback: Callable[..., Any] | None = None,
        timestamp: int = 0,
        headers: Sequence[tuple[str, Any]] | Mapping[str, Any] | None = None,
    ) -> None:
        pairs = list(headers.items()) if isinstance(headers, Mapping) else list(headers or [])
        native = [(str(name), _encode(v)) for name, v in pairs]
        outcome = self._cluster._append(topic, _encode(value), _encode(key), partition, timestamp, native)
        self._cluster.calls.append(("produce", {"topic": topic, "key": _encode(key), "headers": native}))
        if isinstance(outcome, KafkaError):
            message = Message(topic, partition, -1, _encode(key), _encode(value), None, (0, 0), outcome)
            self._reports.append((on_delivery or callback, outcome, message))
        else:
            message = outcome.message()
            message._headers = None  # the library does not return headers to the delivery callback
            self._reports.append((on_delivery or callback, None, message))

    def _serve(self) -> int:
        if self._cluster._withhold:
            return 0
        reports, self._reports = self._reports, []
        for report, error, message in reports:
            if report is not None:
                report(error, message)
        return len(reports)

    def poll(self, timeout: float | None = None) -> int:
        return self._serve()

    def flush(self, timeout: float | None = None) -> int:
        self._serve()
        self._cluster.calls.append(("flush", {"timeout": timeout}))
        return len(self._reports)

    def __len__(self) -> int:
        return len(self._reports)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        return _metadata(self._cluster, topic)


@dataclass
class _PartitionMetadata:
    id: int


@dataclass
class _TopicMetadata:
    topic: str
    partitions: dict[int, _PartitionMetadata]
    error: KafkaError | None = None


@dataclass
class _ClusterMetadata:
    topics: dict[str, _TopicMetadata]


def _metadata(cluster: FakeKafkaCluster, topic: str | None) -> _ClusterMetadata:
    with cluster._cond:
        names = [topic] if topic is not None else sorted(cluster._topics)
        out: dict[str, _TopicMetadata] = {}
        for name in names:
            found = cluster._topics.get(name)
            if found is None:
                out[name] = _TopicMetadata(name, {}, KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
            else:
                out[name] = _TopicMetadata(
                    name, {p: _PartitionMetadata(p) for p in range(len(found.partitions))}
                )
        return _ClusterMetadata(out)


class FakeConsumer:
    """confluent_kafka.Consumer over a :class:`FakeKafkaCluster`."""

    def __init__(self, cluster: FakeKafkaCluster, config: Mapping[str, Any]) -> None:
        self._cluster = cluster
        self.config = dict(config)
        self._group = str(config.get("group.id", ""))
        self._reset = str(config.get("auto.offset.reset", "latest"))
        self._member: _Member | None = None
        self._subscription: list[str] = []
        self._callbacks: dict[str, Callable[..., Any] | None] = {}
        self._manual: set[tuple[str, int]] = set()
        self._positions: dict[tuple[str, int], int] = {}
        self._paused: set[tuple[str, int]] = set()
        self._closed = False
        self._cursor = 0
        self.member_id = f"fake-member-{next(cluster._member_ids)}"
        cluster.calls.append(("Consumer", {"config": dict(config)}))

    # -- helpers -------------------------------------------------------------------------------
    def _check(self) -> None:
        if self._closed:
            raise RuntimeError("Consumer closed")

    def _start(self, tp: tuple[str, int]) -> int:
        committed = self._cluster._committed.get((self._group, *tp))
        if committed is not None:
            return committed
        log = self._cluster._topic(tp[0]).partitions[tp[1]]
        return 0 if self._reset in ("earliest", "smallest", "beginning") else len(log)

    def _assigned(self) -> set[tuple[str, int]]:
        return set(self._member.held) if self._member is not None else set(self._manual)

    def _sync_group(self) -> None:
        """Serve a pending rebalance: callbacks run here, outside the cluster lock, like librdkafka."""
        member = self._member
        if member is None:
            return
        cluster = self._cluster
        with cluster._cond:
            if member.expelled:  # the session timed out: everything is lost, then rejoin
                lost = sorted(member.held)
                member.held.clear()
                for tp in lost:
                    self._positions.pop(tp, None)
                gained: list[tuple[str, int]] = []
                rejoin = True
            else:
                owned = cluster._owned_by(self._group, member)
                lost = sorted(member.held - owned)
                gained = sorted(
                    tp for tp in owned - member.held if cluster._barrier_free(self._group, member, tp)
                )
                rejoin = False
                if not member.cooperative and (lost or gained):
                    lost, gained = sorted(member.held), sorted(owned)
                    gained = [tp for tp in gained if cluster._barrier_free(self._group, member, tp)]
        if rejoin:
            callback = self._callbacks.get("on_lost") or self._callbacks.get("on_revoke")
            if lost and callback is not None:
                callback(self, [TopicPartition(t, p) for t, p in lost])
            with cluster._cond:
                self._member = cluster._join(self, self._subscription, member.cooperative)
            self._sync_group()
            return
        if lost:
            callback = self._callbacks.get("on_revoke")
            if callback is not None:
                callback(self, [TopicPartition(t, p) for t, p in lost])
            with cluster._cond:
                for tp in lost:
                    member.held.discard(tp)
                    self._positions.pop(tp, None)
                    self._paused.discard(tp)
                cluster._cond.notify_all()
        if gained:
            with cluster._cond:
                for tp in gained:
                    member.held.add(tp)
                    self._positions[tp] = self._start(tp)
            callback = self._callbacks.get("on_assign")
            if callback is not None:
                callback(self, [TopicPartition(t, p, self._positions[(t, p)]) for t, p in gained])

    def _next_record(self) -> _Record | None:
        """The next fetchable record, visiting partitions in turn (caller holds the lock)."""
        cluster = self._cluster
        candidates = sorted(self._assigned() - self._paused)
        if not candidates:
            return None
        for i in range(len(candidates)):
            tp = candidates[(self._cursor + i) % len(candidates)]
            found = cluster._topics.get(tp[0])
            if found is None or tp[1] >= len(found.partitions):
                continue
            position = self._positions.get(tp)
            if position is None:
                position = self._positions[tp] = self._start(tp)
            log = found.partitions[tp[1]]
            if position < len(log):
                self._positions[tp] = position + 1
                self._cursor = (self._cursor + i + 1) % len(candidates)
                return log[position]
        return None

    # -- the consumer API ------------------------------------------------------------------------
    def subscribe(
        self,
        topics: list[str],
        on_assign: Callable[..., Any] | None = None,
        on_revoke: Callable[..., Any] | None = None,
        on_lost: Callable[..., Any] | None = None,
    ) -> None:
        self._check()
        if not self._group:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, "group.id must be set to subscribe"))
        if self._member is not None:
            self.unsubscribe()
        self._subscription = list(topics)
        self._callbacks = {"on_assign": on_assign, "on_revoke": on_revoke, "on_lost": on_lost}
        strategy = str(self.config.get("partition.assignment.strategy", "range,roundrobin"))
        self._member = self._cluster._join(self, list(topics), strategy == "cooperative-sticky")
        self._cluster.calls.append(("subscribe", {"group": self._group, "topics": list(topics)}))

    def unsubscribe(self) -> None:
        self._check()
        member, self._member = self._member, None
        if member is not None:
            held = sorted(member.held)
            callback = self._callbacks.get("on_revoke")
            if held and callback is not None:
                callback(self, [TopicPartition(t, p) for t, p in held])
            member.held.clear()
            self._cluster._leave(self._group, member)
        self._positions.clear()
        self._paused.clear()

    def poll(self, timeout: float | None = None) -> Message | None:
        self._check()
        wait = None if timeout is None or timeout < 0 else float(timeout)
        deadline = None if wait is None else time.monotonic() + wait
        while True:
            self._sync_group()
            with self._cluster._cond:
                record = self._next_record()
                if record is not None:
                    return record.message()
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._cluster._cond.wait(0.05 if left is None else min(left, 0.05))

    def consume(self, num_messages: int = 1, timeout: float | None = None) -> list[Message]:
        out: list[Message] = []
        first = self.poll(timeout)
        while first is not None:
            out.append(first)
            if len(out) >= num_messages:
                break
            first = self.poll(0)
        return out

    def commit(
        self,
        message: Message | None = None,
        offsets: Sequence[TopicPartition] | None = None,
        asynchronous: bool = True,
    ) -> list[TopicPartition] | None:
        self._check()
        if message is not None and offsets is not None:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, "message and offsets are exclusive"))
        if message is not None:
            wanted = [(message.topic(), message.partition(), message.offset() + 1)]
        elif offsets is not None:
            wanted = [(tp.topic, tp.partition, tp.offset) for tp in offsets]
        else:
            wanted = [(t, p, o) for (t, p), o in self._positions.items()]
        cluster = self._cluster
        with cluster._cond:
            member = self._member
            if member is not None:
                if member.expelled:
                    raise KafkaException(KafkaError(KafkaError.UNKNOWN_MEMBER_ID, "member expelled"))
                for topic, partition, _ in wanted:
                    if (topic, partition) not in member.held:
                        raise KafkaException(
                            KafkaError(KafkaError.ILLEGAL_GENERATION, f"{topic}[{partition}] not assigned")
                        )
            for topic, partition, offset in wanted:
                if offset < 0:
                    continue
                cluster._committed[(self._group, topic, partition)] = offset
                cluster.commits.append((self._group, topic, partition, offset))
            cluster.calls.append(("commit", {"group": self._group, "offsets": wanted}))
        if asynchronous:
            return None
        return [TopicPartition(t, p, o) for t, p, o in wanted]

    def committed(
        self, partitions: Sequence[TopicPartition], timeout: float | None = None
    ) -> list[TopicPartition]:
        self._check()
        with self._cluster._cond:
            return [
                TopicPartition(
                    tp.topic,
                    tp.partition,
                    self._cluster._committed.get((self._group, tp.topic, tp.partition), OFFSET_INVALID),
                )
                for tp in partitions
            ]

    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float | None = None, cached: bool = False
    ) -> tuple[int, int]:
        self._check()
        with self._cluster._cond:
            found = self._cluster._topics.get(partition.topic)
            if found is None or partition.partition >= len(found.partitions):
                raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
            return 0, len(found.partitions[partition.partition])

    def position(self, partitions: Sequence[TopicPartition]) -> list[TopicPartition]:
        with self._cluster._cond:
            return [
                TopicPartition(
                    tp.topic, tp.partition, self._positions.get((tp.topic, tp.partition), OFFSET_INVALID)
                )
                for tp in partitions
            ]

    def seek(self, partition: TopicPartition) -> None:
        self._check()
        tp = (partition.topic, partition.partition)
        with self._cluster._cond:
            if tp not in self._assigned():
                raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION, f"{tp} is not assigned"))
            self._positions[tp] = partition.offset
            self._cluster.calls.append(
                ("seek", {"topic": tp[0], "partition": tp[1], "offset": partition.offset})
            )

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        with self._cluster._cond:
            self._paused.update((tp.topic, tp.partition) for tp in partitions)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        with self._cluster._cond:
            self._paused.difference_update((tp.topic, tp.partition) for tp in partitions)
            self._cluster._cond.notify_all()

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._check()
        with self._cluster._cond:
            self._manual = set()
            for tp in partitions:
                key = (tp.topic, tp.partition)
                self._manual.add(key)
                self._positions[key] = tp.offset if tp.offset >= 0 else self._start(key)

    incremental_assign = assign

    def unassign(self) -> None:
        self._manual = set()

    def assignment(self) -> list[TopicPartition]:
        with self._cluster._cond:
            return [TopicPartition(t, p) for t, p in sorted(self._assigned())]

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        return _metadata(self._cluster, topic)

    def memberid(self) -> str:
        return self.member_id

    def close(self) -> None:
        if self._closed:
            raise RuntimeError("Consumer closed")
        if self._member is not None and not self._member.expelled:
            self.unsubscribe()
        elif self._member is not None:
            self._member = None
        self._closed = True
        self._cluster.calls.append(("close", {"group": self._group}))
