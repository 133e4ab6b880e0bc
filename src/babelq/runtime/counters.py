"""Lock-free counters for the runtime's stats.

Worker threads count what their handler chain decided and the fetching thread counts what
it did to the broker. Each thread writes to its own shard (a plain dict reached through a
thread-local), so counting takes no lock on the hot path; :meth:`Counters.snapshot` sums
the shards.
"""

from __future__ import annotations

import threading

#: Counters always present in a snapshot (zero until something happens).
STANDARD = (
    "received",
    "handled",
    "failed",
    "retried",
    "released",
    "deferred",
    "dead_lettered",
    "dead_lettered.failed",
    "dead_lettered.unknown_urn",
    "dead_lettered.poison",
    "poison",
    "expired",
    "unknown_urn",
    "duplicates_skipped",
    "rejected",
    "exhausted_kept",
    "deleted",
    "unstarted_released",
    "unavailable",
    "disposition_errors",
    "fetch_errors",
)


class Counters:
    """Named integer counters, sharded per thread."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._shards: list[dict[str, int]] = []
        self._lock = threading.Lock()

    def _shard(self) -> dict[str, int]:
        shard: dict[str, int] | None = getattr(self._local, "shard", None)
        if shard is None:
            shard = {}
            with self._lock:
                self._shards.append(shard)
            self._local.shard = shard
        return shard

    def incr(self, name: str, n: int = 1) -> None:
        """Add ``n`` to counter ``name``."""
        try:  # the thread's shard exists after its first count: one attribute read
            shard: dict[str, int] = self._local.shard
        except AttributeError:
            shard = self._shard()
        shard[name] = shard.get(name, 0) + n

    def snapshot(self) -> dict[str, int]:
        """Every counter's current total (the standard ones always present)."""
        with self._lock:
            shards = list(self._shards)
        total = dict.fromkeys(STANDARD, 0)
        for shard in shards:
            for name, value in list(shard.items()):
                total[name] = total.get(name, 0) + value
        return total
