"""Crash proofs: a worker process killed mid-handler loses nothing; a SIGTERM loses and repeats nothing.

Each test seeds a durable queue with work, always-failing messages and poison, starts
``crash_worker.py`` as a subprocess with slow-ish handlers and four handler threads, kills
it while handlers run, lets a fresh worker finish the queue, then checks the handlers'
record (meta.id per completed handler) and the dead-letter queue, decoded.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from babelq.envelope import decode, make, original_bytes
from babelq.transports import open_transport

SCRIPT = Path(__file__).resolve().parent / "crash_worker.py"
WORK = "urn:babel:crash:work"
FAIL = "urn:babel:crash:fail"
VISIBILITY = 1.0
N_WORK = 40
POISON = [b"{not json", b'{"job":"urn:babel:crash:work","meta":{"schema_version":9},"data":{},"attempts":0}']


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.live)])
def broker_url(request: pytest.FixtureRequest, tmp_path: Path, unique_queue: str) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/q.db?visibility_timeout={VISIBILITY}"
        return
    pytest.importorskip("babelq.transports.redis", reason="the redis transport has not landed")
    from conftest import require_service

    require_service("redis")
    url = f"redis://127.0.0.1:6379/15?visibility_timeout={VISIBILITY}"
    yield url
    transport = open_transport(url)
    for queue in (unique_queue, f"{unique_queue}.dlq"):
        transport.purge(queue)
    transport.close()


def seed(url: str, queue: str) -> tuple[set[str], set[str]]:
    transport = open_transport(url)
    work = [make(WORK, {"n": n}, queue=queue) for n in range(N_WORK)]
    fail = [make(FAIL, {"n": n}, queue=queue) for n in range(3)]
    bodies = [e.encode() for e in work]
    for at, extra in zip((5, 15, 25, 30, 35), [f.encode() for f in fail] + POISON, strict=True):
        bodies.insert(at, extra)
    for body in bodies:
        transport.publish(queue, body)
    transport.close()
    return {e.id for e in work}, {e.id for e in fail}


def start_worker(
    url: str, queue: str, record: Path, mode: str, sleep_s: float, *, idem_table: str | None = None,
    handlers: str = "sync",
) -> subprocess.Popen[bytes]:
    path = os.pathsep.join([str(SCRIPT.parent), *sys.path])
    env = {**os.environ, "PYTHONPATH": path, "CRASH_HANDLERS": handlers}
    extra = [idem_table] if idem_table else []
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), url, queue, str(record), mode, "4", str(sleep_s), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"ready", proc.stderr.read() if proc.stderr else b""
    return proc


def recorded(record: Path) -> list[str]:
    return record.read_text().split() if record.exists() else []


def wait_for_handled(record: Path, at_least: int, proc: subprocess.Popen[bytes], timeout: float = 15) -> None:
    end = time.monotonic() + timeout
    while len(recorded(record)) < at_least:
        assert proc.poll() is None, "the worker exited early"
        assert time.monotonic() < end, "the worker handled too little in time"
        time.sleep(0.01)


def finish_queue(
    url: str, queue: str, record: Path, idem_table: str | None = None, handlers: str = "sync"
) -> None:
    """A fresh worker drains what is left (retries and reservations that came back included)."""
    time.sleep(VISIBILITY + 0.3)  # the killed worker's reservations expire
    proc = start_worker(url, queue, record, "drain", 0.01, idem_table=idem_table, handlers=handlers)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()


def check_dead_letters(url: str, queue: str, fail_ids: set[str]) -> None:
    transport = open_transport(url)
    try:
        assert transport.size(queue) == 0
        assert transport.reserve(queue, max_messages=10, timeout=0) == []
        records = [d.body for d in transport.reserve(f"{queue}.dlq", max_messages=100, timeout=0.5)]
    finally:
        transport.close()
    assert len(records) == len(fail_ids) + len(POISON)
    failed = [decode(r) for r in records if orjson.loads(r)["dead_letter"]["reason"] == "failed"]
    assert {e.id for e in failed} == fail_ids
    for env in failed:
        assert env.dead_letter is not None
        assert env.dead_letter["attempts"] == 2 and env.dead_letter["exception"] == "RuntimeError"
    poison = [original_bytes(r) for r in records if orjson.loads(r)["dead_letter"]["reason"] == "poison"]
    assert sorted(poison) == sorted(POISON)  # type: ignore[type-var]


@pytest.mark.slow
def test_sigkill_mid_handler_loses_nothing(broker_url: str, unique_queue: str, tmp_path: Path) -> None:
    work_ids, fail_ids = seed(broker_url, unique_queue)
    record = tmp_path / "handled.txt"
    proc = start_worker(broker_url, unique_queue, record, "run", 0.1)
    wait_for_handled(record, 8, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    before = len(recorded(record))
    assert before < N_WORK  # killed in the middle, with handlers running

    finish_queue(broker_url, unique_queue, record)

    handled = Counter(recorded(record))
    assert set(handled) == work_ids  # every message handled at least once, none lost
    check_dead_letters(broker_url, unique_queue, fail_ids)


@pytest.mark.slow
def test_a_worker_of_two_queues_killed_mid_handler_loses_nothing(
    broker_url: str, unique_queue: str, tmp_path: Path
) -> None:
    queues = [f"{unique_queue}-a", f"{unique_queue}-b"]
    seeded = [seed(broker_url, queue) for queue in queues]
    record = tmp_path / "handled.txt"
    proc = start_worker(broker_url, ",".join(queues), record, "run", 0.1)
    wait_for_handled(record, 8, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    assert len(recorded(record)) < 2 * N_WORK  # killed in the middle, with handlers running

    finish_queue(broker_url, ",".join(queues), record)

    assert set(recorded(record)) == seeded[0][0] | seeded[1][0]  # every message of both, none lost
    for queue, (_, fail_ids) in zip(queues, seeded, strict=True):
        check_dead_letters(broker_url, queue, fail_ids)  # each queue's dead letters on its own DLQ
    if broker_url.startswith("redis"):
        transport = open_transport(broker_url)
        for queue in queues:
            transport.purge(queue)
            transport.purge(f"{queue}.dlq")
        transport.close()


@pytest.mark.slow
def test_sigterm_is_graceful_nothing_lost_nothing_twice(
    broker_url: str, unique_queue: str, tmp_path: Path
) -> None:
    work_ids, fail_ids = seed(broker_url, unique_queue)
    record = tmp_path / "handled.txt"
    proc = start_worker(broker_url, unique_queue, record, "run", 0.1)
    wait_for_handled(record, 8, proc)
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err.decode()
    assert b"SIGTERM received" in err or len(recorded(record)) < N_WORK
    assert len(recorded(record)) < N_WORK

    finish_queue(broker_url, unique_queue, record)

    handled = Counter(recorded(record))
    assert set(handled) == work_ids
    assert max(handled.values()) == 1, [k for k, v in handled.items() if v > 1]
    check_dead_letters(broker_url, unique_queue, fail_ids)


@pytest.mark.slow
def test_async_handlers_sigkill_loses_nothing_and_sigterm_repeats_nothing(
    tmp_path: Path, unique_queue: str
) -> None:
    """The same two proofs with ``async def`` handlers: killed with coroutines in flight on the
    App's loop, nothing is lost; stopped with SIGTERM, the in-flight coroutines finish and are
    settled once."""
    url = f"sqlite:///{tmp_path}/q.db?visibility_timeout={VISIBILITY}"
    for signum, queue in ((signal.SIGKILL, f"{unique_queue}_k"), (signal.SIGTERM, f"{unique_queue}_t")):
        work_ids, fail_ids = seed(url, queue)
        record = tmp_path / f"handled_{queue}.txt"
        proc = start_worker(url, queue, record, "run", 0.1, handlers="async")
        wait_for_handled(record, 8, proc)
        os.kill(proc.pid, signum)
        _, err = proc.communicate(timeout=15)
        assert len(recorded(record)) < N_WORK
        if signum == signal.SIGTERM:
            assert proc.returncode == 0, err.decode()

        finish_queue(url, queue, record, handlers="async")

        handled = Counter(recorded(record))
        assert set(handled) == work_ids, signum  # every message handled, none lost
        if signum == signal.SIGTERM:
            assert max(handled.values()) == 1, [k for k, v in handled.items() if v > 1]
        check_dead_letters(url, queue, fail_ids)


@pytest.mark.slow
@pytest.mark.live
def test_sigkill_with_idempotency_claims_held_loses_nothing(tmp_path: Path, unique_queue: str) -> None:
    """SIGKILL between a claim and the handler's end: the claims of the dead worker expire, every
    message is handled, and only those killed mid-handler can run twice (the rest are skipped)."""
    from conftest import require_service

    require_service("postgres")
    import psycopg

    from babelq.idempotency.postgres_store import PostgresStore

    url = f"sqlite:///{tmp_path}/q.db?visibility_timeout={VISIBILITY}"
    table = f"t_crash_idem_{unique_queue[-8:]}"
    store = PostgresStore("postgresql://postgres@127.0.0.1:5432/test", table=table)
    store.migrate()
    store.close()
    try:
        work_ids, fail_ids = seed(url, unique_queue)
        record = tmp_path / "handled.txt"
        proc = start_worker(url, unique_queue, record, "run", 0.1, idem_table=table)
        wait_for_handled(record, 8, proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        assert len(recorded(record)) < N_WORK

        finish_queue(url, unique_queue, record, table)

        handled = Counter(recorded(record))
        assert set(handled) == work_ids  # none lost, the dead worker's claims did not block them
        twice = [k for k, v in handled.items() if v > 1]
        assert max(handled.values()) <= 2 and len(twice) <= 4, twice  # at most the 4 in-flight handlers
        check_dead_letters(url, unique_queue, fail_ids)
    finally:
        with psycopg.connect("postgresql://postgres@127.0.0.1:5432/test", autocommit=True) as conn:
            conn.execute(f'DROP TABLE IF EXISTS "{table}"')
