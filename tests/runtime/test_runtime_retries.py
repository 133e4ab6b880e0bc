"""Failures retry with attempts+1 and backoff, then dead-letter; nothing is silently dropped."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from babelq.envelope import decode, make
from babelq.errors import ConfigurationError
from babelq.runtime import App, Backoff, Message, PermanentError

from .support import RecordingTransport, dlq, dlq_envelopes

URN = "urn:babel:payments:charge.requested"


class BoomError(RuntimeError):
    pass


def always_fails(message: Message) -> None:
    raise BoomError(f"card declined for {message.data['n']}")


def test_each_retry_carries_attempts_plus_one_and_meta_unchanged(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    app = make_app(max_attempts=4)
    seen: list[tuple[int, bytes]] = []

    def handler(message: Message) -> None:
        seen.append((message.attempts, message.body))
        raise BoomError("nope")

    app.register(URN, handler)
    env = make(URN, {"n": 1}, queue="q", meta={"x-custom": [1, 2]}, expire_at=2**50)
    transport.publish("q", env.encode())

    app.run_until_empty(wait_delayed=True, timeout=5)

    assert [a for a, _ in seen] == [0, 1, 2, 3]
    for attempts, body in seen:
        doc = orjson.loads(body)
        assert doc["attempts"] == attempts
        assert doc["meta"] == env.meta  # meta is immutable: no deliver_at written on retries
        assert doc["trace_id"] == env.trace_id and doc["data"] == env.data
    assert len(transport.named("retry")) == 3
    [dead] = dlq_envelopes(transport)
    assert dead.attempts == 4
    assert dead.dead_letter is not None
    assert dead.dead_letter["reason"] == "failed"
    assert dead.dead_letter["error"] == "nope"
    assert dead.dead_letter["exception"].endswith("test_runtime_retries.BoomError")
    assert dead.dead_letter["attempts"] == 4
    assert dead.dead_letter["original_queue"] == "q"
    assert dead.meta == env.meta
    stats = app.stats()
    assert (stats["retried"], stats["failed"], stats["dead_lettered"], stats["handled"]) == (3, 4, 1, 0)


def test_retry_delays_follow_exponential_backoff(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    app = make_app(max_attempts=4, backoff=Backoff(base_ms=10, cap_ms=25, jitter=False))
    app.register(URN, always_fails)
    transport.publish("q", make(URN, {"n": 1}, queue="q").encode())
    app.run_until_empty(wait_delayed=True, timeout=5)
    assert transport.named("retry") == [10, 20, 25]


def test_retry_is_not_visible_before_its_delay(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    app = make_app(max_attempts=2, backoff=Backoff(base_ms=400, jitter=False))
    times: list[float] = []

    def handler(message: Message) -> None:
        times.append(time.monotonic())
        raise BoomError("x")

    app.register(URN, handler)
    transport.publish("q", make(URN, {"n": 1}, queue="q").encode())
    assert app.run_until_empty() == 1  # the retry waits: the queue has nothing ready
    assert transport.size("q") == 1
    app.run_until_empty(wait_delayed=True, timeout=5)
    assert len(times) == 2
    assert times[1] - times[0] >= 0.38


def test_reconciled_attempts_count_toward_max_attempts(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    """A broker whose own counter is ahead of the body (SQS-style max) exhausts sooner."""
    app = make_app(max_attempts=3)
    app.register(URN, always_fails)
    original_reserve = transport.reserve

    def reserve(queue: str, *, max_messages: int = 1, timeout: float = 0.0) -> list:  # type: ignore[type-arg]
        batch = original_reserve(queue, max_messages=max_messages, timeout=timeout)
        for delivery in batch:
            delivery.reconcile = lambda body_attempts: max(body_attempts, 2)
        return batch

    transport.reserve = reserve  # type: ignore[method-assign]
    transport.publish("q", make(URN, {"n": 1}, queue="q").encode())
    app.run_until_empty(wait_delayed=True, timeout=5)
    assert transport.named("retry") == []
    [dead] = dlq_envelopes(transport)
    assert dead.attempts == 3


@settings(max_examples=300, deadline=None)
@given(
    base=st.integers(0, 10_000),
    cap=st.integers(0, 1_000_000),
    failures=st.integers(1, 200),
    seed=st.integers(),
)
def test_full_jitter_stays_within_the_exponential_ceiling(
    base: int, cap: int, failures: int, seed: int
) -> None:
    backoff = Backoff(base_ms=base, cap_ms=cap, rng=random.Random(seed))
    ceiling = min(cap, base * 2 ** (failures - 1))
    assert backoff.ceiling_ms(failures) == ceiling
    assert 0 <= backoff.delay_ms(failures) <= ceiling


def test_full_jitter_spreads_delays() -> None:
    backoff = Backoff(base_ms=1_000, rng=random.Random(7))
    delays = {backoff.delay_ms(3) for _ in range(200)}
    assert len(delays) > 150 and max(delays) <= 4_000 and min(delays) < 1_000


def test_permanent_error_dead_letters_without_retry(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    app = make_app(max_attempts=5)

    def handler(message: Message) -> None:
        raise PermanentError("amount is negative", cause="validation")

    app.register(URN, handler)
    transport.publish("q", make(URN, {"n": 1}, queue="q").encode())
    app.run_until_empty()
    assert transport.named("retry") == []
    [dead] = dlq_envelopes(transport)
    assert dead.dead_letter is not None
    assert (dead.dead_letter["reason"], dead.dead_letter["cause"]) == ("failed", "validation")
    assert dead.dead_letter["error"] == "amount is negative"
    assert dead.attempts == 0


def test_success_after_a_failure_is_acked_once(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    app = make_app(max_attempts=3)
    runs: list[int] = []

    def flaky(message: Message) -> None:
        runs.append(message.attempts)
        if message.attempts == 0:
            raise BoomError("transient")

    app.register(URN, flaky)
    transport.publish("q", make(URN, {"n": 1}, queue="q").encode())
    app.run_until_empty(wait_delayed=True, timeout=5)
    assert runs == [0, 1]
    assert dlq(transport) == [] and transport.size("q") == 0 and transport.reserved_count("q") == 0
    stats = app.stats()
    assert (stats["handled"], stats["failed"], stats["retried"]) == (1, 1, 1)


class TestDeadLetteringOff:
    def test_release_policy_keeps_exhausted_message_with_max_delay_and_logs_error(
        self, transport: RecordingTransport, make_app: Callable[..., App], caplog: pytest.LogCaptureFixture
    ) -> None:
        app = make_app(max_attempts=1, dead_letter="release", max_delay_ms=60_000)
        app.register(URN, always_fails)
        body = make(URN, {"n": 1}, queue="q").encode()
        transport.publish("q", body)
        transport.publish("q", b"poison!")
        with caplog.at_level("ERROR", logger="babelq.runtime"):
            app.run_until_empty()
        assert dlq(transport) == []
        assert transport.named("release") == [60_000, 60_000]
        assert sorted(transport.peek_all("q")) == sorted([body, b"poison!"])
        assert len([r for r in caplog.records if r.levelname == "ERROR"]) == 2
        assert app.stats()["exhausted_kept"] == 2

    def test_delete_policy_drops_and_says_so(
        self, transport: RecordingTransport, make_app: Callable[..., App], caplog: pytest.LogCaptureFixture
    ) -> None:
        app = make_app(max_attempts=1, dead_letter="delete")
        app.register(URN, always_fails)
        env = make(URN, {"n": 1}, queue="q")
        transport.publish("q", env.encode())
        with caplog.at_level("ERROR", logger="babelq.runtime"):
            app.run_until_empty()
        assert dlq(transport) == [] and transport.size("q") == 0 and transport.reserved_count("q") == 0
        assert any(env.id in r.getMessage() and r.levelname == "ERROR" for r in caplog.records)
        assert app.stats()["deleted"] == 1


def test_settings_are_validated() -> None:
    with pytest.raises(ConfigurationError, match="max_attempts"):
        App(max_attempts=0)
    with pytest.raises(ConfigurationError, match="dead_letter"):
        App(dead_letter="drop")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="concurrency"):
        App(concurrency=0)


def test_dlq_record_can_be_redriven_and_handled(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    from babelq.envelope import redrive

    app = make_app(max_attempts=1)
    fail = {"on": True}

    def handler(message: Message) -> None:
        if fail["on"]:
            raise BoomError("down")

    app.register(URN, handler)
    env = make(URN, {"n": 1}, queue="q")
    transport.publish("q", env.encode())
    app.run_until_empty()
    [record] = dlq(transport)
    fail["on"] = False
    transport.publish("q", redrive(decode(record)).encode())
    app.run_until_empty()
    assert app.stats()["handled"] == 1
