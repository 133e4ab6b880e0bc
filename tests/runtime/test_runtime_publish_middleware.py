"""Publish middleware: every App publish passes one visible chain before the transport."""

from __future__ import annotations

from dataclasses import replace

import pytest

from babelq.envelope import decode
from babelq.errors import ConfigurationError
from babelq.runtime import App
from babelq.runtime.middleware import Publication, PublishNext

from .support import RecordingTransport

URN = "urn:babel:orders:created"


def _stamp(name: str, seen: list[str]):  # type: ignore[no-untyped-def]
    def layer(publication: Publication, call_next: PublishNext) -> None:
        seen.append(name)
        data = dict(publication.envelope.data or {})
        data.setdefault("layers", []).append(name)
        call_next(replace(publication, envelope=publication.envelope.with_data(data)))

    return layer


def test_layers_run_in_order_and_may_replace_the_envelope(transport: RecordingTransport) -> None:
    seen: list[str] = []
    app = App(transport, queue="orders", publish_middleware=[_stamp("outer", seen)])
    app.use_publish(_stamp("inner", seen))
    message_id = app.publish(URN, {"n": 1})
    [body] = transport.peek_all("orders")
    env = decode(body)
    assert env.data == {"n": 1, "layers": ["outer", "inner"]}
    assert env.id == message_id and seen == ["outer", "inner"]


def test_send_and_publish_many_pass_the_chain_and_still_batch(transport: RecordingTransport) -> None:
    seen: list[str] = []
    calls: list[int] = []
    original = transport.publish_many

    def counting(queue: str, messages):  # type: ignore[no-untyped-def]
        calls.append(len(messages))
        original(queue, messages)

    transport.publish_many = counting  # type: ignore[method-assign]
    app = App(transport, queue="orders", publish_middleware=[_stamp("only", seen)])
    ids = app.publish_many([(URN, {"n": n}) for n in range(4)])
    assert calls == [4] and len(ids) == 4 and seen == ["only"] * 4
    sent = [decode(b).data for b in transport.peek_all("orders")]
    assert sent == [{"n": n, "layers": ["only"]} for n in range(4)]


def test_a_layer_that_raises_refuses_the_publication(transport: RecordingTransport) -> None:
    def refuse(publication: Publication, call_next: PublishNext) -> None:
        if (publication.envelope.data or {}).get("n") == 2:
            raise ConfigurationError("data.n: refused by the test layer")
        call_next(publication)

    app = App(transport, queue="orders").use_publish(refuse)
    app.publish(URN, {"n": 1})
    with pytest.raises(ConfigurationError, match=r"data\.n"):
        app.publish(URN, {"n": 2})
    assert [decode(b).data for b in transport.peek_all("orders")] == [{"n": 1}]


def test_a_layer_may_send_nothing_and_publish_many_returns_what_was_sent(
    transport: RecordingTransport,
) -> None:
    def odd_only(publication: Publication, call_next: PublishNext) -> None:
        if (publication.envelope.data or {})["n"] % 2:
            call_next(publication)

    app = App(transport, queue="orders", publish_middleware=[odd_only])
    ids = app.publish_many([(URN, {"n": n}) for n in range(5)])
    bodies = [decode(b) for b in transport.peek_all("orders")]
    assert [e.data for e in bodies] == [{"n": 1}, {"n": 3}]
    assert ids == [e.id for e in bodies]
