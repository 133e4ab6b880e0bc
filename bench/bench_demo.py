"""Demo benchmark: ``babelq demo`` end to end, wall time and the driver's peak memory, per size.

Runs ``babelq demo --rows N`` (local[2], embedded SQLite broker and ledger, a fresh output
directory) as a child process for each size (default 100,000 and 1,000,000) and samples, every
0.2 s, the resident memory of the driver's two processes: the Python process that runs the demo
and the JVM it starts (Spark's Python workers are not the driver). Printed per size: wall seconds,
BALANCED or not, the driver's peak RSS (Python + JVM, summed at each sample), the stage table the
demo itself prints, and the ratio of the biggest size's peak to the smallest's (issue 11's
targets: 100k under 20 s, 1M under 75 s, the 1M peak at most 1.5x the 100k peak).

``--baseline REV`` runs the same sizes, in the same run and alternating with the current tree,
from a git worktree of revision REV (e.g. the commit before a change) with this interpreter and
``PYTHONPATH`` pointing at the worktree's ``src``; the table then gives both and their ratio.

Usage: ``python3 dev.py bench demo [--rows 100000,1000000] [--baseline REV]``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import print_table, tree_env, worktree_src  # noqa: E402 - the bench directory is not a package


@dataclass
class DemoRun:
    rows: int
    seconds: float
    balanced: bool
    peak_rss_mb: float
    peak_python_mb: float
    peak_jvm_mb: float
    stages: list[str] = field(default_factory=list)


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _is_jvm(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/exe").resolve().name == "java"
    except OSError:
        return False


class _Sampler(threading.Thread):
    """Peak RSS of the driver: the demo's Python process and its JVM child, sampled together."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = self.peak_python = self.peak_jvm = 0.0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.2):
            python = _rss_mb(self.pid)
            jvm = sum(_rss_mb(c) for c in _children(self.pid) if _is_jvm(c))
            self.peak_python = max(self.peak_python, python)
            self.peak_jvm = max(self.peak_jvm, jvm)
            self.peak = max(self.peak, python + jvm)


def run_demo(rows: int, src: Path | None) -> DemoRun:
    """One demo of ``rows`` payments in a fresh directory; ``src`` is another tree's ``src`` (baseline)."""
    env = tree_env(src)
    with tempfile.TemporaryDirectory(prefix="bench-demo-") as tmp:
        command = [sys.executable, "-m", "babelq.cli.main", "demo", "--rows", str(rows),
                   "--out", f"{tmp}/out"]
        tree = src or ROOT / "src"
        if "--export" in (tree / "babelq/cli/commands/demo.py").read_text(encoding="utf-8"):
            command += ["--export", "none"]  # time the pipeline, not the picture (older trees: no option)
        started = time.perf_counter()
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                 env=env, cwd=tmp)
        sampler = _Sampler(child.pid)
        sampler.start()
        stdout, _ = child.communicate()
        seconds = time.perf_counter() - started
        sampler.done.set()
        sampler.join()
    lines = stdout.splitlines()
    stages: list[str] = []
    if "STAGES" in lines:
        for line in lines[lines.index("STAGES") + 1:]:
            if not line.strip():
                break
            stages.append(line)
    return DemoRun(rows, seconds, child.returncode == 0 and "BALANCED" in lines, sampler.peak,
                   sampler.peak_python, sampler.peak_jvm, stages)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="100000,1000000", help="comma-separated sizes")
    parser.add_argument("--baseline", help="a git revision to run next to the current tree")
    args = parser.parse_args()
    sizes = [int(n) for n in args.rows.split(",")]
    trees: dict[str, Path | None] = {"current": None}
    if args.baseline:
        trees[f"baseline {args.baseline}"] = worktree_src(args.baseline)
    results: dict[tuple[str, int], DemoRun] = {}
    for rows in sizes:
        for name, src in trees.items():
            got = run_demo(rows, src)
            results[name, rows] = got
            state = "BALANCED" if got.balanced else "NOT BALANCED"
            print(f"  {name:<22} {rows:>9,} rows  {got.seconds:7.1f} s  {state}  "
                  f"driver peak RSS {got.peak_rss_mb:,.0f} MB "
                  f"(python {got.peak_python_mb:,.0f}, jvm {got.peak_jvm_mb:,.0f})", flush=True)
            for line in got.stages:
                print(f"      {line.strip()}")
    print()
    targets = {100_000: 20.0, 1_000_000: 75.0}
    headers = ["tree", "rows", "wall s", "target s", "peak RSS MB", "balanced"]
    table = []
    for (name, rows), got in results.items():
        target = targets.get(rows)
        table.append([name, f"{rows:,}", f"{got.seconds:.1f}", f"{target:.0f}" if target else "-",
                      f"{got.peak_rss_mb:,.0f}", "yes" if got.balanced else "NO"])
    print_table(headers, table)
    for name in trees:
        small, big = results.get((name, min(sizes))), results.get((name, max(sizes)))
        if small and big and big is not small and small.peak_rss_mb:
            print(f"  {name}: peak RSS at {max(sizes):,} / at {min(sizes):,} = "
                  f"{big.peak_rss_mb / small.peak_rss_mb:.2f}x (target: at most 1.5x)")
    if args.baseline:
        base = f"baseline {args.baseline}"
        for rows in sizes:
            ours, theirs = results["current", rows], results[base, rows]
            print(f"  {rows:,} rows: current / baseline wall = {ours.seconds / theirs.seconds:.2f}x "
                  f"({ours.seconds:.1f} s vs {theirs.seconds:.1f} s)")


if __name__ == "__main__":
    main()
