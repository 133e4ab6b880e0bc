"""Ctrl-C during a Spark command: one line, exit code 130, and no process of the command left.

A terminal's Ctrl-C sends SIGINT to the whole foreground process group: the ``babelq`` process,
its driver JVM (which PySpark launches ignoring SIGINT) and the Python workers the JVM started.
The test does the same to a real ``babelq settle`` in a session of its own, once Spark is
running a task: the ``--bank`` it is given marks a file when a payment reaches it, then blocks.
What is checked afterwards is the whole session, so a JVM or worker handed to PID 1 counts.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import ROOT
from payment_fixtures import publish_transfers
from spark_defaults import isolated_env

BABELQ = ROOT / ".venv" / "bin" / "babelq"
BLOCKING_BANK = """\
import os
import threading
from pathlib import Path


def post(payment):
    Path(os.environ["BANK_REACHED"]).touch()
    threading.Event().wait()  # until the process is ended
"""


def _session_processes(session: int) -> list[str]:
    """The living processes of ``session`` (Linux /proc), as "pid command" strings."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if int(fields[3]) == session and fields[0] != "Z":  # state, ppid, pgrp, session
            found.append(f"{entry.name} {command[:120]}")
    return found


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="lists the session's processes in /proc")
def test_ctrl_c_during_settle_is_one_line_exit_130_and_leaves_no_process(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/q.db"
    publish_transfers(url, "payments", 3)
    (tmp_path / "bank.py").write_text(BLOCKING_BANK)
    reached = tmp_path / "reached"
    env = isolated_env(("BABELQ_BROKER",))
    env["BANK_REACHED"] = str(reached)
    # files, not pipes: reading a pipe to its end would wait for every process holding it
    stderr = tmp_path / "stderr"
    with (tmp_path / "stdout").open("wb") as out, stderr.open("wb") as err:
        settle = subprocess.Popen(
            [str(BABELQ), "settle", "--broker", url, "--ledger", str(tmp_path / "ledger.db"), "--checkpoint",
             str(tmp_path / "ck"), "--bank", "./bank.py:post", "--progress", "none"],
            cwd=tmp_path, env=env, stdout=out, stderr=err, start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 240
        while not reached.exists():  # a payment is in a Spark task: the JVM and its workers are running
            assert settle.poll() is None, stderr.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "no payment reached the bank"
            time.sleep(0.1)
        os.killpg(settle.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        settle.wait(timeout=120)
        left = _session_processes(settle.pid)  # at once: the command ends when its processes do
    finally:
        if settle.poll() is None:
            settle.kill()
            settle.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(settle.pid, signal.SIGKILL)
    said = stderr.read_text(errors="replace")
    assert said.splitlines() == ["babelq settle: interrupted"], said[-3000:]
    assert settle.returncode == 130
    assert left == []
