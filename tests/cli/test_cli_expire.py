"""``babelq expire`` as a person runs it: a pass, a SIGKILL at its worst moments, a broker outage.

The crash rows kill the real executable with SIGKILL at the crash points around the atomic move
(``expire.before_move``: a page judged, nothing sent; ``expire.after_move``: the page's expired
messages moved, nothing counted or printed), then count every message on the queue and on the
DLQ: none lost, none doubled. A second run finishes the job.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import orjson
import pytest

from babelq.envelope import make
from babelq.runtime.expiry_sweep import AFTER_MOVE, BEFORE_MOVE, PAGE
from babelq.runtime.failpoint import ENV
from babelq.transports import open_transport
from babelq.transports.base import Transport
from conftest import ROOT, require_service
from expiry_support import drain, ids

BABELQ = ROOT / ".venv" / "bin" / "babelq"
URN = "urn:babel:payments:transfer"


def command() -> list[str]:
    return [str(BABELQ)] if BABELQ.exists() else [sys.executable, "-m", "babelq.cli.main"]


def run_expire(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    full = {k: v for k, v in os.environ.items() if k not in ("BABELQ_BROKER", ENV)}
    full.update(env or {})
    return subprocess.run(
        [*command(), "expire", *args], capture_output=True, env=full, timeout=120, check=False
    )


def seed(transport: Transport, queue: str, n: int) -> tuple[list[bytes], list[bytes]]:
    """``n`` expired and ``n`` live messages, interleaved; returns (expired, live)."""
    past = int(time.time() * 1000) - 1_000
    expired = [make(URN, {"n": i}, queue=queue, expire_at=past).encode() for i in range(n)]
    live = [make(URN, {"n": i}, queue=queue).encode() for i in range(n)]
    for a, b in zip(expired, live, strict=True):
        transport.publish(queue, a)
        transport.publish(queue, b)
    return expired, live


def waiting(transport: Transport, queue: str) -> list[bytes]:
    """What waits on ``queue``, read without taking it."""
    out: list[bytes] = []
    cursor = None
    while True:
        page, cursor = transport.scan_waiting(queue, after=cursor)
        out += [d.body for d in page]
        if cursor is None:
            return out


def test_one_pass_prints_its_totals(sweep_broker_url: str, unique_queue: str) -> None:
    transport = open_transport(sweep_broker_url)
    expired, live = seed(transport, unique_queue, 5)
    proc = run_expire("--broker", sweep_broker_url, "--queue", unique_queue)
    assert proc.returncode == 0, proc.stderr.decode()
    assert json.loads(proc.stdout) == {"passes": 1, "read": 10, "expired": 5, "moved": 5}
    assert f"moved to '{unique_queue}.dlq'" in proc.stderr.decode()
    assert drain(transport, unique_queue) == live
    assert ids(drain(transport, f"{unique_queue}.dlq")) == ids(expired)
    transport.close()


@pytest.mark.parametrize("point", [BEFORE_MOVE, AFTER_MOVE])
def test_sigkill_at_the_worst_moments_loses_and_doubles_nothing(
    sweep_broker_url: str, unique_queue: str, point: str
) -> None:
    transport = open_transport(sweep_broker_url)
    n = PAGE  # two pages: the kill comes after the first page's move
    expired, live = seed(transport, unique_queue, n)

    killed = run_expire("--broker", sweep_broker_url, "--queue", unique_queue, env={ENV: point})
    assert killed.returncode == -signal.SIGKILL
    assert killed.stdout == b""

    on_queue = waiting(transport, unique_queue)
    on_dlq = waiting(transport, f"{unique_queue}.dlq")
    assert ids(on_queue) + ids(on_dlq) == ids(expired) + ids(live)  # nothing lost, nothing twice
    moved = ids(on_dlq)
    if point == BEFORE_MOVE:
        assert not moved
    else:  # the first page (PAGE messages read, half of them expired) went, all of it
        assert moved == ids(expired[: PAGE // 2])
    assert [b for b in on_queue if orjson.loads(b)["meta"]["id"] not in moved] == on_queue

    again = run_expire("--broker", sweep_broker_url, "--queue", unique_queue)
    assert again.returncode == 0, again.stderr.decode()
    assert ids(drain(transport, f"{unique_queue}.dlq")) == ids(expired)
    assert drain(transport, unique_queue) == live  # untouched, in order
    transport.close()


@pytest.mark.live
def test_every_waits_out_a_broker_outage(unique_queue: str) -> None:
    from runtime.faults import TcpProxy

    require_service("redis")
    direct = open_transport("redis://127.0.0.1:6379/15")
    proxy = TcpProxy(("127.0.0.1", 6379))  # not started: the broker is down
    url = f"redis://127.0.0.1:{proxy.port}/15"
    full = {k: v for k, v in os.environ.items() if k not in ("BABELQ_BROKER", ENV)}
    proc = subprocess.Popen(
        [*command(), "expire", "--broker", url, "--queue", unique_queue, "--every", "0.2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        seen: list[bytes] = []
        while b"unavailable" not in (line := proc.stderr.readline()):
            assert line, b"".join(seen).decode()
            seen.append(line)
        assert proc.poll() is None  # still running, waiting
        proxy.start()
        expired, live = seed(direct, unique_queue, 3)
        give_up = time.monotonic() + 60
        while len(waiting(direct, f"{unique_queue}.dlq")) < len(expired):
            assert time.monotonic() < give_up, "the command never swept after the broker came back"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0
        assert json.loads(out)["moved"] == 3
        assert drain(direct, unique_queue) == live
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proxy.stop()
        for queue in (unique_queue, f"{unique_queue}.dlq"):
            direct.purge(queue)
        direct.close()
