"""Leases renewed while the worker holds them: a slow message is not handed to another worker.

The memory transport's leases lapse for real (its reserve sweeps expired reservations back),
so a *thief* -- a second consumer polling the same queue -- gets any message whose lease the
worker let lapse. The control test removes renewal and shows the thief then does get them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

import pytest

from babelq.envelope import make
from babelq.runtime import App, Backoff, Message
from babelq.runtime.counters import Counters
from babelq.runtime.leases import RENEW_FRACTION, LeaseKeeper
from babelq.transports.base import Delivery
from babelq.transports.memory import MemoryTransport

from .support import RecordingTransport

LEASE = 1.0
URN = "urn:babel:test:slow"


class Thief:
    """Reserves from the queue in a loop while the worker runs; whatever it gets was stolen.

    ``once``: stop after the first theft. A thief that goes on taking and giving back a lapsed
    message can hold it at the moment the worker, with nothing in flight, looks at the queue: the
    worker then finds it empty and ends its run before handling the message again."""

    def __init__(self, transport: MemoryTransport, queue: str, *, once: bool = False) -> None:
        self.transport, self.queue, self.once = transport, queue, once
        self.stolen: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            got = self.transport.reserve(self.queue, max_messages=10, timeout=0.02)
            for delivery in got:
                self.stolen.append(delivery.body)
                self.transport.release(delivery)  # give it back: the worker must still see it through
            if got and self.once:
                return

    def __enter__(self) -> Thief:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)


class NoRenewal(MemoryTransport):
    """The memory transport with renewal switched off: every renewal finds its lease gone."""

    def renew_many(self, deliveries: Sequence[Delivery]) -> int:
        return 0


def _run(
    transport: MemoryTransport, *, count: int, pause: float, concurrency: int, within: float = 20.0,
    steal_once: bool = False,
) -> tuple[App, list[str], list[bytes]]:
    """Drain ``count`` slow messages (all fetched at once) with a thief polling the queue meanwhile.

    Returns the app, the handled message numbers and the bodies the thief got.
    """
    handled: list[str] = []
    app = App(
        transport,
        queue="q",
        concurrency=concurrency,
        prefetch=count,
        backoff=Backoff(base_ms=0, jitter=False),
    )

    @app.handler(URN)
    def slow(message: Message) -> None:
        time.sleep(pause)
        handled.append(message.data["n"])

    for n in range(count):
        transport.publish("q", make(URN, {"n": str(n)}, queue="q").encode())
    # the thief starts once the worker holds everything, so it can only take what lapsed
    started = threading.Event()
    original = transport.reserve

    def reserve(queue: str, *, max_messages: int = 1, timeout: float = 0.0) -> list[Delivery]:
        got = original(queue, max_messages=max_messages, timeout=timeout)
        if got:
            started.set()
        return got

    transport.reserve = reserve  # type: ignore[method-assign]
    runner = threading.Thread(target=lambda: app.run_until_empty(timeout=within), daemon=True)
    runner.start()
    assert started.wait(5)
    del transport.reserve  # the thief uses the transport's own reserve
    with Thief(transport, "q", once=steal_once) as thief:
        runner.join(within + 10)
    assert not runner.is_alive()
    return app, handled, thief.stolen


@pytest.mark.parametrize(
    ("concurrency", "count", "pause"),
    [
        (1, 8, LEASE / 4),  # handlers on the conductor: the batch's tail waits two leases
        (2, 1, 2.5 * LEASE),  # worker threads: one handler runs two and a half leases
    ],
    ids=["inline-prefetch-tail", "threads-one-slow-handler"],
)
def test_held_messages_are_not_handed_to_another_consumer(concurrency: int, count: int, pause: float) -> None:
    transport = MemoryTransport(visibility_timeout=LEASE)
    app, handled, stolen = _run(transport, count=count, pause=pause, concurrency=concurrency)
    assert stolen == []
    assert sorted(handled) == sorted(str(n) for n in range(count))  # each exactly once
    stats = app.stats()
    assert stats["leases_renewed"] >= 1
    assert stats.get("leases_lost", 0) == 0
    assert transport.size("q") == 0 and transport.reserve("q", timeout=0) == []


@pytest.mark.parametrize("concurrency", [1, 2])
def test_without_renewal_the_same_run_loses_its_leases(
    concurrency: int, caplog: pytest.LogCaptureFixture
) -> None:
    """The control: the setup above does catch lapsed leases, and the worker says so."""
    transport = NoRenewal(visibility_timeout=LEASE)
    count, pause = (8, LEASE / 4) if concurrency == 1 else (1, 2.5 * LEASE)
    with caplog.at_level(logging.WARNING, logger="babelq.runtime"):
        # a lapsed slow message comes back and lapses again: the run only ends at its deadline,
        # which leaves a second handling (2.5 leases with concurrency 2) room to start late on a
        # loaded machine (at 4 s one full CI run handled it only once)
        app, handled, stolen = _run(transport, count=count, pause=pause, concurrency=concurrency, within=6.0,
                                    steal_once=True)
    assert stolen
    assert len(handled) > count  # handled more than once
    assert app.stats()["leases_lost"] >= 1
    warnings = [r for r in caplog.records if "had lapsed before renewal" in r.getMessage()]
    assert 1 <= len(warnings) <= 2 * count  # said when it happens, not at every renewal after


# -- the keeper on its own, with a clock we move by hand ----------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FailingRenewals(RecordingTransport):
    """Records renewals; while ``fail`` is set, a renewal raises as a broker gone away would."""

    fail = False

    def renew_many(self, deliveries: Sequence[Delivery]) -> int:
        if self.fail:
            raise ConnectionError("broker away")
        return super().renew_many(deliveries)


def _keeper(transport: MemoryTransport, clock: Clock) -> LeaseKeeper:
    return LeaseKeeper(transport, "q", counters=Counters(), log=logging.getLogger("test"), clock=clock)


def test_keeper_renews_every_third_of_a_lease_only_what_it_holds() -> None:
    transport, clock = RecordingTransport(visibility_timeout=9.0), Clock()
    keeper = _keeper(transport, clock)
    assert keeper.every == pytest.approx(9.0 * RENEW_FRACTION) == pytest.approx(3.0)
    for n in range(3):
        transport.publish("q", f"m{n}".encode())
    held = transport.reserve("q", max_messages=3)
    keeper.hold(held)
    clock.now += 2.9
    keeper.tick()
    assert transport.named("renew_many") == []  # not due yet
    clock.now += 0.2
    keeper.tick()
    assert transport.named("renew_many") == [3]
    keeper.let_go(held[0])
    clock.now += 1.0
    keeper.tick()
    assert transport.named("renew_many") == [3]  # the next one is a full interval after the last
    clock.now += 2.0
    keeper.tick()
    assert transport.named("renew_many") == [3, 2]
    keeper.let_go(held[1])
    keeper.let_go(held[2])
    clock.now += 10
    keeper.tick()
    assert transport.named("renew_many") == [3, 2]  # nothing held: no broker call
    assert keeper.counters.snapshot()["leases_renewed"] == 5


def test_keeper_survives_a_failed_renewal_and_tries_again_soon() -> None:
    transport, clock = FailingRenewals(visibility_timeout=30.0), Clock()
    keeper = _keeper(transport, clock)
    transport.publish("q", b"m")
    keeper.hold(transport.reserve("q"))
    transport.fail = True
    clock.now += 10
    keeper.tick()  # logs, counts, does not raise
    assert keeper.counters.snapshot()["renew_errors"] == 1
    transport.fail = False
    clock.now += 1.0  # a failed renewal is retried within a second, not a third of a lease
    keeper.tick()
    assert transport.named("renew_many") == [1]


def test_connection_bound_reservations_need_no_renewal() -> None:
    class ConnectionBound(RecordingTransport):
        leased_reservations = False

    transport, clock = ConnectionBound(visibility_timeout=1.0), Clock()
    keeper = _keeper(transport, clock)
    assert keeper.every is None
    transport.publish("q", b"m")
    keeper.hold(transport.reserve("q"))
    clock.now += 100
    assert not keeper.due()
    keeper.tick()
    assert transport.named("renew_many") == [] and keeper.held == 0
