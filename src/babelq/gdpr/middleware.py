"""GDPR field encryption in the runtime: the broker only ever stores ciphertext of marked fields.

>>> from babelq.gdpr import load_cipher
>>> from babelq.gdpr.middleware import ProtectFields, UnprotectFields
>>> cipher = load_cipher()                      # BABELQ_GDPR_KEYS / BABELQ_GDPR_KEY_FILE
>>> app = App("redis://...", publish_middleware=[ProtectFields(registry, cipher)],
...           middleware=[UnprotectFields(registry, cipher)])

The agreed order of the features: on consume, tracing span -> **unprotect** -> schema check ->
handler (the schema validates cleartext); on publish, schema check -> **protect** -> trace
headers -> transport. The schema of a URN comes from a :class:`babelq.schema.SchemaRegistry`;
a URN without a schema, or whose schema marks nothing, passes untouched and costs one dict
lookup.

Consume side: the handler's ``message.data`` is the cleartext (``message.with_data``), while
``message.envelope`` stays as received, so a retry or a dead letter re-publishes the ciphertext
and never the cleartext. A marked value no known key can open is the message's fault:
dead-lettered at once with reason ``failed`` and cause ``undecryptable``, never retried. The
error names the field and the key ids tried, never a value.

Publish side: each publication's envelope is replaced by a copy whose marked values are
ciphertext (``Envelope.with_data``); the caller's ``data`` is not changed. A value that cannot
be protected refuses the publish (:class:`~babelq.gdpr.errors.ProtectError`).

Both take the cipher at construction: a missing or bad key configuration fails when the
App is built (:func:`babelq.gdpr.load_cipher` raises ConfigurationError), not at the first
message.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Final

from babelq.errors import ConfigurationError
from babelq.gdpr.cipher import Cipher
from babelq.gdpr.errors import UndecryptableError
from babelq.gdpr.fields import Paths, Plan, check_paths, plan, protected_with, unprotected_with
from babelq.runtime.message import Message
from babelq.runtime.middleware import Next, Publication, PublishNext
from babelq.runtime.outcome import Outcome
from babelq.runtime.rules import REASON_FAILED
from babelq.schema.registry import SchemaRegistry

#: ``dead_letter.cause`` of a message whose protected field no known key opens.
UNDECRYPTABLE: Final = "undecryptable"


class _MarkedPaths:
    """The plan of each URN's schema, recomputed when the registry's schema object changes."""

    def __init__(self, registry: SchemaRegistry, paths: Paths) -> None:
        self.registry = registry
        self.paths = paths
        self._cache: dict[str, tuple[Any, Plan]] = {}
        self._lock = threading.Lock()

    def of(self, urn: str) -> Plan:
        schema = self.registry.get(urn)
        hit = self._cache.get(urn)
        if hit is not None and hit[0] is schema:
            return hit[1]
        found = plan(schema, self.paths)
        with self._lock:
            self._cache[urn] = (schema, found)
        return found


def _check(registry: object, cipher: object) -> None:
    if not isinstance(registry, SchemaRegistry):
        got = type(registry).__name__
        raise ConfigurationError(f"registry: must be a babelq.schema.SchemaRegistry, got {got}")
    if not isinstance(cipher, Cipher):
        raise ConfigurationError(
            "cipher: must have encrypt(bytes) -> str and decrypt(str) -> bytes "
            "(babelq.gdpr.load_cipher() reads the keys from the environment)"
        )


class ProtectFields:
    """Publish middleware: marked values leave the process as ciphertext.

    ``paths`` as in :func:`babelq.gdpr.protected`: a URN whose schema marks a position the
    reference grammar does not reach refuses every publish under ``"reference"``.
    """

    def __init__(self, registry: SchemaRegistry, cipher: Cipher, *, paths: Paths = "reference") -> None:
        _check(registry, cipher)
        self.cipher = cipher
        self.paths = check_paths(paths)
        self._paths = _MarkedPaths(registry, self.paths)

    def __call__(self, publication: Publication, call_next: PublishNext) -> None:
        envelope = publication.envelope
        found = self._paths.of(envelope.urn)
        if found.refused is not None:
            raise found.refusal()
        steps = found.steps
        if steps:
            data = protected_with(envelope.data, steps, self.cipher)
            if data is not envelope.data:
                publication = dataclasses.replace(publication, envelope=envelope.with_data(data))
        call_next(publication)


class UnprotectFields:
    """Consume middleware: the handler sees cleartext; an unreadable field is dead-lettered.

    ``paths`` as in :func:`babelq.gdpr.unprotected`: under ``"reference"`` a mark beyond the
    reference grammar is left as it arrived (other SDKs never protect it).
    """

    def __init__(self, registry: SchemaRegistry, cipher: Cipher, *, paths: Paths = "reference") -> None:
        _check(registry, cipher)
        self.cipher = cipher
        self.paths = check_paths(paths)
        self._paths = _MarkedPaths(registry, self.paths)

    def __call__(self, message: Message, call_next: Next) -> Outcome:
        steps = self._paths.of(message.urn).steps
        if not steps:
            return call_next(message)
        try:
            data = unprotected_with(message.data, steps, self.cipher)
        except UndecryptableError as exc:
            return Outcome.dead_letter(REASON_FAILED, error=exc, cause=UNDECRYPTABLE)
        return call_next(message if data is message.data else message.with_data(data))
