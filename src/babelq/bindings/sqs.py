"""Amazon SQS binding.

Produce: six ``bq-*`` MessageAttributes (ids and strings as DataType ``String``, counters
as ``Number``), FIFO group/deduplication ids (the group: the configured one, else the queue
name), and ``DelaySeconds`` capped at SQS's 900 s.
Consume: SQS counts receives itself (``ApproximateReceiveCount``, 1-based), but a runtime
that retries by re-publishing resets it, so attempts = max(body, count - 1) and is never
lowered; an absent or garbage count is ignored.
"""

from __future__ import annotations

from typing import Final, Literal

from babelq.bindings._fields import Doc, document, integer, meta_of, non_negative, text, urn

#: SQS's maximum DelaySeconds.
MAX_DELAY_SECONDS: Final = 900
FIFO_SUFFIX: Final = ".fifo"
#: what names a FIFO message's group: the configured group (else the queue name), or first
#: ``meta.sharding_key``
GroupBy = Literal["group_id", "sharding_key"]


def _string(value: str) -> dict[str, str]:
    return {"DataType": "String", "StringValue": value}


def _number(value: int) -> dict[str, str]:
    return {"DataType": "Number", "StringValue": str(value)}


def project(doc: Doc) -> dict[str, dict[str, str]]:
    """The ``MessageAttributes`` for sending ``doc``."""
    body = document(doc)
    meta = meta_of(body)
    attrs: dict[str, dict[str, str]] = {}
    for name, value in (
        ("bq-job", urn(body)),
        ("bq-trace-id", text(body, "trace_id")),
        ("bq-message-id", text(meta, "id")),
    ):
        if value is not None:
            attrs[name] = _string(value)
    version = integer(meta, "schema_version")
    if version is not None:
        attrs["bq-schema-version"] = _number(version)
    lang = text(meta, "lang")
    if lang is not None:
        attrs["bq-source-lang"] = _string(lang)
    created_at = integer(meta, "created_at")
    if created_at is not None:
        attrs["bq-created-at"] = _number(created_at)
    return attrs


def reconcile_attempts(body_attempts: int, approximate_receive_count: object) -> int:
    """max(body attempts, ApproximateReceiveCount - 1); a missing or non-numeric count is ignored."""
    count = non_negative(approximate_receive_count)
    if count is None:
        return body_attempts
    return max(body_attempts, count - 1)


def is_fifo(queue_name: str) -> bool:
    """Whether ``queue_name`` names a FIFO queue (it ends in ``.fifo``)."""
    return queue_name.endswith(FIFO_SUFFIX)


def fifo_parameters(
    queue_name: str,
    doc: Doc,
    *,
    group_id: str | None = None,
    group_by: GroupBy = "group_id",
    content_based_dedup: bool = False,
) -> dict[str, str]:
    """``MessageGroupId`` / ``MessageDeduplicationId`` for a FIFO queue; ``{}`` for a standard one.

    The group is ``group_id``, else the queue name, as the standard says; ``group_by=
    "sharding_key"`` (an opt-in beyond it) puts ``meta.sharding_key`` first. The deduplication
    id is ``meta.id`` unless the queue deduplicates by content.
    """
    if not is_fifo(queue_name):
        return {}
    meta = meta_of(document(doc))
    keyed = text(meta, "sharding_key") if group_by == "sharding_key" else None
    params = {"MessageGroupId": keyed or group_id or queue_name}
    message_id = text(meta, "id")
    if not content_based_dedup and message_id is not None:
        params["MessageDeduplicationId"] = message_id
    return params


def delay_seconds(delay_ms: int) -> int:
    """``DelaySeconds`` for a delay in milliseconds: rounded up, between 0 and 900."""
    if delay_ms <= 0:
        return 0
    return min(-(-delay_ms // 1000), MAX_DELAY_SECONDS)
