"""How the demo's report and terminal output write counts, times and error texts.

Separators on every count (``100,000``, not ``100000``), times as ISO-8601 in UTC, and dead-letter
errors made readable for display only: the error text inside a dead letter is the standard's and
stays as every SDK wrote it (``expired: meta.expire_at 1795327477213 passed ...``); the report
shows the epoch milliseconds in it as ISO-8601 and long durations with their hours.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

#: 13-digit integers standing alone: epoch milliseconds from 2001-09-09 to 2286
_EPOCH_MS = re.compile(r"(?<![\d.])\d{13}(?![\d.])")
#: an integer followed by "ms": a duration
_DURATION_MS = re.compile(r"(?<![\d.])(\d{4,12}) ms\b")


def count(n: int) -> str:
    return f"{n:,}"


def iso_ms(epoch_ms: int) -> str:
    """``2026-11-25T14:50:31.431Z``."""
    moment = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{epoch_ms % 1000:03d}Z"


def iso_s(epoch_seconds: float) -> str:
    """``2026-11-25T14:50:31Z`` (whole seconds, UTC)."""
    return datetime.fromtimestamp(int(epoch_seconds), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def duration(ms: int) -> str:
    """``86,461,169 ms (24.0 h)``; below a minute only the milliseconds."""
    if ms >= 3_600_000:
        return f"{ms:,} ms ({ms / 3_600_000:.1f} h)"
    if ms >= 60_000:
        return f"{ms:,} ms ({ms / 60_000:.1f} min)"
    return f"{ms:,} ms"


def readable_error(text: str) -> str:
    """``text`` with epoch milliseconds as ISO-8601 and durations in ms with separators."""
    text = _EPOCH_MS.sub(lambda m: iso_ms(int(m.group(0))), text)
    return _DURATION_MS.sub(lambda m: duration(int(m.group(1))), text)
