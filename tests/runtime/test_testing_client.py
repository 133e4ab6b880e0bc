"""babelq.testing: an App's handlers in-process, and what happened to each message."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
from pathlib import Path

from babelq.envelope import make, original_bytes
from babelq.outbox import Outbox
from babelq.runtime import App, Backoff, Message, PermanentError
from babelq.testing import TestBroker
from babelq.transports.memory import MemoryTransport

URN = "urn:babel:orders:created"
NEXT = "urn:babel:shipping:requested"


@dataclasses.dataclass
class Order:
    order_id: int


def build_app(transport: object = "redis://127.0.0.1:1/15", backoff: Backoff | None = None) -> App:
    """An App bound to a broker that is not there: the test broker must stand in for it."""
    app = App(transport, queue="orders", max_attempts=3, backoff=backoff)  # type: ignore[arg-type]
    tries: dict[int, int] = {}

    @app.handler(URN)
    async def created(order: Order) -> None:
        await asyncio.sleep(0)
        tries[order.order_id] = tries.get(order.order_id, 0) + 1
        if order.order_id == 2 and tries[2] < 3:
            raise RuntimeError("flaky")
        if order.order_id == 3:
            raise PermanentError("closed account", cause="refused")
        app.publish(NEXT, {"order_id": order.order_id}, queue="shipping")

    return app


def test_every_fate_is_recorded_and_retries_run_at_once() -> None:
    app = build_app()
    with TestBroker(app) as broker:
        for n in (1, 2, 3):
            broker.publish(URN, Order(n))
        broker.publish(URN, {"order_id": "x"})
        broker.publish_body(b"{not json")
        assert broker.drain(timeout=5) == 7
        fates = [(r.fate, r.data["order_id"] if r.data else None) for r in broker.records]
        assert sorted(fates, key=str) == sorted(
            [("handled", 1), ("retried", 2), ("retried", 2), ("handled", 2), ("dead_lettered", 3),
             ("dead_lettered", "x"), ("dead_lettered", None)],
            key=str,
        )
        causes = sorted(str(r.cause) for r in broker.dead_lettered)
        assert causes == ["None", "refused", "schema"]  # poison has a reason, no cause
        assert [e.data for e in broker.messages("shipping")] == [{"order_id": 1}, {"order_id": 2}]
        poison = [b for b in broker.dead_letters() if b"poison" in b]
        assert [original_bytes(b) for b in poison] == [b"{not json"]
    assert app._url == "redis://127.0.0.1:1/15" and app._transport is None  # given back


def test_real_backoff_keeps_the_apps_policy() -> None:
    # no jitter: the first retry waits exactly a second (jittered, it could come within the drain)
    app = build_app(MemoryTransport(), Backoff(base_ms=1_000, jitter=False))
    with TestBroker(app, real_backoff=True) as broker:
        broker.publish(URN, Order(2))
        broker.drain(timeout=0.3)  # the first retry is not due yet
        assert [r.fate for r in broker.records] == ["retried"]
        assert broker.retried[0].delay_ms > 0
    assert app.policy.backoff.base_ms > 0


pytest_plugins = ["babelq.testing.plugin"]


def test_the_pytest_fixture(babelq_broker: object) -> None:
    app = App("memory://", queue="q")
    seen: list[int] = []

    @app.handler(URN)
    def created(message: Message) -> None:
        seen.append(message.data["order_id"])

    broker = babelq_broker(app)  # type: ignore[operator]
    broker.publish(URN, {"order_id": 5})
    broker.drain()
    assert seen == [5] and [r.fate for r in broker.records] == ["handled"]


def test_the_outbox_is_relayed_into_the_test_broker_and_a_rollback_sends_nothing(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/app.db"
    db = sqlite3.connect(tmp_path / "app.db")
    outbox = Outbox()
    outbox.init_schema(db)
    with db:  # committed: relayed
        outbox.add(db, make(URN, {"order_id": 1}), queue="orders")
    try:
        with db:  # rolled back: never relayed
            outbox.add(db, make(URN, {"order_id": 99}), queue="orders")
            raise RuntimeError("the view failed")
    except RuntimeError:
        pass
    db.close()
    app = build_app(MemoryTransport())
    with TestBroker(app) as broker:
        assert broker.relay(url) == 1
        assert [m.data for m in broker.messages("orders")] == [{"order_id": 1}]
        assert broker.drain() == 1
        assert [(r.fate, r.data["order_id"] if r.data else None) for r in broker.records] == [("handled", 1)]
        assert [m.data for m in broker.messages("shipping")] == [{"order_id": 1}]
        assert broker.relay(url) == 0  # marked published: never twice
