"""babelq's Kafka transport next to the ``babelqueue`` package's, through one fake client.

Fake-backed: no Kafka broker runs here. The package imports ``confluent_kafka`` inside its
methods, so ``sys.modules["confluent_kafka"]`` is pointed at the recording fake of
:mod:`transports.fake_kafka`; babelq gets the same fake module through ``client_module``. Given
the same envelope (and, for settling, the same consumed record) both must store the same native
record: topic, partition, value bytes, key, headers in order, and the same timestamp where the
layouts agree; they must commit the same offsets; and each must consume what the other produced,
tier topics included (each side's re-inject step moves the other's parked records).

Where the two deliberately differ, a test below pins the difference:

* ``meta.sharding_key`` is babelq's record key (docs/standard.md §6); the package sends no key on
  publish (both keep a consumed record's key on retry and dead-letter writes).
* A record parked on a tier topic: babelq stamps it with the time it was parked, the package
  with ``meta.created_at``. Re-injection measures the delay from the record timestamp, so
  babelq's stamp keeps an old message's retry from coming back at once on CreateTime topics.
* A retry under babelq's default ``tier_policy=delay`` picks the tier from the runtime's delay;
  with ``tier_policy=attempts`` it picks it from the attempts exactly as the package does.
* An envelope that names its URN only as ``urn`` (the inbound alias): babelq projects it as
  ``bq-job``, the package sends no ``bq-job``.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from babelqueue.kafka_retry import RetryReinjector
from babelqueue.kafka_transport import KafkaTransport as PackageKafkaTransport

from babelq.envelope import make
from babelq.transports.base import Delivery
from babelq.transports.kafka import KafkaTransport
from transports.fake_kafka import FakeKafkaCluster, _Record

URL = "kafka://broker-1:9092"
TIERS = [500, 2_000]
QUEUE = "orders"
CONFORMANCE = Path(__file__).resolve().parents[1] / "conformance"
VALID = [
    case["file"] for case in json.loads((CONFORMANCE / "manifest.json").read_text())["cases"] if case["valid"]
]


class Side:
    """One SDK's transport on its own fake cluster (so equal records sit at equal offsets)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, kind: str, **options: Any) -> None:
        self.cluster = FakeKafkaCluster()
        self.module = self.cluster.module()
        self.kind = kind
        if kind == "babelq":
            self.transport: Any = KafkaTransport.from_url(
                URL, client_module=self.module, retry_tiers=TIERS, **options
            )
        else:
            self.transport = PackageKafkaTransport(URL, retry_tiers_ms=TIERS, delivery_timeout=1.0)

    def run(self, action: Callable[[Any], Any], monkeypatch: pytest.MonkeyPatch) -> Any:
        """Run ``action(transport)`` with ``confluent_kafka`` resolving to this side's fake."""
        with monkeypatch.context() as patch:
            patch.setitem(sys.modules, "confluent_kafka", self.module)
            return action(self.transport)

    def close(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.run(lambda t: t.close(), monkeypatch)


@pytest.fixture
def pair(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., tuple[Side, Side]]]:
    made: list[Side] = []

    def build(**options: Any) -> tuple[Side, Side]:
        ours, theirs = Side(monkeypatch, "babelq", **options), Side(monkeypatch, "babelqueue")
        made.extend([ours, theirs])
        return ours, theirs

    yield build
    for side in made:
        side.close(monkeypatch)


def native(record: _Record) -> tuple[Any, ...]:
    """Everything a Kafka record is, but its timestamp."""
    return (record.topic, record.partition, record.offset, record.key, record.value, record.headers)


def seed(side: Side, body: bytes, key: bytes | None = None) -> None:
    """Store the same source record on both sides, as a third producer would."""
    producer = side.module.Producer({"bootstrap.servers": "x"})
    kwargs: dict[str, Any] = {"value": body, "headers": []}
    if key is not None:
        kwargs["key"] = key
    producer.produce(QUEUE, **kwargs)
    producer.flush()


def take(side: Side, monkeypatch: pytest.MonkeyPatch, queue: str = QUEUE) -> Any:
    """One delivery (babelq) / received message (package) from ``queue``."""
    if side.kind == "babelq":
        [delivery] = side.run(lambda t: t.reserve(queue, timeout=2), monkeypatch)
        return delivery
    return side.run(lambda t: t.pop(queue, timeout=1.0), monkeypatch)


# -- publishing --------------------------------------------------------------------------------
@pytest.mark.parametrize("fixture", VALID)
def test_kafka_fake_differential_publish_of_conformance_fixtures(
    pair: Callable[..., tuple[Side, Side]], monkeypatch: pytest.MonkeyPatch, fixture: str
) -> None:
    body = (CONFORMANCE / fixture).read_bytes()  # pretty-printed: the bytes must travel as they are
    ours, theirs = pair()
    ours.run(lambda t: t.publish(QUEUE, body), monkeypatch)
    theirs.run(lambda t: t.publish(QUEUE, body.decode()), monkeypatch)
    [mine] = ours.cluster.records(QUEUE)
    [package] = theirs.cluster.records(QUEUE)
    assert mine.value == body
    assert mine.timestamp == package.timestamp == json.loads(body)["meta"]["created_at"]
    if fixture.endswith("urn-alias.json"):  # pinned difference: babelq projects the alias as bq-job
        assert mine.headers[0] == ("bq-job", json.loads(body)["urn"].encode())
        assert mine.headers[1:] == package.headers
        assert not any(name == "bq-job" for name, _ in package.headers)
    else:
        assert native(mine) == native(package)


_WITHOUT_ATTEMPTS = (
    b'{"job":"urn:babel:orders:created","trace_id":"t-1","data":{},'
    b'"meta":{"id":"m-1","schema_version":1,"lang":"php","created_at":1749132727000}'
)


@pytest.mark.parametrize(
    "body", [_WITHOUT_ATTEMPTS + b"}", _WITHOUT_ATTEMPTS + b',"attempts":null}'], ids=["absent", "null"]
)
def test_kafka_fake_differential_a_body_without_a_count_projects_zero_attempts(
    pair: Callable[..., tuple[Side, Side]], monkeypatch: pytest.MonkeyPatch, body: bytes
) -> None:
    """The counter starts at 0 (seed 004): both write ``bq-attempts: 0`` for such a body."""
    ours, theirs = pair()
    ours.run(lambda t: t.publish(QUEUE, body), monkeypatch)
    theirs.run(lambda t: t.publish(QUEUE, body.decode()), monkeypatch)
    [mine], [package] = ours.cluster.records(QUEUE), theirs.cluster.records(QUEUE)
    assert native(mine) == native(package)
    assert dict(mine.headers)["bq-attempts"] == b"0"


@pytest.mark.parametrize(
    "envelope",
    [
        make("urn:babel:orders:created", {"order_id": 7, "note": "ça/va 🚀", "amount_cents": 1999}),
        make("urn:babel:orders:created", {"n": 1}, correlation_id="batch-1", meta={"tenant": "eu"}),
        make("urn:babel:orders:created", {"n": 2}).with_attempts(3),
    ],
    ids=["unicode", "extra-meta", "attempts-3"],
)
def test_kafka_fake_differential_publish_of_made_envelopes(
    pair: Callable[..., tuple[Side, Side]], monkeypatch: pytest.MonkeyPatch, envelope: Any
) -> None:
    ours, theirs = pair()
    ours.run(lambda t: t.publish(QUEUE, envelope.encode(), envelope=envelope), monkeypatch)
    theirs.run(lambda t: t.publish(QUEUE, envelope.encode().decode()), monkeypatch)
    [mine], [package] = ours.cluster.records(QUEUE), theirs.cluster.records(QUEUE)
    assert native(mine) == native(package)
    assert mine.timestamp == package.timestamp == envelope.created_at


def test_kafka_fake_differential_sharding_key_is_only_babelqs_record_key(
    pair: Callable[..., tuple[Side, Side]], monkeypatch: pytest.MonkeyPatch
) -> None:
    envelope = make("urn:babel:orders:created", {"n": 1}, sharding_key="customer-7")
    ours, theirs = pair()
    ours.run(lambda t: t.publish(QUEUE, envelope.encode()), monkeypatch)
    theirs.run(lambda t: t.publish(QUEUE, envelope.encode().decode()), monkeypatch)
    [mine], [package] = ours.cluster.records(QUEUE), theirs.cluster.records(QUEUE)
    assert (mine.key, package.key) == (b"customer-7", None)
    assert (mine.value, mine.headers) == (package.value, package.headers)


@pytest.mark.parametrize("delay_ms", [1, 500, 501, 2_000])
def test_kafka_fake_differential_delayed_publish_parks_on_the_same_tier(
    pair: Callable[..., tuple[Side, Side]], monkeypatch: pytest.MonkeyPatch, delay_ms: int
) -> None:
    envelope = make("urn:babel:orders:created", {"n": 1})
    ours, theirs = pair()
    before = int(time.time() * 1000)
    ours.run(lambda t: t.publish(QUEUE, envelope.encode(), delay_ms=delay_ms), monkeypatch)
    theirs.run(lambda t: t.publish_delayed(QUEUE, envelope.encode().decode(), delay_ms), monkeypatch)
    mine, package = ours.cluster.produced, theirs.cluster.produced
    assert [native(r) for r in mine] == [native(r) for r in package]
    assert mine[0].topic == f"{QUEUE}.retry.{1 if delay_ms <= 500 else 2}"
    assert mine[0].headers[-2:] == [
        ("bq-delay", str(delay_ms).encode()),
        ("bq-original-topic", QUEUE.encode()),
    ]
    # pinned difference: the parking time (babelq) vs meta.created_at (package)
    assert package[0].timestamp == envelope.created_at
    assert mine[0].timestamp >= before


def test_kafka_fake_differential_both_refuse_a_delay_beyond_the_last_tier(
    pair: Callable[..., tuple[Side, Side]], monkeypatch: pytest.MonkeyPatch
) -> None:
    ours, theirs = pair()
    with pytest.raises(ValueError, match="largest retry tier"):  # babelq: a ConfigurationError
        ours.run(lambda t: t.publish(QUEUE, b"{}", delay_ms=2_001), monkeypatch)
    with pytest.raises(Exception, match="exceeds the largest retry tier"):
        theirs.run(lambda t: t.publish_delayed(QUEUE, "{}", 2_001), monkeypatch)
    assert ours.cluster.produced == [] and theirs.cluster.produced == []


# -- settling ----------------------------------------------------------------------------------
@pytest.mark.parametrize("attempts", [0, 1, 4])
def test_kafka_fake_differential_retry_writes_the_same_tier_record_and_commit(
    pair: Callable[..., tuple[Side, Side]], monkeypatch: pytest.MonkeyPatch, attempts: int
) -> None:
    envelope = make("urn:babel:orders:created", {"n": 1}).with_attempts(attempts)
    retried = envelope.with_attempts(attempts + 1).encode()
    ours, theirs = pair(tier_policy="attempts")
    for side in (ours, theirs):
        seed(side, envelope.encode(), key=b"k-1")
    delivery: Delivery = take(ours, monkeypatch)
    received = take(theirs, monkeypatch)
    assert delivery.body == received.body.encode()
    assert (delivery.receipt.key, received.key) == (b"k-1", b"k-1")

    ours.run(lambda t: t.retry(delivery, retried, delay_ms=1234), monkeypatch)
    theirs.run(lambda t: t.redeliver(received, retried.decode(), 1.234), monkeypatch)

    [mine] = [r for r in ours.cluster.produced if r.topic != QUEUE]
    [package] = [r for r in theirs.cluster.produced if r.topic != QUEUE]
    assert native(mine) == native(package)
    assert mine.topic == f"{QUEUE}.retry.{min(attempts, 1) + 1}"
    assert dict(mine.headers)["bq-attempts"] == str(attempts + 1).encode()
    assert ours.cluster.commits == theirs.cluster.commits == [("babelqueue", QUEUE, 0, 1)]


def test_kafka_fake_differential_default_retry_policy_follows_the_delay(
    pair: Callable[..., tuple[Side, Side]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pinned difference: babelq's default picks the tier from the runtime's backoff."""
    envelope = make("urn:babel:orders:created", {"n": 1})
    ours, _ = pair()
    seed(ours, envelope.encode())
    delivery = take(ours, monkeypatch)
    ours.run(lambda t: t.retry(delivery, envelope.with_attempts(1).encode(), delay_ms=1_500), monkeypatch)
    [parked] = [r for r in ours.cluster.produced if r.topic != QUEUE]
    assert parked.topic == f"{QUEUE}.retry.2"  # attempts 0 would be tier 1 in the package
    assert dict(parked.headers)["bq-delay"] == b"1500"


@pytest.mark.parametrize("key", [b"k-9", None, b""])
def test_kafka_fake_differential_dead_letter_writes_the_same_dlq_record_and_commit(
    pair: Callable[..., tuple[Side, Side]], monkeypatch: pytest.MonkeyPatch, key: bytes | None
) -> None:
    envelope = make("urn:babel:orders:created", {"n": 1}).with_attempts(2)
    doc = envelope.document()
    doc["dead_letter"] = {"reason": "failed", "error": "boom", "original_queue": QUEUE, "attempts": 2}
    dead = json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()
    ours, theirs = pair()
    for side in (ours, theirs):
        seed(side, envelope.encode(), key=key)
    delivery, received = take(ours, monkeypatch), take(theirs, monkeypatch)

    ours.run(lambda t: t.dead_letter(delivery, dead, dlq=f"{QUEUE}.dlq"), monkeypatch)

    def package_dead_letter(t: PackageKafkaTransport) -> None:  # what the package's runtime does
        t.publish_settle(f"{QUEUE}.dlq", dead.decode(), "", key=received.key)
        t.ack(received)

    theirs.run(package_dead_letter, monkeypatch)
    [mine] = ours.cluster.records(f"{QUEUE}.dlq")
    [package] = theirs.cluster.records(f"{QUEUE}.dlq")
    assert native(mine) == native(package)
    assert mine.timestamp == package.timestamp == envelope.created_at
    assert mine.key == key
    assert ours.cluster.commits == theirs.cluster.commits == [("babelqueue", QUEUE, 0, 1)]


def test_kafka_fake_differential_plain_ack_commits_the_same_offsets(
    pair: Callable[..., tuple[Side, Side]], monkeypatch: pytest.MonkeyPatch
) -> None:
    ours, theirs = pair()
    bodies = [make("urn:babel:orders:created", {"n": n}).encode() for n in range(3)]
    for side in (ours, theirs):
        for body in bodies:
            seed(side, body)
    for _ in bodies:
        ours.run(lambda t: t.ack(take(ours, monkeypatch)), monkeypatch)
        theirs.run(lambda t: t.ack(take(theirs, monkeypatch)), monkeypatch)
    assert ours.cluster.commits == theirs.cluster.commits == [("babelqueue", QUEUE, 0, n) for n in (1, 2, 3)]


# -- each consumes the other's -----------------------------------------------------------------
@pytest.fixture
def shared(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeKafkaCluster, KafkaTransport, Any]]:
    cluster = FakeKafkaCluster()
    module = cluster.module()
    monkeypatch.setitem(sys.modules, "confluent_kafka", module)
    ours = KafkaTransport.from_url(URL, client_module=module, retry_tiers=TIERS)
    theirs = PackageKafkaTransport(URL, retry_tiers_ms=TIERS, delivery_timeout=1.0)
    yield cluster, ours, theirs
    ours.close()
    theirs.close()


def test_kafka_fake_differential_each_consumes_the_others_records(
    shared: tuple[FakeKafkaCluster, KafkaTransport, Any],
) -> None:
    cluster, ours, theirs = shared
    from_babelq = make("urn:babel:orders:created", {"from": "babelq"}).with_attempts(2)
    from_package = make("urn:babel:orders:created", {"from": "babelqueue"}).with_attempts(1)
    ours.publish("to-package", from_babelq.encode())
    theirs.publish("to-babelq", from_package.encode().decode())

    received = theirs.pop("to-package", timeout=1.0)
    assert received.body == from_babelq.encode().decode()  # attempts agree with bq-attempts: untouched
    theirs.ack(received)
    [delivery] = ours.reserve("to-babelq", timeout=2)
    assert delivery.body == from_package.encode()
    assert delivery.attempts(from_package.attempts) == 1
    assert delivery.headers["bq-message-id"] == from_package.id.encode()
    ours.ack(delivery)
    assert cluster.committed_offset("babelqueue", "to-package") == 1
    assert cluster.committed_offset("babelqueue", "to-babelq") == 1


def test_kafka_fake_differential_each_reads_the_others_dead_letters(
    shared: tuple[FakeKafkaCluster, KafkaTransport, Any],
) -> None:
    _, ours, theirs = shared
    envelope = make("urn:babel:orders:created", {"n": 1})
    ours.publish(QUEUE, envelope.encode())
    [delivery] = ours.reserve(QUEUE, timeout=2)
    doc = envelope.document()
    doc["dead_letter"] = {"reason": "failed"}
    dead = json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
    ours.dead_letter(delivery, dead.encode(), dlq=f"{QUEUE}.dlq")
    received = theirs.pop(f"{QUEUE}.dlq", timeout=1.0)
    assert received.body == dead
    theirs.ack(received)

    theirs.publish_settle("other.dlq", dead, "", key=b"kk")
    [back] = ours.reserve("other.dlq", timeout=2)
    assert (back.body, back.receipt.key) == (dead.encode(), b"kk")
    ours.ack(back)


def test_kafka_fake_differential_the_packages_reinjector_moves_babelqs_parked_record(
    shared: tuple[FakeKafkaCluster, KafkaTransport, Any],
) -> None:
    cluster, ours, theirs = shared
    envelope = make("urn:babel:orders:created", {"n": 1})
    ours.publish(QUEUE, envelope.encode(), delay_ms=300)
    reinjector = RetryReinjector(URL, work_topics=[QUEUE], retry_tiers_ms=TIERS, delivery_timeout=1.0)
    started = time.monotonic()
    moved = 0
    while not moved and time.monotonic() - started < 5:
        moved = reinjector.run_once(timeout=0.05)
    reinjector.close()
    # the package waits its tier (500 ms) from the parking time babelq stamped
    assert time.monotonic() - started >= 0.4
    received = theirs.pop(QUEUE, timeout=1.0)
    assert received.body == envelope.encode().decode()
    [record] = cluster.records(QUEUE)
    assert [name for name, _ in record.headers] == [
        "bq-job",
        "bq-trace-id",
        "bq-message-id",
        "bq-schema-version",
        "bq-source-lang",
        "bq-attempts",
    ]
    theirs.ack(received)


def test_kafka_fake_differential_babelq_reinjects_the_packages_parked_record(
    shared: tuple[FakeKafkaCluster, KafkaTransport, Any],
) -> None:
    cluster, ours, theirs = shared
    envelope = make("urn:babel:orders:created", {"n": 1})
    started = time.monotonic()
    theirs.publish_delayed(QUEUE, envelope.encode().decode(), 300)
    assert ours.reserve(QUEUE, timeout=0.1) == []
    [delivery] = ours.reserve(QUEUE, timeout=3)
    assert time.monotonic() - started >= 0.25  # bq-delay, measured from the record timestamp
    assert delivery.body == envelope.encode()
    assert "bq-delay" not in delivery.headers
    ours.ack(delivery)
    # babelq's re-inject step commits in the package's re-inject group: the two share tiers
    assert cluster.committed_offset("babelqueue-retry-reinject", f"{QUEUE}.retry.1") == 1
