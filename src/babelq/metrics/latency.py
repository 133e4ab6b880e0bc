"""Handler latency as histogram buckets counted in the runtime's lock-free Counters.

Each message adds one to ``latency.bucket.<i>`` (the first bucket whose bound it fits) and
its duration in microseconds to ``latency.sum_us``; the exporter turns these into a
cumulative Prometheus histogram on scrape. No lock and no prometheus call per message.
"""

from __future__ import annotations

import bisect
import time

from babelq.runtime.counters import Counters
from babelq.runtime.message import Message
from babelq.runtime.middleware import Next
from babelq.runtime.outcome import Outcome

#: Upper bounds in seconds (a last, implicit +Inf bucket follows).
BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)
_NAMES = tuple(f"latency.bucket.{i}" for i in range(len(BUCKETS) + 1))


class LatencyMiddleware:
    """Times the rest of the chain (the handler) and counts it into a bucket."""

    def __init__(self, counters: Counters) -> None:
        self.counters = counters

    def __call__(self, message: Message, call_next: Next) -> Outcome:
        start = time.perf_counter()
        try:
            return call_next(message)
        finally:
            elapsed = time.perf_counter() - start
            self.counters.incr(_NAMES[bisect.bisect_left(BUCKETS, elapsed)])
            self.counters.incr("latency.sum_us", int(elapsed * 1_000_000))


def histogram(snapshot: dict[str, int]) -> tuple[list[tuple[str, float]], float]:
    """Cumulative ``(le, count)`` buckets (ending with ``+Inf``) and the sum in seconds."""
    buckets: list[tuple[str, float]] = []
    running = 0
    for i, name in enumerate(_NAMES):
        running += snapshot.get(name, 0)
        le = repr(BUCKETS[i]) if i < len(BUCKETS) else "+Inf"
        buckets.append((le, float(running)))
    return buckets, snapshot.get("latency.sum_us", 0) / 1_000_000
