"""SIGTERM/SIGINT -> graceful stop; a second signal skips the grace period.

Handlers can only be installed from the main thread; elsewhere this is a no-op and the
caller stops the worker with ``App.stop()``. Previous handlers are restored on exit.

Why the stop runs on a thread of its own: Python runs a signal handler in the main thread
between two bytecodes, possibly while that thread holds a lock, and a stop takes locks (an
``Event.set()`` takes the Event's condition, which ``Event.wait`` holds for a moment between
two waits; a log line takes its handler's). A handler that stopped the run itself could wait
for a lock its own thread held: the process hung for good. So the handler only writes the
signal's number to a pipe (a system call, no lock); the thread ``babelq-signals`` reads it,
logs, and calls the stop.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from types import FrameType
from typing import Any

logger = logging.getLogger("babelq.runtime")

_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: how long leaving the block waits for a stop still running on the dispatcher
_JOIN_S = 5.0


@contextmanager
def stop_on_signals(graceful: Callable[[], None], hard: Callable[[], None]) -> Iterator[None]:
    """While active, the first SIGTERM/SIGINT calls ``graceful``, the next one ``hard`` (each
    on the thread ``babelq-signals``, never inside the signal handler)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    readable, writable = os.pipe()
    dispatcher = threading.Thread(
        target=_dispatch, args=(readable, graceful, hard), name="babelq-signals", daemon=True
    )
    dispatcher.start()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        with suppress(OSError):  # the pipe is closing: the block is being left anyway
            os.write(writable, bytes((signum,)))

    previous: dict[signal.Signals, Any] = {}
    try:
        for sig in _SIGNALS:
            previous[sig] = signal.signal(sig, on_signal)
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        os.close(writable)  # the dispatcher reads the end of the pipe and returns
        dispatcher.join(_JOIN_S)


def _dispatch(readable: int, graceful: Callable[[], None], hard: Callable[[], None]) -> None:
    received = 0
    try:
        while True:
            got = os.read(readable, 1)
            if not got:
                return
            received += 1
            name = signal.Signals(got[0]).name
            try:
                if received == 1:
                    logger.info(
                        "%s received: stopping (in-flight handlers may finish; again to stop now)", name
                    )
                    graceful()
                else:
                    logger.warning("%s received again: stopping without waiting for in-flight handlers", name)
                    hard()
            except Exception:  # a stop that fails must not end the thread that delivers the next
                logger.exception("stopping on %s failed", name)
    finally:
        os.close(readable)
