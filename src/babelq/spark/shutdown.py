"""Ending the driver JVM with the command that started it.

PySpark's driver JVM exits when this process closes its stdin (the gateway server reads it to
end of file, then runs Spark's shutdown hooks) or, failing that, after this process has exited:
the JVM, then the Python worker daemons it started, outlive the command by the seconds their
shutdown takes, re-parented to PID 1, competing with whatever a script starts next. And PySpark
launches the JVM ignoring SIGINT, so Ctrl-C reaches the Python side only.

:func:`end_jvm` ends them on the command's own time: it stops the SparkContext, closes the JVM's
stdin, waits for the JVM and then for every process below this one that existed at the call
(the daemons and their workers) to exit, and kills what is left after a bound. The CLI calls it
when a Spark command ends, however it ends (:mod:`babelq.cli.main`). Only Linux lists a process's descendants
(``/proc``); elsewhere the JVM alone is waited for.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

#: seconds the JVM gets to run Spark's shutdown hooks (stop the context, remove its temp files)
JVM_GRACE = 20.0
#: seconds the JVM's Python daemons and workers get once the JVM is gone
WORKER_GRACE = 5.0
_POLL = 0.05


def _children() -> dict[int, list[int]]:
    """parent pid -> child pids of every process ``/proc`` lists (empty where there is no /proc)."""
    tree: dict[int, list[int]] = {}
    proc = Path("/proc")
    if not proc.is_dir():
        return tree
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # it exited meanwhile
            continue
        fields = stat.rpartition(")")[2].split()  # after "pid (command name)": state, ppid, ...
        if len(fields) > 1:
            tree.setdefault(int(fields[1]), []).append(int(entry.name))
    return tree


def descendants(pid: int) -> list[int]:
    """Every living process below ``pid`` (children, their children...), Linux only."""
    tree = _children()
    found: list[int] = []
    pending = list(tree.get(pid, []))
    while pending:
        child = pending.pop()
        found.append(child)
        pending.extend(tree.get(child, []))
    return found


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, exited but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    state = Path(f"/proc/{pid}/stat")
    with contextlib.suppress(OSError):
        return state.read_text().rpartition(")")[2].split()[0] != "Z"  # a zombie has exited
    return True


def driver_jvm() -> Any:
    """The Popen of the driver JVM this process launched, or None (no Spark, or spark-submit's)."""
    if "pyspark" not in sys.modules:  # never import pyspark just to find there is nothing to end
        return None
    from pyspark import SparkContext

    return getattr(SparkContext._gateway, "proc", None)


def _stop_quietly(context: Any) -> None:
    with contextlib.suppress(Exception):  # a JVM the interrupt already broke
        context.stop()


def end_jvm(*, keep: Any = None, jvm_grace: float = JVM_GRACE, worker_grace: float = WORKER_GRACE) -> bool:
    """End the driver JVM this process launched and the processes it started; True if there was one
    (other than ``keep``: a JVM the caller had before, which another part of the process still uses).

    Closing the JVM's stdin makes it exit through Spark's shutdown hooks; it is killed if it has
    not exited after ``jvm_grace`` seconds, and so is any of its Python daemons and workers still
    running ``worker_grace`` seconds later. The SparkContext is unusable afterwards: the CLI calls
    this as the command ends."""
    proc = driver_jvm()
    if proc is None or proc is keep:
        return False
    # every process below this one but the JVM: the JVM's Python daemons and their workers
    family = [pid for pid in descendants(os.getpid()) if pid != proc.pid]
    from pyspark import SparkContext

    active = SparkContext._active_spark_context
    if active is not None:
        # Stopped from this side first, the context closes its accumulator server before the JVM
        # closes its connection (which the server would report as a traceback); in a thread,
        # because a JVM that is stuck must not hold the command past the bound.
        stopper = threading.Thread(target=_stop_quietly, args=(active,), name="babelq-stop", daemon=True)
        stopper.start()
        stopper.join(jvm_grace)
    if proc.stdin is not None:
        with contextlib.suppress(OSError):
            proc.stdin.close()
    try:
        proc.wait(timeout=jvm_grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + worker_grace
    while any(process_alive(pid) for pid in family) and time.monotonic() < deadline:
        time.sleep(_POLL)
    for pid in family:
        if process_alive(pid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    return True
