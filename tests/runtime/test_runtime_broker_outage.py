"""``App.run()`` (what ``babelq worker`` runs) when the broker goes away and comes back.

Expected: one WARNING line per failed attempt naming the broker (URL redacted) and the error,
no traceback (those only at DEBUG), capped backoff, and once the broker is back the worker
carries on by itself: everything published during the outage is handled.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from babelq.envelope import make
from babelq.runtime import App, Message
from babelq.transports import open_transport

from .faults import TcpProxy

URN = "urn:babel:jobs:run"
REDIS = "redis://127.0.0.1:6379/15"


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, f"{what}: not reached within {timeout} s"
        time.sleep(0.01)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def run_in_thread(app: App) -> threading.Thread:
    thread = threading.Thread(target=lambda: app.run(handle_signals=False), daemon=True)
    thread.start()
    return thread


def no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []
    assert "Traceback" not in caplog.text


@pytest.fixture
def queue(unique_queue: str) -> Iterator[str]:
    from conftest import require_service

    require_service("redis")
    yield unique_queue
    transport = open_transport(REDIS)
    for name in (unique_queue, f"{unique_queue}.dlq"):
        transport.purge(name)
    transport.close()


def test_an_unreachable_broker_is_retried_with_one_redacted_line_per_attempt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pytest.importorskip("redis")
    port = free_port()  # nothing listens here
    app = App(f"redis://:s3cret@127.0.0.1:{port}/15", queue="orders", poll_timeout=0.1)
    app.register(URN, lambda message: None)
    with caplog.at_level(logging.INFO, logger="babelq"):
        thread = run_in_thread(app)
        time.sleep(1.0)
        app.stop()
        thread.join(5)
    assert not thread.is_alive()
    lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert 2 <= len(lines) <= 6, [r.getMessage() for r in lines]  # backoff, not a hot loop
    for record in lines:
        text = record.getMessage()
        assert f"redis://:***@127.0.0.1:{port}/15" in text and "s3cret" not in text
        assert "onnect" in text  # the error itself ("Connection refused", "Error 111 connecting...")
        assert "\n" not in text
    no_tracebacks(caplog)
    assert app.stats()["fetch_errors"] >= 2


@pytest.mark.live
@pytest.mark.slow
def test_the_worker_carries_on_when_the_broker_comes_back(
    queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    direct = open_transport(REDIS)
    with TcpProxy(("127.0.0.1", 6379)) as proxy:
        url = f"redis://127.0.0.1:{proxy.port}/15?visibility_timeout=10"
        app = App(url, queue=queue, poll_timeout=0.2)
        effects: Counter[int] = Counter()
        lock = threading.Lock()

        def handler(message: Message) -> None:
            with lock:
                effects[message.data["n"]] += 1

        def handled() -> int:
            with lock:
                return sum(effects.values())

        app.register(URN, handler)
        for n in range(20):
            direct.publish(queue, make(URN, {"n": n}, queue=queue).encode())
        with caplog.at_level(logging.INFO, logger="babelq"):
            thread = run_in_thread(app)
            wait_for(lambda: handled() == 20, 10, "20 handled before the outage")
            wait_for(lambda: direct.reserved(queue) == 0, 5, "acks flushed")
            proxy.stop()  # the broker is unreachable
            for n in range(20, 50):  # others still publish
                direct.publish(queue, make(URN, {"n": n}, queue=queue).encode())
            wait_for(lambda: app.stats()["fetch_errors"] >= 3, 10, "three failed attempts")
            proxy.start()
            wait_for(lambda: handled() == 50, 15, "everything published during the outage handled")
            app.stop()
            thread.join(10)
    direct.close()
    assert effects == Counter(range(50))
    outage = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(outage) == app.stats()["fetch_errors"] >= 3
    assert all(f"redis://127.0.0.1:{proxy.port}/15" in line for line in outage), outage
    assert any("reachable again" in r.getMessage() for r in caplog.records)
    no_tracebacks(caplog)
