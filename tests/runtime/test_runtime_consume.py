"""The consume loops: concurrency, batched acks never before the handler, shutdown, errors."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence

import pytest

from babelq.envelope import make
from babelq.runtime import App, Message
from babelq.transports.base import Delivery

from .support import RecordingTransport

URN = "urn:babel:jobs:run"


def publish(transport: RecordingTransport, n: int, queue: str = "q") -> list[bytes]:
    bodies = [make(URN, {"n": i}, queue=queue).encode() for i in range(n)]
    for body in bodies:
        transport.publish(queue, body)
    return bodies


def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "condition not reached in time"
        time.sleep(0.005)


@pytest.mark.parametrize("concurrency", [1, 3, 8])
def test_every_message_handled_once_and_acked_in_batches(
    concurrency: int, transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    app = make_app(concurrency=concurrency, prefetch=50)
    seen: Counter[int] = Counter()
    lock = threading.Lock()

    def handler(message: Message) -> None:
        with lock:
            seen[message.data["n"]] += 1

    app.register(URN, handler)
    publish(transport, 1000)
    assert app.run_until_empty() == 1000
    assert seen == Counter(range(1000))
    acked = sum(transport.named("ack_many")) + len(transport.named("ack"))
    assert acked == 1000
    assert max(transport.named("ack_many")) > 1
    assert len(transport.named("ack_many")) + len(transport.named("ack")) < 1000
    assert transport.size("q") == 0 and transport.reserved_count("q") == 0
    assert app.stats()["received"] == 1000 and app.stats()["handled"] == 1000


@pytest.mark.parametrize("concurrency", [1, 2])
def test_nothing_is_acked_before_its_handler_returned(
    concurrency: int, transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    app = make_app(concurrency=concurrency, prefetch=4)
    release = threading.Event()
    started: list[int] = []

    def handler(message: Message) -> None:
        started.append(message.data["n"])
        assert release.wait(5)

    app.register(URN, handler)
    publish(transport, 4)
    runner = threading.Thread(target=app.run_until_empty)
    runner.start()
    wait_for(lambda: len(started) == concurrency)
    time.sleep(0.1)
    assert transport.named("ack") == [] and transport.named("ack_many") == []
    assert transport.reserved_count("q") == 4
    release.set()
    runner.join(5)
    assert not runner.is_alive()
    assert sum(transport.named("ack_many")) + len(transport.named("ack")) == 4


def test_graceful_stop_finishes_in_flight_and_releases_unstarted(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    app = make_app(concurrency=2, prefetch=6, grace_period=5)
    gate = threading.Event()
    handled: Counter[bytes] = Counter()
    started: list[bytes] = []
    lock = threading.Lock()

    def handler(message: Message) -> None:
        with lock:
            started.append(message.body)
        gate.wait(5)
        with lock:
            handled[message.body] += 1

    app.register(URN, handler)
    bodies = publish(transport, 6)
    runner = threading.Thread(target=app.run, kwargs={"handle_signals": False})
    runner.start()
    wait_for(lambda: len(started) == 2)
    app.stop()
    time.sleep(0.1)
    gate.set()
    runner.join(5)
    assert not runner.is_alive()
    assert sorted(handled) == sorted(started)
    assert app.stats()["unstarted_released"] == 4
    assert sorted(transport.peek_all("q")) == sorted(b for b in bodies if b not in started)
    assert transport.reserved_count("q") == 0
    app.run_until_empty()
    assert handled == Counter(bodies)  # each exactly once across the two runs


def test_stop_after_grace_period_leaves_in_flight_reserved_for_redelivery() -> None:
    transport = RecordingTransport(visibility_timeout=0.5)
    app = App(transport, queue="q", concurrency=2, grace_period=0.2)
    gate = threading.Event()
    runs: list[int] = []

    def handler(message: Message) -> None:
        runs.append(message.delivery_count or 0)
        if len(runs) == 1:
            gate.wait(3)

    app.register(URN, handler)
    publish(transport, 1)
    runner = threading.Thread(target=app.run, kwargs={"handle_signals": False})
    runner.start()
    wait_for(lambda: len(runs) == 1)
    started = time.monotonic()
    app.stop()
    runner.join(3)
    assert time.monotonic() - started < 1.0
    assert transport.named("ack") == [] and transport.named("ack_many") == []
    gate.set()
    app.run_until_empty(wait_delayed=True, timeout=3)
    time.sleep(0.6)  # past the visibility timeout the reservation is back
    app.run_until_empty()
    assert runs == [1, 2]


def test_inline_stop_mid_batch_releases_the_rest(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    app = make_app(concurrency=1, prefetch=10)
    handled: list[int] = []

    def handler(message: Message) -> None:
        handled.append(message.data["n"])
        if len(handled) == 3:
            app.stop()

    app.register(URN, handler)
    publish(transport, 10)
    assert app.run(handle_signals=False) == 3
    assert handled == [0, 1, 2]
    assert transport.size("q") == 7 and transport.reserved_count("q") == 0
    assert app.stats()["unstarted_released"] == 7


@pytest.mark.parametrize("concurrency", [1, 4])
def test_drain_max_messages(
    concurrency: int, transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    app = make_app(concurrency=concurrency, prefetch=8)
    app.register(URN, lambda m: None)
    publish(transport, 50)
    assert app.drain(max_messages=20) == 20
    assert transport.size("q") == 30 and transport.reserved_count("q") == 0


def test_sigterm_stops_run_gracefully_and_restores_the_handler(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    app = make_app(concurrency=1, prefetch=5)
    handled: list[int] = []

    def handler(message: Message) -> None:
        if not handled:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # the handler keeps running after the signal
        handled.append(message.data["n"])

    app.register(URN, handler)
    publish(transport, 5)
    before = signal.getsignal(signal.SIGTERM)
    assert app.run() == 1
    assert handled == [0]
    assert transport.size("q") == 4 and transport.reserved_count("q") == 0
    assert signal.getsignal(signal.SIGTERM) is before


class FlakyFetch(RecordingTransport):
    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def reserve(self, queue: str, *, max_messages: int = 1, timeout: float = 0.0) -> list[Delivery]:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("broker restarting")
        return super().reserve(queue, max_messages=max_messages, timeout=timeout)


def test_run_survives_broker_errors_while_fetching() -> None:
    transport = FlakyFetch(failures=2)
    app = App(transport, queue="q")
    app.register(URN, lambda m: app.stop())
    publish(transport, 1)
    assert app.run(handle_signals=False) == 1
    assert app.stats()["fetch_errors"] == 2


def test_drain_raises_broker_errors() -> None:
    app = App(FlakyFetch(failures=1), queue="q")
    with pytest.raises(ConnectionError):
        app.run_until_empty()


class FailingAck(RecordingTransport):
    def ack_many(self, deliveries: Sequence[Delivery]) -> None:
        raise ConnectionError("lost connection")

    def ack(self, delivery: Delivery) -> None:
        raise ConnectionError("lost connection")


def test_failed_ack_means_redelivery_not_loss() -> None:
    transport = FailingAck(visibility_timeout=0.2)
    app = App(transport, queue="q")
    runs: list[int] = []
    app.register(URN, lambda m: runs.append(m.delivery_count or 0))
    publish(transport, 1)
    app.run_until_empty()
    assert app.stats()["disposition_errors"] == 1
    time.sleep(0.3)
    app.run_until_empty()
    assert runs == [1, 2]


def test_handler_threads_run_in_parallel(transport: RecordingTransport, make_app: Callable[..., App]) -> None:
    app = make_app(concurrency=8, prefetch=16)
    app.register(URN, lambda m: time.sleep(0.1))
    publish(transport, 16)
    started = time.monotonic()
    app.run_until_empty()
    assert time.monotonic() - started < 1.0  # 16 x 0.1 s on 8 threads, not 1.6 s
