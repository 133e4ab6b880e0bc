"""The relay's named crash point, so a test can SIGKILL it between publish and mark on purpose.

The worst moment for a relay to die is after the broker accepted a batch and before the
rows are marked published: the relay calls :func:`~babelq.runtime.failpoint.failpoint` there
with :data:`AFTER_PUBLISH`, which SIGKILLs the process when ``$BABELQ_FAILPOINT`` names it.

The point: ``outbox.relay.after_publish``.
"""

from __future__ import annotations

from babelq.runtime.failpoint import ENV, failpoint

AFTER_PUBLISH = "outbox.relay.after_publish"

__all__ = ["AFTER_PUBLISH", "ENV", "failpoint"]
