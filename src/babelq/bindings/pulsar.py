"""Apache Pulsar binding.

Produce: Pulsar properties are string to string, so every ``bq-*`` value is stringified;
``meta.sharding_key`` is the message key (ordering), a delayed message mirrors its
delivery time on ``bq-delay``. Topics live under ``persistent://public/default/`` and
consumers share the subscription ``babelqueue``. Consume: RedeliveryCount is 0-based, so
attempts = max(body, RedeliveryCount), never lowered.
"""

from __future__ import annotations

from typing import Final

from babelq.bindings._fields import Doc, attempts, document, integer, meta_of, non_negative, text, urn

SUBSCRIPTION: Final = "babelqueue"
TOPIC_PREFIX: Final = "persistent://public/default/"


def project(doc: Doc) -> dict[str, str]:
    """The message properties for sending ``doc``.

    ``bq-delay`` is not among them: it mirrors the delay of one particular send (relative ms,
    known only when sending), so the transport adds it with :func:`delay_properties`.
    """
    body = document(doc)
    meta = meta_of(body)
    props: dict[str, str] = {}
    for name, value in (
        ("bq-job", urn(body)),
        ("bq-trace-id", text(body, "trace_id")),
        ("bq-message-id", text(meta, "id")),
        ("bq-schema-version", integer(meta, "schema_version")),
        ("bq-source-lang", text(meta, "lang")),
        ("bq-attempts", attempts(body)),
    ):
        if value is not None:
            props[name] = str(value)
    return props


def reconcile_attempts(body_attempts: int, redelivery_count: object) -> int:
    """max(body attempts, RedeliveryCount) (0-based, no -1)."""
    count = non_negative(redelivery_count)
    if count is None:
        return body_attempts
    return max(body_attempts, count)


def topic(queue: str) -> str:
    """The topic of a logical queue."""
    return f"{TOPIC_PREFIX}{queue}"


def dlq_topic(queue: str) -> str:
    """The dead-letter topic of a logical queue (``<queue>.dlq``)."""
    return topic(f"{queue}.dlq")


def partition_key(doc: Doc) -> str | None:
    """The message key: ``meta.sharding_key``, if any."""
    return text(meta_of(document(doc)), "sharding_key")


def delay_properties(delay_ms: int) -> dict[str, str]:
    """The ``bq-delay`` mirror of a native deliverAfter/deliverAt: the delay in ms from the send.

    Milliseconds of delay, like the Kafka binding's ``bq-delay`` header, not an epoch: a
    consumer reads how long the message was held back without knowing the producer's clock.
    """
    return {"bq-delay": str(delay_ms)}
