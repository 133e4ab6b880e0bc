"""Policy per URN: a handler's own max_attempts, backoff and (async) timeout."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable

import pytest

from babelq.envelope import make
from babelq.errors import ConfigurationError
from babelq.runtime import App, Backoff, Message, RateLimit

from .support import RecordingTransport, dlq_envelopes

FLAKY = "urn:babel:jobs:flaky"
STUBBORN = "urn:babel:jobs:stubborn"
SLOW = "urn:babel:jobs:slow"


def test_a_urn_overrides_the_apps_attempts_and_backoff(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    app = make_app(max_attempts=2, backoff=Backoff(base_ms=0, jitter=False))
    runs: Counter[str] = Counter()

    @app.handler(FLAKY)
    def flaky(message: Message) -> None:
        runs[FLAKY] += 1
        raise RuntimeError("no")

    @app.handler(STUBBORN, max_attempts=5, backoff=Backoff(base_ms=1, cap_ms=1, jitter=False))
    def stubborn(message: Message) -> None:
        runs[STUBBORN] += 1
        raise RuntimeError("no")

    for urn in (FLAKY, STUBBORN):
        transport.publish("q", make(urn, {}, queue="q").encode())
    app.run_until_empty(wait_delayed=True, timeout=10)
    assert runs == Counter({FLAKY: 2, STUBBORN: 5})
    attempts = {e.urn: e.dead_letter["attempts"] for e in dlq_envelopes(transport) if e.dead_letter}
    assert attempts == {FLAKY: 2, STUBBORN: 5}
    delays = [d for d in transport.named("retry")]
    assert delays.count(1) == 4  # the stubborn URN's own backoff; the App's is 0


def test_an_async_handler_over_its_timeout_is_a_failed_attempt(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    app = make_app(max_attempts=2)
    started: list[float] = []

    @app.handler(SLOW, timeout=0.05)
    async def slow(message: Message) -> None:
        started.append(time.monotonic())
        await asyncio.sleep(5)

    transport.publish("q", make(SLOW, {}, queue="q").encode())
    begin = time.monotonic()
    app.run_until_empty(wait_delayed=True, timeout=10)
    assert time.monotonic() - begin < 3  # cancelled, not waited out
    assert len(started) == 2
    (dead,) = dlq_envelopes(transport)
    assert dead.dead_letter is not None
    assert dead.dead_letter["exception"] == "babelq.errors.HandlerTimeoutError"
    assert "timeout of 0.05 s" in dead.dead_letter["error"]
    app.close()


@pytest.mark.parametrize("timeout", [0, -1, "5", True])
def test_a_bad_timeout_is_refused(timeout: object) -> None:
    app = App("memory://", queue="q")

    async def handler(message: Message) -> None: ...

    with pytest.raises(ConfigurationError, match="timeout"):
        app.register(SLOW, handler, timeout=timeout)  # type: ignore[arg-type]


def test_a_timeout_on_a_sync_handler_is_refused_with_the_reason() -> None:
    app = App("memory://", queue="q")

    def handler(message: Message) -> None: ...

    with pytest.raises(ConfigurationError, match="async def handlers only"):
        app.register(SLOW, handler, timeout=1.0)
    with pytest.raises(ConfigurationError, match="max_attempts"):
        app.register(FLAKY, handler, max_attempts=0)
    assert app.router.urns == ()


def test_a_rate_limit_holds_a_urn_to_its_rate_and_leaves_the_others_alone(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    app = make_app(concurrency=2, prefetch=40)
    starts: dict[str, list[float]] = {FLAKY: [], STUBBORN: []}

    @app.handler(FLAKY, rate=RateLimit(20, burst=1))
    def limited(message: Message) -> None:
        starts[FLAKY].append(time.monotonic())

    @app.handler(STUBBORN)
    def free(message: Message) -> None:
        starts[STUBBORN].append(time.monotonic())

    for n in range(10):
        transport.publish("q", make(FLAKY, {"n": n}, queue="q").encode())
        transport.publish("q", make(STUBBORN, {"n": n}, queue="q").encode())
    app.run_until_empty(timeout=20)
    assert len(starts[FLAKY]) == len(starts[STUBBORN]) == 10
    limited_span = starts[FLAKY][-1] - starts[FLAKY][0]
    assert limited_span >= 9 / 20 - 0.02  # 10 starts at 20/s with no burst: 0.45 s at least
    assert app.stats().get("handled") == 20 and not transport.named("release")


def test_a_token_too_far_away_puts_the_message_back_not_failed(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    app = make_app(unavailable_delay_ms=0)
    ran: list[int] = []
    # one token every 10 s: the second message, handled right after the first, finds none
    app.register(FLAKY, lambda message: ran.append(1), rate=RateLimit(0.1, burst=1, max_wait=0.0))
    for n in range(2):
        transport.publish("q", make(FLAKY, {"n": n}, queue="q").encode())
    app.drain(max_messages=2)
    assert len(ran) == 1 and transport.named("release")  # the second waits its turn on the broker
    assert app.stats().get("failed", 0) == 0 and dlq_envelopes(transport) == []


@pytest.mark.live
def test_a_shared_rate_limit_holds_two_workers_to_one_rate(unique_queue: str) -> None:
    from conftest import require_service

    host, port = require_service("redis")
    url = f"redis://{host}:{port}/15"
    key = f"babelq:rate:test:{unique_queue}"
    starts: list[float] = []
    apps = []
    transport = RecordingTransport()
    for _ in range(2):
        app = App(transport, queue="q", concurrency=2)
        app.register(FLAKY, lambda message: starts.append(time.monotonic()),
                     rate=RateLimit(10, burst=1, shared=url, key=key))  # fmt: skip
        apps.append(app)
    for n in range(12):
        transport.publish("q", make(FLAKY, {"n": n}, queue="q").encode())
    import threading

    runners = [threading.Thread(target=a.run_until_empty, kwargs={"timeout": 20}) for a in apps]
    for runner in runners:
        runner.start()
    for runner in runners:
        runner.join(30)
    assert len(starts) == 12
    starts.sort()
    assert starts[-1] - starts[0] >= 11 / 10 - 0.05  # 12 starts at 10/s between both workers
    import redis

    redis.Redis.from_url(url).delete(key)


def test_a_bad_rate_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="rate"):
        RateLimit(0)
    with pytest.raises(ConfigurationError, match="burst"):
        RateLimit(5, burst=0)


def test_a_handlers_own_timeout_error_is_not_taken_for_its_time_limit(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    app = make_app(max_attempts=1)

    @app.handler(SLOW, timeout=5.0)
    async def slow(message: Message) -> None:
        await asyncio.sleep(0)
        raise TimeoutError("the payment service did not answer")

    transport.publish("q", make(SLOW, {}, queue="q").encode())
    app.run_until_empty(timeout=10)
    (dead,) = dlq_envelopes(transport)
    assert dead.dead_letter is not None
    assert dead.dead_letter["exception"] == "TimeoutError"
    assert dead.dead_letter["error"] == "the payment service did not answer"
    app.close()
