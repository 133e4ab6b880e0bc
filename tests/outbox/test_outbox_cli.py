"""``babelq outbox`` and ``babelq relay`` as a person runs them: output, exit codes, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from babelq.transports import open_transport

from .support import BABELQ, Target, envelopes, read_all, relay_cli, wait_for_start

pytestmark = pytest.mark.live


def babelq(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BABELQ, *args], capture_output=True, text=True, timeout=60, check=False, env=env)


def test_init_status_relay_once(target: Target, unique_queue: str, tmp_path: Path) -> None:
    init = babelq("outbox", "init", target.url, "--table", target.table)
    assert init.returncode == 0 and f"outbox table {target.table} ready" in init.stdout, init.stderr
    target.add(envelopes(7, unique_queue), unique_queue)
    status = babelq("outbox", "status", target.url, "--table", target.table)
    assert json.loads(status.stdout)["counts"] == {"pending": 7, "published": 0, "failed": 0}
    broker = f"sqlite://{tmp_path}/broker.db"
    done = relay_cli(
        "--outbox", target.url, "--broker", broker, "--table", target.table, "--publish-batch", "3", "--once"
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"batches": 3, "claimed": 7, "failed": 0, "outages": 0, "published": 7}
    t = open_transport(broker)
    assert len(read_all(t, unique_queue)) == 7
    t.close()
    env = {**os.environ, "BABELQ_OUTBOX": target.url}
    prune = babelq("outbox", "prune", "--table", target.table, "--older-than", "0", env=env)
    assert json.loads(prune.stdout) == {"pruned": 7}, prune.stderr
    requeue = babelq("outbox", "requeue", "--table", target.table, env=env)
    assert json.loads(requeue.stdout) == {"requeued": 0}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--broker", "sqlite:///tmp/x.db"], "babelq relay: error: --outbox: no outbox URL given"),
        (["--outbox", "x.db"], "babelq relay: error: --broker: no broker URL given"),
        (
            ["--outbox", "x.db", "--broker", "sqlite:///tmp/x.db", "--publish-batch", "0"],
            "--publish-batch: must be >= 1",
        ),
        (["--outbox", "x.db", "--broker", "sqlite:///tmp/x.db", "--lease", "0"], "--lease: must be > 0"),
        (
            ["--outbox", "mysql://u:hunter2@h/d", "--broker", "sqlite:///tmp/x.db"],
            "--outbox: unsupported outbox URL",
        ),
        (
            ["--outbox", "x.db", "--broker", "redis://:hunter2@127.0.0.1:1/15", "--once"],
            "--broker redis://:***@",
        ),
        (
            [
                "--outbox",
                "postgresql://postgres:hunter2@127.0.0.1:1/x",
                "--broker",
                "sqlite:///tmp/x.db",
                "--once",
            ],
            "outbox postgresql://postgres:***@127.0.0.1:1/x",
        ),
    ],
)
def test_relay_errors_are_one_redacted_line_naming_the_option(
    args: list[str], expected: str, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("BABELQ_OUTBOX", "BABELQ_BROKER")}
    out = subprocess.run(
        [*BABELQ, "relay", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
        env=env,
    )
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], out.stderr
    assert "hunter2" not in out.stderr + out.stdout


def test_outbox_errors(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "BABELQ_OUTBOX"}
    missing = babelq("outbox", "status", env=env)
    assert missing.returncode == 2 and "URL: no outbox URL given; pass the URL argument" in missing.stderr
    nodir = babelq("outbox", "init", f"sqlite://{tmp_path}/nope/app.db")
    assert nodir.returncode == 2 and "does not exist" in nodir.stderr
    table = babelq("outbox", "init", f"sqlite://{tmp_path}/app.db", "--table", "a-b")
    assert table.returncode == 2 and "table: must start with a letter" in table.stderr


def test_sigusr1_prints_a_running_relays_stacks_and_it_goes_on(target: Target, tmp_path: Path) -> None:
    import signal
    import time

    proc = subprocess.Popen(
        [*BABELQ, "relay", "--outbox", target.url, "--broker", f"sqlite://{tmp_path}/broker.db",
         "--table", target.table, "--poll", "0.05"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        wait_for_start(proc, within=60)  # the handlers are in place
        proc.send_signal(signal.SIGUSR1)
        time.sleep(0.5)
        assert proc.poll() is None  # still running
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "Current thread" in err and "babelq/outbox/relay.py" in err, err
    assert json.loads(out.strip().splitlines()[-1])["published"] == 0


@pytest.mark.parametrize("option", ["--outbox", "--broker"])
def test_a_sqlite_url_with_a_password_is_refused_without_showing_it(option: str, tmp_path: Path) -> None:
    secret = "PgPw_8812"
    leaky = f"sqlite://user:{secret}@/nonexistent/x.db"
    args = {"--outbox": f"sqlite://{tmp_path}/app.db", "--broker": f"sqlite://{tmp_path}/broker.db"}
    args[option] = leaky
    done = relay_cli("--outbox", args["--outbox"], "--broker", args["--broker"], "--once")
    assert done.returncode == 2
    assert secret not in done.stderr + done.stdout
    assert "user or password" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
