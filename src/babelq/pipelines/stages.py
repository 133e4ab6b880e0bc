"""Stage timing and progress lines: every pipeline step logs what it did, how many, how fast.

The demo's report and reconciliation read the same records, so the numbers in the log, the
table and the HTML are one set of measurements. A clock given a live
:class:`~babelq.pipelines.progress.Progress` also shows each stage while it runs: the stage's
task is :attr:`Stage.progress`, and a stage given ``spark`` is watched through Spark's metrics
(:func:`~babelq.pipelines.progress.watch_spark`) until it ends, when its count becomes the
stage's ``rows``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from babelq.pipelines.progress import Progress, Task, watch_spark


def _no_progress() -> Task:
    return Progress.off().task("")

log = logging.getLogger("babelq.pipelines")


@dataclass(slots=True)
class Stage:
    """One timed step. ``rows`` is its count, in ``unit``: ``rows`` of a file, or ``messages`` of
    the broker (each counted once, whatever the times it was delivered)."""

    name: str
    seconds: float = 0.0
    rows: int = 0
    unit: str = "rows"
    progress: Task = field(default_factory=_no_progress, repr=False, compare=False)  #: its live progress

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0

    def count_text(self) -> str:
        """``98,276 messages``."""
        return f"{self.rows:,} {self.unit}"

    def rate_text(self) -> str:
        """``5,261 messages/s``."""
        return f"{self.rate:,.0f} {self.unit}/s"


def reasons_text(by_reason: Mapping[str, int]) -> str:
    """``expired: 3, bad_iban: 2`` (sorted by reason), or ``none``: counts per reason in a log line."""
    return ", ".join(f"{reason}: {n:,}" for reason, n in sorted(by_reason.items())) or "none"


@dataclass(slots=True)
class StageClock:
    """Collects :class:`Stage` records in order (and shows them on ``progress`` while they run)."""

    stages: list[Stage] = field(default_factory=list)
    progress: Progress = field(default_factory=Progress.off)

    @contextmanager
    def stage(self, name: str, *, total: int | Callable[[], int | None] | None = None, unit: str = "rows",
              spark: Any = None) -> Iterator[Stage]:
        """Time the block as stage ``name``. For its progress: ``total`` (a count, or a function
        asked only when progress is shown), ``unit``, and ``spark`` to watch the Spark jobs the
        block runs. When the block ends, the stage's task ends with ``rows`` unless the block
        finished it itself."""
        known = total() if callable(total) and self.progress.live else total
        record = Stage(name, unit=unit)
        record.progress = self.progress.task(name, total=known if isinstance(known, int) else None, unit=unit)
        log.info("stage %s: started", name)
        start = time.perf_counter()
        ended = False
        try:
            with watch_spark(spark, record.progress) if spark is not None else nullcontext():
                yield record
            ended = True
        finally:
            record.seconds = time.perf_counter() - start
            # the stage's own count is the last word (a failed stage stays short of its total)
            record.progress.finish(record.rows, unit=unit, complete=ended, note="")
            self.stages.append(record)
            if not self.progress.live:  # else the progress's last line said it
                log.info("stage %s: %s in %.2f s (%s)", name, record.count_text(), record.seconds,
                         record.rate_text())

    def seconds(self, name: str) -> float:
        return sum(s.seconds for s in self.stages if s.name == name)
