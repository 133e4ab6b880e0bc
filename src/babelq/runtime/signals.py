"""SIGTERM/SIGINT -> graceful stop; a second signal skips the grace period.

Handlers can only be installed from the main thread; elsewhere this is a no-op and the
caller stops the worker with ``App.stop()``. Previous handlers are restored on exit.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

logger = logging.getLogger("babelq.runtime")

_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def stop_on_signals(graceful: Callable[[], None], hard: Callable[[], None]) -> Iterator[None]:
    """While active, the first SIGTERM/SIGINT calls ``graceful``, the next one ``hard``."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        name = signal.Signals(signum).name
        if len(received) == 1:
            logger.info("%s received: stopping (in-flight handlers may finish; again to stop now)", name)
            graceful()
        else:
            logger.warning("%s received again: stopping without waiting for in-flight handlers", name)
            hard()

    previous: dict[signal.Signals, Any] = {}
    for sig in _SIGNALS:
        previous[sig] = signal.signal(sig, on_signal)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
