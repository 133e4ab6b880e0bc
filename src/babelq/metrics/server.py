"""The scrape-time collector and the HTTP exporter.

:func:`collector` returns a ``prometheus_client`` custom collector that, on each scrape,
sums the App's counter shards and asks the broker for the queue's depth: nothing is done per
message. :func:`serve` registers it and starts ``prometheus_client``'s HTTP server thread.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from babelq.errors import ConfigurationError
from babelq.metrics.latency import LatencyMiddleware, histogram

if TYPE_CHECKING:
    from babelq.runtime.app import App

#: Runtime counter → (metric name, help). ``_total`` is appended by the client library.
_COUNTERS = {
    "received": ("babelq_messages_received", "Deliveries received from the broker."),
    "handled": ("babelq_messages_handled", "Messages whose handler succeeded."),
    "failed": ("babelq_messages_failed", "Handler runs that raised."),
    "retried": ("babelq_messages_retried", "Messages put back with a delay for another attempt."),
    "released": ("babelq_messages_released", "Messages released unhandled."),
    "leases_lost": ("babelq_leases_lost", "Reservations that lapsed before the handler finished."),
}
_DEAD_LETTER_REASONS = ("failed", "unknown_urn", "poison")


def _client() -> Any:
    try:
        return importlib.import_module("prometheus_client")
    except ImportError:
        raise ConfigurationError(
            "metrics: prometheus_client is not installed; install the extra: pip install 'babelq[metrics]'"
        ) from None


class _AppCollector:
    def __init__(self, app: App, queue: str | None) -> None:
        self.app = app
        self.queue = queue or app.queue
        self.core = importlib.import_module("prometheus_client.core")

    def describe(self) -> list[Any]:  # no scrape at registration time (that would hit the broker)
        return []

    def collect(self) -> Iterator[Any]:
        core, q = self.core, self.queue
        snap = self.app.stats()
        for key, (name, doc) in _COUNTERS.items():
            family = core.CounterMetricFamily(name, doc, labels=["queue"])
            family.add_metric([q], snap.get(key, 0))
            yield family
        dead = core.CounterMetricFamily(
            "babelq_messages_dead_lettered", "Messages moved to the dead-letter queue, by reason.",
            labels=["queue", "reason"],
        )
        for reason in _DEAD_LETTER_REASONS:
            dead.add_metric([q, reason], snap.get(f"dead_lettered.{reason}", 0))
        yield dead
        buckets, total = histogram(snap)
        hist = core.HistogramMetricFamily(
            "babelq_handler_seconds", "Handler latency (middleware and handler).", labels=["queue"]
        )
        hist.add_metric([q], buckets, total)
        yield hist
        yield from self._depth(core, q)

    def _depth(self, core: Any, q: str) -> Iterator[Any]:
        transport = getattr(self.app, "_transport", None)
        if transport is None:
            return
        for kind, read in (("ready", transport.ready), ("reserved", transport.reserved)):
            try:
                value = read(q)
            except Exception:  # a broker hiccup must not fail the whole scrape
                continue
            if value is None:
                continue
            gauge = core.GaugeMetricFamily(
                f"babelq_queue_{kind}", f"Messages {kind} on the queue, read on scrape.", labels=["queue"]
            )
            gauge.add_metric([q], value)
            yield gauge


def collector(app: App, *, queue: str | None = None) -> Any:
    """A ``prometheus_client`` collector for ``app`` (adds the latency middleware to it)."""
    _client()
    if not any(isinstance(layer, LatencyMiddleware) for layer in getattr(app.router, "_middleware", ())):
        app.use(LatencyMiddleware(app.counters))
    return _AppCollector(app, queue)


@dataclass(frozen=True)
class MetricsServer:
    """A running exporter: its own registry (two Apps in one process can each serve) and port."""

    registry: Any
    port: int
    _server: Any

    def close(self) -> None:
        """Stop serving and free the port."""
        self._server.shutdown()
        self._server.server_close()


def serve(app: App, port: int, *, addr: str = "0.0.0.0", queue: str | None = None) -> MetricsServer:
    """Export ``app``'s metrics on ``http://addr:port/metrics`` from a daemon thread.

    ``port=0`` takes a free port (read it from the result). Call before ``app.run()``.
    """
    if type(port) is not int or not 0 <= port <= 65535:
        raise ConfigurationError(f"metrics port: must be an integer 0..65535, got {port!r}")
    client = _client()
    registry = client.CollectorRegistry()
    registry.register(collector(app, queue=queue))
    server, _thread = client.start_http_server(port, addr=addr, registry=registry)
    return MetricsServer(registry, int(server.server_port), server)
