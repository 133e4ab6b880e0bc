"""The heartbeat thread of a connection-bound transport (AMQP 0-9-1, AMQP 1.0).

A handler may hold the caller's thread for longer than the broker's heartbeat interval; a
small daemon thread keeps the connection alive meanwhile by calling the transport's
``_heartbeat_tick()`` (which returns the seconds until the next tick). It holds the transport
only weakly, so a transport that is dropped without ``close()`` is still collected, and the
thread ends with it or when ``stop`` is set.
"""

from __future__ import annotations

import threading
import weakref
from typing import Protocol


class Ticking(Protocol):
    """A transport with a heartbeat: ``_heartbeat_tick()`` sends what is due, returns the next wait."""

    def _heartbeat_tick(self) -> float: ...


def _run(ref: weakref.ref[Ticking], stop: threading.Event, wait: float) -> None:
    while not stop.wait(wait):
        transport = ref()
        if transport is None:
            return
        wait = transport._heartbeat_tick()
        del transport


def start_keepalive(
    transport: Ticking, stop: threading.Event, *, name: str, first_wait: float
) -> threading.Thread:
    """Start ``transport``'s heartbeat thread (first tick after ``first_wait`` seconds)."""
    thread = threading.Thread(
        target=_run, args=(weakref.ref(transport), stop, first_wait), name=name, daemon=True
    )
    thread.start()
    return thread
