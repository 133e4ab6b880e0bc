"""A tracer whose finished spans land in memory (opentelemetry-sdk's InMemorySpanExporter).

The provider is local to the test (never the global one), and handed to both SDKs' middleware
explicitly, so tests do not leak spans into each other.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Tracer


@dataclass
class Spans:
    tracer: Tracer
    exporter: InMemorySpanExporter

    def finished(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def of_kind(self, kind: SpanKind) -> list[ReadableSpan]:
        return [s for s in self.finished() if s.kind == kind]

    def one(self, kind: SpanKind) -> ReadableSpan:
        found = self.of_kind(kind)
        assert len(found) == 1, f"expected one {kind} span, got {[s.name for s in found]}"
        return found[0]


@pytest.fixture
def spans() -> Iterator[Spans]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield Spans(provider.get_tracer("tests"), exporter)
    provider.shutdown()


def traceparent_of(span: Any) -> str:
    """The W3C ``traceparent`` naming ``span`` (its flags: sampled, and random when the SDK says so)."""
    ctx = span.get_span_context() if hasattr(span, "get_span_context") else span.context
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"
