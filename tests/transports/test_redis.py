"""Redis-specific behaviour beyond the contract, checked against the raw keys (live Redis)."""

from __future__ import annotations

import pickle
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from babelq.bindings.redis import keys_for, split_member
from babelq.errors import ConfigurationError
from babelq.transports import Delivery, Outgoing, open_transport
from babelq.transports.redis import RedisTransport
from conftest import require_service

pytestmark = pytest.mark.live


@pytest.fixture
def url() -> str:
    host, port = require_service("redis")
    return f"redis://{host}:{port}/15"


@pytest.fixture
def raw(url: str) -> Iterator[Any]:
    import redis

    client = redis.Redis.from_url(url)
    yield client
    client.close()


@pytest.fixture
def transport(url: str, unique_queue: str, raw: Any) -> Iterator[RedisTransport]:
    t = RedisTransport(url, visibility_timeout=1, poll_interval=0.1)
    yield t
    t.purge(unique_queue)
    t.close()
    # whatever a failing test left under a name built from the unique one (X:processing, ...)
    leftovers = list(raw.scan_iter(match=f"*{unique_queue}*"))
    if leftovers:
        raw.delete(*leftovers)


def test_url_options_are_ours_and_the_rest_goes_to_redis_py(url: str, unique_queue: str, raw: Any) -> None:
    t = open_transport(f"{url}?prefix=bqtest:&visibility_timeout=7&poll_interval=0.2&socket_timeout=5")
    try:
        assert isinstance(t, RedisTransport)
        assert (t.prefix, t.visibility_timeout, t.poll_interval) == ("bqtest:", 7.0, 0.2)
        t.publish(unique_queue, b"x")
        assert raw.lrange(f"bqtest:{unique_queue}", 0, -1) == [b"x"]
        assert raw.exists(unique_queue) == 0
    finally:
        t.purge(unique_queue)
        t.close()


def test_bad_option_values_are_configuration_errors(url: str) -> None:
    with pytest.raises(ConfigurationError):
        RedisTransport.from_url(f"{url}?visibility_timeout=soon")
    with pytest.raises(ConfigurationError):
        RedisTransport(url, visibility_timeout=0)


def test_publish_is_a_bare_rpush_of_the_body(transport: RedisTransport, unique_queue: str, raw: Any) -> None:
    bodies = [b'{"job":"urn:babel:t:a","n":"Zo\xc3\xab"}', b"second"]
    transport.publish(unique_queue, bodies[0])
    transport.publish_many(unique_queue, [Outgoing(bodies[1])])
    assert raw.lrange(unique_queue, 0, -1) == bodies


def test_a_foreign_producer_rpush_is_consumed(transport: RedisTransport, unique_queue: str, raw: Any) -> None:
    raw.rpush(unique_queue, b"from-php", b"from-go")
    got = transport.reserve(unique_queue, max_messages=5)
    assert [d.body for d in got] == [b"from-php", b"from-go"]
    transport.ack_many(got)


def test_reserved_body_sits_in_processing_with_a_deadline(
    transport: RedisTransport, unique_queue: str, raw: Any
) -> None:
    keys = keys_for(unique_queue)
    transport.publish(unique_queue, b"held")
    before = time.time()
    [delivery] = transport.reserve(unique_queue)
    assert raw.llen(keys.ready) == 0
    assert raw.lrange(keys.processing, 0, -1) == [b"held"]
    [(member, deadline)] = raw.zrange(keys.deadlines, 0, -1, withscores=True)
    token, body = split_member(member)
    assert body == b"held" and all(c in "0123456789abcdef" for c in token)
    assert before + 0.5 < deadline < time.time() + 1.5  # epoch seconds, visibility_timeout=1
    transport.ack(delivery)
    assert raw.exists(keys.processing, keys.deadlines) == 0


def test_lapsed_reservation_returns_to_the_head(
    transport: RedisTransport, unique_queue: str, raw: Any
) -> None:
    transport.publish(unique_queue, b"first")
    [held] = transport.reserve(unique_queue)
    transport.publish(unique_queue, b"second")
    time.sleep(1.1)
    got = transport.reserve(unique_queue, max_messages=2)
    assert [d.body for d in got] == [b"first", b"second"]
    assert [d.delivery_count for d in got] == [2, 1]
    transport.ack(held)  # late: changes nothing
    assert raw.llen(keys_for(unique_queue).processing) == 2
    transport.ack_many(got)
    assert raw.llen(keys_for(unique_queue).processing) == 0


def test_delayed_body_waits_in_the_delayed_set_with_delays_own(url: str, unique_queue: str, raw: Any) -> None:
    keys = keys_for(unique_queue)
    with RedisTransport(url, visibility_timeout=1, poll_interval=0.1, delays="own") as transport:
        transport.publish(unique_queue, b"later", delay_ms=300)
        assert raw.llen(keys.ready) == 0
        [(member, _)] = raw.zrange(keys.delayed, 0, -1, withscores=True)
        assert split_member(member)[1] == b"later"
        [delivery] = transport.reserve(unique_queue, timeout=2)
        assert delivery.body == b"later"
        assert raw.zcard(keys.delayed) == 0
        transport.ack(delivery)


def test_delayed_body_is_parked_as_a_reservation_by_default(url: str, unique_queue: str, raw: Any) -> None:
    """The default (``delays=lease``): a reservation due at its time, which the babelqueue SDK's
    sweep also brings back; counted as waiting (``size``), not as in flight (``reserved``)."""
    keys = keys_for(unique_queue)
    with RedisTransport(url, visibility_timeout=30, poll_interval=0.1) as transport:
        assert transport.delays == "lease"
        transport.publish(unique_queue, b"held")
        [held] = transport.reserve(unique_queue, timeout=2)  # a real reservation beside the parked body
        transport.publish(unique_queue, b"later", delay_ms=300)
        assert raw.llen(keys.ready) == 0 and raw.zcard(keys.delayed) == 0
        parked = [m for m in raw.zrange(keys.deadlines, 0, -1) if split_member(m)[1] == b"later"]
        assert len(parked) == 1 and split_member(parked[0])[0].startswith("delayed-")
        assert raw.lrange(keys.processing, 0, -1).count(b"later") == 1
        assert (transport.size(unique_queue), transport.reserved(unique_queue)) == (1, 1)
        [delivery] = transport.reserve(unique_queue, timeout=3)
        assert delivery.body == b"later"
        transport.ack(delivery)
        transport.ack(held)
        assert (transport.size(unique_queue), transport.reserved(unique_queue)) == (0, 0)


def test_acking_twice_in_one_batch_removes_one_copy(
    transport: RedisTransport, unique_queue: str, raw: Any
) -> None:
    transport.publish_many(unique_queue, [Outgoing(b"twin"), Outgoing(b"twin")])
    first, second = transport.reserve(unique_queue, max_messages=2)
    assert (first.delivery_count, second.delivery_count) == (1, 2)  # counted per body digest
    transport.ack_many([first, first])
    assert raw.lrange(keys_for(unique_queue).processing, 0, -1) == [b"twin"]
    transport.ack(second)


def test_identical_bodies_in_one_batch_count_each_hand_out_on_top_of_earlier_ones(
    transport: RedisTransport, unique_queue: str
) -> None:
    transport.publish(unique_queue, b"twin")
    [first] = transport.reserve(unique_queue)
    transport.release(first)  # the count is kept: the next hand-out of the body is its second
    transport.publish_many(unique_queue, [Outgoing(b"other"), Outgoing(b"twin"), Outgoing(b"twin")])
    got = transport.reserve(unique_queue, max_messages=4)
    assert [(d.body, d.delivery_count) for d in got] == [
        (b"twin", 2), (b"other", 1), (b"twin", 3), (b"twin", 4)
    ]
    transport.ack_many(got)


def test_delivery_counts_are_a_hash_table_while_in_flight_and_go_with_the_last_ack(
    transport: RedisTransport, unique_queue: str, raw: Any
) -> None:
    # A batch of counts written into a listpack costs a scan of the hash per field (Redis keeps
    # hashes of up to 512 short fields so by default): the reserve keeps one long marker field
    # so the hash is a hash table, and the last settle deletes the hash with its marker.
    keys = keys_for(unique_queue)
    transport.publish_many(unique_queue, [Outgoing(b"m%d" % i) for i in range(20)])
    got = transport.reserve(unique_queue, max_messages=20)
    assert raw.object("encoding", keys.deliveries) == b"hashtable"
    assert raw.hlen(keys.deliveries) == 21  # a count per body and the marker
    transport.ack_many(got[:10])
    transport.retry(got[10], b"again", delay_ms=0)  # a retry forgets its count too
    assert raw.hlen(keys.deliveries) == 10
    transport.ack_many(got[11:])
    assert raw.exists(keys.deliveries) == 0
    [again] = transport.reserve(unique_queue)
    assert (again.body, again.delivery_count) == (b"again", 1)
    transport.release(again)  # a release keeps the count, so the hash stays
    assert raw.hlen(keys.deliveries) == 2
    [third] = transport.reserve(unique_queue)
    assert third.delivery_count == 2
    transport.ack(third)
    assert raw.exists(keys.deliveries) == 0


def test_waiting_does_not_reorder_the_list(transport: RedisTransport, unique_queue: str, url: str) -> None:
    # A waiting reserve blocks on the list itself; being woken must not change the order.
    woken: list[bytes] = []
    waiter = threading.Thread(
        target=lambda: woken.extend(d.body for d in transport.reserve(unique_queue, timeout=3))
    )
    other = RedisTransport(url)
    try:
        waiter.start()
        time.sleep(0.2)
        other.publish_many(unique_queue, [Outgoing(b"%d" % i) for i in range(5)])
        waiter.join(timeout=5)
        assert woken == [b"0"]
        rest = transport.reserve(unique_queue, max_messages=5)
        assert [d.body for d in rest] == [b"1", b"2", b"3", b"4"]
    finally:
        waiter.join()
        other.close()


def test_pickled_transport_reconnects(transport: RedisTransport, unique_queue: str) -> None:
    copy = pickle.loads(pickle.dumps(transport))
    try:
        copy.publish(unique_queue, b"x")
        assert transport.size(unique_queue) == 1
        assert copy.visibility_timeout == transport.visibility_timeout
    finally:
        copy.close()


def test_a_pickled_copy_keeps_every_option(url: str) -> None:
    """The shared options and the default layout's own (``delays``) all survive the trip."""
    t = RedisTransport(
        url, prefix="bqtest:", visibility_timeout=7, poll_interval=0.2, sweep_limit=50, delays="own"
    )
    copy = pickle.loads(pickle.dumps(t))
    try:
        assert type(copy) is RedisTransport
        assert (copy.url, copy.prefix, copy.visibility_timeout) == (url, "bqtest:", 7.0)
        assert (copy.poll_interval, copy.sweep_limit, copy.delays) == (0.2, 50, "own")
    finally:
        t.close()
        copy.close()


def test_babelqueue_sdk_and_babelq_recover_each_others_reservations(
    url: str, unique_queue: str, transport: RedisTransport
) -> None:
    from babelqueue.redis_transport import RedisTransport as BabelqueueRedis

    theirs = BabelqueueRedis(url, retry_after=1)
    body = '{"job":"urn:babel:orders:created","data":{"name":"Zoë"}}'
    try:
        theirs.publish(unique_queue, body)
        assert theirs.pop(unique_queue, timeout=1) is not None  # their worker "crashes"
        [ours] = transport.reserve(unique_queue, timeout=3)
        assert ours.body == body.encode()
        held = transport.reserve(unique_queue, timeout=0)
        assert held == []
        time.sleep(1.1)  # our reservation lapses: their sweep puts it back
        message = theirs.pop(unique_queue, timeout=2)
        assert message is not None and message.body == body
        theirs.ack(message)
        transport.ack(ours)  # late: nothing left to touch
        assert transport.size(unique_queue) == 0
    finally:
        theirs.close()


def test_large_batches_are_split_under_the_script_limits(url: str, unique_queue: str) -> None:
    # a long lease: the fixture's one-second one lapsed on a loaded CI machine (load 11) before the
    # nine reserves were done, and the sweep handed the first claims out again
    transport = RedisTransport(url, visibility_timeout=120, poll_interval=0.1)
    try:
        _take_all_in_batches(transport, unique_queue)
    finally:
        transport.purge(unique_queue)
        transport.close()


def _take_all_in_batches(transport: RedisTransport, unique_queue: str) -> None:
    total = 9000
    transport.publish_many(
        unique_queue, [Outgoing(b"%d" % i, delay_ms=1 if i % 2 else 0) for i in range(total)]
    )
    time.sleep(0.05)
    got: list[Delivery] = []
    while len(got) < total:
        batch = transport.reserve(unique_queue, max_messages=total, timeout=1)
        assert 0 < len(batch) <= 1000
        got += batch
    assert sorted(d.body for d in got) == sorted(b"%d" % i for i in range(total))
    transport.ack_many(got)
    assert transport.size(unique_queue) == 0


# -- queue names that would reach another queue's keys (issue 10) -------------------------


def test_a_consumer_of_x_processing_cannot_take_xs_in_flight_bodies(
    transport: RedisTransport, unique_queue: str, raw: Any
) -> None:
    transport.publish(unique_queue, b"in flight")
    [held] = transport.reserve(unique_queue)
    with pytest.raises(ConfigurationError, match="':processing'"):
        transport.reserve(f"{unique_queue}:processing", max_messages=10)
    assert raw.lrange(keys_for(unique_queue).processing, 0, -1) == [b"in flight"]
    transport.ack(held)
    assert raw.llen(keys_for(unique_queue).processing) == 0


def test_publishing_to_x_delayed_is_refused_and_x_keeps_working(
    transport: RedisTransport, unique_queue: str, raw: Any
) -> None:
    with pytest.raises(ConfigurationError, match="':delayed'"):
        transport.publish(f"{unique_queue}:delayed", b"stray")
    with pytest.raises(ConfigurationError, match="':delayed'"):
        transport.publish_many(f"{unique_queue}:delayed", [Outgoing(b"stray")])
    assert raw.exists(keys_for(unique_queue).delayed) == 0
    transport.publish(unique_queue, b"fine")
    [delivery] = transport.reserve(unique_queue)
    assert delivery.body == b"fine"
    transport.ack(delivery)


def test_every_entry_point_taking_a_queue_name_applies_the_rule(
    transport: RedisTransport, unique_queue: str
) -> None:
    bad = f"{unique_queue}:processing"
    calls: list[Callable[[], object]] = [
        lambda: transport.publish(bad, b"x"),
        lambda: transport.publish(bad, b"x", delay_ms=10),
        lambda: transport.publish_many(bad, [Outgoing(b"x")]),
        lambda: transport.reserve(bad),
        lambda: transport.size(bad),
        lambda: transport.reserved(bad),
        lambda: transport.purge(bad),
        lambda: transport.lease_seconds(bad),
        lambda: transport.keys(bad),
    ]
    for call in calls:
        with pytest.raises(ConfigurationError, match=repr(bad)):
            call()
    # the dead-letter target is a queue name too: the reservation stays held, nothing is written
    transport.publish(unique_queue, b"m")
    [delivery] = transport.reserve(unique_queue)
    with pytest.raises(ConfigurationError, match=repr(f"{bad}.dlq")):
        transport.dead_letter(delivery, b"m", dlq=f"{bad}.dlq")
    assert transport.reserved(unique_queue) == 1
    transport.ack(delivery)


def test_reserved_suffixes_cover_every_key_either_sdk_writes(
    url: str, unique_queue: str, raw: Any, transport: RedisTransport
) -> None:
    """Drive both SDKs' layouts through every operation that creates a key, then list the keys."""
    from babelqueue.redis_transport import RedisTransport as BabelqueueRedis

    from babelq.bindings.redis import RESERVED_SUFFIXES

    body = '{"job":"urn:babel:orders:created","data":{},"attempts":0}'
    legacy, laravel = BabelqueueRedis(url, retry_after=60), BabelqueueRedis(url, laravel_compat=True)
    ours = "o" + unique_queue[1:]  # not a superstring of unique_queue: the scans stay apart
    try:
        for theirs in (legacy, laravel):
            theirs.publish(unique_queue, body)
            theirs.publish(unique_queue, body)
            assert theirs.pop(unique_queue, timeout=1) is not None
        laravel.publish_delayed(unique_queue, body, 60)
        transport.publish_many(ours, [Outgoing(b"a"), Outgoing(b"b"), Outgoing(b"c", delay_ms=60_000)])
        transport.reserve(ours)
        suffixes: set[str] = set()
        for name in (unique_queue, ours):
            for key in raw.scan_iter(match=f"*{name}*"):
                text = key.decode().removeprefix("queues:")
                assert text.startswith(name)
                suffixes.add(text[len(name):])
        assert suffixes - {""} <= set(RESERVED_SUFFIXES)
        seen = {":processing", ":processing:deadlines", ":delayed", ":deliveries", ":reserved", ":notify"}
        assert seen <= suffixes
    finally:
        legacy.close()
        laravel.close()
        transport.purge(ours)
        leftovers = list(raw.scan_iter(match=f"*{unique_queue}*"))
        if leftovers:
            raw.delete(*leftovers)


def test_a_queue_key_used_by_another_application_is_a_configuration_error(
    transport: RedisTransport, unique_queue: str, raw: Any
) -> None:
    raw.set(unique_queue, b"someone else's string")
    with pytest.raises(ConfigurationError, match="another type") as caught:
        transport.publish(unique_queue, b"x")
    assert "\n" not in str(caught.value)
    with pytest.raises(ConfigurationError, match="another type"):
        transport.reserve(unique_queue)
    raw.delete(unique_queue)


# -- tagged reservations (the Spark data source's executor reads) ------------------------------------


def test_a_tags_record_names_its_members_and_goes_when_settled(
    transport: RedisTransport, unique_queue: str, raw: Any
) -> None:
    from babelq.bindings.redis import reads_key

    tag = "0123456789abcdef0123456789abcdef"
    transport.publish_many(unique_queue, [Outgoing(b"a"), Outgoing(b"b")])
    held = transport.reserve_tagged(unique_queue, tag, max_messages=5)
    record = reads_key(unique_queue, tag)
    keys = keys_for(unique_queue)
    assert raw.lrange(record, 0, -1) == [b"taken", *(d.receipt.member for d in held)]
    assert 0 < raw.ttl(record) <= 600  # a dead run's records go away by themselves
    assert sorted(raw.zrange(keys.deadlines, 0, -1)) == sorted(d.receipt.member for d in held)
    assert [split_member(d.receipt.member)[1] for d in held] == [b"a", b"b"]
    assert transport.ack_tagged(unique_queue, [tag]) == 2
    assert raw.exists(record, keys.processing, keys.deadlines) == 0


def test_settling_thousands_of_tagged_reservations_out_of_claim_order_stays_fast(
    transport: RedisTransport, unique_queue: str, raw: Any
) -> None:
    """Parallel executor tasks claim in any order and the driver acks slot by slot: one LREM per
    body would walk the processing list past every other slot's bodies (quadratic: seconds of a
    blocked Redis at 20k, which then answers BUSY to everyone)."""
    n = 20_000
    tags = [f"{i:032x}" for i in range(4)]
    body = b'{"job":"urn:babel:test:x","data":{"padding":"' + b"p" * 700 + b'","n":%d}}'
    # The fixture's one-second lease lapses while a loaded machine claims 20k bodies, and the
    # other consumer's reserve would then reclaim them: this test is about settle cost, not lapse.
    long_lease = RedisTransport(transport.url, visibility_timeout=600)
    other = RedisTransport(transport.url, visibility_timeout=60)
    try:
        long_lease.publish_many(unique_queue, [Outgoing(body % i) for i in range(n)])
        for tag in tags:
            assert len(long_lease.reserve_tagged(unique_queue, tag, max_messages=n // 4)) == n // 4
        long_lease.publish(unique_queue, b"someone else's")
        [theirs] = other.reserve(unique_queue)
        started = time.monotonic()
        assert long_lease.release_tagged(unique_queue, tags[:1]) == n // 4
        assert long_lease.ack_tagged(unique_queue, tags[:0:-1]) == 3 * n // 4  # the last slot first
        assert time.monotonic() - started < 2.0
        keys = keys_for(unique_queue)
        assert raw.lrange(keys.processing, 0, -1) == [b"someone else's"]  # the other one is untouched
        assert raw.lrange(keys.ready, 0, 2) == [body % i for i in range(3)]  # released: at the head, in order
        other.ack(theirs)
    finally:
        other.close()
        long_lease.close()


def test_a_waiting_scan_reads_parked_delayed_bodies_and_never_reservations(
    url: str, unique_queue: str, raw: Any
) -> None:
    """Parked bodies share the deadline set with reservations: a scan reports only the parked
    ones, across pages, and a waiting move takes the body out of the processing list too."""
    keys = keys_for(unique_queue)
    with RedisTransport(url, visibility_timeout=30) as transport:
        transport.publish_many(unique_queue, [Outgoing(b"held %d" % i) for i in range(3)])
        held = transport.reserve(unique_queue, max_messages=3)
        assert len(held) == 3
        transport.publish_many(unique_queue, [Outgoing(b"parked %d" % i, delay_ms=60_000) for i in range(3)])
        seen: list[Delivery] = []
        cursor: Any = None
        while True:
            page, cursor = transport.scan_waiting(unique_queue, after=cursor, limit=2)
            seen += page
            if cursor is None:
                break
        assert sorted(d.body for d in seen) == [b"parked 0", b"parked 1", b"parked 2"]
        [first] = [d for d in seen if d.body == b"parked 1"]
        assert transport.dead_letter_waiting([(first, b"record")], dlq=f"{unique_queue}.dlq") == 1
        assert b"parked 1" not in raw.lrange(keys.processing, 0, -1)
        assert raw.lrange(f"{unique_queue}.dlq", 0, -1) == [b"record"]
        assert transport.size(unique_queue) == 2 and transport.reserved(unique_queue) == 3
        transport.ack_many(held)
        transport.purge(f"{unique_queue}.dlq")
