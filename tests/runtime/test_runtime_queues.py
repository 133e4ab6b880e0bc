"""One worker, several queues: read fairly in turn, each message settled on its own queue."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from babelq.cli.main import main
from babelq.envelope import decode, make
from babelq.errors import ConfigurationError, UnavailableError
from babelq.runtime import App, Message, PermanentError
from babelq.transports import open_transport
from babelq.transports.base import Delivery

from .support import RecordingTransport

URN = "urn:babel:jobs:run"


def publish(transport: Any, queue: str, n: int, **data: Any) -> None:
    for i in range(n):
        transport.publish(queue, make(URN, {"n": i, "q": queue, **data}, queue=queue).encode())


@pytest.mark.parametrize("concurrency", [1, 3])
def test_a_backlog_on_each_queue_is_read_in_turn(
    transport: RecordingTransport, make_app: Callable[..., App], concurrency: int
) -> None:
    app = make_app(concurrency=concurrency, prefetch=10)
    seen: list[str] = []
    lock = threading.Lock()

    @app.handler(URN)
    def handle(message: Message) -> None:
        with lock:
            seen.append(message.data["q"])

    publish(transport, "a", 100)
    publish(transport, "b", 100)
    assert app.drain(40, queue=["a", "b"]) == 40
    # a full queue never starves the other: batches alternate (handler threads ask for a refill
    # once half the prefetch is free, so their batches differ in size)
    counts = Counter(seen)
    assert counts == {"a": 20, "b": 20} if concurrency == 1 else min(counts["a"], counts["b"]) >= 10, counts
    assert transport.size("a") == 80 and transport.size("b") == 80
    assert app.run_until_empty(queue=["a", "b"]) == 160
    app.close()


def test_retries_and_dead_letters_stay_on_the_queue_the_message_came_from(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    app = make_app(max_attempts=2)
    tries: Counter[str] = Counter()

    @app.handler(URN)
    def handle(message: Message) -> None:
        tries[message.data["q"]] += 1
        if message.data.get("fate") == "dlq":
            raise PermanentError("refused", cause="refused")
        raise RuntimeError("flaky")

    publish(transport, "a", 1)
    publish(transport, "b", 1, fate="dlq")
    app.run_until_empty(queue=["a", "b"], wait_delayed=True)
    assert tries == {"a": 2, "b": 1}
    assert [decode(b).data["q"] for b in transport.peek_all("a.dlq")] == ["a"]
    assert [decode(b).data["q"] for b in transport.peek_all("b.dlq")] == ["b"]
    assert transport.size("a") == transport.size("b") == 0
    app.close()


def test_a_message_on_the_second_queue_is_taken_while_the_worker_waits(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    app = make_app().tune(poll_timeout=1.0)
    got = threading.Event()

    @app.handler(URN)
    def handle(message: Message) -> None:
        got.set()

    worker = threading.Thread(target=app.run, kwargs={"queue": ["a", "b"], "handle_signals": False})
    worker.start()
    try:
        time.sleep(0.5)  # the worker is waiting: both queues are empty
        published = time.monotonic()
        publish(transport, "b", 1)
        assert got.wait(5)
        assert time.monotonic() - published < 2.0  # at most one share of the poll, not forever
    finally:
        app.stop()
        worker.join(10)
    assert not worker.is_alive()
    app.close()


class OneQueueDown(RecordingTransport):
    """The real memory transport, with queue ``down`` refusing every fetch (a broker outage)."""

    def reserve(self, queue: str, *, max_messages: int = 1, timeout: float = 0.0) -> list[Delivery]:
        if queue == "down":
            raise UnavailableError("queue down: broker unreachable")
        return super().reserve(queue, max_messages=max_messages, timeout=timeout)


def test_a_queue_whose_fetches_fail_does_not_hold_up_the_others() -> None:
    transport = OneQueueDown(visibility_timeout=30.0)
    app = App(transport, queue="down")
    handled: list[int] = []

    @app.handler(URN)
    def handle(message: Message) -> None:
        handled.append(message.data["n"])
        if len(handled) == 6:
            app.stop()

    publish(transport, "up", 6)
    worker = threading.Thread(target=app.run, kwargs={"queue": ["down", "up"], "handle_signals": False})
    worker.start()
    worker.join(30)
    assert not worker.is_alive()
    assert sorted(handled) == list(range(6))
    assert app.stats()["fetch_errors"] >= 1  # the outage was seen, and waited out
    app.close()


@pytest.mark.parametrize("queues", [[], ["a", ""], ["a", "a"]])
def test_bad_queue_lists_are_one_line_errors(make_app: Callable[..., App], queues: Sequence[str]) -> None:
    app = make_app()
    with pytest.raises(ConfigurationError, match="queue"):
        app.drain(queue=queues)
    app.close()


# -- babelq worker --queue a,b, on Redis -------------------------------------------------------

APP_MODULE = """
from babelq.runtime import App

app = App(queue="unused")

@app.handler("urn:babel:jobs:run")
def run(message):
    pass
"""


@pytest.mark.live
def test_the_worker_command_reads_several_queues_on_redis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], unique_queue: str
) -> None:
    from conftest import require_service

    require_service("redis")
    url = "redis://127.0.0.1:6379/15"
    (tmp_path / "queues_worker_app.py").write_text(APP_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "queues_worker_app", raising=False)
    a, b = f"{unique_queue}-a", f"{unique_queue}-b"
    transport = open_transport(url)
    try:
        publish(transport, a, 7)
        publish(transport, b, 5)
        transport.publish(b, b"not an envelope")
        code = main(["worker", "--url", url, "--app", "queues_worker_app:app", "--queue", f"{a}, {b}",
                     "--until-empty"])
        assert code == 0
        stats = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert stats["handled"] == 12 and stats["dead_lettered.poison"] == 1
        assert transport.size(a) == transport.size(b) == 0
        assert transport.size(f"{b}.dlq") == 1 and transport.size(f"{a}.dlq") == 0
    finally:
        for q in (a, b, f"{a}.dlq", f"{b}.dlq"):
            transport.purge(q)
        transport.close()
        sys.modules.pop("queues_worker_app", None)


@pytest.mark.parametrize("spec", ["a,,b", "a,", "a,b,a"])
def test_a_bad_queue_list_on_the_command_line_is_one_line_and_exit_2(
    spec: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["worker", "--url", "memory://", "--app", "nowhere:app", "--queue", spec])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and "--queue" in err, err
