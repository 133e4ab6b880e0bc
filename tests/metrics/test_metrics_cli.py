"""``babelq worker --metrics-port N --log-format json`` in a subprocess, scraped over HTTP."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from babelq.envelope import make
from babelq.transports import open_transport

pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families

APP = textwrap.dedent(
    """
    import logging
    from babelq.runtime import App
    app = App(queue="m-cli", poll_timeout=0.1)
    log = logging.getLogger("m_cli_app")

    @app.handler("urn:babel:m:ok")
    def ok(message):
        log.warning("handled %s", message.data["n"])
    """
)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _handled(port: int) -> float:
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return -1
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "babelq_messages_handled_total":
                return float(sample.value)
    return -1


def test_worker_serves_metrics_and_logs_json(tmp_path: Path) -> None:
    (tmp_path / "m_cli_app.py").write_text(APP)
    url = f"sqlite:///{tmp_path}/q.db"
    transport = open_transport(url)
    ids = []
    for n in range(5):
        env = make("urn:babel:m:ok", {"n": n}, queue="m-cli")
        transport.publish("m-cli", env.encode())
        ids.append(env.id)
    transport.close()
    port = _port()
    env_vars = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    cmd = [sys.executable, "-m", "babelq.cli.main", "worker", "--url", url, "--app", "m_cli_app:app"]
    proc = subprocess.Popen(
        [*cmd, "--metrics-port", str(port), "--log-format", "json"],
        cwd=tmp_path,
        env=env_vars,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while _handled(port) != 5 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _handled(port) == 5
    finally:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    handled = [line for line in lines if line["msg"].startswith("handled ")]
    assert sorted(line["meta.id"] for line in handled) == sorted(ids)
    assert all(line["trace_id"] != "-" for line in handled)
