"""Middleware: idempotency (with the conformance sequences), tracing/logging, order, metrics."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from babelq.envelope import make
from babelq.idempotency import MemoryStore
from babelq.idempotency.middleware import CLAIMED_ELSEWHERE, IdempotencyMiddleware
from babelq.runtime import App, Message, MessageContextFilter, Next, Outcome

from .support import RecordingTransport, dlq_envelopes

URN = "urn:babel:orders:created"
MANIFEST = Path(__file__).resolve().parent.parent / "conformance" / "manifest.json"


class SeenSet:
    """A plain seen-set store (no claim): the standard's three-method contract."""

    def __init__(self) -> None:
        self.ids: set[str] = set()
        self.remembered: list[str] = []

    def seen(self, message_id: str) -> bool:
        return message_id in self.ids

    def remember(self, message_id: str) -> None:
        self.ids.add(message_id)
        self.remembered.append(message_id)

    def forget(self, message_id: str) -> None:
        self.ids.discard(message_id)


def body_with_id(meta_id: str, n: int = 0) -> bytes:
    doc = orjson.loads(make(URN, {"n": n}, queue="q").encode())
    if meta_id:
        doc["meta"]["id"] = meta_id
    else:
        del doc["meta"]["id"]
    return orjson.dumps(doc)


def _sequences() -> list[Any]:
    cases = json.loads(MANIFEST.read_text())["idempotency"]["sequences"]["cases"]
    return [pytest.param(case, id=case["name"]) for case in cases]


@pytest.mark.parametrize("store_kind", ["seen-set", "claiming"])
@pytest.mark.parametrize("case", _sequences())
def test_conformance_idempotency_sequences_through_the_runtime(
    case: dict[str, Any], store_kind: str, transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    store: Any = SeenSet() if store_kind == "seen-set" else MemoryStore()
    app = make_app(middleware=[IdempotencyMiddleware(store)], max_attempts=1)
    effects: list[str] = []
    plan: dict[str, str] = {}

    def handler(message: Message) -> None:
        effects.append(message.id)  # the manifest's effects are handler invocations
        if plan["outcome"] == "throw":
            raise RuntimeError("handler failed")

    app.register(URN, handler)
    for n, delivery in enumerate(case["deliveries"]):
        if delivery.get("forget_before"):
            store.forget(delivery["meta_id"])
        plan["outcome"] = delivery.get("outcome", "ok")
        before = app.stats()
        transport.publish("q", body_with_id(delivery["meta_id"], n))
        assert app.run_until_empty() == 1
        after = app.stats()
        ran = after["handled"] + after["failed"] - before["handled"] - before["failed"]
        skipped = after["duplicates_skipped"] - before["duplicates_skipped"]
        if delivery["expect_effect"] == "run":
            assert (ran, skipped) == (1, 0), delivery
        else:
            assert (ran, skipped) == (0, 1), delivery
        assert transport.reserved_count("q") == 0 and transport.size("q") == 0
    assert len(effects) == case["expected_effects"]


def test_duplicate_is_acked_and_counted(transport: RecordingTransport, make_app: Callable[..., App]) -> None:
    app = make_app(middleware=[IdempotencyMiddleware(MemoryStore())])
    runs: list[str] = []
    app.register(URN, lambda m: runs.append(m.id))
    body = make(URN, {}, queue="q").encode()
    for _ in range(3):
        transport.publish("q", body)
    app.run_until_empty()
    assert len(runs) == 1
    assert app.stats()["duplicates_skipped"] == 2
    assert app.stats()["handled"] == 1
    assert transport.reserved_count("q") == 0


def test_remembered_only_after_success_so_retries_run(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    store = SeenSet()
    app = make_app(middleware=[IdempotencyMiddleware(store)], max_attempts=3)
    runs: list[int] = []

    def flaky(message: Message) -> None:
        runs.append(message.attempts)
        if message.attempts < 2:
            raise RuntimeError("transient")

    app.register(URN, flaky)
    env = make(URN, {}, queue="q")
    transport.publish("q", env.encode())
    app.run_until_empty(wait_delayed=True, timeout=5)
    assert runs == [0, 1, 2]
    assert store.remembered == [env.id]


def test_not_remembered_when_dead_lettered(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    store = SeenSet()
    app = make_app(middleware=[IdempotencyMiddleware(store)], max_attempts=1)

    def bad(message: Message) -> None:
        raise ValueError("bad")

    app.register(URN, bad)
    transport.publish("q", make(URN, {}, queue="q").encode())
    app.run_until_empty()
    assert store.remembered == []
    assert len(dlq_envelopes(transport)) == 1


def test_claimed_elsewhere_is_released_not_acked_nor_failed(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    store = MemoryStore()
    app = make_app(middleware=[IdempotencyMiddleware(store, busy_delay_ms=1234)])
    app.register(URN, lambda m: None)
    env = make(URN, {}, queue="q")
    assert store.claim(env.id)  # another worker is running it right now
    transport.publish("q", env.encode())
    app.run_until_empty()
    assert transport.named("release") == [1234]
    assert transport.peek_all("q") == [env.encode()]
    stats = app.stats()
    assert stats[CLAIMED_ELSEWHERE] == 1 and stats["failed"] == 0 and stats["retried"] == 0


def test_store_failure_after_success_still_acks(
    transport: RecordingTransport, make_app: Callable[..., App], caplog: pytest.LogCaptureFixture
) -> None:
    class Broken(SeenSet):
        def remember(self, message_id: str) -> None:
            raise ConnectionError("store down")

    app = make_app(middleware=[IdempotencyMiddleware(Broken())])
    runs: list[str] = []
    app.register(URN, lambda m: runs.append(m.id))
    transport.publish("q", make(URN, {}, queue="q").encode())
    with caplog.at_level("ERROR"):
        app.run_until_empty()
    assert len(runs) == 1 and transport.size("q") == 0 and transport.reserved_count("q") == 0
    assert any("store down" in (r.exc_text or "") or "remember" in r.getMessage() for r in caplog.records)


# -- order, with_data and custom middleware ------------------------------------------------------


def test_middleware_order_and_data_replacement(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    order: list[str] = []

    def outer(message: Message, call_next: Next) -> Outcome:
        order.append("outer-in")
        outcome = call_next(message)
        order.append(f"outer-out:{outcome.label}")
        return outcome

    def decrypt(message: Message, call_next: Next) -> Outcome:
        order.append("decrypt")
        return call_next(message.with_data({**message.data, "secret": "clear"}))

    app = make_app(middleware=[outer], max_attempts=2)
    app.use(decrypt)
    seen: list[dict[str, Any]] = []

    def handler(message: Message) -> None:
        seen.append(dict(message.data))
        if message.attempts == 0:
            raise RuntimeError("once")

    app.register(URN, handler)
    env = make(URN, {"secret": "cipher"}, queue="q")
    transport.publish("q", env.encode())
    app.run_until_empty(wait_delayed=True, timeout=5)
    assert order == ["outer-in", "decrypt", "outer-out:failed", "outer-in", "decrypt", "outer-out:handled"]
    assert seen == [{"secret": "clear"}, {"secret": "clear"}]


def test_retry_republishes_the_received_data_not_the_replaced_one(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    def decrypt(message: Message, call_next: Next) -> Outcome:
        return call_next(message.with_data({"secret": "clear"}))

    app = make_app(middleware=[decrypt], max_attempts=1)

    def handler(message: Message) -> None:
        raise RuntimeError("x")

    app.register(URN, handler)
    transport.publish("q", make(URN, {"secret": "cipher"}, queue="q").encode())
    app.run_until_empty()
    [dead] = dlq_envelopes(transport)
    assert dead.data == {"secret": "cipher"}


def test_exception_in_middleware_is_a_failed_attempt(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    def broken(message: Message, call_next: Next) -> Outcome:
        raise KeyError("schema registry unreachable")

    app = make_app(middleware=[broken], max_attempts=2)
    app.register(URN, lambda m: None)
    transport.publish("q", make(URN, {}, queue="q").encode())
    app.run_until_empty(wait_delayed=True, timeout=5)
    [dead] = dlq_envelopes(transport)
    assert dead.dead_letter is not None and dead.dead_letter["exception"] == "KeyError"
    assert app.stats()["retried"] == 1


def test_middleware_may_dead_letter_directly(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    def schema(message: Message, call_next: Next) -> Outcome:
        if "amount" not in message.data:
            return Outcome.dead_letter(
                "failed", error="data.amount: required", cause="schema", label="invalid"
            )
        return call_next(message)

    app = make_app(middleware=[schema])
    app.register(URN, lambda m: None)
    transport.publish("q", make(URN, {}, queue="q").encode())
    transport.publish("q", make(URN, {"amount": 5}, queue="q").encode())
    app.run_until_empty()
    [dead] = dlq_envelopes(transport)
    assert dead.dead_letter is not None and dead.dead_letter["cause"] == "schema"
    stats = app.stats()
    assert stats["invalid"] == 1 and stats["handled"] == 1


# -- logging and tracing ---------------------------------------------------------------------------


def test_every_runtime_log_line_about_a_message_carries_its_ids(
    transport: RecordingTransport, make_app: Callable[..., App], caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app(max_attempts=2)

    def handler(message: Message) -> None:
        raise RuntimeError("fail")

    app.register(URN, handler)
    env = make(URN, {}, queue="q")
    transport.publish("q", env.encode())
    with caplog.at_level(logging.DEBUG, logger="babelq.runtime"):
        app.run_until_empty(wait_delayed=True, timeout=5)
    about = [r for r in caplog.records if r.name == "babelq.runtime" and getattr(r, "message_id", None)]
    assert len(about) >= 6  # start+end debug per attempt, the retry warning, the dead-letter error
    for record in about:
        assert record.trace_id == env.trace_id  # type: ignore[attr-defined]
        assert record.message_id == env.id  # type: ignore[attr-defined]
        assert env.trace_id in record.getMessage() and env.id in record.getMessage()
    assert {r.levelname for r in about} >= {"DEBUG", "WARNING", "ERROR"}


def test_handler_log_lines_get_trace_through_the_filter(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler_log = logging.getLogger("tests.runtime.handler")
    sink = Collect()
    sink.addFilter(MessageContextFilter())
    sink.setFormatter(logging.Formatter("%(trace_id)s %(message_id)s %(message)s"))
    handler_log.addHandler(sink)
    handler_log.setLevel(logging.INFO)
    try:
        app = make_app()
        app.register(URN, lambda m: handler_log.info("charging %s", m.data["n"]))
        env = make(URN, {"n": 5}, queue="q")
        transport.publish("q", env.encode())
        app.run_until_empty()
        handler_log.info("outside")
    finally:
        handler_log.removeHandler(sink)
    assert sink.format(records[0]) == f"{env.trace_id} {env.id} charging 5"
    assert sink.format(records[1]) == "- - outside"


def test_stats_are_consistent_across_threads(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    app = make_app(concurrency=4, prefetch=16)
    lock = threading.Lock()
    count = {"n": 0}

    def handler(message: Message) -> None:
        with lock:
            count["n"] += 1
        if message.data["n"] % 10 == 0:
            raise PermissionError("every tenth fails")

    app.register(URN, handler)
    for n in range(1, 501):
        transport.publish("q", make(URN, {"n": n}, queue="q").encode())
    app.run_until_empty(wait_delayed=True, timeout=20)
    stats = app.stats()
    assert count["n"] == 450 + 50 * 3
    assert stats["handled"] == 450
    assert stats["failed"] == 150 and stats["retried"] == 100
    assert stats["dead_lettered.failed"] == 50 and stats["dead_lettered"] == 50
    assert stats["received"] == 600
