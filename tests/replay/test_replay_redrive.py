"""Redrive with --dry-run and --to, and the replay mark handlers read, on SQLite and live Redis."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from babelq.envelope import annotate, decode, make
from babelq.errors import ConfigurationError
from babelq.pipelines.dlq import redrive_messages, selector
from babelq.runtime import App, Message, PermanentError
from babelq.runtime.replay import REPLAY_HEADER, bypass_external_effects, is_replay
from babelq.transports import Transport, open_transport
from conftest import ROOT, require_service

URN = "urn:babel:orders:created"
REDIS = "redis://127.0.0.1:6379/15"


@pytest.fixture(params=["sqlite", "redis"])
def broker(request: pytest.FixtureRequest, tmp_path: Path, unique_queue: str) -> Iterator[str]:
    if request.param == "redis":
        require_service("redis")
        url = REDIS
    else:
        url = f"sqlite:///{tmp_path}/q.db"
    yield url
    if request.param == "redis":
        cleanup = open_transport(url)
        for q in (
            unique_queue,
            unique_queue + ".dlq",
            unique_queue + "-sandbox",
            unique_queue + "-sandbox.dlq",
        ):
            cleanup.purge(q)
        cleanup.close()


def _dead_letters(broker: str, queue: str, n: int) -> list[str]:
    """Publish ``n`` orders whose handler refuses them: they end on ``queue.dlq``; returns their ids."""
    app = App(broker, queue=queue, poll_timeout=0.05)

    def refuse(message: Message) -> None:
        raise PermanentError("card declined")

    app.register(URN, refuse)
    ids = [app.publish(URN, {"order_id": i}) for i in range(n)]
    app.run_until_empty(timeout=10)
    assert app.stats()["dead_lettered"] == n
    app.close()
    return ids


def _bodies(transport: Transport, queue: str) -> list[bytes]:
    held = transport.reserve(queue, max_messages=100)
    transport.release_many(held)
    return sorted(d.body for d in held)


class Handled:
    """A handler recording what it saw and which external effects it fired."""

    def __init__(self) -> None:
        self.replays: list[bool] = []
        self.emails: list[int] = []

    def __call__(self, message: Message) -> None:
        self.replays.append(message.is_replay())
        assert is_replay() is message.is_replay()  # the module function reads the current message
        bypass_external_effects(lambda: self.emails.append(message.data["order_id"]))


def test_dry_run_writes_nothing(broker: str, unique_queue: str) -> None:
    _dead_letters(broker, unique_queue, 3)
    transport = open_transport(broker)
    dlq = unique_queue + ".dlq"
    before = _bodies(transport, dlq)
    result = redrive_messages(transport, dlq, selector(), dry_run=True)
    assert (result.redriven, result.dry_run) == (3, True)
    assert dict(result.by_reason) == {("failed", ""): 3}
    assert dict(result.to_queues) == {unique_queue: 3}
    assert "would redrive 3 from" in result.lines(dlq)[0]
    assert result.lines(dlq)[-1] == "dry run: nothing was published or removed"
    assert transport.size(unique_queue) == 0  # nothing published
    assert _bodies(transport, dlq) == before  # nothing removed or changed
    transport.close()


def test_redrive_marks_replays_and_handlers_skip_effects(broker: str, unique_queue: str) -> None:
    ids = _dead_letters(broker, unique_queue, 2)
    transport = open_transport(broker)
    result = redrive_messages(transport, unique_queue + ".dlq", selector())
    assert (result.redriven, result.marked) == (2, True)
    assert transport.size(unique_queue + ".dlq") == 0
    [first, *_] = held = transport.reserve(unique_queue, max_messages=10)
    assert first.carried_headers.get(REPLAY_HEADER) == "1"
    env = decode(first.body)
    assert env.attempts == 0 and env.dead_letter is None and env.id in ids
    assert "bq-replay-bypass" not in first.body.decode()  # the mark rides beside the body, never in it
    transport.release_many(held)

    handled = Handled()
    app = App(broker, queue=unique_queue, poll_timeout=0.05)
    app.register(URN, handled)
    app.publish(URN, {"order_id": 99})  # a first delivery beside the replays
    app.run_until_empty(timeout=10)
    assert sorted(handled.replays) == [False, True, True]
    assert handled.emails == [99]  # the replays skipped the external effect
    app.close()
    transport.close()


def test_to_queue_and_no_mark(broker: str, unique_queue: str) -> None:
    _dead_letters(broker, unique_queue, 2)
    sandbox = unique_queue + "-sandbox"
    transport = open_transport(broker)
    dlq = unique_queue + ".dlq"
    with pytest.raises(ConfigurationError, match="to: must be another queue than the DLQ"):
        redrive_messages(transport, dlq, selector(), to_queue=dlq)
    result = redrive_messages(transport, dlq, selector(), to_queue=sandbox, limit=1)
    assert (result.redriven, result.not_selected, dict(result.to_queues)) == (1, 1, {sandbox: 1})
    assert transport.size(unique_queue) == 0 and transport.size(sandbox) == 1

    # a replay that fails again keeps its mark on the DLQ; --no-mark takes it off
    handled = Handled()
    app = App(broker, queue=sandbox, poll_timeout=0.05)

    def fail_again(message: Message) -> None:
        handled(message)
        raise PermanentError("still declined")

    app.register(URN, fail_again)
    app.run_until_empty(timeout=10)
    assert handled.replays == [True]
    [again] = transport.reserve(sandbox + ".dlq", max_messages=10)
    assert again.carried_headers.get(REPLAY_HEADER) == "1"
    transport.release(again)
    plain = redrive_messages(transport, sandbox + ".dlq", selector(), mark=False)
    assert (plain.redriven, plain.marked) == (1, False)
    [back] = transport.reserve(sandbox, max_messages=10)
    assert REPLAY_HEADER not in back.carried_headers
    transport.release(back)
    app.close()
    app = App(broker, queue=sandbox, poll_timeout=0.05)
    app.register(URN, handled)
    app.run_until_empty(timeout=10)
    assert handled.replays == [True, False]
    app.close()
    transport.close()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run(
        [sys.executable, "-m", "babelq.cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_cli_dry_run_to_and_errors(tmp_path: Path, unique_queue: str) -> None:
    broker = f"sqlite:///{tmp_path}/q.db"
    _dead_letters(broker, unique_queue, 3)
    dry = _cli("dlq", "redrive", "--broker", broker, "--queue", unique_queue, "--dry-run", "--to", "sandbox")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines() == [
        f"would redrive 3 from {unique_queue}.dlq: {{'sandbox': 3}}",
        "  3 failed",
        "they would be marked as replays (message.is_replay())",
        "not selected 0",
        "dry run: nothing was published or removed",
    ]
    transport = open_transport(broker)
    assert transport.size(unique_queue + ".dlq") == 3 and transport.size("sandbox") == 0

    refused = _cli("dlq", "--broker", broker, "--queue", unique_queue, "--to", "sandbox")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "babelq dlq: error: --to: only for a redrive (babelq dlq redrive --queue ...)"
    ]

    done = _cli(
        "dlq", "redrive", "--broker", broker, "--queue", unique_queue, "--to", "sandbox", "--limit", "2"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:2] == [
        f"redriven 2 from {unique_queue}.dlq: {{'sandbox': 2}}",
        "  2 failed",
    ]
    assert transport.size(unique_queue + ".dlq") == 1 and transport.size("sandbox") == 2
    held = transport.reserve("sandbox", max_messages=10)
    assert [d.carried_headers.get(REPLAY_HEADER) for d in held] == ["1", "1"]
    transport.close()


def test_envelope_is_unchanged_but_for_the_reset(tmp_path: Path) -> None:
    """The body a redrive writes is the dead letter's envelope with attempts 0 and no dead_letter
    (unknown keys kept), exactly: the mark never enters it."""
    broker = f"sqlite:///{tmp_path}/q.db"
    transport = open_transport(broker)
    original = make(URN, {"order_id": 1}, queue="orders", meta={"tenant": "t1"})
    transport.publish("orders.dlq", annotate(original.with_attempts(3), "failed", error="x").encode())
    redrive_messages(transport, "orders.dlq", selector())
    [back] = transport.reserve("orders", max_messages=1)
    assert back.body == original.encode()
    transport.close()


def test_report_warns_about_messages_no_handler_ran() -> None:
    from collections import Counter

    from babelq.pipelines.dlq import RedriveResult

    result = RedriveResult(
        redriven=3,
        to_queues=Counter({"orders": 3}),
        by_reason=Counter({("failed", "schema"): 2, ("failed", "max_attempts"): 1}),
    )
    assert result.lines("orders.dlq") == [
        "redriven 3 from orders.dlq: {'orders': 3}",
        "  2 failed (cause schema)",
        "  1 failed (cause max_attempts)",
        "they are marked as replays (message.is_replay())",
        "note: 2 of them never reached a handler (cause schema), so their external effects never fired; "
        "redrive those with --cause ... --no-mark",
        "not selected 0",
    ]
    result.marked = False
    assert not any(line.startswith("note:") for line in result.lines("orders.dlq"))
