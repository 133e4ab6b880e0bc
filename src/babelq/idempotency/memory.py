"""A process-local, thread-safe idempotency store (tests and single-process consumers).

It implements the claiming contract too, so threads of one worker process serialize on an
id exactly as a fleet does on Redis or PostgreSQL. Expiry uses a monotonic clock; expired
entries are dropped lazily when touched and swept when the store grows.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final

_CLAIMED: Final = 0
_DONE: Final = 1
_SWEEP_EVERY: Final = 4096


class MemoryStore:
    """Seen-set in a dict. ``ttl`` (seconds) expires done ids; ``claim_ttl`` expires claims."""

    def __init__(
        self,
        *,
        ttl: float | None = None,
        claim_ttl: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if ttl is not None and ttl <= 0:
            raise ValueError(f"ttl must be positive seconds or None, got {ttl!r}")
        if claim_ttl <= 0:
            raise ValueError(f"claim_ttl must be positive seconds, got {claim_ttl!r}")
        self._ttl = ttl
        self._claim_ttl = claim_ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[int, float]] = {}  # id -> (state, expires_at or inf)
        self._writes = 0

    def _state(self, message_id: str, now: float) -> int | None:
        entry = self._entries.get(message_id)
        if entry is None:
            return None
        if entry[1] <= now:
            del self._entries[message_id]
            return None
        return entry[0]

    def _set(self, message_id: str, state: int, now: float, ttl: float | None) -> None:
        self._entries[message_id] = (state, now + ttl if ttl is not None else float("inf"))
        self._writes += 1
        if self._writes % _SWEEP_EVERY == 0:
            expired = [key for key, (_, until) in self._entries.items() if until <= now]
            for key in expired:
                del self._entries[key]

    def seen(self, message_id: str) -> bool:
        with self._lock:
            return self._state(message_id, self._clock()) == _DONE

    def remember(self, message_id: str) -> None:
        with self._lock:
            self._set(message_id, _DONE, self._clock(), self._ttl)

    def forget(self, message_id: str) -> None:
        with self._lock:
            self._entries.pop(message_id, None)

    def claim(self, message_id: str) -> bool:
        with self._lock:
            now = self._clock()
            if self._state(message_id, now) is not None:
                return False
            self._set(message_id, _CLAIMED, now, self._claim_ttl)
            return True

    def release(self, message_id: str) -> None:
        with self._lock:
            if self._state(message_id, self._clock()) == _CLAIMED:
                del self._entries[message_id]

    def __len__(self) -> int:
        """Live entries (claimed or done)."""
        with self._lock:
            now = self._clock()
            return sum(1 for _, until in self._entries.values() if until > now)
