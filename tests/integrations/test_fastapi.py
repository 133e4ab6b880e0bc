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
        url = f"redis://{host}:{port}/15"
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


SERVED_APP = '''
import os
from pathlib import Path
from typing import Annotated

from fastapi import Depends, FastAPI

from babelq.integrations.fastapi import Publisher, lifespan
from babelq.runtime import App, Message

worker = App(os.environ["SHOP_BROKER"], queue=os.environ["SHOP_QUEUE"], poll_timeout=0.2, grace_period=5)
seen = Path(__file__).with_name("handled.txt")

@worker.handler("urn:babel:orders:created")
async def created(message: Message) -> None:
    with seen.open("a") as f:
        f.write(f"{message.data['order_id']}\\n")

api = FastAPI(lifespan=lifespan(worker))
publisher = Annotated[Publisher, Depends(Publisher.of(worker))]

@api.post("/orders/{order_id}")
async def place(order_id: int, publish: publisher) -> dict[str, str]:
    return {"id": await publish("urn:babel:orders:created", {"order_id": order_id})}
'''


@pytest.mark.live
def test_under_a_real_asgi_server_requests_publish_and_sigterm_stops_both(
    tmp_path: Any, unique_queue: str
) -> None:
    import os
    import signal
    import socket
    import subprocess
    import sys

    import httpx

    from babelq.transports import open_transport
    from conftest import require_service

    host, port = require_service("redis")
    url = f"redis://{host}:{port}/15"
    (tmp_path / "shop_api.py").write_text(SERVED_APP)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        http_port = probe.getsockname()[1]
    env = {**os.environ, "SHOP_BROKER": url, "SHOP_QUEUE": unique_queue}
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "shop_api:api", "--port", str(http_port), "--log-level", "info"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        base = f"http://127.0.0.1:{http_port}"
        wait_for(lambda: _answers(base), timeout=30)
        ids = [httpx.post(f"{base}/orders/{n}", timeout=10).json()["id"] for n in range(5)]
        assert len(set(ids)) == 5
        handled = tmp_path / "handled.txt"
        wait_for(lambda: handled.exists() and sorted(handled.read_text().split()) == list("01234"), 20)
        server.send_signal(signal.SIGTERM)
        out, _ = server.communicate(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    # uvicorn ends a SIGTERM'd server by raising the signal again once shut down cleanly
    assert server.returncode in (0, -signal.SIGTERM), out
    assert "Application shutdown complete" in out, out  # the lifespan (and its consumer) ended
    assert sorted(handled.read_text().split()) == list("01234")  # each once
    check = open_transport(url)
    try:
        assert check.size(unique_queue) == 0 and check.size(f"{unique_queue}.dlq") == 0
        check.purge(unique_queue)
    finally:
        check.close()


def _answers(base: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{base}/docs", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
