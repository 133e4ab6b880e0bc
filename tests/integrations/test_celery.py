"""Celery: a real ``celery worker`` on Redis runs a Celery task and a babelq handler side by side."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from babelq.transports import open_transport

pytestmark = [pytest.mark.live, pytest.mark.slow]

PROJECT = """
    import os
    from celery import Celery
    from babelq.integrations.celery import install

    celery_app = Celery("shop", broker=os.environ["SHOP_BROKER"])
    celery_app.conf.task_default_queue = os.environ["SHOP_TASKS"]
    envelopes = install(celery_app, queue=os.environ["SHOP_QUEUE"], poll_timeout=0.1)

    def record(line):
        with open(os.environ["SHOP_RECORD"], "a") as out:
            out.write(line + "\\n")

    @celery_app.task(name="shop.add_order")
    def add_order(n):
        record(f"task {n}")

    @envelopes.handler("urn:babel:orders:created")
    def created(message):
        record(f"envelope {message.data['order_id']}")
"""


def test_one_worker_runs_celery_tasks_and_envelopes(tmp_path: Path, unique_queue: str) -> None:
    pytest.importorskip("celery")
    from conftest import require_service

    host, port = require_service("redis")
    broker = f"redis://{host}:{port}/15"
    record = tmp_path / "record.txt"
    (tmp_path / "shop_celery.py").write_text(textwrap.dedent(PROJECT))
    tasks = f"{unique_queue}_tasks"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path]),
        "SHOP_BROKER": broker, "SHOP_TASKS": tasks, "SHOP_QUEUE": unique_queue, "SHOP_RECORD": str(record),
    }  # fmt: skip
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "shop_celery", "worker", "--pool", "solo", "-Q", tasks,
         "--without-heartbeat", "--without-mingle", "--without-gossip", "-l", "warning"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    producer = subprocess.run(
        [sys.executable, "-c", textwrap.dedent("""
            from babelq.runtime import App
            from shop_celery import add_order
            import os
            App(os.environ["SHOP_BROKER"], queue=os.environ["SHOP_QUEUE"]).publish(
                "urn:babel:orders:created", {"order_id": 7})
            add_order.delay(8)
        """)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    try:
        assert producer.returncode == 0, producer.stderr
        end = time.monotonic() + 60
        def seen() -> list[str]:
            return sorted(record.read_text().split("\n")[:-1]) if record.exists() else []

        while seen() != ["envelope 7", "task 8"]:
            assert worker.poll() is None, worker.communicate()[1][-2000:]
            assert time.monotonic() < end, record.read_text() if record.exists() else "nothing handled"
            time.sleep(0.05)
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=60)
        assert worker.returncode == 0, err[-2000:]
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
        transport = open_transport(broker)
        try:
            assert transport.size(unique_queue) == 0  # the envelope was acked, not left behind
            transport.purge(unique_queue)
        finally:
            transport.close()
    assert sorted(record.read_text().split("\n")[:-1]) == ["envelope 7", "task 8"]  # each once
