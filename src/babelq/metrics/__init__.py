"""Prometheus metrics and JSON logs for a worker.

``prometheus_client`` is an optional extra (``pip install babelq[metrics]``) imported only
when :func:`serve` or :func:`collector` is called. The exporter reads the runtime's own
lock-free :class:`~babelq.runtime.counters.Counters` on scrape instead of incrementing
Prometheus counters per message, so the hot path pays nothing beyond what ``App.stats``
already costs; the latency histogram is counted into the same shards by
:class:`LatencyMiddleware`. Queue depth is read from the broker on scrape only.
"""

from __future__ import annotations

from babelq.metrics.jsonlog import JsonFormatter, configure_json_logging, use_json_format
from babelq.metrics.latency import BUCKETS, LatencyMiddleware
from babelq.metrics.server import Family, MetricsServer, collector, counter_lines, serve, serve_counters

__all__ = [
    "BUCKETS",
    "Family",
    "JsonFormatter",
    "LatencyMiddleware",
    "MetricsServer",
    "collector",
    "configure_json_logging",
    "counter_lines",
    "serve",
    "serve_counters",
    "use_json_format",
]
