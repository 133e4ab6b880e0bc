"""The envelope's ``trace_id`` (a UUID string) as a 128-bit OpenTelemetry trace id, and back.

A UUID is 128 bits and so is an OTel/W3C trace id, so the natural mapping is the UUID's bytes.
That is also how the ``babelqueue`` package correlates a message without a ``traceparent``, so
a babelq consumer and a package consumer of the same header-less message land in one trace.
A ``trace_id`` that is not a UUID (the standard requires only a non-empty string) maps to the
first 16 bytes of its SHA-256, which the package does too; zero (OTel's invalid id) never comes
out.
"""

from __future__ import annotations

import hashlib


def otel_trace_id(trace_id: str) -> int:
    """The 128-bit trace id for envelope ``trace_id`` (non-zero)."""
    compact = trace_id.replace("-", "")
    if len(compact) == 32:
        try:
            value = int(compact, 16)
        except ValueError:
            value = 0
        if value:
            return value
    digest = hashlib.sha256(trace_id.encode("utf-8")).digest()[:16]
    return int.from_bytes(digest, "big") or 1


def trace_id_uuid(otel_id: int) -> str:
    """A 128-bit trace id written as a UUID string (``8-4-4-4-12`` lowercase hex)."""
    h = f"{otel_id & ((1 << 128) - 1):032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def parent_span_id(trace_id: str) -> int:
    """A stable, non-zero 64-bit span id standing for "the producer" of a header-less message,
    so the consumer span can name a remote parent in the ``trace_id``'s trace."""
    digest = hashlib.blake2b(trace_id.encode("utf-8"), digest_size=8, person=b"babelq-parent").digest()
    return int.from_bytes(digest, "big") or 1
