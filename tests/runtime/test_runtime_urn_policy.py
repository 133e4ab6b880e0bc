"""Policy per URN: a handler's own max_attempts, backoff and (async) timeout."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable

import pytest

from babelq.envelope import make
from babelq.errors import ConfigurationError
from babelq.runtime import App, Backoff, Message

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
    assert dead.dead_letter["exception"] == "babelq.runtime.routing.HandlerTimeoutError"
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
