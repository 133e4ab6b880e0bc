"""The Kafka transport over the recording confluent-kafka fake: the shared contract, then Kafka
specifics. No Kafka broker runs on this machine, so everything here is fake-backed
(``tests/transports/fake_kafka.py``); what that proves and what it does not is in
docs/transports-kafka.md.

Kafka semantics the contract flags declare: the broker counts no deliveries
(``delivery_count`` is None: ``bq-attempts`` carries the count), the record timestamp is the
producer's ``meta.created_at`` and not a store time (the fake's topics use CreateTime), and
reservations are connection-bound: a polled record stays with its consumer until it is settled
or the consumer leaves the group, so nothing lapses and nothing can be settled by tag.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from babelq.bindings import kafka as binding
from babelq.envelope import make
from babelq.errors import ConfigurationError, UnavailableError
from babelq.transports import open_transport
from babelq.transports.base import Outgoing, Transport
from babelq.transports.kafka import DEFAULT_RETRY_TIERS_MS, KafkaDeliveryError, KafkaTransport
from babelq.urls import redact
from transports.contract import MakeTransport, TransportContract, _body
from transports.fake_kafka import FakeKafkaCluster

URL = "kafka://broker-1:9092"
TIERS = [500, 2_000, 60_000, 300_000]


@pytest.fixture
def cluster() -> FakeKafkaCluster:
    return FakeKafkaCluster()


@pytest.fixture
def make_kafka(cluster: FakeKafkaCluster) -> Iterator[Callable[..., KafkaTransport]]:
    made: list[KafkaTransport] = []

    def factory(url: str = URL, **options: object) -> KafkaTransport:
        transport = KafkaTransport.from_url(url, client_module=cluster.module(), **options)
        made.append(transport)
        return transport

    yield factory
    for transport in made:
        transport.close()


@pytest.fixture
def make_transport(make_kafka: Callable[..., KafkaTransport]) -> MakeTransport:
    def make_one(*, visibility_timeout: float | None = None) -> Transport:
        del (
            visibility_timeout
        )  # nothing lapses on Kafka: a record is held until settled or the consumer leaves
        return make_kafka()

    return make_one


class TestKafkaContractFakeBacked(TransportContract):
    supports_delivery_count = False  # Kafka counts no deliveries; bq-attempts does
    supports_stored_at = False  # CreateTime topics: the timestamp is meta.created_at, not the store time
    supports_tagged = False  # offsets are committed by the group member that holds the partition

    def test_unacked_reservation_comes_back(  # type: ignore[override]  # no lapse: the holder leaves
        self, make_transport: MakeTransport, unique_queue: str
    ) -> None:
        holder, other = make_transport(), make_transport()
        holder.publish(unique_queue, _body("lease"))
        [first] = self._drain(holder, unique_queue, 1, within=3)
        assert other.reserve(unique_queue, timeout=0.3) == []  # held: nobody else gets it
        assert holder.reserve(unique_queue, timeout=0.2) == []
        holder.close()  # leaves the group without committing: the group hands it out again
        [again] = self._drain(other, unique_queue, 1, within=3)
        assert again.body == first.body
        other.ack(again)

    def test_late_ack_leaves_the_new_reservation_alone(
        self, make_transport: MakeTransport, unique_queue: str, cluster: FakeKafkaCluster
    ) -> None:
        slow, fast = make_transport(), make_transport()
        assert isinstance(slow, KafkaTransport)
        slow.publish(unique_queue, _body("late"))
        [stale] = self._drain(slow, unique_queue, 1, within=3)
        cluster.expire(slow._consumers[unique_queue])  # its session timed out: expelled from the group
        [current] = self._drain(fast, unique_queue, 1, within=3)
        slow.ack(stale)  # too late: refused by the group, nothing committed
        assert cluster.committed_offset("babelqueue", unique_queue) is None
        fast.release(current)
        [again] = self._drain(fast, unique_queue, 1, within=3)
        assert again.body == _body("late")
        fast.ack(again)
        fast.purge(unique_queue)


# -- Kafka specifics (fake-backed) -----------------------------------------------------------------
@pytest.fixture
def kafka(make_kafka: Callable[..., KafkaTransport]) -> KafkaTransport:
    return make_kafka(retry_tiers=TIERS)


def test_kafka_fake_publish_projects_headers_key_and_timestamp(
    kafka: KafkaTransport, cluster: FakeKafkaCluster, unique_queue: str
) -> None:
    envelope = make("urn:babel:orders:created", {"n": 1}, queue=unique_queue, sharding_key="customer-7")
    kafka.publish(unique_queue, envelope.encode(), envelope=envelope)

    [record] = cluster.records(unique_queue)
    assert record.value == envelope.encode()
    assert record.headers == [
        ("bq-job", b"urn:babel:orders:created"),
        ("bq-trace-id", envelope.trace_id.encode()),
        ("bq-message-id", envelope.id.encode()),
        ("bq-schema-version", b"1"),
        ("bq-source-lang", b"python"),
        ("bq-attempts", b"0"),
    ]
    assert record.key == b"customer-7"
    assert (record.timestamp_type, record.timestamp) == (1, envelope.created_at)

    [delivery] = kafka.reserve(unique_queue, timeout=2)
    assert delivery.body == envelope.encode()
    assert delivery.headers["bq-job"] == b"urn:babel:orders:created"
    assert delivery.delivery_count is None
    assert delivery.attempts(0) == 0
    kafka.ack(delivery)


def test_kafka_fake_body_without_envelope_gets_no_headers_and_no_key(
    kafka: KafkaTransport, cluster: FakeKafkaCluster, unique_queue: str
) -> None:
    kafka.publish(unique_queue, b"\xff not json")
    [record] = cluster.records(unique_queue)
    assert (record.value, record.headers, record.key) == (b"\xff not json", [], None)


def test_kafka_fake_bq_attempts_header_is_authoritative(
    kafka: KafkaTransport, cluster: FakeKafkaCluster, unique_queue: str
) -> None:
    body = make("urn:babel:orders:created", {"n": 1}).with_attempts(5).encode()
    producer = cluster.module().Producer({"bootstrap.servers": "x"})
    producer.produce(unique_queue, value=body, headers=[("bq-attempts", b"2")])
    producer.produce(unique_queue, value=body)  # a foreign producer without the header
    producer.flush()
    lower, bare = kafka.reserve(unique_queue, max_messages=2, timeout=2)
    assert lower.attempts(5) == 2  # the header wins, even when lower
    assert bare.attempts(5) == 5
    kafka.ack_many([lower, bare])


def test_kafka_fake_commit_never_passes_an_unsettled_record(
    kafka: KafkaTransport, cluster: FakeKafkaCluster, unique_queue: str
) -> None:
    kafka.publish_many(unique_queue, [Outgoing(_body("c", i)) for i in range(3)])
    first, second, third = kafka.reserve(unique_queue, max_messages=3, timeout=2)
    assert cluster.committed_offset("babelqueue", unique_queue) is None  # nothing settled, nothing committed
    kafka.ack(second)
    assert cluster.committed_offset("babelqueue", unique_queue) is None  # first is still in flight
    kafka.ack(first)
    assert cluster.committed_offset("babelqueue", unique_queue) == 2  # both, in one position
    kafka.ack(third)
    assert cluster.committed_offset("babelqueue", unique_queue) == 3
    kafka.ack(third)  # settling twice is a logged no-op
    assert [c[3] for c in cluster.commits if c[1] == unique_queue] == [2, 3]


def test_kafka_fake_a_crash_before_settling_redelivers(
    make_kafka: Callable[..., KafkaTransport], cluster: FakeKafkaCluster, unique_queue: str
) -> None:
    crashed = make_kafka()
    crashed.publish_many(unique_queue, [Outgoing(_body("crash", i)) for i in range(3)])
    first, second, _third = crashed.reserve(unique_queue, max_messages=3, timeout=2)
    crashed.ack(second)  # settled, but behind the unsettled first: not committable yet
    cluster.expire(crashed._consumers[unique_queue])  # killed: no close, no commit, session timeout
    assert cluster.committed_offset("babelqueue", unique_queue) is None

    restarted = make_kafka()
    got = restarted.reserve(unique_queue, max_messages=5, timeout=2)
    # at least once: everything after the last commit again, the acked second included
    assert [d.body for d in got] == [_body("crash", i) for i in range(3)]
    restarted.ack_many(got)
    assert cluster.committed_offset("babelqueue", unique_queue) == 3
    crashed.ack(first)  # the dead worker's late ack changes nothing
    assert cluster.committed_offset("babelqueue", unique_queue) == 3


def test_kafka_fake_close_commits_what_was_settled(
    make_kafka: Callable[..., KafkaTransport], cluster: FakeKafkaCluster, unique_queue: str
) -> None:
    worker = make_kafka()
    worker.publish_many(unique_queue, [Outgoing(_body("close", i)) for i in range(2)])
    first, _second = worker.reserve(unique_queue, max_messages=2, timeout=2)
    worker.ack(first)
    worker.close()
    assert cluster.committed_offset("babelqueue", unique_queue) == 1
    [left] = make_kafka().reserve(unique_queue, timeout=2)
    assert left.body == _body("close", 1)


def test_kafka_fake_retry_parks_on_a_tier_topic_then_comes_back(
    kafka: KafkaTransport, cluster: FakeKafkaCluster, unique_queue: str
) -> None:
    envelope = make("urn:babel:orders:created", {"n": 1}, queue=unique_queue, sharding_key="k1")
    kafka.publish(unique_queue, envelope.encode(), envelope=envelope)
    [delivery] = kafka.reserve(unique_queue, timeout=2)
    retried = envelope.with_attempts(1).encode()
    parked_at = int(time.time() * 1000)
    kafka.retry(delivery, retried, delay_ms=400)

    assert cluster.committed_offset("babelqueue", unique_queue) == 1  # settled only after the copy is stored
    [parked] = cluster.records(f"{unique_queue}.retry.1")  # the smallest tier covering 400 ms (500)
    assert parked.value == retried
    assert parked.key == b"k1"
    assert parked.headers == [
        *binding.headers(make_doc(retried)),
        ("bq-delay", b"400"),
        ("bq-original-topic", unique_queue.encode()),
    ]
    assert parked.timestamp >= parked_at  # measured from the parking, see docs
    started = time.monotonic()
    assert kafka.reserve(unique_queue, timeout=0.2) == []
    [back] = kafka.reserve(unique_queue, timeout=3)
    assert time.monotonic() - started >= 0.3
    assert back.body == retried
    assert back.attempts(0) == 1
    assert "bq-delay" not in back.headers and "bq-original-topic" not in back.headers
    assert cluster.records(unique_queue)[-1].key == b"k1"
    assert cluster.committed_offset("babelqueue-retry-reinject", f"{unique_queue}.retry.1") == 1
    kafka.ack(back)


def make_doc(body: bytes) -> dict[str, object]:
    import json

    doc: dict[str, object] = json.loads(body)
    return doc


@pytest.mark.parametrize(("delay_ms", "tier"), [(1, 1), (500, 1), (501, 2), (60_000, 3), (300_000, 4)])
def test_kafka_fake_a_delay_takes_the_smallest_covering_tier(
    kafka: KafkaTransport, cluster: FakeKafkaCluster, unique_queue: str, delay_ms: int, tier: int
) -> None:
    kafka.publish(unique_queue, _body("tier"), delay_ms=delay_ms)
    [record] = cluster.records(f"{unique_queue}.retry.{tier}")
    assert ("bq-delay", str(delay_ms).encode()) in record.headers
    assert kafka.size(unique_queue) == 1
    assert kafka.ready(unique_queue) == 0


def test_kafka_fake_a_delay_beyond_the_largest_tier_is_refused(
    kafka: KafkaTransport, cluster: FakeKafkaCluster, unique_queue: str
) -> None:
    with pytest.raises(ConfigurationError, match=r"retry_tiers: a delay of 300001 ms exceeds") as caught:
        kafka.publish(unique_queue, _body("late"), delay_ms=300_001)
    assert "\n" not in str(caught.value)
    kafka.publish(unique_queue, _body("now"))
    [delivery] = kafka.reserve(unique_queue, timeout=2)
    with pytest.raises(ConfigurationError, match="retry_tiers"):
        kafka.retry(delivery, _body("now", 1), delay_ms=10**9)
    assert cluster.committed_offset("babelqueue", unique_queue) is None  # nothing settled
    assert kafka.renew_many([delivery]) == 1  # still held
    no_tiers = KafkaTransport.from_url(URL + "?retry_tiers=none", client_module=cluster.module())
    with pytest.raises(ConfigurationError, match="none are configured"):
        no_tiers.publish(unique_queue, _body("x"), delay_ms=10)
    no_tiers.close()


def test_kafka_fake_tier_policy_attempts_picks_the_tier_by_attempts(
    make_kafka: Callable[..., KafkaTransport], cluster: FakeKafkaCluster, unique_queue: str
) -> None:
    kafka = make_kafka(retry_tiers="500,2000", tier_policy="attempts")
    envelope = make("urn:babel:orders:created", {"n": 1}, queue=unique_queue)
    for attempts, tier in ((0, 1), (1, 2), (5, 2)):  # stays on the last tier once they run out
        kafka.publish(unique_queue, envelope.with_attempts(attempts).encode())
        [delivery] = kafka.reserve(unique_queue, timeout=2)
        kafka.retry(delivery, envelope.with_attempts(attempts + 1).encode(), delay_ms=0)  # delay ignored
        parked = cluster.records(f"{unique_queue}.retry.{tier}")[-1]
        names = dict(parked.headers)
        assert names["bq-attempts"] == str(attempts + 1).encode()
        assert names["bq-delay"] == str((500, 2000)[tier - 1]).encode()


def test_kafka_fake_dead_letter_goes_to_the_dlq_topic_with_the_key(
    kafka: KafkaTransport, cluster: FakeKafkaCluster, unique_queue: str
) -> None:
    envelope = make("urn:babel:orders:created", {"n": 1}, queue=unique_queue, sharding_key="k9")
    kafka.publish(unique_queue, envelope.encode(), envelope=envelope)
    [delivery] = kafka.reserve(unique_queue, timeout=2)
    dead = envelope.document()
    dead["dead_letter"] = {"reason": "failed"}
    body = make_body(dead)
    kafka.dead_letter(delivery, body, dlq=f"{unique_queue}.dlq")
    [record] = cluster.records(f"{unique_queue}.dlq")
    assert (record.value, record.key) == (body, b"k9")
    assert record.headers == binding.headers(dead)
    assert record.timestamp == envelope.created_at
    assert cluster.committed_offset("babelqueue", unique_queue) == 1


def make_body(doc: dict[str, object]) -> bytes:
    import json

    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()


def test_kafka_fake_an_unconfirmed_settle_write_commits_nothing(
    kafka: KafkaTransport, cluster: FakeKafkaCluster, unique_queue: str
) -> None:
    kafka.publish(unique_queue, _body("dlq"))
    [delivery] = kafka.reserve(unique_queue, timeout=2)
    cluster.fail_deliveries(f"{unique_queue}.dlq")
    with pytest.raises(KafkaDeliveryError, match="failed") as caught:
        kafka.dead_letter(delivery, _body("dlq", 1), dlq=f"{unique_queue}.dlq")
    assert isinstance(caught.value, UnavailableError)  # the runtime puts the message back
    assert cluster.committed_offset("babelqueue", unique_queue) is None
    assert kafka.renew_many([delivery]) == 1
    cluster.withhold_reports()
    with pytest.raises(KafkaDeliveryError, match="not confirmed within"):
        kafka.release(delivery)
    cluster.withhold_reports(False)
    assert cluster.committed_offset("babelqueue", unique_queue) is None
    kafka.dead_letter(delivery, _body("dlq", 1), dlq=f"{unique_queue}.dlq")
    assert cluster.committed_offset("babelqueue", unique_queue) == 1


def test_kafka_fake_release_re_produces_the_same_record(
    kafka: KafkaTransport, cluster: FakeKafkaCluster, unique_queue: str
) -> None:
    envelope = make("urn:babel:orders:created", {"n": 1}, queue=unique_queue, sharding_key="k2")
    kafka.publish(unique_queue, envelope.encode(), envelope=envelope)
    [delivery] = kafka.reserve(unique_queue, timeout=2)
    kafka.release(delivery)
    original, copy = cluster.records(unique_queue)
    assert (copy.value, copy.key, copy.headers, copy.timestamp) == (
        original.value,
        original.key,
        original.headers,
        original.timestamp,
    )
    assert cluster.committed_offset("babelqueue", unique_queue) == 1


def test_kafka_fake_partitions_are_shared_out_and_keys_keep_their_order(
    make_kafka: Callable[..., KafkaTransport], cluster: FakeKafkaCluster, unique_queue: str
) -> None:
    cluster.create_topic(unique_queue, partitions=2)
    a, b = make_kafka(), make_kafka()
    assert a.reserve(unique_queue) == [] and b.reserve(unique_queue) == []  # both joined
    bodies = [
        make("urn:babel:orders:created", {"n": n}, sharding_key=f"k{n % 8}").encode() for n in range(40)
    ]
    a.publish_many(unique_queue, [Outgoing(body) for body in bodies])
    got_a = a.reserve(unique_queue, max_messages=40, timeout=1)
    got_b = b.reserve(unique_queue, max_messages=40, timeout=1)
    assert got_a and got_b  # one partition each
    assert sorted(d.body for d in got_a + got_b) == sorted(bodies)
    for got in (got_a, got_b):
        for key in {d.receipt.key for d in got}:
            mine = [d.body for d in got if d.receipt.key == key]
            assert mine == [body for body in bodies if body in mine]  # per key: publish order
    a.ack_many(got_a)
    b.ack_many(got_b)
    assert a.size(unique_queue) == 0


def test_kafka_fake_a_revoked_partitions_deliveries_go_stale(
    make_kafka: Callable[..., KafkaTransport], cluster: FakeKafkaCluster, unique_queue: str
) -> None:
    cluster.create_topic(unique_queue, partitions=2)
    a = make_kafka()
    a.publish_many(unique_queue, [Outgoing(_body("r", i)) for i in range(4)])
    held = a.reserve(unique_queue, max_messages=4, timeout=1)
    assert len(held) == 4  # a holds both partitions
    b = make_kafka()
    assert b.reserve(unique_queue, timeout=0.3) == []  # p1 is not fetched before a gives it up
    a.reserve(unique_queue, timeout=0.1)  # a's poll serves the rebalance: one partition is revoked
    moved = [d for d in held if a.renew_many([d]) == 0]
    assert len(moved) == 2
    a.ack_many(held)  # the moved ones are stale: not committed by a
    again = b.reserve(unique_queue, max_messages=4, timeout=1)
    assert sorted(d.body for d in again) == sorted(d.body for d in moved)
    b.ack_many(again)
    assert a.size(unique_queue) == 0


# -- URL, options, errors, redaction ------------------------------------------------------------
def test_kafka_fake_url_options(cluster: FakeKafkaCluster) -> None:
    t = KafkaTransport.from_url(
        "kafka://b1:9092,b2,[::1]:9093?group=orders&retry_tiers=1000,5000&tier_policy=attempts"
        "&reinject=false&reinject_group=rg&delivery_timeout=5&client_id=app&auto_offset_reset=latest",
        client_module=cluster.module(),
    )
    assert t._client_config == {"bootstrap.servers": "b1:9092,b2:9092,[::1]:9093", "client.id": "app"}
    assert (t.group, t.retry_tiers, t.tier_policy, t.reinject, t.reinject_group) == (
        "orders",
        (1000, 5000),
        "attempts",
        False,
        "rg",
    )
    assert (t.delivery_timeout, t.auto_offset_reset) == (5.0, "latest")
    assert t.leased_reservations is False and t.tagged_reservations is False
    assert t.lease_seconds("q") is None
    assert t.holder_options(max_held=10, visibility_timeout=30, snapshot=True) == {}
    assert KafkaTransport.from_url("kafka://b1", client_module=cluster.module()).retry_tiers == (
        DEFAULT_RETRY_TIERS_MS
    )
    assert (
        KafkaTransport.from_url(URL, group="kw", client_module=cluster.module()).group == "kw"
    )  # keyword wins
    t.publish("q", _body("x"))
    [config] = [c[1]["config"] for c in cluster.calls if c[0] == "Producer"]
    assert config["client.id"] == "app"


@pytest.mark.parametrize(
    ("url", "option"),
    [
        ("kafka://b:9092?bogus=1", "bogus"),
        ("kafka://b:9092?retry_tiers=5000,abc", "retry_tiers"),
        ("kafka://b:9092?retry_tiers=30000,5000", "retry_tiers"),
        ("kafka://b:9092?retry_tiers=0", "retry_tiers"),
        ("kafka://b:9092?tier_policy=random", "tier_policy"),
        ("kafka://b:9092?reinject=maybe", "reinject"),
        ("kafka://b:9092?delivery_timeout=soon", "delivery_timeout"),
        ("kafka://b:9092?delivery_timeout=0", "delivery_timeout"),
        ("kafka://b:9092?group=", "group"),
        ("kafka://b:9092?auto_offset_reset=middle", "auto_offset_reset"),
        ("kafka://b:port", "url"),
        ("kafka://b:70000", "url"),
        ("kafka://", "url"),
        ("kafka://[::1", "url"),
    ],
)
def test_kafka_fake_bad_options_are_one_line_errors_naming_the_option(url: str, option: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        KafkaTransport.from_url(url)
    text = str(caught.value)
    assert text.startswith(f"{option}:")
    assert "\n" not in text


def test_kafka_fake_the_constructor_refuses_options_in_the_url() -> None:
    with pytest.raises(ConfigurationError, match=r"^url: the constructor takes kafka://hosts only"):
        KafkaTransport("kafka://b1:9092?group=ignored")
    assert KafkaTransport("kafka://b1:9092/").group == "babelqueue"


def test_kafka_fake_a_failed_re_injection_leaves_the_record_parked(
    make_kafka: Callable[..., KafkaTransport], cluster: FakeKafkaCluster, unique_queue: str
) -> None:
    kafka, other = make_kafka(retry_tiers=TIERS), make_kafka(retry_tiers=TIERS)
    kafka.publish(unique_queue, _body("parked"), delay_ms=100)
    time.sleep(0.15)
    cluster.fail_deliveries(unique_queue)  # the move to the work topic is not stored
    assert kafka.reserve(unique_queue) == []  # one re-inject step, which fails
    assert cluster.committed_offset("babelqueue-retry-reinject", f"{unique_queue}.retry.1") is None
    assert kafka.size(unique_queue) == 1  # still parked, not lost
    [back] = kafka.reserve(unique_queue, timeout=2)  # the next step moves it
    assert back.body == _body("parked")
    kafka.ack(back)
    assert other.reserve(unique_queue, timeout=0.3) == []  # moved once: the re-inject group shares
    assert len(cluster.records(unique_queue)) == 1


def test_kafka_fake_credentials_never_show(cluster: FakeKafkaCluster) -> None:
    url = "kafka://alice:s3cret@b1:9092?sasl_password=t0psecret&sasl_mechanism=SCRAM-SHA-512"
    t = KafkaTransport.from_url(url, client_module=cluster.module())
    assert t._client_config["sasl.username"] == "alice"
    assert t._client_config["sasl.password"] == "t0psecret"  # the query option wins over the user info
    assert t._client_config["sasl.mechanism"] == "SCRAM-SHA-512"
    assert t._client_config["security.protocol"] == "SASL_SSL"  # credentials never go out in the clear
    for shown in (repr(t), redact(url)):  # sasl_password is one of babelq.urls' secret parameters
        assert "s3cret" not in shown and "t0psecret" not in shown
        assert "alice" in shown
    with pytest.raises(ConfigurationError) as caught:
        KafkaTransport.from_url(url + "&bogus=1", client_module=cluster.module())
    assert "s3cret" not in str(caught.value) and "t0psecret" not in str(caught.value)
    with pytest.raises(ConfigurationError) as caught:
        KafkaTransport.from_url(url, client_module=cluster.module()).publish("q", b"x", delay_ms=10**10)
    assert "s3cret" not in str(caught.value) and "t0psecret" not in str(caught.value)


def test_kafka_fake_client_errors_are_one_line_and_redacted(cluster: FakeKafkaCluster) -> None:
    module = cluster.module()

    class Refusing:
        def __init__(self, config: dict[str, object]) -> None:
            raise module.KafkaException(
                module.KafkaError(
                    -186, "Invalid value for sasl.password=hunter2\nat kafka://u:hunter2@b1:9092"
                )
            )

    module.Producer = Refusing
    t = KafkaTransport.from_url("kafka://u:hunter2@b1:9092", client_module=module)
    with pytest.raises(ConfigurationError) as caught:
        t.publish("q", b"x")
    text = str(caught.value)
    assert text.startswith("config: the Kafka client refused")
    assert "hunter2" not in text and "\n" not in text


def test_kafka_fake_open_transport_and_lazy_import(cluster: FakeKafkaCluster) -> None:
    t = open_transport("kafka://b1:9092?group=g", client_module=cluster.module())
    assert isinstance(t, KafkaTransport)
    t.close()
    t.close()
    with pytest.raises(ConfigurationError, match="after close"):
        t.publish("q", b"x")
    code = "import sys, babelq.transports, babelq.transports.kafka; print('confluent_kafka' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"  # the client library is imported only when a transport uses it


def test_kafka_fake_runtime_retries_through_tiers_then_dead_letters(
    make_kafka: Callable[..., KafkaTransport], cluster: FakeKafkaCluster, unique_queue: str
) -> None:
    """The worker runtime over Kafka: a failing handler's message goes round the tier topics, then
    to ``<queue>.dlq``; poison goes straight there with its bytes; every work offset is committed."""
    from babelq.runtime import App, Backoff, Message

    kafka = make_kafka(retry_tiers="200,1000")
    envelope = make("urn:babel:orders:created", {"n": 1}, queue=unique_queue, sharding_key="c-1")
    kafka.publish(unique_queue, envelope.encode(), envelope=envelope)
    kafka.publish(unique_queue, b"\xffnot json")
    app = App(
        kafka, queue=unique_queue, max_attempts=3, backoff=Backoff(base_ms=100, cap_ms=150, jitter=False)
    )
    runs: list[int] = []

    @app.handler("urn:babel:orders:created")
    def failing(message: Message) -> None:
        runs.append(message.attempts)
        raise RuntimeError("boom")

    app.drain(timeout=15, wait_delayed=True)

    assert runs == [0, 1, 2]  # attempts from bq-attempts on each round
    parked = cluster.records(f"{unique_queue}.retry.1")
    assert [dict(r.headers)["bq-attempts"] for r in parked] == [b"1", b"2"]
    assert all(r.key == b"c-1" for r in parked)
    dead = {json.loads(r.value)["dead_letter"]["reason"]: r for r in cluster.records(f"{unique_queue}.dlq")}
    assert set(dead) == {"failed", "poison"}
    assert dead["failed"].key == b"c-1"
    poison = json.loads(dead["poison"].value)
    assert (poison["raw"], poison["raw_encoding"]) == (base64.b64encode(b"\xffnot json").decode(), "base64")
    assert json.loads(dead["failed"].value)["dead_letter"]["original_queue"] == unique_queue
    assert cluster.end_offset(unique_queue) == cluster.committed_offset("babelqueue", unique_queue) == 4
    assert kafka.size(unique_queue) == 0


# -- the real client library, no broker --------------------------------------------------------------
def test_kafka_real_client_takes_the_settings_and_reports_an_unreachable_broker() -> None:
    """Not fake-backed: the installed confluent-kafka against a closed port. It proves the
    librdkafka properties the transport sets are accepted (cooperative-sticky, the rebalance
    callbacks, SASL over TLS) and that an unconfirmed write is a one-line error. No broker."""
    pytest.importorskip("confluent_kafka")
    t = KafkaTransport.from_url(
        "kafka://alice:hunter2@127.0.0.1:1?delivery_timeout=1",
        config={"socket.connection.setup.timeout.ms": 1000},
    )
    try:
        with pytest.raises(KafkaDeliveryError) as caught:
            t.publish("q", make("urn:babel:orders:created", {"n": 1}).encode())
        text = str(caught.value)
        assert text.startswith("kafka: the write to 'q' was not confirmed within 1.0s")
        assert "hunter2" not in text and "\n" not in text
        assert t.reserve("q", timeout=0.2) == []  # joined nothing, raised nothing
    finally:
        t.close()
    with pytest.raises(ConfigurationError) as refused:
        KafkaTransport.from_url(
            "kafka://alice:hunter2@127.0.0.1:1", config={"no.such.property": "x"}
        ).publish("q", b"x")
    assert str(refused.value).startswith("config: the Kafka client refused its settings")
    assert "no.such.property" in str(refused.value) and "hunter2" not in str(refused.value)
