"""Apache Kafka binding.

Produce: ``bq-*`` record headers as UTF-8 bytes, the record timestamp = ``meta.created_at``
and the record key = ``meta.sharding_key`` (partition ordering). Kafka has no delivery
counter, so consume reads the ``bq-attempts`` header as authoritative when it is present
and numeric (even when lower than the body's), else the body. Retries go through tier
topics ``<topic>.retry.<n>``, terminal failures to ``<topic>.dlq``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from babelq.bindings._fields import Doc, attempts, document, integer, meta_of, non_negative, text, urn
from babelq.envelope import now_ms

ATTEMPTS_HEADER = "bq-attempts"


def headers(doc: Doc) -> list[tuple[str, bytes]]:
    """The record headers for producing ``doc``."""
    body = document(doc)
    meta = meta_of(body)
    out: list[tuple[str, bytes]] = []
    for name, value in (
        ("bq-job", urn(body)),
        ("bq-trace-id", text(body, "trace_id")),
        ("bq-message-id", text(meta, "id")),
        ("bq-schema-version", integer(meta, "schema_version")),
        ("bq-source-lang", text(meta, "lang")),
        (ATTEMPTS_HEADER, attempts(body)),
    ):
        if value is not None:
            out.append((name, str(value).encode("utf-8")))
    return out


def record_timestamp(doc: Doc) -> int:
    """The record timestamp: ``meta.created_at`` (epoch ms), else the current time."""
    created_at = integer(meta_of(document(doc)), "created_at")
    return now_ms() if created_at is None else created_at


def record_key(doc: Doc) -> bytes | None:
    """The record key: ``meta.sharding_key`` as UTF-8, or ``None`` (round-robin)."""
    key = text(meta_of(document(doc)), "sharding_key")
    return None if key is None else key.encode("utf-8")


def _header_value(
    found: Sequence[tuple[str, bytes | None]] | Mapping[str, bytes | None] | None,
) -> object:
    if found is None:
        return None
    if isinstance(found, Mapping):
        return found.get(ATTEMPTS_HEADER)
    value: object = None
    for name, raw in found:  # Kafka allows repeated keys; the last one wins
        if name == ATTEMPTS_HEADER:
            value = raw
    return value


def reconcile_attempts(
    body_attempts: int,
    headers: Sequence[tuple[str, bytes | None]] | Mapping[str, bytes | None] | None,
) -> int:
    """The ``bq-attempts`` header when present and numeric (authoritative), else the body's count."""
    count = non_negative(_header_value(headers))
    return body_attempts if count is None else count


def retry_topic(topic: str, tier: int) -> str:
    """The retry topic of tier ``tier`` (1-based): ``<topic>.retry.<tier>``."""
    if type(tier) is not int or tier < 1:
        raise ValueError(f"retry tier must be an integer >= 1, got {tier!r}")
    return f"{topic}.retry.{tier}"


def dlq_topic(topic: str) -> str:
    """The dead-letter topic of ``topic``."""
    return f"{topic}.dlq"
