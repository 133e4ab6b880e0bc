"""Coroutine handlers run to completion, and a handler of the wrong shape is refused at start."""

from __future__ import annotations

import asyncio
import functools
import threading
import warnings
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from babelq.envelope import decode, make
from babelq.errors import ConfigurationError, UnavailableError
from babelq.runtime import App, Message, PermanentError, current_message

from .support import RecordingTransport, dlq_envelopes

URN = "urn:babel:jobs:run"


def publish(transport: RecordingTransport, n: int, queue: str = "q") -> None:
    for i in range(n):
        transport.publish(queue, make(URN, {"n": i}, queue=queue).encode())


@pytest.mark.parametrize("concurrency", [1, 4])
def test_an_async_handler_runs_before_its_message_is_acked(
    concurrency: int, transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    app = make_app(concurrency=concurrency)
    seen: Counter[int] = Counter()

    @app.handler(URN)
    async def handle(message: Message) -> None:
        await asyncio.sleep(0)  # a real suspension: the body must resume after it
        seen[message.data["n"]] += 1

    publish(transport, 50)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "coroutine ... was never awaited" would be the silent ack
        assert app.run_until_empty() == 50
    assert seen == Counter(range(50))
    assert app.stats()["handled"] == 50
    assert transport.size("q") == 0 and transport.reserved_count("q") == 0
    app.close()


def test_async_handlers_have_the_sync_outcomes(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    app = make_app(max_attempts=2, unavailable_delay_ms=0)
    runs: Counter[int] = Counter()

    @app.handler(URN)
    async def handle(message: Message) -> None:
        n = message.data["n"]
        runs[n] += 1
        await asyncio.sleep(0)
        if n == 1:
            raise RuntimeError("boom")
        if n == 2:
            raise PermanentError("never", cause="refused")
        if n == 3 and runs[n] == 1:
            raise UnavailableError("db down")

    publish(transport, 4)
    app.run_until_empty(wait_delayed=True, timeout=10)
    assert runs == Counter({0: 1, 1: 2, 2: 1, 3: 2})
    dead = {e.data["n"]: e.dead_letter for e in dlq_envelopes(transport)}
    assert set(dead) == {1, 2}
    assert dead[1] is not None and dead[1]["exception"] == "RuntimeError" and dead[1]["attempts"] == 2
    assert dead[2] is not None and dead[2].get("cause") == "refused"
    app.close()


def test_async_handlers_share_one_loop_and_see_their_message(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    app = make_app(concurrency=3)
    loops: set[int] = set()
    current: list[bool] = []

    @app.handler(URN)
    async def handle(message: Message) -> None:
        loops.add(id(asyncio.get_running_loop()))
        await asyncio.sleep(0.001)
        current.append(current_message() is message)

    publish(transport, 30)
    app.run_until_empty()
    assert len(loops) == 1  # a client made on the loop can be used by every handler
    assert current == [True] * 30
    app.close()


def test_at_most_concurrency_async_handlers_run_at_once(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    app = make_app(concurrency=3, prefetch=20)
    running = peak = 0
    lock = threading.Lock()

    @app.handler(URN)
    async def handle(message: Message) -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        await asyncio.sleep(0.01)
        with lock:
            running -= 1

    publish(transport, 30)
    app.run_until_empty()
    assert peak == 3
    app.close()


def test_a_coroutine_waiting_on_another_handler_is_not_held_up_by_its_thread(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    """Two handlers on two threads share the loop: the first waits for what the second does, so
    the loop must keep running the first while the second thread hands its coroutine over."""
    app = make_app(concurrency=2, prefetch=2)
    released = asyncio.Event()
    order: list[str] = []

    @app.handler(URN)
    async def handle(message: Message) -> None:
        if message.data["n"] == 0:
            await asyncio.wait_for(released.wait(), timeout=10)
            order.append("waited")
        else:
            await asyncio.sleep(0.05)  # the first handler is surely waiting by now
            order.append("released")
            released.set()

    publish(transport, 2)
    assert app.run_until_empty() == 2
    assert order == ["released", "waited"]
    assert app.stats()["handled"] == 2
    app.close()


@pytest.mark.parametrize("concurrency", [1, 4])
def test_an_async_handler_runs_inside_a_task(
    concurrency: int, transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    """``asyncio.timeout`` and other task-bound tools need the current task, also in a coroutine
    that ends without suspending."""
    app = make_app(concurrency=concurrency, max_attempts=1)
    tasks: list[bool] = []

    @app.handler(URN)
    async def handle(message: Message) -> None:
        tasks.append(asyncio.current_task() is not None)
        async with asyncio.timeout(0.05 if message.data["n"] == 0 else 10):
            if message.data["n"] == 0:
                await asyncio.sleep(5)  # cancelled by its timeout: a failed attempt

    publish(transport, 6)
    assert app.run_until_empty() == 6
    assert tasks == [True] * 6
    dead = [e.data["n"] for e in dlq_envelopes(transport)]
    assert dead == [0]
    assert dead_exception(transport) == "TimeoutError"
    app.close()


def dead_exception(transport: RecordingTransport) -> str:
    (envelope,) = dlq_envelopes(transport)
    assert envelope.dead_letter is not None
    return str(envelope.dead_letter["exception"])


def test_many_async_handlers_of_every_outcome_on_many_threads(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    """Coroutines that end at once, suspend briefly, or fail, mixed on eight threads: every one
    runs once and is settled once, and the run ends."""
    app = make_app(concurrency=8, prefetch=16, max_attempts=1)
    runs: Counter[int] = Counter()

    @app.handler(URN)
    async def handle(message: Message) -> None:
        n = message.data["n"]
        runs[n] += 1
        if n % 3 == 1:
            await asyncio.sleep(0)
        elif n % 3 == 2:
            await asyncio.sleep(0.001)
        if n % 7 == 0:
            raise PermanentError("seventh", cause="refused")

    publish(transport, 600)
    assert app.run_until_empty() == 600
    assert runs == Counter(range(600))
    dead = sorted(e.data["n"] for e in dlq_envelopes(transport))
    assert dead == list(range(0, 600, 7))
    assert app.stats()["handled"] == 600 - len(dead)
    assert transport.size("q") == 0 and transport.reserved_count("q") == 0
    app.close()


def test_a_sync_callable_returning_a_coroutine_is_awaited(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    """A decorator that hides ``async def`` behind a plain function must not turn into an ack."""
    app = make_app()
    done: list[int] = []

    async def body(message: Message) -> None:
        await asyncio.sleep(0)
        done.append(message.data["n"])

    def wrapped(message: Message) -> Awaitable[None]:
        return body(message)

    app.register(URN, wrapped)
    publish(transport, 3)
    app.run_until_empty()
    assert sorted(done) == [0, 1, 2]
    app.close()


def test_an_async_callable_object_and_a_partial_are_awaited(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    done: list[str] = []

    class Handler:
        async def __call__(self, message: Message) -> None:
            await asyncio.sleep(0)
            done.append("object")

    async def with_tag(tag: str, message: Message) -> None:
        await asyncio.sleep(0)
        done.append(tag)

    app = make_app()
    app.register(URN, Handler())
    app.register("urn:babel:jobs:other", functools.partial(with_tag, "partial"))
    publish(transport, 1)
    transport.publish("q", make("urn:babel:jobs:other", {}, queue="q").encode())
    app.run_until_empty()
    assert sorted(done) == ["object", "partial"]
    app.close()


def _no_args() -> None: ...


def _two_args(message: Message, tx: Any) -> None: ...


async def _async_two(message: Message, other: Any) -> None: ...


def _keyword_only(*, message: Message) -> None: ...


@pytest.mark.parametrize("fn", [_no_args, _two_args, _async_two, _keyword_only])
def test_a_handler_of_the_wrong_shape_is_refused_at_registration(fn: Callable[..., Any]) -> None:
    app = App("memory://", queue="q")
    with pytest.raises(ConfigurationError) as caught:
        app.register(URN, fn)
    text = str(caught.value)
    assert "\n" not in text and URN in text and fn.__name__ in text and "one argument" in text
    with pytest.raises(ConfigurationError):
        app.handler(URN)(fn)
    assert app.router.urns == ()


def test_handlers_of_the_right_shape_are_accepted() -> None:
    app = App("memory://", queue="q")

    def plain(message: Message) -> None: ...

    def defaults(message: Message, retries: int = 3) -> None: ...

    def star(*args: Any) -> None: ...

    async def coro(message: Message) -> None: ...

    for n, fn in enumerate([plain, defaults, star, coro, print]):
        app.register(f"urn:babel:jobs:ok{n}", fn)
    assert len(app.router.urns) == 5


@pytest.mark.parametrize("concurrency", [1, 3])
def test_the_loop_is_stopped_when_the_app_closes(
    transport: RecordingTransport, make_app: Callable[..., App], concurrency: int
) -> None:
    app = make_app(concurrency=concurrency)
    loops: list[asyncio.AbstractEventLoop] = []
    threads: set[str] = set()

    @app.handler(URN)
    async def handle(message: Message) -> None:
        loops.append(asyncio.get_running_loop())
        threads.add(threading.current_thread().name)
        await asyncio.sleep(0)

    publish(transport, 4)
    app.run_until_empty()
    assert len(set(loops)) == 1
    # the handling threads drive the loop themselves: no thread of its own
    assert not any(name.startswith("babelq-asyncio") for name in threads), threads
    app.close()
    assert loops[0].is_closed()
    assert not any(t.name.startswith("babelq-asyncio") and t.is_alive() for t in threading.enumerate())


def test_an_inline_loop_cancels_a_task_a_handler_left_running_at_close(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    app = make_app()
    cancelled: list[bool] = []

    async def background() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    @app.handler(URN)
    async def handle(message: Message) -> None:
        asyncio.get_running_loop().create_task(background())
        await asyncio.sleep(0)  # the task takes its first step, and waits

    publish(transport, 1)
    assert app.run_until_empty() == 1
    app.close()
    assert cancelled == [True]


def test_a_handler_run_from_inside_another_loop_still_runs(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    # a sync drain called from a coroutine (a test, a notebook): this thread already runs a loop,
    # so the handler goes to the App loop's own thread instead of a second loop here
    app = make_app()
    ran: list[int] = []

    @app.handler(URN)
    async def handle(message: Message) -> None:
        await asyncio.sleep(0)
        ran.append(message.data["n"])

    publish(transport, 3)

    async def main() -> int:
        return app.run_until_empty()

    assert asyncio.run(main()) == 3
    assert ran == [0, 1, 2]
    app.close()


def test_running_a_coroutine_to_completion_from_the_apps_own_loop_is_refused(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    app = make_app()
    errors: list[str] = []

    @app.handler(URN)
    async def handle(message: Message) -> None:
        try:
            app.router.loop.run(asyncio.sleep(0))
        except ConfigurationError as exc:
            errors.append(str(exc))

    publish(transport, 1)
    app.run_until_empty()
    assert errors and "await it" in errors[0]
    app.close()


def test_an_async_handler_publishes_downstream_with_the_inbound_trace(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    app = make_app()
    inbound: list[str] = []

    @app.handler(URN)
    async def handle(message: Message) -> None:
        await asyncio.sleep(0)
        inbound.append(message.trace_id)
        app.publish("urn:babel:jobs:next", {"from": message.data["n"]}, queue="next")

    transport.publish("q", make(URN, {"n": 0}, queue="q", trace_id="trace-of-the-order").encode())
    app.run_until_empty()
    (body,) = transport.peek_all("next")
    out = decode(body)
    assert inbound == ["trace-of-the-order"]
    assert out.data == {"from": 0} and out.trace_id == "trace-of-the-order"
    app.close()
