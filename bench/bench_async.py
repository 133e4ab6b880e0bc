"""``async def`` handlers against plain ones: the same App, broker and no-op work, alternated.

    .venv/bin/python bench/bench_async.py                       # Redis DB 15, 20k messages, 3 rounds
    .venv/bin/python bench/bench_async.py --url sqlite:///tmp/a.db --n 10000 --concurrency 1 4

Each round publishes ``n`` messages (not timed), then drains them with a no-op handler through
the runtime's whole consume path: once plain, once ``async def`` (run on the App's event loop).
Prints messages/s and CPU-µs per message (all of this process's threads: steadier than the rate
on a loaded machine) per round, the async/sync ratios and their medians, and the yardstick
(seconds of a plain 10M-iteration Python loop in this process) so absolute rates can be compared
across machines. The target: async at least 0.8x the sync rate.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Any

from _util import yardstick

URN = "urn:babel:bench:tick"


def one_round(url: str, n: int, concurrency: int, style: str) -> tuple[float, float]:
    """(messages/s, CPU-µs of this process per message) of one drain."""
    from babelq.runtime import App, Message

    queue = f"bench-async-{uuid.uuid4().hex[:10]}"
    app = App(url, queue=queue, concurrency=concurrency)
    handled = [0]
    if style == "async":

        async def tick_async(message: Message) -> None:
            handled[0] += 1

        app.register(URN, tick_async)
    else:

        def tick(message: Message) -> None:
            handled[0] += 1

        app.register(URN, tick)
    try:
        for start in range(0, n, 1000):
            app.publish_many([(URN, {"i": i, "sku": "ABC-123"}) for i in range(start, min(n, start + 1000))])
        started, cpu = time.perf_counter(), time.process_time()
        done = app.run_until_empty()
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        assert done == n == handled[0], (done, handled[0])
    finally:
        app.transport.purge(queue)
        app.close()
    return n / elapsed, cpu / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default="redis://127.0.0.1:6379/15")
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    args = parser.parse_args()
    print(f"yardstick (10M-iteration loop): {yardstick():.3f} s")
    print(f"broker {args.url}, {args.n} messages a round, no-op handler, default prefetch")
    for concurrency in args.concurrency:
        one_round(args.url, min(args.n, 2_000), concurrency, "sync")  # warm-up: imports, connections
        one_round(args.url, min(args.n, 2_000), concurrency, "async")
        rates: dict[str, list[float]] = {"sync": [], "async": []}
        ratios: list[float] = []
        cpu_ratios: list[float] = []
        for r in range(args.rounds):
            order: Any = ("sync", "async") if r % 2 == 0 else ("async", "sync")
            got = {style: one_round(args.url, args.n, concurrency, style) for style in order}
            for style, (rate, _) in got.items():
                rates[style].append(rate)
            ratios.append(got["async"][0] / got["sync"][0])
            cpu_ratios.append(got["async"][1] / got["sync"][1])
            print(
                f"  concurrency {concurrency} round {r + 1}: sync {got['sync'][0]:,.0f}/s "
                f"({got['sync'][1]:.1f} CPU-µs/msg), async {got['async'][0]:,.0f}/s "
                f"({got['async'][1]:.1f} CPU-µs/msg); async/sync rate {ratios[-1]:.2f}x, "
                f"CPU {cpu_ratios[-1]:.2f}x"
            )
        print(
            f"concurrency {concurrency}: sync median {statistics.median(rates['sync']):,.0f}/s, async median "
            f"{statistics.median(rates['async']):,.0f}/s; async/sync rate median "
            f"{statistics.median(ratios):.2f}x "
            f"(range {min(ratios):.2f}-{max(ratios):.2f}; target 0.80x), CPU per message "
            f"{statistics.median(cpu_ratios):.2f}x"
        )


if __name__ == "__main__":
    main()
