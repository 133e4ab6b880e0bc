"""FastAPI: the App consumes for as long as the web app runs; endpoints publish without blocking.

No ``from __future__ import annotations`` here: FastAPI reads the endpoints' annotations, which
name objects local to each test."""

import threading
import time
from typing import Annotated, Any

import pytest
from fastapi import Depends, FastAPI
from fastapi.testclient import TestClient

from babelq.integrations.fastapi import Publisher, lifespan
from babelq.runtime import App, Message

URN = "urn:babel:orders:created"


def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "not reached in time"
        time.sleep(0.01)


@pytest.mark.parametrize("url", ["memory://fastapi-orders", pytest.param("redis", marks=pytest.mark.live)])
def test_an_endpoint_publishes_and_the_lifespan_consumes(url: str, unique_queue: str) -> None:
    if url == "redis":
        from conftest import require_service

        host, port = require_service("redis")
        url = f"redis://{host}:{port}/0"
    worker = App(url, queue=unique_queue, poll_timeout=0.1, grace_period=5)
    handled: list[int] = []

    @worker.handler(URN)
    async def created(message: Message) -> None:
        handled.append(message.data["order_id"])

    api = FastAPI(lifespan=lifespan(worker))

    publisher = Annotated[Publisher, Depends(Publisher.of(worker))]

    @api.post("/orders/{order_id}")
    async def place(order_id: int, publish: publisher) -> dict[str, str]:  # type: ignore[valid-type]
        return {"id": await publish(URN, {"order_id": order_id})}

    with TestClient(api) as client:
        consumers = [t for t in threading.enumerate() if t.name == "babelq-consumer"]
        assert len(consumers) == 1
        ids = [client.post(f"/orders/{n}").json()["id"] for n in range(5)]
        assert len(set(ids)) == 5
        wait_for(lambda: sorted(handled) == [0, 1, 2, 3, 4])
    consumers[0].join(1)
    assert not consumers[0].is_alive()  # stopped with the web app
    if url.startswith("redis"):
        from babelq.transports import open_transport

        check = open_transport(url)
        try:
            assert check.size(unique_queue) == 0
            check.purge(unique_queue)
        finally:
            check.close()


def test_a_publishing_only_web_app_starts_no_consumer() -> None:
    worker = App("memory://fastapi-only", queue="orders")
    api = FastAPI(lifespan=lifespan(worker, consume=False))

    publisher = Annotated[Publisher, Depends(Publisher.of(worker))]

    @api.post("/orders")
    async def place(publish: publisher) -> dict[str, str]:  # type: ignore[valid-type]
        return {"id": await publish(URN, {"order_id": 1})}

    with TestClient(api) as client:
        assert not [t for t in threading.enumerate() if t.name == "babelq-consumer"]
        assert client.post("/orders").status_code == 200
        assert worker.transport.size("orders") == 1
