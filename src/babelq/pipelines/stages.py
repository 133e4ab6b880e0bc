"""Stage timing and progress lines: every pipeline step logs what it did, how many, how fast.

The demo's report and reconciliation read the same records, so the numbers in the log, the
table and the HTML are one set of measurements.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

log = logging.getLogger("babelq.pipelines")


@dataclass(slots=True)
class Stage:
    name: str
    seconds: float = 0.0
    rows: int = 0

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


@dataclass(slots=True)
class StageClock:
    """Collects :class:`Stage` records in order."""

    stages: list[Stage] = field(default_factory=list)

    @contextmanager
    def stage(self, name: str) -> Iterator[Stage]:
        record = Stage(name)
        log.info("stage %s: started", name)
        start = time.perf_counter()
        try:
            yield record
        finally:
            record.seconds = time.perf_counter() - start
            self.stages.append(record)
            log.info("stage %s: %d rows in %.2f s (%.0f rows/s)", name, record.rows, record.seconds,
                     record.rate)

    def seconds(self, name: str) -> float:
        return sum(s.seconds for s in self.stages if s.name == name)
