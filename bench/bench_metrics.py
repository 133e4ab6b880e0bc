"""Per-message cost of the metrics exporter: App.drain on memory:// with and without it.

    .venv/bin/python bench/bench_metrics.py --n 20000 --rounds 5

Rounds alternate (plain, metrics) in one process; prints each round's ratio and the median.
"""

from __future__ import annotations

import argparse
import statistics
import time

from babelq.metrics import collector
from babelq.runtime import App

URN = "urn:babel:bench:metrics"


def _run(n: int, metrics: bool) -> float:
    app = App("memory://", queue="bench", prefetch=256)
    app.register(URN, lambda message: None)
    if metrics:
        collector(app)
    for i in range(n):
        app.publish(URN, {"n": i})
    start = time.perf_counter()
    assert app.run_until_empty() == n
    elapsed = time.perf_counter() - start
    app.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    ratios = []
    for r in range(args.rounds):
        plain, metered = _run(args.n, False), _run(args.n, True)
        ratios.append(metered / plain)
        print(
            f"round {r}: plain {args.n / plain:,.0f} msg/s, metrics {args.n / metered:,.0f} msg/s, "
            f"ratio {metered / plain:.3f}, +{(metered - plain) / args.n * 1e6:.2f} us/msg"
        )
    print(f"median ratio (metrics/plain time): {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
