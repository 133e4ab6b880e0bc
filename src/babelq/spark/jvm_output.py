"""The driver JVM's own stderr, passed through a filter when Spark's log is quiet.

Spark's launcher starts every driver JVM with ``--add-modules=jdk.incubator.vector``, and the JVM
answers with ``WARNING: Using incubator modules: jdk.incubator.vector`` on stderr before any
log4j configuration applies: a line no log level can reach. When babelq launches the JVM with
its quiet log level (:mod:`babelq.spark.log_level`), :func:`launch_gateway` gives the JVM a pipe
as its stderr and a daemon thread copies every line to this process's stderr except the lines
of :data:`NOISE`. The thread reads from before the JVM starts, so a JVM that fails to start
still shows why; Spark's ERROR records, and the tracebacks of Python workers (which inherit the
JVM's stderr), pass unchanged.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any, Final

log = logging.getLogger(__name__)

#: beginnings of the JVM's own stderr lines that are dropped
NOISE: Final = (b"WARNING: Using incubator modules:",)
_muted = threading.Event()


def mute() -> None:
    """Drop everything the JVM (and the Python workers it started) writes to stderr from now on:
    what a command interrupted by Ctrl-C does, since the JVM and its workers then report, at
    length, the connections and jobs the interrupt cut."""
    _muted.set()


def _copy(read_fd: int, target_fd: int) -> None:
    """Copy lines from ``read_fd`` to ``target_fd``, dropping :data:`NOISE`, until end of file.

    Writes with ``os.write`` (no Python buffer: safe in a daemon thread at interpreter exit), and
    keeps draining if the target is gone, so the JVM never blocks on a full pipe."""
    with os.fdopen(read_fd, "rb", buffering=0) as pipe:
        pending = b""
        while chunk := pipe.read(65_536):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            out = b"".join(line + b"\n" for line in lines if not line.startswith(NOISE))
            if not _muted.is_set():
                _write(target_fd, out)
        if pending and not pending.startswith(NOISE) and not _muted.is_set():
            _write(target_fd, pending)


def _write(fd: int, data: bytes) -> None:
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:  # stderr closed: the lines are lost, the JVM must still not block
        pass


def launch_gateway(conf: Any) -> Any:
    """PySpark's ``launch_gateway(conf)``, with the JVM's stderr filtered (module docstring)."""
    from pyspark import java_gateway

    pyspark_launch: Any = java_gateway.launch_gateway  # untyped in pyspark
    read_fd, write_fd = os.pipe()
    copier = threading.Thread(target=_copy, args=(read_fd, 2), name="babelq-jvm-stderr", daemon=True)
    copier.start()
    try:
        return pyspark_launch(conf, popen_kwargs={"stderr": write_fd})
    except BaseException:
        os.close(write_fd)
        write_fd = -1
        copier.join(timeout=2.0)  # the failed JVM's last words before the error is reported
        raise
    finally:
        if write_fd >= 0:
            os.close(write_fd)  # the JVM holds its own copy; the pipe ends when it exits
