"""Fast minting of UUID v4 strings and millisecond timestamps.

``str(uuid.uuid4())`` builds a ``UUID`` object and an int per call, a cost a producer pays on
its hot path, and it needs two ids per message (meta.id and, for a new trace, trace_id). Here
one read of the operating system's random source gives both, and the strings are cut straight
from its hex form, with the version nibble set to ``4`` and the variant nibble mapped into
``8..b``. The output is an ordinary RFC 4122 version-4 UUID (122 random bits).
"""

from __future__ import annotations

import os
import time

#: hex digit -> the variant digit (10xx in binary) keeping the digit's two low random bits.
_VARIANT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}


def _cut(h: str) -> str:
    """A UUID v4 string from 32 random hex digits (digits 12 and 16 are overwritten)."""
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:32]}"


def uuid4() -> str:
    """A new random UUID (version 4) as a lowercase hyphenated string."""
    return _cut(os.urandom(16).hex())


def uuid4_pair() -> tuple[str, str]:
    """Two independent UUID v4 strings from one read of the random source."""
    h = os.urandom(32).hex()
    return (
        f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:32]}",
        f"{h[32:40]}-{h[40:44]}-4{h[45:48]}-{_VARIANT[h[48]]}{h[49:52]}-{h[52:64]}",
    )


def now_ms() -> int:
    """The current Unix time in milliseconds (UTC)."""
    return time.time_ns() // 1_000_000
