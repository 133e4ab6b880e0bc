"""Schema checks in the runtime: ``data`` that breaks its URN's JSON Schema never reaches a
handler, and never leaves a producer.

>>> from babelq.schema import SchemaRegistry
>>> from babelq.schema.middleware import CheckSchema, CheckSchemaOnPublish
>>> registry = SchemaRegistry()
>>> registry.load("schemas/")                     # or registry.register(urn, schema)
>>> app = App("redis://...", middleware=[CheckSchema(registry)],
...           publish_middleware=[CheckSchemaOnPublish(registry)])

docs/standard.md §9 on the runtime's terms. The agreed order of the features: on consume, tracing
span -> GDPR unprotect -> **schema check** -> handler (the check sees cleartext); on publish,
**schema check** -> GDPR protect -> trace headers -> transport (it checks what the caller wrote,
before any field becomes ciphertext). Register the middleware in that order.

Consume side (:class:`CheckSchema`): a message whose ``data`` breaks its URN's schema is
dead-lettered at once with reason ``failed``, cause ``schema``
(:data:`babelq.runtime.rules.SCHEMA`) and an error naming every JSON path, e.g.
``schema: $.amount: -5 is less than the minimum of 0``. It is never retried: the same bytes
fail the same way on every attempt, so retrying only delays the dead letter. It is counted as
``schema_invalid``.

Publish side (:class:`CheckSchemaOnPublish`): a publication whose ``data`` breaks the schema is
refused before anything reaches the broker, with a one-line
:class:`~babelq.schema.errors.SchemaViolationError` naming the URN, the queue and the paths. A batch
(``App.publish_many``) is checked message by message before the first is sent, so a bad
message refuses the whole batch and nothing of it is published.

A URN without a registered schema passes (the check is opt-in per URN, as in the standard)
unless ``required=True``, which makes a missing schema a violation too. The compiled validator
is cached per URN by the registry (compiled once, at registration); ``bench/bench_schema.py``
measures what that saves. Error texts never quote a value of a field the schema marks
``x-gdpr-sensitive`` (:mod:`babelq.schema.validation`).
"""

from __future__ import annotations

from babelq.errors import ConfigurationError
from babelq.runtime import rules
from babelq.runtime.message import Message
from babelq.runtime.middleware import Next, Publication, PublishNext
from babelq.runtime.outcome import SCHEMA_INVALID, Outcome
from babelq.schema.errors import SchemaViolationError
from babelq.schema.registry import SchemaRegistry


def _registry(registry: object) -> SchemaRegistry:
    if not isinstance(registry, SchemaRegistry):
        got = type(registry).__name__
        raise ConfigurationError(f"registry: must be a babelq.schema.SchemaRegistry, got {got}")
    return registry


class CheckSchema:
    """Consume middleware: dead-letter (cause ``schema``, never retried) data that breaks its schema."""

    def __init__(self, registry: SchemaRegistry, *, required: bool = False) -> None:
        self.registry = _registry(registry)
        self.required = required

    def __call__(self, message: Message, call_next: Next) -> Outcome:
        urn = message.urn
        if not self.required and urn not in self.registry:  # opt-in: one dict lookup
            return call_next(message)
        # jsonschema's "object" is a dict: the read-only view the handler gets is not one
        errors = self.registry.validate(urn, dict(message.data), required=self.required)
        if not errors:
            return call_next(message)
        violation = SchemaViolationError(urn, errors)
        return Outcome.dead_letter(
            rules.REASON_FAILED, error=violation, cause=rules.SCHEMA, label=SCHEMA_INVALID
        )


class CheckSchemaOnPublish:
    """Publish middleware: refuse (raise :class:`SchemaViolationError`) data that breaks its schema."""

    def __init__(self, registry: SchemaRegistry, *, required: bool = False) -> None:
        self.registry = _registry(registry)
        self.required = required

    def __call__(self, publication: Publication, call_next: PublishNext) -> None:
        envelope = publication.envelope
        urn = envelope.urn
        if self.required or urn in self.registry:
            errors = self.registry.validate(urn, envelope.data, required=self.required)
            if errors:
                refused = f"refused to publish {urn} to {publication.queue!r}"
                raise SchemaViolationError(urn, errors, refused=refused)
        call_next(publication)
