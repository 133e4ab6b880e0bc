"""``babelq worker``: loads an App from module:attr, binds it to --url, consumes."""

from __future__ import annotations

import json
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from babelq.cli.main import main
from babelq.envelope import make
from babelq.transports import open_transport

APP_MODULE = textwrap.dedent(
    """
    from pathlib import Path
    from babelq.runtime import App

    app = App(queue="cli-orders")
    seen = Path(__file__).with_name("seen.txt")

    @app.handler("urn:babel:orders:created")
    def created(message):
        with seen.open("a") as f:
            f.write(message.id + "\\n")

    def factory():
        return app
    """
)


@pytest.fixture
def app_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "cli_worker_app.py").write_text(APP_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "cli_worker_app", raising=False)
    yield tmp_path
    sys.modules.pop("cli_worker_app", None)


@pytest.mark.parametrize("attr", ["app", "factory"])
def test_worker_command_drains_queue_and_prints_stats(
    attr: str, app_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{app_dir}/q.db"
    transport = open_transport(url)
    ids = []
    for n in range(5):
        env = make("urn:babel:orders:created", {"n": n}, queue="cli-orders")
        transport.publish("cli-orders", env.encode())
        ids.append(env.id)
    transport.publish("cli-orders", b"garbage")
    transport.close()

    code = main(
        ["worker", "--url", url, "--app", f"cli_worker_app:{attr}", "--until-empty", "--concurrency", "2"]
    )

    assert code == 0
    stats = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert stats["handled"] == 5 and stats["dead_lettered.poison"] == 1
    assert sorted((app_dir / "seen.txt").read_text().split()) == sorted(ids)
    transport = open_transport(url)
    assert transport.size("cli-orders") == 0 and transport.size("cli-orders.dlq") == 1
    transport.close()


def test_worker_command_reports_a_bad_app_spec(app_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["worker", "--url", "memory://", "--app", "cli_worker_app"]) == 2
    assert "MODULE:ATTR" in capsys.readouterr().err
    assert main(["worker", "--url", "memory://", "--app", "cli_worker_app:nope"]) == 2
    assert "no attribute" in capsys.readouterr().err
    assert main(["worker", "--url", "memory://", "--app", "cli_worker_app:seen"]) == 2
    assert "not a babelq.runtime.App" in capsys.readouterr().err


def test_the_log_options_go_before_or_after_the_command() -> None:
    import logging

    from babelq.cli.main import build_parser, log_level

    parser = build_parser()

    def level(argv: list[str]) -> int:
        args, _ = parser.parse_known_args(argv)
        args.verbose += args.sub_verbose
        return log_level(args)

    base = ["--app", "m:a", "--until-empty"]
    assert level(["worker", *base]) == logging.INFO  # a worker says what it consumes
    assert level(["inspect", "f"]) == logging.WARNING
    assert level(["-v", "inspect", "f"]) == level(["inspect", "f", "-v"]) == logging.INFO
    assert level(["-v", "inspect", "f", "-v"]) == logging.DEBUG
    assert level(["worker", *base, "--log-level", "warning"]) == logging.WARNING
    assert level(["--log-level", "error", "worker", *base]) == logging.ERROR


def test_a_running_worker_says_what_it_consumes_and_exits_with_plain_counters(app_dir: Path) -> None:
    """The start-up line at INFO (queue, broker, handlers, threads); on SIGTERM one JSON line
    of counters, without the latency histogram's raw buckets that --metrics-port adds."""
    import os
    import signal
    import socket
    import subprocess

    url = f"sqlite:///{app_dir}/q.db"
    transport = open_transport(url)
    transport.publish("cli-orders", make("urn:babel:orders:created", {"n": 1}, queue="cli-orders").encode())
    transport.close()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(app_dir), *sys.path])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "babelq.cli.main", "worker", "--broker", url, "--app", "cli_worker_app:app",
         "--concurrency", "2", "--metrics-port", str(port)],
        cwd=app_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if "consuming" in line:
                break
        start = lines[-1]
        assert start.startswith("INFO") and "'cli-orders'" in start and url in start
        assert "2 handler thread(s)" in start and "urn:babel:orders:created" in start
        deadline = time.monotonic() + 20
        while not (app_dir / "seen.txt").exists():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    stats = json.loads(out.strip().splitlines()[-1])
    assert stats["handled"] == 1
    assert not [k for k in stats if k.startswith("latency.")]


def test_worker_loads_an_app_from_a_py_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--app examples/worker_app.py:app``: a path, as ``babelq consume --app`` takes one."""
    repo = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(repo)
    monkeypatch.delitem(sys.modules, "worker_app", raising=False)
    url = f"sqlite:///{tmp_path}/q.db"
    transport = open_transport(url)
    for n in range(3):
        order = {"order_id": f"o{n}", "amount_cents": 100 + n}
        transport.publish("orders", make("urn:babel:orders:created", order, queue="orders").encode())
    transport.close()

    code = main(["worker", "--broker", url, "--app", "examples/worker_app.py:app", "--until-empty"])
    sys.modules.pop("worker_app", None)

    assert code == 0
    stats = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert stats["handled"] == 3
    transport = open_transport(url)
    assert transport.size("orders") == 0 and transport.size("shipping") == 3
    transport.close()
