"""SIGKILLing a babelq command's whole process group, for the crash tests of settle and consume."""

from __future__ import annotations

import random
import subprocess
import time
from collections.abc import Callable

from babelq.pipelines.failpoints import kill_session, session_pids


def gone(session: int) -> None:
    """Wait until no process of the killed run's session is left (workers die a moment later)."""
    deadline = time.monotonic() + 30
    while session_pids(session) and time.monotonic() < deadline:
        kill_session(session)
        time.sleep(0.05)
    assert not session_pids(session), f"processes of session {session} survived SIGKILL"


def kill_after_progress(
    args: list[str], progress: Callable[[], int], rng: random.Random, log: list[str], *, within: float
) -> None:
    """Start ``args`` in a session of its own; once ``progress()`` has grown, wait a random moment
    of up to ``within`` seconds and SIGKILL the whole session (driver, JVM, Spark's Python workers)."""
    before = progress()
    proc = subprocess.Popen(
        args, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline and progress() <= before:
        time.sleep(0.05)
    time.sleep(rng.uniform(0.0, within))
    if proc.poll() is None:
        kill_session(proc.pid)
        log.append(f"killed at progress {progress()} (was {before})")
    else:
        log.append(f"finished before the kill (exit {proc.returncode})")
    proc.wait(timeout=60)
    gone(proc.pid)
