"""Tracing benchmark: publish + consume with the tracing middleware next to without, same run.

Each round publishes N messages through ``App.publish`` (one call per message, or ``--batch``
messages per ``App.publish_many``) and drains them with ``App.drain`` and a no-op handler, on
the same transport, for three Apps that alternate round after round (best round kept, see
``_util``):

* ``plain``: no tracing middleware;
* ``traced, API no-op``: both tracing middlewares with OpenTelemetry's no-op tracer (what the
  API gives when no SDK is configured): the middlewares' own cost (attributes, a non-recording
  span, an extract); its span context is invalid, so no ``traceparent`` is written and the
  publishes stay as they are;
* ``traced, SDK``: both middlewares with an opentelemetry-sdk TracerProvider recording every
  span and handing it to an exporter that drops it (SimpleSpanProcessor): what a process with
  tracing switched on pays short of the network export, ``traceparent`` on the wire included
  (and with ``--batch``, single publishes instead of one batch: headers travel one at a time).

Printed: messages/s (publish and consume of one message counted as one), the ratio to
``plain`` and the microseconds each message costs more than with ``plain``. Transports:
``memory://`` (the middlewares' cost with nothing else in the way) and a live Redis when
reachable (``--url`` for another).

Usage: ``.venv/bin/python bench/bench_tracing.py [--messages N] [--rounds N] [--batch N] [--url URL]``
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import BENCH_REDIS, format_rate, print_table

REDIS_URL = BENCH_REDIS
URN = "urn:babel:bench:traced"


def _sdk_tracer() -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Drop()))
    return provider.get_tracer("bench")


def _noop_tracer() -> Any:
    from opentelemetry.trace import NoOpTracerProvider

    return NoOpTracerProvider().get_tracer("bench")


def make_app(url: str, queue: str, tracer: Any | None) -> Any:
    from babelq.runtime import App
    from babelq.tracing import TraceConsumeMiddleware, TracePublishMiddleware

    if tracer is None:
        app = App(url, queue=queue)
    else:
        app = App(
            url,
            queue=queue,
            middleware=[TraceConsumeMiddleware(tracer)],
            publish_middleware=[TracePublishMiddleware(tracer)],
        )
    app.register(URN, lambda message: None)
    return app


def one_round(app: Any, n: int, batch: int) -> float:
    """Seconds to publish ``n`` messages and drain them."""
    data = {"order_id": 1042, "amount_minor": 1999, "currency": "EUR"}
    started = time.perf_counter()
    if batch <= 1:
        for _ in range(n):
            app.publish(URN, data)
    else:
        for start in range(0, n, batch):
            app.publish_many([(URN, data)] * min(batch, n - start))
    handled = app.drain()
    elapsed = time.perf_counter() - started
    if handled != n:
        raise RuntimeError(f"drained {handled} of {n} messages")
    return elapsed


def measure(url: str, n: int, rounds: int, batch: int) -> dict[str, float]:
    """Best messages/s per contender, rounds interleaved (one warm-up round each)."""
    contenders: dict[str, Callable[[], Any | None]] = {
        "plain": lambda: None,
        "traced, API no-op": _noop_tracer,
        "traced, SDK": _sdk_tracer,
    }
    apps = {name: make_app(url, f"bench-tracing-{uuid.uuid4().hex[:8]}", make())
            for name, make in contenders.items()}
    try:
        for app in apps.values():
            one_round(app, min(n, 500), batch)
        best = dict.fromkeys(apps, float("inf"))
        for _ in range(rounds):
            for name, app in apps.items():
                best[name] = min(best[name], one_round(app, n, batch))
        return {name: n / seconds for name, seconds in best.items()}
    finally:
        for app in apps.values():
            app.close()


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=1, help="messages per publish_many (1: App.publish)")
    parser.add_argument("--url", action="append", help="transport URL(s); default memory:// and local Redis")
    args = parser.parse_args(argv)
    urls = args.url or ["memory://", *([REDIS_URL] if _reachable("127.0.0.1", 6379) else [])]
    mode = "App.publish" if args.batch <= 1 else f"App.publish_many({args.batch})"
    print(f"{args.messages} messages per round, best of {args.rounds} rounds, {mode} then App.drain\n")
    rows: list[list[str]] = []
    for url in urls:
        rates = measure(url, args.messages, args.rounds, args.batch)
        base = rates["plain"]
        for name, rate in rates.items():
            added = (1 / rate - 1 / base) * 1e6
            rows.append([url.split("?")[0], name, format_rate(rate), f"{rate / base:.2f}x", f"{added:+.0f}"])
    print_table(["transport", "contender", "msgs/s (publish+consume)", "vs plain", "µs added per msg"], rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
