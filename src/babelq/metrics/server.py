"""The scrape-time collector and the HTTP exporter.

:func:`collector` returns a ``prometheus_client`` custom collector that, on each scrape,
sums the App's counter shards and asks the broker for the queue's depth: nothing is done per
message. :func:`serve` registers it and starts ``prometheus_client``'s HTTP server thread.

The same collector serves any other consumer that counts in the runtime's counter names
(``handled``, ``retried``, ``dead_lettered.<reason>``...): :func:`serve_counters` takes a function
returning such a snapshot, so ``babelq settle`` exports the worker's metric names from its own
per-micro-batch counts, without a second exporter. A counter the snapshot leaves out is not
exported (a consumer that cannot observe it says nothing rather than 0); :class:`Family` adds
labelled counters of the consumer's own.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from babelq.errors import ConfigurationError
from babelq.extras import optional_import
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
#: The snapshot keys of the dead-letter counter, by reason.
DEAD_LETTERED = {reason: f"dead_lettered.{reason}" for reason in _DEAD_LETTER_REASONS}


@dataclass(frozen=True)
class Family:
    """A labelled counter of a consumer's own, exported beside the standard ones: ``name`` (without
    ``_total``), ``labels`` (after ``queue``) and ``samples`` (label values -> count)."""

    name: str
    doc: str
    labels: Sequence[str]
    samples: Mapping[tuple[str, ...], float] = field(default_factory=dict)


def counter_lines(snapshot: Mapping[str, int], queue: str) -> list[str]:
    """The counters of ``snapshot`` as their scraped samples read, one per line
    (``babelq_messages_handled_total{queue="payments"} 41``): what a command prints at its end, so
    that its summary and its ``/metrics`` use the same names."""
    lines = [f'{name}_total{{queue="{queue}"}} {snapshot[key]}' for key, (name, _) in _COUNTERS.items()
             if key in snapshot]
    lines += [f'babelq_messages_dead_lettered_total{{queue="{queue}",reason="{reason}"}} {snapshot[key]}'
              for reason, key in DEAD_LETTERED.items() if key in snapshot]
    return lines


def _client() -> Any:
    return optional_import("prometheus_client", needed_for="metrics: the Prometheus endpoint")


class _CounterCollector:
    """Exports a counter snapshot (``read``), optionally the latency histogram counted into it,
    the consumer's own ``families`` and the queue's depth asked of ``transport`` on each scrape."""

    def __init__(self, read: Callable[[], Mapping[str, int]], queue: str | Sequence[str], *,
                 latency: bool = False, transport: Callable[[], Any] | None = None,
                 families: Callable[[], Iterable[Family]] | None = None) -> None:
        self.read = read
        #: the queues read; a worker of several labels its counters with their names joined by ","
        self.queues: tuple[str, ...] = (queue,) if isinstance(queue, str) else tuple(queue)
        self.queue = ",".join(self.queues)
        self.latency = latency
        self.transport = transport
        self.families = families
        self.core = importlib.import_module("prometheus_client.core")

    def describe(self) -> list[Any]:  # no scrape at registration time (that would hit the broker)
        return []

    def collect(self) -> Iterator[Any]:
        core, q = self.core, self.queue
        snap = self.read()
        for key, (name, doc) in _COUNTERS.items():
            if key in snap:
                family = core.CounterMetricFamily(name, doc, labels=["queue"])
                family.add_metric([q], snap[key])
                yield family
        if any(key in snap for key in DEAD_LETTERED.values()):
            dead = core.CounterMetricFamily(
                "babelq_messages_dead_lettered", "Messages moved to the dead-letter queue, by reason.",
                labels=["queue", "reason"],
            )
            for reason, key in DEAD_LETTERED.items():
                dead.add_metric([q, reason], snap.get(key, 0))
            yield dead
        if self.latency:
            buckets, total = histogram(dict(snap))
            hist = core.HistogramMetricFamily(
                "babelq_handler_seconds", "Handler latency (middleware and handler).", labels=["queue"]
            )
            hist.add_metric([q], buckets, total)
            yield hist
        for own in self.families() if self.families is not None else ():
            family = core.CounterMetricFamily(own.name, own.doc, labels=["queue", *own.labels])
            for values, count in own.samples.items():
                family.add_metric([q, *values], count)
            yield family
        yield from self._depth(core)

    def _depth(self, core: Any) -> Iterator[Any]:
        """Each queue's depth, one sample per queue."""
        transport = self.transport() if self.transport is not None else None
        if transport is None:
            return
        for kind, read in (("ready", transport.ready), ("reserved", transport.reserved)):
            gauge = core.GaugeMetricFamily(
                f"babelq_queue_{kind}", f"Messages {kind} on the queue, read on scrape.", labels=["queue"]
            )
            for q in self.queues:
                try:
                    value = read(q)
                except Exception:  # a broker hiccup must not fail the whole scrape
                    continue
                if value is not None:
                    gauge.add_metric([q], value)
            if gauge.samples:
                yield gauge


def collector(app: App, *, queue: str | Sequence[str] | None = None) -> Any:
    """A ``prometheus_client`` collector for ``app`` (adds the latency middleware to it)."""
    _client()
    if not any(isinstance(layer, LatencyMiddleware) for layer in getattr(app.router, "_middleware", ())):
        app.use(LatencyMiddleware(app.counters))

    def read() -> dict[str, int]:  # every standard counter, 0 until counted
        return {**dict.fromkeys(_COUNTERS, 0), **dict.fromkeys(DEAD_LETTERED.values(), 0), **app.stats()}

    return _CounterCollector(read, queue or app.queue, latency=True,
                             transport=lambda: getattr(app, "_transport", None))


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


def serve(
    app: App, port: int, *, addr: str = "0.0.0.0", queue: str | Sequence[str] | None = None
) -> MetricsServer:
    """Export ``app``'s metrics on ``http://addr:port/metrics`` from a daemon thread.

    ``port=0`` takes a free port (read it from the result). Call before ``app.run()``.
    """
    _check_port(port)
    return _start(collector(app, queue=queue), port, addr)


def serve_counters(
    read: Callable[[], Mapping[str, int]], port: int, *, queue: str, addr: str = "0.0.0.0",
    transport: Any = None, families: Callable[[], Iterable[Family]] | None = None,
) -> MetricsServer:
    """Export a consumer's counters, in the runtime's counter names, as the worker's metrics.

    ``read`` is called on each scrape and returns the snapshot (``received``, ``handled``,
    ``failed``, ``retried``, ``released``, ``dead_lettered.<reason>``; the ones it leaves out are
    not exported); ``transport``, when given, is asked for the queue's depth on each scrape;
    ``families`` adds labelled counters of the consumer's own. ``port=0`` takes a free port.
    """
    _check_port(port)
    _client()
    depth = (lambda: transport) if transport is not None else None
    return _start(_CounterCollector(read, queue, transport=depth, families=families), port, addr)


def _check_port(port: int) -> None:
    if type(port) is not int or not 0 <= port <= 65535:
        raise ConfigurationError(f"metrics port: must be an integer 0..65535, got {port!r}")


def _start(found: Any, port: int, addr: str) -> MetricsServer:
    client = _client()
    registry = client.CollectorRegistry()
    registry.register(found)
    try:
        server, _thread = client.start_http_server(port, addr=addr, registry=registry)
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise ConfigurationError(f"metrics port {port}: cannot listen on {addr}: {why}") from None
    return MetricsServer(registry, int(server.server_port), server)
