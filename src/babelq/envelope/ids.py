"""Fast minting of UUID v4 strings and millisecond timestamps.

``uuid.uuid4()`` builds a ``UUID`` object per call; a producer needs two ids per message
(meta.id and, for a new trace, trace_id), so we read 32 random bytes once and format both
directly. The output is an ordinary RFC 4122 version-4 UUID string.
"""

from __future__ import annotations

import os
import time

_VERSION_MASK = ~(0xF000 << 64) & ((1 << 128) - 1)
_VARIANT_MASK = ~(0xC000 << 48) & ((1 << 128) - 1)
_V4_BITS = (0x4000 << 64) | (0x8000 << 48)


def _fmt(n: int) -> str:
    h = f"{(n & _VERSION_MASK & _VARIANT_MASK) | _V4_BITS:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def uuid4() -> str:
    """A new random UUID (version 4) as a lowercase hyphenated string."""
    return _fmt(int.from_bytes(os.urandom(16)))


def uuid4_pair() -> tuple[str, str]:
    """Two independent UUID v4 strings from one read of the random source."""
    n = int.from_bytes(os.urandom(32))
    return _fmt(n >> 128), _fmt(n & ((1 << 128) - 1))


def now_ms() -> int:
    """The current Unix time in milliseconds (UTC)."""
    return time.time_ns() // 1_000_000
