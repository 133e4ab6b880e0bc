"""Every delivery is classified before any handler runs: poison, expired, early, unknown URN."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable

import orjson
import pytest

from babelq.envelope import decode, make, now_ms, original_bytes
from babelq.runtime import App, Message

from .support import RecordingTransport, dlq, dlq_envelopes

URN = "urn:babel:orders:created"

POISON_BODIES = [
    pytest.param(b"not json at all", "raw", id="not-json"),
    pytest.param(b"\xff\xfe{\"job\":1}", "raw_base64", id="not-utf8"),
    pytest.param(b"[1,2,3]", "raw", id="array"),
    pytest.param(b'{"trace_id":"t","data":{},"meta":{"id":"x","schema_version":1},"attempts":0}', "in_place",
                 id="no-urn"),
    pytest.param(
        b'{"job":"urn:babel:orders:created","trace_id":"t","data":{},'
        b'"meta":{"id":"x","queue":"q","lang":"go","schema_version":2,"created_at":1},"attempts":0}',
        "in_place",
        id="schema-version-2",
    ),
    pytest.param(
        b'{"job":"urn:babel:orders:created","trace_id":"t","data":[],'
        b'"meta":{"id":"x","schema_version":1},"attempts":0}', "in_place", id="data-not-object",
    ),
    pytest.param(
        b'{ "job" : "urn:babel:orders:created", "trace_id":"t","data":{},'
        b'"meta":{"id":"x","schema_version":1},"attempts":true }', "in_place", id="bool-attempts-spaced",
    ),
]


@pytest.mark.parametrize(("body", "kept"), POISON_BODIES)
def test_poison_is_dead_lettered_with_exact_bytes_and_never_handled(
    body: bytes, kept: str, transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    app = make_app()
    calls: list[Message] = []
    app.register(URN, calls.append)
    transport.publish("q", body)

    assert app.run_until_empty() == 1

    assert calls == []
    [record] = dlq(transport)
    assert original_bytes(record) == body
    block = orjson.loads(record)["dead_letter"]
    assert block["reason"] == "poison"
    assert block["original_queue"] == "q"
    assert block["original"] == kept
    assert block["error"]
    if kept == "raw_base64":
        assert base64.b64decode(orjson.loads(record)["raw"]) == body
    assert transport.named("retry") == []
    stats = app.stats()
    assert stats["poison"] == 1
    assert stats["dead_lettered.poison"] == 1
    assert stats["handled"] == 0
    assert transport.size("q") == 0


def test_accepted_message_reaches_handler_with_its_facts(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    app = make_app()
    seen: list[Message] = []
    app.register(URN, seen.append)
    env = make(URN, {"order_id": 1042}, queue="q", correlation_id="batch-7", meta={"tenant": "acme"})
    transport.publish("q", env.encode())

    app.run_until_empty()

    [msg] = seen
    assert msg.urn == URN
    assert msg.data == {"order_id": 1042}
    assert msg.id == env.id and msg.trace_id == env.trace_id
    assert msg.meta["tenant"] == "acme"
    assert msg.correlation_id == "batch-7"
    assert msg.attempts == 0
    assert msg.body == env.encode()
    assert msg.envelope == env
    assert msg.delivery_count == 1
    assert msg.queue == "q"
    with pytest.raises(TypeError):
        msg.data["order_id"] = 1  # type: ignore[index]
    with pytest.raises(AttributeError):
        msg.attempts = 3  # type: ignore[misc]


def test_urn_alias_is_routed(transport: RecordingTransport, make_app: Callable[..., App]) -> None:
    app = make_app()
    seen: list[str] = []
    app.register(URN, lambda m: seen.append(m.urn))
    doc = orjson.loads(make(URN, {}, queue="q").encode())
    doc["urn"] = doc.pop("job")
    transport.publish("q", orjson.dumps(doc))
    app.run_until_empty()
    assert seen == [URN]


def test_expired_message_is_dead_lettered_not_handled(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    app = make_app()
    calls: list[Message] = []
    app.register(URN, calls.append)
    env = make(URN, {"n": 1}, queue="q", expire_at=now_ms() - 5)
    fresh = make(URN, {"n": 2}, queue="q", expire_at=now_ms() + 60_000)
    transport.publish("q", env.encode())
    transport.publish("q", fresh.encode())

    app.run_until_empty()

    assert [m.data["n"] for m in calls] == [2]
    [dead] = dlq_envelopes(transport)
    assert dead.id == env.id and dead.data == {"n": 1}
    assert dead.dead_letter is not None
    assert dead.dead_letter["reason"] == "failed"
    assert dead.dead_letter["cause"] == "expired"
    assert dead.without_dead_letter() == decode(env.encode())
    assert app.stats()["expired"] == 1
    assert app.stats()["dead_lettered.failed"] == 1


def test_deliver_at_in_future_is_released_with_remaining_delay_and_handled_later(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    app = make_app()
    handled_at: list[int] = []
    app.register(URN, lambda m: handled_at.append(now_ms()))
    due = now_ms() + 300
    # Published without the native delay, as a broker without delays would deliver it.
    transport.publish("q", make(URN, {}, queue="q", deliver_at=due).encode())

    app.run_until_empty(wait_delayed=True, timeout=5)

    [delay] = transport.named("release")
    assert 200 <= delay <= 300
    assert len(handled_at) == 1
    assert handled_at[0] >= due
    assert app.stats()["deferred"] == 1
    assert app.stats()["handled"] == 1


def test_deliver_at_delay_is_capped_at_max_delay(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    app = make_app(max_delay_ms=1_000)
    app.register(URN, lambda m: None)
    transport.publish("q", make(URN, {}, queue="q", deliver_at=now_ms() + 3_600_000).encode())
    app.run_until_empty()
    assert transport.named("release") == [1_000]
    assert transport.size("q") == 1


def test_expiry_wins_over_deliver_at(transport: RecordingTransport, make_app: Callable[..., App]) -> None:
    app = make_app()
    app.register(URN, lambda m: None)
    transport.publish("q", make(URN, {}, queue="q", deliver_at=now_ms() + 60_000, expire_at=1).encode())
    app.run_until_empty()
    [dead] = dlq_envelopes(transport)
    assert dead.dead_letter is not None and dead.dead_letter["cause"] == "expired"


class TestUnknownURN:
    def _run(self, transport: RecordingTransport, app: App, *, wait_delayed: bool = False) -> bytes:
        app.register(URN, lambda m: None)
        body = make("urn:babel:orders:nobody-knows", {"x": 1}, queue="q").encode()
        transport.publish("q", body)
        app.run_until_empty(wait_delayed=wait_delayed, timeout=5)
        return body

    def test_fail_retries_then_dead_letters(
        self, transport: RecordingTransport, make_app: Callable[..., App]
    ) -> None:
        app = make_app(unknown_urn="fail", max_attempts=3)
        body = self._run(transport, app, wait_delayed=True)
        assert len(transport.named("retry")) == 2
        [dead] = dlq_envelopes(transport)
        assert dead.id == decode(body).id
        assert dead.attempts == 3
        assert dead.dead_letter is not None
        assert dead.dead_letter["reason"] == "failed"
        assert dead.dead_letter["cause"] == "unknown_urn"
        assert dead.dead_letter["exception"] == "babelq.errors.UnknownURNError"
        assert app.stats()["unknown_urn"] == 3

    def test_delete_acks_and_logs(
        self, transport: RecordingTransport, make_app: Callable[..., App], caplog: pytest.LogCaptureFixture
    ) -> None:
        app = make_app(unknown_urn="delete")
        with caplog.at_level("WARNING", logger="babelq.runtime"):
            body = self._run(transport, app)
        assert transport.size("q") == 0 and dlq(transport) == []
        assert transport.reserved_count("q") == 0
        assert any(decode(body).id in r.getMessage() for r in caplog.records)
        assert app.stats()["unknown_urn"] == 1

    def test_release_puts_it_back_unchanged_with_a_delay(
        self, transport: RecordingTransport, make_app: Callable[..., App]
    ) -> None:
        app = make_app(unknown_urn="release", unknown_urn_delay_ms=60_000)
        body = self._run(transport, app)
        assert transport.named("release") == [60_000]
        assert transport.peek_all("q") == [body]
        assert dlq(transport) == []

    def test_dead_letter_uses_reason_unknown_urn(
        self, transport: RecordingTransport, make_app: Callable[..., App]
    ) -> None:
        app = make_app(unknown_urn="dead_letter")
        body = self._run(transport, app)
        [dead] = dlq_envelopes(transport)
        assert dead.dead_letter is not None and dead.dead_letter["reason"] == "unknown_urn"
        assert dead.without_dead_letter() == decode(body)
        assert transport.named("retry") == []
        assert app.stats()["dead_lettered.unknown_urn"] == 1


def test_unknown_strategy_is_validated() -> None:
    from babelq.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="unknown_urn"):
        App(unknown_urn="ignore")  # type: ignore[arg-type]


def test_classification_happens_before_any_handler_with_mixed_batch(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    app = make_app(unknown_urn="dead_letter")
    handled: list[str] = []
    app.register(URN, lambda m: handled.append(m.id))
    good = make(URN, {}, queue="q")
    bodies = [
        b"{oops",
        make(URN, {}, queue="q", expire_at=1).encode(),
        make("urn:babel:orders:other", {}, queue="q").encode(),
        good.encode(),
    ]
    for body in bodies:
        transport.publish("q", body)
    start = time.monotonic()
    assert app.run_until_empty() == 4
    assert time.monotonic() - start < 2
    assert handled == [good.id]
    reasons = sorted(e.dead_letter["reason"] for e in dlq_envelopes(transport) if e.dead_letter)
    assert reasons == ["failed", "poison", "unknown_urn"]
