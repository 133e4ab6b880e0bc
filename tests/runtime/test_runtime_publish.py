"""Producing through the App: ids, traces, delays, batches, children."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from babelq.envelope import decode, now_ms
from babelq.errors import ConfigurationError
from babelq.runtime import App, Message
from babelq.transports.memory import MemoryTransport

from .support import RecordingTransport

URN = "urn:babel:orders:created"
NEXT = "urn:babel:shipping:requested"


def test_publish_returns_meta_id_and_writes_canonical_envelope(transport: RecordingTransport) -> None:
    app = App(transport, queue="orders")
    message_id = app.publish(URN, {"order_id": 1042}, correlation_id="b-1", priority=7, meta={"tenant": "a"})
    [body] = transport.peek_all("orders")
    env = decode(body)
    assert env.accepts()
    assert env.id == message_id
    assert (env.urn, env.data, env.queue, env.attempts) == (URN, {"order_id": 1042}, "orders", 0)
    assert (env.correlation_id, env.priority, env.meta["tenant"]) == ("b-1", 7, "a")
    assert env.trace_id and env.trace_id != env.id


def test_publish_to_another_queue_and_continue_a_trace(transport: RecordingTransport) -> None:
    app = App(transport, queue="orders")
    app.publish(URN, {}, queue="audit", trace_id="0b7e3f52-6a7f-4d53-9d8b-111111111111")
    [body] = transport.peek_all("audit")
    assert decode(body).trace_id == "0b7e3f52-6a7f-4d53-9d8b-111111111111"
    assert decode(body).queue == "audit"


def test_deliver_at_becomes_native_delay(transport: RecordingTransport) -> None:
    app = App(transport, queue="orders")
    app.publish(URN, {}, deliver_at=now_ms() + 400)
    assert transport.size("orders") == 1
    assert transport.reserve("orders", timeout=0) == []
    assert len(transport.reserve("orders", timeout=2)) == 1


def test_publish_many_batches_with_one_call(transport: RecordingTransport) -> None:
    calls: list[int] = []
    original = transport.publish_many

    def counting(queue: str, messages):  # type: ignore[no-untyped-def]
        calls.append(len(messages))
        original(queue, messages)

    transport.publish_many = counting  # type: ignore[method-assign]
    app = App(transport, queue="orders")
    ids = app.publish_many([(URN, {"n": n}) for n in range(5)], correlation_id="batch")
    assert calls == [5]
    envs = [decode(b) for b in transport.peek_all("orders")]
    assert [e.id for e in envs] == ids
    assert len(set(ids)) == 5
    assert [e.data["n"] for e in envs] == list(range(5))
    assert {e.correlation_id for e in envs} == {"batch"}
    assert len({e.trace_id for e in envs}) == 5  # independent messages start their own traces
    app.publish_many([(URN, {}), (URN, {})], trace_id="0b7e3f52-6a7f-4d53-9d8b-222222222222")
    assert {decode(b).trace_id for b in transport.peek_all("orders")[5:]} == {
        "0b7e3f52-6a7f-4d53-9d8b-222222222222"
    }


def test_handler_children_continue_the_trace(transport: RecordingTransport) -> None:
    app = App(transport, queue="orders")
    published: list[str] = []
    inbound: list[Message] = []

    @app.handler(URN)
    def created(message: Message) -> None:
        inbound.append(message)
        published.append(app.publish(NEXT, {"order_id": message.data["order_id"]}, queue="shipping"))
        app.send(message.child(NEXT, {"via": "child"}, queue="shipping"))

    app.publish(URN, {"order_id": 7})
    app.run_until_empty()
    out = [decode(b) for b in transport.peek_all("shipping")]
    assert len(out) == 2
    assert {e.trace_id for e in out} == {inbound[0].trace_id}
    assert inbound[0].id not in {e.id for e in out}
    assert published[0] == out[0].id
    assert out[1].data == {"via": "child"} and out[1].queue == "shipping"


def test_child_copies_trace_and_mints_new_id(transport: RecordingTransport) -> None:
    app = App(transport, queue="orders")
    seen: list[Message] = []
    app.register(URN, seen.append)
    app.publish(URN, {})
    app.run_until_empty()
    [msg] = seen
    child = msg.child(NEXT, {"a": 1}, correlation_id="c")
    assert child.trace_id == msg.trace_id
    assert child.id != msg.id
    assert child.queue == "orders" and child.correlation_id == "c"


def test_outside_handlers_every_publish_starts_a_trace(transport: RecordingTransport) -> None:
    app = App(transport, queue="orders")
    app.publish(URN, {})
    app.publish(URN, {})
    a, b = (decode(x) for x in transport.peek_all("orders"))
    assert a.trace_id != b.trace_id


def test_unbound_app_refuses_to_publish_and_binds_by_url() -> None:
    app = App(queue="orders")
    with pytest.raises(ConfigurationError, match="no transport"):
        app.publish(URN, {})
    app.bind("memory://test-runtime-bind")
    app.publish(URN, {})
    shared = MemoryTransport.from_url("memory://test-runtime-bind")
    assert shared.size("orders") == 1
    shared.purge("orders")


def test_duplicate_handler_registration_is_refused(make_app: Callable[..., App]) -> None:
    app = make_app()
    app.register(URN, lambda m: None)
    with pytest.raises(ConfigurationError, match="already"):
        app.register(URN, lambda m: None)
    with pytest.raises(ConfigurationError, match="callable"):
        app.register(NEXT, "not a function")  # type: ignore[arg-type]
