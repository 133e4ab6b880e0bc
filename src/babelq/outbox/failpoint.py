"""A named crash point in the relay, so a test can SIGKILL it between publish and mark on purpose.

The worst moment for a relay to die is after the broker accepted a batch and before the
rows are marked published: a timer cannot hit it, so the relay calls :func:`failpoint` there.
When ``$BABELQ_FAILPOINT`` (comma-separated names, the same variable the pipelines' crash
points read) lists the name, this process kills itself with SIGKILL on the spot: no
``finally``, no rollback, as when a machine dies. Unset (always, outside tests) it is one
environment lookup per batch.

The point: ``outbox.relay.after_publish``.
"""

from __future__ import annotations

import os
import signal

ENV = "BABELQ_FAILPOINT"
AFTER_PUBLISH = "outbox.relay.after_publish"


def failpoint(name: str) -> None:
    """SIGKILL this process if ``$BABELQ_FAILPOINT`` names ``name`` (test hook)."""
    armed = os.environ.get(ENV)
    if armed and name in armed.split(","):
        os.kill(os.getpid(), signal.SIGKILL)
