"""The behaviour every transport promises, written once and run against each one.

A transport's test module subclasses :class:`TransportContract` and provides one fixture,
``make_transport``: a factory ``make(*, visibility_timeout: float | None = None) -> Transport``
whose instances all talk to the same broker/store (a second instance is "another worker", or
"the worker restarted after a crash"), and which closes every instance it made at teardown.
``visibility_timeout=None`` means the class's :attr:`TransportContract.visibility_timeout`.

A transport that lacks a capability says so with a class attribute (``supports_delivery_count
= False``...). The tests that need it then check the honest fallback (``delivery_count is
None``) or skip with a reason that names the declaration, so nothing is skipped silently.

    class TestSQLiteContract(TransportContract):
        pass   # everything supported

Timing: the class's ``visibility_timeout`` (seconds) must be short (1 s) so expiry tests stay
fast; ``slack`` is extra time a broker may need to make a message visible again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from babelq.envelope import dlq_name, make
from babelq.errors import ConfigurationError
from babelq.transports import Delivery, Outgoing, Transport

FIXTURE = Path(__file__).resolve().parent.parent / "conformance" / "fixtures" / "order-created.json"

MakeTransport = Callable[..., Transport]


def _body(tag: str, i: int = 0) -> bytes:
    return f'{{"job":"urn:babel:test:{tag}","n":{i}}}'.encode()


class TransportContract:
    """Contract tests; subclass and provide the ``make_transport`` fixture."""

    #: reservation lease the factory configures by default (seconds)
    visibility_timeout: ClassVar[float] = 1.0
    #: extra seconds a broker may need before an expired/released message is visible again
    slack: ClassVar[float] = 1.5
    #: Delivery.delivery_count counts hand-outs (1, 2, ...); when False it must be None
    supports_delivery_count: ClassVar[bool] = True
    #: Delivery.stored_at is the store time in epoch ms; when False it must be None
    supports_stored_at: ClassVar[bool] = True
    #: publish(delay_ms=...) / release(delay_ms=...) / retry(delay_ms=...) are honoured
    supports_delay: ClassVar[bool] = True
    #: messages from one producer are reserved in publish order
    supports_fifo: ClassVar[bool] = True
    #: bodies need not be UTF-8 (a foreign producer's poison must survive byte for byte)
    supports_binary_bodies: ClassVar[bool] = True
    #: an empty body is a message like any other
    supports_empty_body: ClassVar[bool] = True
    #: reserve(max_messages=n) returns n when n are ready (not merely "up to n")
    exact_batches: ClassVar[bool] = True
    #: a late ack of an expired, re-reserved message leaves the newer reservation alone
    gated_settle: ClassVar[bool] = True
    #: reserve_tagged / renew_tagged / ack_tagged / release_tagged work (tagged_reservations)
    supports_tagged: ClassVar[bool] = True
    #: publish(headers=...) carries string headers beside the body to Delivery.carried_headers
    supports_headers: ClassVar[bool] = True

    # -- fixtures --------------------------------------------------------------------------

    @pytest.fixture
    def transport(self, make_transport: MakeTransport, unique_queue: str) -> Iterator[Transport]:
        t = make_transport()
        yield t
        try:
            t.purge(unique_queue)
            t.purge(dlq_name(unique_queue))
        except Exception:  # the test may have closed it on purpose
            cleaner = make_transport()
            cleaner.purge(unique_queue)
            cleaner.purge(dlq_name(unique_queue))

    # -- helpers ---------------------------------------------------------------------------

    def _need(self, capability: str) -> None:
        if not getattr(self, capability):
            pytest.skip(f"{type(self).__name__} declares {capability} = False")

    @staticmethod
    def _drain(t: Transport, queue: str, want: int, *, within: float, batch: int = 10) -> list[Delivery]:
        """Reserve until ``want`` deliveries are held or ``within`` seconds pass."""
        got: list[Delivery] = []
        end = time.monotonic() + within
        while len(got) < want:
            left = end - time.monotonic()
            if left <= 0:
                break
            got += t.reserve(queue, max_messages=min(batch, want - len(got)), timeout=min(left, 0.5))
        return got

    def _assert_size(self, t: Transport, queue: str, expected: int) -> None:
        """``size`` reaches ``expected`` within ``slack`` seconds (brokers count asynchronously)."""
        end = time.monotonic() + self.slack
        while (actual := t.size(queue)) != expected and time.monotonic() < end:
            time.sleep(0.05)
        assert actual == expected, f"size({queue!r}) is {actual}, expected {expected}"

    def _expiry_wait(self) -> float:
        return self.visibility_timeout + self.slack

    def _assert_ready(self, t: Transport, queue: str, expected: int) -> None:
        """``ready`` reaches ``expected`` within ``slack`` seconds (brokers count asynchronously)."""
        end = time.monotonic() + self.slack
        while (actual := t.ready(queue)) != expected and time.monotonic() < end:
            time.sleep(0.05)
        assert actual == expected, f"ready({queue!r}) is {actual}, expected {expected}"

    # -- basics ----------------------------------------------------------------------------

    def test_publish_reserve_ack(self, transport: Transport, unique_queue: str) -> None:
        body = _body("basic")
        transport.publish(unique_queue, body)
        [delivery] = self._drain(transport, unique_queue, 1, within=3)
        assert delivery.body == body
        assert delivery.queue == unique_queue
        transport.ack(delivery)
        self._assert_size(transport, unique_queue, 0)
        assert transport.reserve(unique_queue, max_messages=5) == []

    def test_reserve_on_empty_queue_returns_nothing(self, transport: Transport, unique_queue: str) -> None:
        assert transport.reserve(unique_queue) == []
        self._assert_size(transport, unique_queue, 0)

    def test_first_delivery_facts(self, transport: Transport, unique_queue: str) -> None:
        before = int(time.time() * 1000)
        transport.publish(unique_queue, _body("facts"))
        [delivery] = self._drain(transport, unique_queue, 1, within=3)
        after = int(time.time() * 1000)
        if self.supports_delivery_count:
            assert delivery.delivery_count == 1
        else:
            assert delivery.delivery_count is None
        if self.supports_stored_at:
            assert delivery.stored_at is not None
            assert before - 1000 <= delivery.stored_at <= after + 1000
        else:
            assert delivery.stored_at is None
        transport.ack(delivery)

    def test_close_is_idempotent(self, make_transport: MakeTransport) -> None:
        t = make_transport()
        t.close()
        t.close()

    # -- bytes -----------------------------------------------------------------------------

    @pytest.mark.parametrize(
        "body",
        [
            '{"job":"urn:babel:t:x","data":{"name":"Zoë","city":"Zürich","yen":"¥","emoji":"🚀"}}'.encode(),
            b'{"data":{"path":"a/b","quote":"\\"","nl":"\\n","tab":"\\t"}}',
            b'  {\n  "pretty" : true\r\n}\n',
            "日本語のメッセージ".encode(),
        ],
        ids=["non-ascii", "escapes", "whitespace", "not-json"],
    )
    def test_body_is_byte_identical(self, transport: Transport, unique_queue: str, body: bytes) -> None:
        transport.publish(unique_queue, body)
        [delivery] = self._drain(transport, unique_queue, 1, within=3)
        assert type(delivery.body) is bytes
        assert delivery.body == body
        transport.ack(delivery)

    def test_conformance_fixture_round_trips_byte_for_byte(
        self, transport: Transport, unique_queue: str
    ) -> None:
        # docs/standard.md §4 / conformance redis.payload_identity: produce -> reserve gives the same bytes.
        raw = FIXTURE.read_bytes()
        assert b"\n" in raw  # the file is pretty-printed: whitespace must survive too
        transport.publish(unique_queue, raw)
        [delivery] = self._drain(transport, unique_queue, 1, within=3)
        assert delivery.body == raw
        transport.ack(delivery)

    def test_encoded_envelope_round_trips(self, transport: Transport, unique_queue: str) -> None:
        env = make("urn:babel:orders:created", {"order_id": 7, "note": "ça/va"}, queue=unique_queue)
        body = env.encode()
        transport.publish(unique_queue, body, envelope=env)
        [delivery] = self._drain(transport, unique_queue, 1, within=3)
        assert delivery.body == body
        transport.ack(delivery)

    def test_empty_body_survives(self, transport: Transport, unique_queue: str) -> None:
        self._need("supports_empty_body")
        transport.publish(unique_queue, b"")
        [delivery] = self._drain(transport, unique_queue, 1, within=3)
        assert delivery.body == b""
        transport.ack(delivery)

    def test_binary_body_survives(self, transport: Transport, unique_queue: str) -> None:
        self._need("supports_binary_bodies")
        body = b"\xff\xfe\x00not utf-8\x80{"
        transport.publish(unique_queue, body)
        [delivery] = self._drain(transport, unique_queue, 1, within=3)
        assert delivery.body == body
        transport.ack(delivery)

    # -- order and batches -----------------------------------------------------------------

    def test_fifo_for_one_producer(self, transport: Transport, unique_queue: str) -> None:
        self._need("supports_fifo")
        bodies = [_body("fifo", i) for i in range(20)]
        for body in bodies:
            transport.publish(unique_queue, body)
        got = self._drain(transport, unique_queue, 20, within=5, batch=3)
        assert [d.body for d in got] == bodies
        transport.ack_many(got)

    def test_reserve_respects_max_messages(self, transport: Transport, unique_queue: str) -> None:
        bodies = [_body("batch", i) for i in range(7)]
        transport.publish_many(unique_queue, [Outgoing(b) for b in bodies])
        first = transport.reserve(unique_queue, max_messages=5, timeout=2)
        assert 1 <= len(first) <= 5
        if self.exact_batches:
            assert len(first) == 5
        rest = self._drain(transport, unique_queue, 7 - len(first), within=5, batch=5)
        assert sorted(d.body for d in first + rest) == sorted(bodies)
        transport.ack_many(first + rest)
        assert transport.reserve(unique_queue, max_messages=5) == []

    def test_publish_many(self, transport: Transport, unique_queue: str) -> None:
        bodies = [_body("many", i) for i in range(50)]
        transport.publish_many(unique_queue, [Outgoing(b) for b in bodies])
        self._assert_size(transport, unique_queue, 50)
        got = self._drain(transport, unique_queue, 50, within=5)
        if self.supports_fifo:
            assert [d.body for d in got] == bodies
        else:
            assert sorted(d.body for d in got) == sorted(bodies)
        transport.ack_many(got)
        self._assert_size(transport, unique_queue, 0)

    def test_publish_many_empty_batch(self, transport: Transport, unique_queue: str) -> None:
        transport.publish_many(unique_queue, [])
        self._assert_size(transport, unique_queue, 0)

    def test_publish_many_with_delays(self, transport: Transport, unique_queue: str) -> None:
        self._need("supports_delay")
        transport.publish_many(unique_queue, [Outgoing(_body("now")), Outgoing(_body("later"), delay_ms=700)])
        self._assert_size(transport, unique_queue, 2)
        first = transport.reserve(unique_queue, max_messages=5, timeout=0.3)
        assert [d.body for d in first] == [_body("now")]
        later = self._drain(transport, unique_queue, 1, within=3)
        assert [d.body for d in later] == [_body("later")]
        transport.ack_many(first + later)

    # -- settling --------------------------------------------------------------------------

    def test_ack_many_removes_for_good(self, transport: Transport, unique_queue: str) -> None:
        transport.publish_many(unique_queue, [Outgoing(_body("ackmany", i)) for i in range(10)])
        got = self._drain(transport, unique_queue, 10, within=5)
        assert len(got) == 10
        transport.ack_many(got)
        transport.ack_many([])
        self._assert_size(transport, unique_queue, 0)
        # acked messages must not come back when the visibility timeout passes
        assert transport.reserve(unique_queue, max_messages=10, timeout=self._expiry_wait()) == []

    def test_release_puts_back_the_same_bytes(self, transport: Transport, unique_queue: str) -> None:
        body = _body("release")
        transport.publish(unique_queue, body)
        [first] = self._drain(transport, unique_queue, 1, within=3)
        transport.release(first)
        [again] = self._drain(transport, unique_queue, 1, within=3)
        assert again.body == body
        if self.supports_delivery_count:
            assert again.delivery_count == 2
        transport.ack(again)
        self._assert_size(transport, unique_queue, 0)

    def test_release_many_puts_every_reservation_back(self, transport: Transport, unique_queue: str) -> None:
        bodies = [_body("relmany", i) for i in range(5)]
        transport.publish_many(unique_queue, [Outgoing(b) for b in bodies])
        held = self._drain(transport, unique_queue, 5, within=5)
        assert len(held) == 5
        transport.release_many(held)
        transport.release_many([])
        again = self._drain(transport, unique_queue, 5, within=5)
        assert sorted(d.body for d in again) == sorted(bodies)
        transport.ack_many(again)
        self._assert_size(transport, unique_queue, 0)

    def test_release_with_delay(self, transport: Transport, unique_queue: str) -> None:
        self._need("supports_delay")
        transport.publish(unique_queue, _body("rdelay"))
        [first] = self._drain(transport, unique_queue, 1, within=3)
        released = time.monotonic()
        transport.release(first, delay_ms=600)
        assert transport.reserve(unique_queue, timeout=0.2) == []
        [again] = self._drain(transport, unique_queue, 1, within=3)
        assert time.monotonic() - released >= 0.5
        assert again.body == _body("rdelay")
        transport.ack(again)

    def test_retry_replaces_the_body_after_the_delay(self, transport: Transport, unique_queue: str) -> None:
        self._need("supports_delay")
        transport.publish(unique_queue, _body("retry", 0))
        [first] = self._drain(transport, unique_queue, 1, within=3)
        retried = time.monotonic()
        transport.retry(first, _body("retry", 1), delay_ms=600)
        self._assert_size(transport, unique_queue, 1)  # waiting (delayed), not lost, not doubled
        assert transport.reserve(unique_queue, timeout=0.2) == []
        [again] = self._drain(transport, unique_queue, 1, within=3)
        assert time.monotonic() - retried >= 0.5
        assert again.body == _body("retry", 1)
        transport.ack(again)
        assert transport.reserve(unique_queue, timeout=0.3) == []  # the old body is gone

    def test_retry_without_delay(self, transport: Transport, unique_queue: str) -> None:
        transport.publish(unique_queue, _body("retry0", 0))
        [first] = self._drain(transport, unique_queue, 1, within=3)
        transport.retry(first, _body("retry0", 1), delay_ms=0)
        [again] = self._drain(transport, unique_queue, 1, within=3)
        assert again.body == _body("retry0", 1)
        transport.ack(again)
        self._assert_size(transport, unique_queue, 0)

    def test_dead_letter_moves_the_body_to_the_dlq(self, transport: Transport, unique_queue: str) -> None:
        dlq = dlq_name(unique_queue)
        assert dlq == f"{unique_queue}.dlq"
        transport.publish(unique_queue, _body("dead"))
        [delivery] = self._drain(transport, unique_queue, 1, within=3)
        annotated = b'{"job":"urn:babel:test:dead","dead_letter":{"reason":"failed"}}'
        transport.dead_letter(delivery, annotated, dlq=dlq)
        self._assert_size(transport, unique_queue, 0)
        assert transport.reserve(unique_queue, timeout=0.2) == []
        [dead] = self._drain(transport, dlq, 1, within=3)
        assert dead.body == annotated
        assert dead.queue == dlq
        transport.ack(dead)
        # the original does not come back after its visibility timeout either
        assert transport.reserve(unique_queue, timeout=self._expiry_wait()) == []

    def test_identical_bodies_are_separate_messages(self, transport: Transport, unique_queue: str) -> None:
        body = _body("twin")
        for _ in range(3):
            transport.publish(unique_queue, body)
        held = self._drain(transport, unique_queue, 3, within=3)
        assert [d.body for d in held] == [body] * 3
        transport.ack(held[0])
        transport.ack(held[1])
        transport.release(held[2])
        self._assert_size(transport, unique_queue, 1)
        [last] = self._drain(transport, unique_queue, 1, within=3)
        transport.ack(last)
        self._assert_size(transport, unique_queue, 0)
        assert transport.reserve(unique_queue, timeout=self._expiry_wait()) == []

    # -- time ------------------------------------------------------------------------------

    def test_delayed_publish_is_invisible_until_due(self, transport: Transport, unique_queue: str) -> None:
        self._need("supports_delay")
        published = time.monotonic()
        transport.publish(unique_queue, _body("delayed"), delay_ms=700)
        self._assert_size(transport, unique_queue, 1)
        assert transport.reserve(unique_queue, timeout=0.3) == []
        [delivery] = self._drain(transport, unique_queue, 1, within=3)
        assert time.monotonic() - published >= 0.6
        assert delivery.body == _body("delayed")
        transport.ack(delivery)

    def test_unacked_reservation_comes_back(self, transport: Transport, unique_queue: str) -> None:
        transport.publish(unique_queue, _body("lease"))
        [first] = self._drain(transport, unique_queue, 1, within=3)
        assert transport.reserve(unique_queue, timeout=0.2) == []  # held: nobody else gets it
        self._assert_size(transport, unique_queue, 0)  # reserved messages are not "waiting"
        [again] = self._drain(transport, unique_queue, 1, within=self._expiry_wait() + 1)
        assert again.body == first.body
        if self.supports_delivery_count:
            assert first.delivery_count is not None and again.delivery_count is not None
            assert again.delivery_count > first.delivery_count
        transport.ack(again)

    def test_crashed_consumer_loses_nothing(self, make_transport: MakeTransport, unique_queue: str) -> None:
        producer = make_transport()
        bodies = [_body("crash", i) for i in range(5)]
        producer.publish_many(unique_queue, [Outgoing(b) for b in bodies])
        crashed = make_transport()
        held = self._drain(crashed, unique_queue, 3, within=3, batch=3)
        assert len(held) == 3
        crashed.close()  # never settled
        restarted = make_transport()
        got: list[bytes] = []
        end = time.monotonic() + self._expiry_wait() + 2
        while len(got) < 5 and time.monotonic() < end:
            batch = restarted.reserve(unique_queue, max_messages=5, timeout=0.5)
            got += [d.body for d in batch]
            restarted.ack_many(batch)  # settle at once, as a worker does
        assert sorted(got) == sorted(bodies)
        self._assert_size(restarted, unique_queue, 0)
        producer.purge(unique_queue)

    def test_renewed_reservation_outlives_its_lease(
        self, make_transport: MakeTransport, unique_queue: str
    ) -> None:
        holder, other = make_transport(), make_transport()
        holder.publish(unique_queue, _body("renew"))
        [held] = self._drain(holder, unique_queue, 1, within=3)
        end = time.monotonic() + 2 * self.visibility_timeout
        while time.monotonic() < end:  # two leases long, renewed every third of one
            assert holder.renew_many([held]) == 1
            time.sleep(self.visibility_timeout / 3)
        assert other.reserve(unique_queue, timeout=0.2) == []  # still held: nobody else got it
        holder.ack(held)
        assert holder.renew_many([held]) == 0  # settled: not revived
        assert holder.renew_many([]) == 0
        self._assert_size(other, unique_queue, 0)

    def test_lease_seconds_is_the_lease_a_reservation_gets(
        self, transport: Transport, unique_queue: str
    ) -> None:
        if transport.leased_reservations:
            assert transport.lease_seconds(unique_queue) == pytest.approx(self.visibility_timeout)
        else:  # connection-bound: held until settled or the connection drops
            assert transport.lease_seconds(unique_queue) is None

    def test_a_worker_keeps_a_slow_handlers_message(
        self, make_transport: MakeTransport, unique_queue: str
    ) -> None:
        """The runtime renews what it holds: a handler running 2.5 leases keeps its message."""
        from babelq.runtime import App, Message  # the layer above, driving this transport

        worker, other = make_transport(), make_transport()
        urn = "urn:babel:contract:slow"
        body = make(urn, {"n": 1}, queue=unique_queue).encode()
        worker.publish(unique_queue, body)
        app = App(worker, queue=unique_queue, concurrency=2, prefetch=1)
        handled: list[int] = []
        stolen: list[bytes] = []

        @app.handler(urn)
        def slow(message: Message) -> None:
            end = time.monotonic() + 2.5 * self.visibility_timeout
            while time.monotonic() < end:  # another worker polls the queue all along
                for delivery in other.reserve(unique_queue, max_messages=5, timeout=0.1):
                    stolen.append(delivery.body)
                    other.release(delivery)
            handled.append(message.data["n"])

        app.drain(timeout=6 * self.visibility_timeout + 10)
        assert stolen == []
        assert handled == [1]
        assert app.stats()["handled"] == 1
        self._assert_size(other, unique_queue, 0)
        assert other.reserve(unique_queue, timeout=0.2) == []

    def test_renew_does_not_revive_a_lapsed_reservation(
        self, make_transport: MakeTransport, unique_queue: str
    ) -> None:
        self._need("gated_settle")
        slow, fast = make_transport(), make_transport()
        if not slow.leased_reservations:
            pytest.skip(f"{type(slow).__name__}: reservations are connection-bound, they never lapse")
        slow.publish(unique_queue, _body("lapsed"))
        [stale] = self._drain(slow, unique_queue, 1, within=3)
        [current] = self._drain(fast, unique_queue, 1, within=self._expiry_wait() + 1)
        assert slow.renew_many([stale]) == 0  # the message belongs to ``fast`` now
        assert fast.renew_many([current]) == 1
        fast.ack(current)
        fast.purge(unique_queue)

    def test_late_ack_leaves_the_new_reservation_alone(
        self, make_transport: MakeTransport, unique_queue: str
    ) -> None:
        self._need("gated_settle")
        slow, fast = make_transport(), make_transport()
        slow.publish(unique_queue, _body("late"))
        [stale] = self._drain(slow, unique_queue, 1, within=3)
        [current] = self._drain(fast, unique_queue, 1, within=self._expiry_wait() + 1)
        slow.ack(stale)  # too late: the message belongs to ``fast`` now
        fast.release(current)
        [again] = self._drain(fast, unique_queue, 1, within=3)
        assert again.body == _body("late")
        fast.ack(again)
        fast.purge(unique_queue)

    def test_reserve_timeout_waits(self, transport: Transport, unique_queue: str) -> None:
        started = time.monotonic()
        assert transport.reserve(unique_queue, timeout=0.5) == []
        waited = time.monotonic() - started
        assert 0.45 <= waited < 0.5 + self.slack

    def test_reserve_returns_early_when_a_message_arrives(
        self, make_transport: MakeTransport, unique_queue: str
    ) -> None:
        consumer, producer = make_transport(), make_transport()
        timer = threading.Timer(0.3, producer.publish, args=(unique_queue, _body("wake")))
        started = time.monotonic()
        timer.start()
        try:
            got = consumer.reserve(unique_queue, timeout=10)
        finally:
            timer.join()
        waited = time.monotonic() - started
        assert [d.body for d in got] == [_body("wake")]
        assert 0.25 <= waited < 2.5
        consumer.ack(got[0])

    # -- inspection ------------------------------------------------------------------------

    def test_size_and_purge(self, transport: Transport, unique_queue: str) -> None:
        transport.publish_many(unique_queue, [Outgoing(_body("size", i)) for i in range(3)])
        delayed = 1
        if self.supports_delay:
            transport.publish(unique_queue, _body("size", 9), delay_ms=60_000)
        else:
            transport.publish(unique_queue, _body("size", 9))
        self._assert_size(transport, unique_queue, 3 + delayed)
        held = transport.reserve(unique_queue, timeout=2)
        assert len(held) == 1
        self._assert_size(transport, unique_queue, 2 + delayed)
        transport.purge(unique_queue)
        self._assert_size(transport, unique_queue, 0)
        assert transport.reserve(unique_queue, timeout=0.2) == []
        assert transport.reserve(unique_queue, timeout=self._expiry_wait()) == []  # reserved ones too

    def test_ready_counts_what_a_reserve_could_take_now(
        self, make_transport: MakeTransport, unique_queue: str
    ) -> None:
        """Not delayed messages, not held ones; a lapsed reservation is ready again."""
        t = make_transport()
        t.publish_many(unique_queue, [Outgoing(_body("ready", i)) for i in range(3)])
        if self.supports_delay:
            t.publish(unique_queue, _body("ready", 9), delay_ms=60_000)
        self._assert_ready(t, unique_queue, 3)
        # a connection-bound consumer's prefetch is invisible to other connections: ask its own
        consumer = make_transport() if t.leased_reservations else t
        held = self._drain(consumer, unique_queue, 1, within=3, batch=1)
        assert len(held) == 1
        self._assert_ready(t, unique_queue, 2)
        if consumer.leased_reservations:  # never settled: once its lease lapses it is ready again
            time.sleep(self.visibility_timeout)
        else:
            consumer.release(held[0])
        self._assert_ready(t, unique_queue, 3)
        t.purge(unique_queue)
        self._assert_ready(t, unique_queue, 0)

    def test_reserved_counts_what_a_crashed_consumer_still_holds(
        self, make_transport: MakeTransport, unique_queue: str
    ) -> None:
        """A killed consumer's reservations are neither waiting (size) nor gone: ``reserved`` sees
        them until the lease lapses, which is how "drained" can mean empty."""
        producer = make_transport()
        producer.publish_many(unique_queue, [Outgoing(_body("held", i)) for i in range(3)])
        crashed = make_transport()
        held = self._drain(crashed, unique_queue, 2, within=3, batch=2)
        assert len(held) == 2
        observed = producer.reserved(unique_queue)
        if observed is None:  # the broker cannot see other connections' deliveries
            assert not crashed.leased_reservations
            crashed.close()
            producer.purge(unique_queue)
            return
        assert observed == 2
        self._assert_size(producer, unique_queue, 1)
        crashed.ack(held[0])
        assert producer.reserved(unique_queue) == 1
        # never settled: once the lease lapses it is waiting again, not reserved
        end = time.monotonic() + self._expiry_wait()
        while producer.reserved(unique_queue) and time.monotonic() < end:
            time.sleep(0.05)
        assert producer.reserved(unique_queue) == 0
        self._assert_size(producer, unique_queue, 2)
        producer.purge(unique_queue)

    def test_queues_are_independent(self, transport: Transport, unique_queue: str) -> None:
        other = f"{unique_queue}-other"
        transport.publish(unique_queue, _body("mine"))
        transport.publish(other, _body("other"))
        try:
            [mine] = self._drain(transport, unique_queue, 1, within=3)
            assert mine.body == _body("mine")
            assert transport.reserve(unique_queue, timeout=0.1) == []
            self._assert_size(transport, other, 1)
            transport.ack(mine)
        finally:
            transport.purge(other)

    # -- concurrency -----------------------------------------------------------------------

    def test_concurrent_consumers_never_share_a_reservation(
        self, make_transport: MakeTransport, unique_queue: str
    ) -> None:
        total, workers = 200, 4
        producer = make_transport(visibility_timeout=60)
        bodies = [_body("conc", i) for i in range(total)]
        producer.publish_many(unique_queue, [Outgoing(b) for b in bodies])
        consumers = [make_transport(visibility_timeout=60) for _ in range(workers)]
        seen: list[bytes] = []
        lock = threading.Lock()
        errors: list[BaseException] = []

        def work(t: Transport) -> None:
            try:
                idle_until = time.monotonic() + 2
                while time.monotonic() < idle_until:
                    got = t.reserve(unique_queue, max_messages=10, timeout=0.2)
                    if not got:
                        with lock:
                            if len(seen) >= total:
                                return
                        continue
                    idle_until = time.monotonic() + 2
                    with lock:
                        seen.extend(d.body for d in got)
                    t.ack_many(got)
            except BaseException as exc:  # surfaced below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(c,)) for c in consumers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert not errors, errors
        assert len(seen) == total, "a reservation was handed out twice or a message was lost"
        assert sorted(seen) == sorted(bodies)
        self._assert_size(producer, unique_queue, 0)

    # -- tagged reservations ----------------------------------------------------------------
    # One process reserves under a tag, others settle by tag (the Spark data source: executor
    # tasks reserve, the driver renews and acks). A tag is taken once.

    TAG_A = "0123456789abcdef0123456789abcdef"
    TAG_B = "fedcba9876543210fedcba9876543210"
    TAG_C = "00000000000000000000000000000001"

    def test_tagged_reservations_are_declared(self, transport: Transport, unique_queue: str) -> None:
        assert transport.tagged_reservations is self.supports_tagged
        if not self.supports_tagged:  # the honest refusal, not a silent non-reservation
            with pytest.raises(ConfigurationError, match="tagged"):
                transport.reserve_tagged(unique_queue, self.TAG_A, max_messages=1)

    def test_a_tag_is_taken_once_and_read_again_the_same(
        self, make_transport: MakeTransport, unique_queue: str
    ) -> None:
        self._need("supports_tagged")
        producer, reader, retried = make_transport(), make_transport(), make_transport()
        bodies = [_body("tag", i) for i in range(5)]
        producer.publish_many(unique_queue, [Outgoing(b) for b in bodies])
        first = reader.reserve_tagged(unique_queue, self.TAG_A, max_messages=3)
        assert [d.body for d in first] == bodies[:3]
        if self.supports_delivery_count:
            assert [d.delivery_count for d in first] == [1, 1, 1]
        # a retried reader (another process) gets the same messages, in order, and nothing new
        again = retried.reserve_tagged(unique_queue, self.TAG_A, max_messages=5)
        assert [d.body for d in again] == bodies[:3]
        if self.supports_delivery_count:
            assert [d.delivery_count for d in again] == [1, 1, 1]  # not handed out again
        self._assert_ready(producer, unique_queue, 2)
        assert producer.reserved(unique_queue) == 3
        other = reader.reserve_tagged(unique_queue, self.TAG_B, max_messages=10)
        assert [d.body for d in other] == bodies[3:]
        # a tag that found nothing stays empty: what is published later is not added to it
        assert reader.reserve_tagged(unique_queue, self.TAG_C, max_messages=10) == []
        producer.publish(unique_queue, _body("later"))
        assert retried.reserve_tagged(unique_queue, self.TAG_C, max_messages=10) == []
        assert producer.ack_tagged(unique_queue, [self.TAG_A, self.TAG_B, self.TAG_C]) == 5
        [later] = self._drain(producer, unique_queue, 1, within=3)
        assert later.body == _body("later")
        producer.ack(later)
        self._assert_size(producer, unique_queue, 0)
        assert producer.reserved(unique_queue) == 0

    def test_another_process_renews_acks_and_releases_by_tag(
        self, make_transport: MakeTransport, unique_queue: str
    ) -> None:
        self._need("supports_tagged")
        reader, driver, consumer = make_transport(), make_transport(), make_transport()
        bodies = [_body("settle", i) for i in range(6)]
        reader.publish_many(unique_queue, [Outgoing(b) for b in bodies])
        assert len(reader.reserve_tagged(unique_queue, self.TAG_A, max_messages=3)) == 3
        assert len(reader.reserve_tagged(unique_queue, self.TAG_B, max_messages=3)) == 3
        reader.close()  # the reader is gone: only the tags are left
        end = time.monotonic() + 2 * self.visibility_timeout
        while time.monotonic() < end:  # two leases long, renewed by the other process
            assert driver.renew_tagged(unique_queue, [self.TAG_A, self.TAG_B]) == 6
            time.sleep(self.visibility_timeout / 3)
        assert consumer.reserve(unique_queue, timeout=0.2) == []  # still held
        assert driver.ack_tagged(unique_queue, [self.TAG_A]) == 3
        assert driver.release_tagged(unique_queue, [self.TAG_B]) == 3
        back = self._drain(consumer, unique_queue, 3, within=3, batch=3)
        assert [d.body for d in back] == bodies[3:]  # same bytes, in order, nothing of TAG_A
        consumer.ack_many(back)
        # settled tags hold nothing and are forgotten
        assert driver.renew_tagged(unique_queue, [self.TAG_A, self.TAG_B]) == 0
        assert driver.ack_tagged(unique_queue, [self.TAG_A, self.TAG_B]) == 0
        assert driver.renew_tagged(unique_queue, []) == 0
        self._assert_size(driver, unique_queue, 0)

    def test_tagged_deliveries_settle_one_by_one_too(self, transport: Transport, unique_queue: str) -> None:
        self._need("supports_tagged")
        transport.publish_many(unique_queue, [Outgoing(_body("one", i)) for i in range(3)])
        held = transport.reserve_tagged(unique_queue, self.TAG_A, max_messages=3)
        transport.ack(held[0])
        transport.release(held[1])
        left = transport.reserve_tagged(unique_queue, self.TAG_A, max_messages=3)
        assert [d.body for d in left] == [held[2].body]  # the settled ones left the tag
        assert transport.ack_tagged(unique_queue, [self.TAG_A]) == 1
        [back] = self._drain(transport, unique_queue, 1, within=3)
        assert back.body == held[1].body
        transport.ack(back)

    def test_a_lapsed_tag_taken_by_another_consumer_is_not_settled_by_tag(
        self, make_transport: MakeTransport, unique_queue: str
    ) -> None:
        """A tag never acks what its holder no longer holds: a run that died and whose messages
        went to someone else must not delete them when a later run settles the tag."""
        self._need("supports_tagged")
        self._need("gated_settle")
        reader, consumer = make_transport(), make_transport()
        reader.publish_many(unique_queue, [Outgoing(_body("lapse", i)) for i in range(2)])
        assert len(reader.reserve_tagged(unique_queue, self.TAG_A, max_messages=2)) == 2
        taken = self._drain(consumer, unique_queue, 2, within=self._expiry_wait() + 1, batch=2)
        assert len(taken) == 2
        assert reader.renew_tagged(unique_queue, [self.TAG_A]) == 0
        assert reader.reserve_tagged(unique_queue, self.TAG_A, max_messages=2) == []
        assert reader.ack_tagged(unique_queue, [self.TAG_A]) == 0
        assert consumer.reserved(unique_queue) == 2
        consumer.ack_many(taken)
        self._assert_size(consumer, unique_queue, 0)
        assert consumer.reserved(unique_queue) == 0

    def test_a_tag_is_32_lowercase_hex_characters(self, transport: Transport, unique_queue: str) -> None:
        self._need("supports_tagged")
        for bad in ("", "ABCDEF0123456789ABCDEF0123456789", "0123", "g" * 32, self.TAG_A + "0"):
            with pytest.raises(ValueError, match="tag"):
                transport.reserve_tagged(unique_queue, bad, max_messages=1)

    # -- carried headers (publish(headers=...): a W3C traceparent rides here) ----------------

    HEADERS: ClassVar[dict[str, str]] = {
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "tracestate": "congo=t61rcWkgMzE",
    }

    def test_publish_with_headers_delivers_them_beside_the_body(
        self, transport: Transport, unique_queue: str
    ) -> None:
        self._need("supports_headers")
        body = _body("headers")
        transport.publish(unique_queue, body, headers=self.HEADERS)
        transport.publish(unique_queue, _body("plain"))
        got = self._drain(transport, unique_queue, 2, within=5)
        assert [d.body for d in got] == [body, _body("plain")] or not self.supports_fifo
        by_body = {d.body: d for d in got}
        assert by_body[body].body == body  # the body is what was published, byte for byte
        assert dict(by_body[body].carried_headers) == self.HEADERS
        assert dict(by_body[_body("plain")].carried_headers) == {}
        transport.ack_many(got)

    def test_a_retry_and_a_dead_letter_keep_the_carried_headers(
        self, transport: Transport, unique_queue: str
    ) -> None:
        self._need("supports_headers")
        transport.publish(unique_queue, _body("keep"), headers=self.HEADERS)
        [first] = self._drain(transport, unique_queue, 1, within=5)
        transport.retry(first, _body("keep", 1), delay_ms=0)
        [again] = self._drain(transport, unique_queue, 1, within=5)
        assert again.body == _body("keep", 1)
        assert dict(again.carried_headers) == self.HEADERS
        dlq = dlq_name(unique_queue)
        transport.dead_letter(again, _body("keep", 2), dlq=dlq)
        [dead] = self._drain(transport, dlq, 1, within=5)
        assert dict(dead.carried_headers) == self.HEADERS
        transport.ack(dead)
