"""Retry delays: exponential backoff with full jitter.

After the n-th failed attempt the next one waits a uniformly random time in
``[0, min(cap_ms, base_ms * 2**(n-1))]`` ("full jitter"): a fleet of workers that failed
together on a shared dependency spreads its retries out instead of hammering it in waves.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from babelq.errors import ConfigurationError


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delay before the next attempt, in milliseconds."""

    base_ms: int = 1_000
    cap_ms: int = 300_000
    jitter: bool = True
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.base_ms < 0 or self.cap_ms < 0:
            raise ConfigurationError(
                f"backoff: base_ms and cap_ms must be >= 0, got {self.base_ms}, {self.cap_ms}"
            )

    def ceiling_ms(self, failures: int) -> int:
        """The largest delay after ``failures`` failed attempts (``failures >= 1``)."""
        exponent = min(max(failures - 1, 0), 62)
        return min(self.cap_ms, self.base_ms << exponent)

    def delay_ms(self, failures: int) -> int:
        """The delay after ``failures`` failed attempts: full jitter below the ceiling."""
        ceiling = self.ceiling_ms(failures)
        if not self.jitter or ceiling == 0:
            return ceiling
        return self.rng.randint(0, ceiling)
