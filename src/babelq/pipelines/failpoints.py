"""Named crash points, so tests can SIGKILL a pipeline at the worst moment on purpose.

A crash test needs the process to die *exactly* between two effects (after the ledger commit
and before the broker publish, between a publish and its mark), which a timer cannot hit.
Each such moment calls :func:`failpoint` with its name; when the environment variable
``BABELQ_FAILPOINT`` lists that name (comma-separated), every process of this process's
*session* is killed with SIGKILL on the spot: the CLI driver, its JVM and Spark's Python
workers (which run in a process group of their own), as when a machine dies. Unset (always,
outside tests), a failpoint is one dictionary lookup.

Arm a failpoint only for a process started in a session of its own (``setsid``,
``subprocess.Popen(..., start_new_session=True)``): in a terminal's session it would kill the
shell too. Linux only (it reads ``/proc``).

Two variants, for the crashes Spark recovers from within a run (a retried task): ``name:process``
SIGKILLs only the process that reaches the point (a Spark task's Python worker, as when one
executor dies), and ``$BABELQ_FAILPOINT_ONCE=<path>`` fires a point only in the process that
creates ``<path>`` first, so the task's retry runs through.

The points of a consume run, named after the run (``consume``, or ``settle`` for ``babelq settle``):
``<run>.after_sink_commit`` and ``<run>.after_outbox_publish`` (in the tasks),
``<run>.after_batch_ack`` (in the driver: the run acked a micro-batch, Spark has not committed
it); and ``consume.files_staged`` (a files sink's files written in staging, the transaction not
committed).
"""

from __future__ import annotations

import os
import signal
from contextlib import suppress
from pathlib import Path

ENV = "BABELQ_FAILPOINT"
ONCE_ENV = "BABELQ_FAILPOINT_ONCE"


def session_pids(session: int) -> list[int]:
    """The processes of ``session`` (from ``/proc``), this one included."""
    pids: list[int] = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:  # the process ended while we looked
            continue
        if len(fields) > 3 and int(fields[3]) == session:  # fields after "(comm)": state ppid pgrp session
            pids.append(int(stat.parent.name))
    return pids


def kill_session(session: int) -> None:
    """SIGKILL every process of ``session``, the caller last."""
    me = os.getpid()
    for pid in session_pids(session):
        if pid != me:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    if os.getsid(0) == session:
        os.kill(me, signal.SIGKILL)


def _first(marker: str | None) -> bool:
    """True unless ``marker`` names a file some process already created (then: not the first)."""
    if not marker:
        return True
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return False
    return True


def failpoint(name: str) -> None:
    """SIGKILL this process's whole session (or, armed as ``name:process``, this process) if
    ``$BABELQ_FAILPOINT`` names ``name`` (test hook)."""
    armed = os.environ.get(ENV)
    if not armed:
        return
    points = armed.split(",")
    if name in points and _first(os.environ.get(ONCE_ENV)):
        kill_session(os.getsid(0))
    elif f"{name}:process" in points and _first(os.environ.get(ONCE_ENV)):
        os.kill(os.getpid(), signal.SIGKILL)
