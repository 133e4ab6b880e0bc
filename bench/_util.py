"""Shared helpers for the benchmark scripts: timing, interleaved best-of-N, a ratio table.

Benchmarks on a shared two-core machine are noisy, so every script measures the same way:
warm each contender up, then run the contenders in turn, round after round, and keep each
one's best round. Interleaving means a burst of load from a neighbour hurts both sides of a
comparison rather than only the one that happened to run during it; best-of-N discards the
rounds such a burst spoiled.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: the Redis database the benchmarks write to: 15, not 0, the database a user's own services
#: most likely use (``BABELQ_BENCH_REDIS`` names another)
BENCH_REDIS = os.environ.get("BABELQ_BENCH_REDIS", "redis://127.0.0.1:6379/15")


@dataclass(frozen=True)
class Timing:
    """The best observed cost of one call, and how it was measured."""

    name: str
    seconds_per_call: float
    calls_per_round: int
    rounds: int

    @property
    def per_second(self) -> float:
        """Calls per second at the best round's pace."""
        return 1.0 / self.seconds_per_call if self.seconds_per_call > 0 else float("inf")


def yardstick() -> float:
    """Seconds of a plain 10M-iteration Python loop in this process: the machine's speed, printed
    beside every absolute figure so runs on different machines compare."""
    start = time.perf_counter()
    total = 0
    for i in range(10_000_000):
        total += i
    return time.perf_counter() - start


def time_round(fn: Callable[[], object], calls: int) -> float:
    """Seconds per call over one round of ``calls`` back-to-back calls (GC paused)."""
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        elapsed = time.perf_counter() - start
    finally:
        if gc_was_enabled:
            gc.enable()
    return elapsed / calls


def calibrate(fn: Callable[[], object], target_seconds: float = 0.05) -> int:
    """How many calls make one round last about ``target_seconds``."""
    calls = 1
    while True:
        per_call = time_round(fn, calls)
        if per_call * calls >= target_seconds / 4 or calls >= 1 << 22:
            return max(1, int(target_seconds / per_call)) if per_call > 0 else calls
        calls *= 4


def interleaved_best(
    contenders: Mapping[str, Callable[[], object]],
    *,
    rounds: int = 15,
    warmup_rounds: int = 2,
    target_seconds: float = 0.05,
) -> dict[str, Timing]:
    """Best-of-``rounds`` seconds per call for each contender, rounds interleaved."""
    calls = {name: calibrate(fn, target_seconds) for name, fn in contenders.items()}
    for _ in range(warmup_rounds):
        for name, fn in contenders.items():
            time_round(fn, calls[name])
    best = dict.fromkeys(contenders, float("inf"))
    for _ in range(rounds):
        for name, fn in contenders.items():
            best[name] = min(best[name], time_round(fn, calls[name]))
    return {name: Timing(name, best[name], calls[name], rounds) for name in contenders}


def format_rate(per_second: float) -> str:
    """``1234567.8`` -> ``'1,234,568'``."""
    return f"{per_second:,.0f}"


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print a plain aligned text table (bench scripts may print)."""
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]
    line = "  ".join(str(h).ljust(w) for h, w in zip(headers, widths, strict=True))
    print(line)
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(str(c).rjust(w) if i else str(c).ljust(w)
                        for i, (c, w) in enumerate(zip(row, widths, strict=True))))


def ratio_row(label: str, ours: Timing, theirs: Timing) -> list[str]:
    """A table row: label, our rate, their rate, and how many times faster we are."""
    return [
        label,
        format_rate(ours.per_second),
        format_rate(theirs.per_second),
        f"{theirs.seconds_per_call / ours.seconds_per_call:.2f}x",
    ]


def timed_calls(inner: Callable[..., None], busy: list[float]) -> Callable[..., None]:
    """``inner``, appending the seconds each call took to ``busy`` (e.g. a foreachBatch body, to
    split a streaming run into time inside the micro-batches and the rest)."""

    def call(*args: Any, **kwargs: Any) -> None:
        started = time.perf_counter()
        try:
            inner(*args, **kwargs)
        finally:
            busy.append(time.perf_counter() - started)

    return call


def worktree_src(rev: str) -> Path:
    """The ``src`` of a detached git worktree of revision ``rev`` (made once, in the temp directory),
    for a benchmark that runs an older tree next to the current one."""
    import subprocess
    import tempfile

    root = Path(__file__).resolve().parent.parent
    path = Path(tempfile.gettempdir()) / f"babelq-bench-{rev[:12]}"
    if not path.exists():
        subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", "-f", str(path), rev],
                       check=True, capture_output=True)
    return path / "src"


def tree_env(src: Path | None) -> dict[str, str]:
    """The environment of a child process that runs babelq from another tree's ``src`` (None: the
    installed one): Spark's Python is this interpreter, and the variables that would point the
    child at a broker or master of the caller's are dropped, so both sides of a comparison run
    the same local setup."""
    import os
    import sys

    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    for name in ("BABELQ_BROKER", "BABELQ_SPARK_MASTER", "MASTER"):
        env.pop(name, None)
    if src is not None:
        env["PYTHONPATH"] = f"{src}{os.pathsep}{env.get('PYTHONPATH', '')}"
    return env
