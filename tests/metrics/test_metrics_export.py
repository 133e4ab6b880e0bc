"""A worker's /metrics, scraped over HTTP after a run, equals the run's counters."""

from __future__ import annotations

import io
import json
import logging
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import require_service

from babelq.errors import ConfigurationError
from babelq.metrics import configure_json_logging, serve
from babelq.runtime import App, Backoff, Message, PermanentError

pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families

OK, FLAKY, BAD, UNKNOWN = "urn:babel:t:ok", "urn:babel:t:flaky", "urn:babel:t:bad", "urn:babel:t:unknown"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


@pytest.fixture(params=["sqlite", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "redis":
        host, port = require_service("redis")
        yield f"redis://{host}:{port}/15"
    else:
        yield f"sqlite:///{tmp_path}/q.db"


def test_scraped_counters_equal_the_run(url: str, unique_queue: str) -> None:
    q = unique_queue
    app = App(url, queue=q, max_attempts=2, backoff=Backoff(base_ms=1, cap_ms=5), poll_timeout=0.1)
    log_stream = io.StringIO()
    logger = logging.getLogger(f"babelq.test.{q}")
    logger.propagate = False
    configure_json_logging(logger=logger, stream=log_stream)

    def ok(message: Message) -> None:
        logger.info("handled %s", message.data["n"])

    def flaky(message: Message) -> None:
        raise RuntimeError("always fails")

    def bad(message: Message) -> None:
        raise PermanentError("never valid")

    app.register(OK, ok)
    app.register(FLAKY, flaky)
    app.register(BAD, bad)
    port = _port()
    serve(app, port, addr="127.0.0.1")
    ids = [app.publish(OK, {"n": i}) for i in range(10)]
    for i in range(3):
        app.publish(FLAKY, {"n": i})
    for i in range(2):
        app.publish(BAD, {"n": i})
    app.publish(UNKNOWN, {"n": 0})
    app.run_until_empty(wait_delayed=True, timeout=30)
    app.publish(OK, {"n": 99})  # stays ready: counted as queue depth
    stats = app.stats()
    # an unknown URN is retried like a failure (unknown_urn="fail") before it is dead-lettered
    assert stats["handled"] == 10 and stats["retried"] == 3 + 1

    m = _scrape(port)
    ql = (("queue", q),)
    assert m[("babelq_messages_handled_total", ql)] == 10
    assert m[("babelq_messages_retried_total", ql)] == 4
    # PermanentError is counted as "rejected", not "failed"
    assert m[("babelq_messages_failed_total", ql)] == stats["failed"] == 3 * 2
    assert stats["rejected"] == 2
    dead = {
        r: m[("babelq_messages_dead_lettered_total", (("queue", q), ("reason", r)))]
        for r in ("failed", "unknown_urn", "poison")
    }
    # with unknown_urn="fail" an unknown URN is dead-lettered as a failure after its attempts
    assert dead == {"failed": 3 + 2 + 1, "unknown_urn": 0, "poison": 0}
    assert stats["dead_lettered"] == 6
    count = m[("babelq_handler_seconds_count", ql)]
    # handler runs only: an unknown URN never reaches the middleware chain
    assert count == stats["handled"] + stats["failed"] + stats["rejected"]
    assert m[("babelq_handler_seconds_bucket", (("le", "+Inf"), ("queue", q)))] == count
    assert m[("babelq_queue_ready", ql)] == 1
    assert m.get(("babelq_queue_reserved", ql), 0) == 0
    assert m[("babelq_leases_lost_total", ql)] == 0

    lines = [json.loads(line) for line in log_stream.getvalue().splitlines()]
    assert len(lines) == 10
    assert {line["meta.id"] for line in lines} == set(ids)
    assert all(line["trace_id"] not in ("", "-") for line in lines)
    app.close()


def test_missing_extra_is_one_line_naming_it() -> None:
    code = (
        "import sys; sys.modules['prometheus_client'] = None\n"
        "from babelq.metrics import serve\nfrom babelq.runtime import App\n"
        "serve(App('memory://'), 0)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert "babelq[metrics]" in last and "prometheus_client" in last


def test_importing_babelq_metrics_does_not_import_prometheus_client() -> None:
    code = "import sys, babelq.metrics; print('prometheus_client' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == "False", out.stderr


def test_scrape_while_app_run_in_a_thread(url: str, unique_queue: str) -> None:
    app = App(url, queue=unique_queue, poll_timeout=0.1)
    app.register(OK, lambda message: None)
    port = _port()
    serve(app, port, addr="127.0.0.1")
    for i in range(20):
        app.publish(OK, {"n": i})
    worker = threading.Thread(target=app.run, kwargs={"handle_signals": False})
    worker.start()
    try:
        deadline = time.monotonic() + 20
        ql = (("queue", unique_queue),)
        while _scrape(port)[("babelq_messages_handled_total", ql)] < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        m = _scrape(port)
        assert m[("babelq_messages_handled_total", ql)] == 20
        assert m[("babelq_handler_seconds_count", ql)] == 20
        assert m[("babelq_queue_ready", ql)] == 0
    finally:
        app.stop()
        worker.join(30)
    app.close()


def test_bad_port_is_one_line_naming_the_option() -> None:
    with pytest.raises(ConfigurationError, match="metrics port"):
        serve(App("memory://"), 70000)


def test_docs_example_runs() -> None:
    text = (Path(__file__).parents[2] / "docs" / "metrics.md").read_text()
    code = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    proc = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == 'babelq_messages_handled_total{queue="orders"} 3.0'
    assert all(json.loads(line)["meta.id"] != "-" for line in proc.stderr.splitlines())
