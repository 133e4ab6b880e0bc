"""Publishing from a coroutine: the same bytes and keys as a blocking publish, and a loop left free."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from babelq.envelope import decode, make
from babelq.errors import UnavailableError
from babelq.runtime import App, Message
from babelq.runtime.middleware import Publication, PublishNext
from babelq.transports import open_transport
from babelq.transports.memory import MemoryTransport

URN = "urn:babel:orders:created"


def test_publish_async_on_memory_writes_what_publish_writes() -> None:
    transport = MemoryTransport()
    app = App(transport, queue="orders")
    envelope = make(URN, {"order_id": 7, "note": "é"}, queue="orders")

    async def main() -> list[str]:
        sent = await app.send_async(envelope, queue="a")
        many = await app.publish_many_async([(URN, {"n": 1}), (URN, {"n": 2})], queue="b")
        one = await app.publish_async(URN, {"n": 3}, queue="b", correlation_id="c-1")
        return [sent, *many, one]

    ids = asyncio.run(main())
    app.send(envelope, queue="a2")
    assert transport.peek_all("a") == transport.peek_all("a2") == [envelope.encode()]
    assert [decode(b).id for b in transport.peek_all("b")] == ids[1:]
    assert decode(transport.peek_all("b")[2]).correlation_id == "c-1"
    assert app._sender is not None and app._sender.mode == "thread"


def test_publish_async_runs_publish_middleware() -> None:
    transport = MemoryTransport()
    app = App(transport, queue="orders")

    def stamp(publication: Publication, call_next: PublishNext) -> None:
        headers = {"x-tenant": "a"}
        call_next(Publication(publication.queue, publication.envelope, publication.delay_ms, headers))

    app.use_publish(stamp)
    asyncio.run(app.publish_async(URN, {"n": 1}))
    (delivery,) = transport.reserve("orders", timeout=0)
    assert delivery.headers == {"x-tenant": "a"}


def test_publish_async_while_the_broker_is_down_is_unavailable_in_one_line() -> None:
    app = App("redis://127.0.0.1:1/15", queue="orders")  # nothing listens on port 1
    with pytest.raises(UnavailableError) as caught:
        asyncio.run(app.publish_async(URN, {"n": 1}))
    assert "\n" not in str(caught.value) and "127.0.0.1:1" in str(caught.value)


@pytest.fixture
def redis_url() -> str:
    from conftest import require_service

    host, port = require_service("redis")
    return f"redis://{host}:{port}/15"


@pytest.fixture
def raw(redis_url: str) -> Iterator[Any]:
    import redis

    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.mark.live
@pytest.mark.parametrize("options", ["", "?delays=lease", "?laravel=1"])
def test_redis_publish_async_writes_the_keys_a_blocking_publish_writes(
    redis_url: str, raw: Any, unique_queue: str, options: str
) -> None:
    app = App(redis_url + options, queue=unique_queue)
    check = open_transport(redis_url + options)
    sync_q, async_q = f"{unique_queue}_s", f"{unique_queue}_a"
    envelopes = [make(URN, {"n": n}, queue=unique_queue) for n in range(3)]
    later = make(URN, {"n": 9}, queue=unique_queue)
    try:
        for env in envelopes:
            app.send(env, queue=sync_q)
        app.send(later, queue=sync_q, delay_ms=60_000)

        async def main() -> str:
            for env in envelopes:
                await app.send_async(env, queue=async_q)
            await app.send_async(later, queue=async_q, delay_ms=60_000)
            mode = app._sender.mode if app._sender is not None else ""
            await app.aclose()
            return mode

        assert asyncio.run(main()) == "asyncio"
        sync_keys = {k.decode().replace(sync_q, "Q") for k in raw.scan_iter(match=f"*{sync_q}*")}
        async_keys = {k.decode().replace(async_q, "Q") for k in raw.scan_iter(match=f"*{async_q}*")}
        assert sync_keys == async_keys and sync_keys
        ready = check.reserve(async_q, max_messages=10, timeout=0)
        assert [d.body for d in ready] == [e.encode() for e in envelopes]  # the delayed one waits
        assert check.size(async_q) == check.size(sync_q) - len(envelopes)
    finally:
        for queue in (sync_q, async_q):
            check.purge(queue)
        check.close()


@pytest.mark.live
def test_redis_publish_async_does_not_block_the_loop(redis_url: str, unique_queue: str) -> None:
    """While many publishes are awaited, a ticker on the same loop keeps ticking."""
    app = App(redis_url, queue=unique_queue)
    ticks: list[float] = []

    async def ticker(stop: asyncio.Event) -> None:
        while not stop.is_set():
            ticks.append(time.monotonic())
            await asyncio.sleep(0)

    async def main() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(ticker(stop))
        await asyncio.gather(*(app.publish_async(URN, {"n": n}) for n in range(200)))
        stop.set()
        await task
        await app.aclose()

    threads_before = threading.active_count()
    check = open_transport(redis_url)
    try:
        asyncio.run(main())
        assert check.size(unique_queue) == 200
        assert len(ticks) > 50  # the ticker ran between the awaited round trips
        assert threading.active_count() <= threads_before  # no worker thread carried the writes
    finally:
        check.purge(unique_queue)
        check.close()


@pytest.mark.live
def test_an_async_handler_awaits_its_downstream_publish(redis_url: str, unique_queue: str) -> None:
    app = App(redis_url, queue=unique_queue)
    downstream = f"{unique_queue}_next"

    @app.handler(URN)
    async def created(message: Message) -> None:
        data = {"order": message.data["n"]}
        await app.publish_async("urn:babel:shipping:requested", data, queue=downstream)

    try:
        app.publish_many([(URN, {"n": n}) for n in range(5)])
        assert app.run_until_empty() == 5
        out = open_transport(redis_url)
        try:
            bodies = [d.body for d in out.reserve(downstream, max_messages=10, timeout=0)]
        finally:
            out.close()
        traces = {decode(b).trace_id for b in bodies}
        assert sorted(decode(b).data["order"] for b in bodies) == [0, 1, 2, 3, 4]
        assert len(traces) == 5  # each continues its own inbound message's trace
    finally:
        for queue in (unique_queue, downstream):
            app.transport.purge(queue)
        app.close()
