"""Named crash points, so a test can SIGKILL a process at the worst moment on purpose.

The worst moment for some processes to die (a relay after the broker accepted a batch and
before its rows are marked; an expiry sweep right after it moved messages to the DLQ) cannot be
hit with a timer, so the code calls :func:`failpoint` there. When ``$BABELQ_FAILPOINT``
(comma-separated names, the variable the pipelines' crash points read too) lists the name, the
process kills itself with SIGKILL on the spot: no ``finally``, no rollback, as when a machine
dies. Unset (always, outside tests) it is one environment lookup.
"""

from __future__ import annotations

import os
import signal

ENV = "BABELQ_FAILPOINT"


def failpoint(name: str) -> None:
    """SIGKILL this process if ``$BABELQ_FAILPOINT`` names ``name`` (test hook)."""
    armed = os.environ.get(ENV)
    if armed and name in armed.split(","):
        os.kill(os.getpid(), signal.SIGKILL)
