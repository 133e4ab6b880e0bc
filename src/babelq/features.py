"""The feature middleware, composed in one place and in one order.

Each feature is one package with its own middleware (:mod:`babelq.tracing`,
:mod:`babelq.idempotency`, :mod:`babelq.gdpr`, :mod:`babelq.schema`). Their order matters, and
getting it wrong is silent: a schema check after protection sees ciphertext (a ``format:
email`` field fails), a check before unprotection does too, and a duplicate that is decrypted
before it is skipped wastes the work. :class:`Features` builds both chains in the order the
features are designed for, from the ones you switch on:

* consume: tracing span -> idempotency -> GDPR unprotect -> schema check -> handler
* publish: schema check -> GDPR protect -> trace headers -> transport

>>> from babelq.runtime import App
>>> from babelq.schema import SchemaRegistry
>>> from babelq.transports.memory import MemoryTransport
>>> schemas = SchemaRegistry()
>>> schemas.register("urn:babel:orders:created", {"required": ["order_id"]})
>>> app = Features(schemas=schemas).install(App(MemoryTransport(), queue="orders"))

Every feature module is imported only when its feature is switched on, so a service without
OpenTelemetry or ``cryptography`` installed can still use the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from babelq.gdpr.cipher import Cipher
    from babelq.gdpr.fields import Paths
    from babelq.idempotency.store import IdempotencyStore
    from babelq.runtime import App
    from babelq.runtime.middleware import Middleware, PublishMiddleware
    from babelq.schema import SchemaRegistry


@dataclass(frozen=True)
class Features:
    """The features a service uses; :meth:`install` adds their middleware to an ``App``.

    ``schemas`` checks ``data`` against each URN's schema (consume: dead-letter with the path;
    publish: refuse), unless ``check_schemas`` is False. ``cipher`` (with ``schemas``, whose
    ``x-gdpr-sensitive`` marks it follows) protects marked fields on publish and unprotects
    them before the handler, at the positions ``gdpr_paths`` selects (``"reference"`` by default,
    ``"extended"`` for babelq-only fleets; :func:`babelq.gdpr.protected`). ``idempotency`` skips
    a ``meta.id`` already handled. ``tracing`` adds OpenTelemetry spans and W3C ``traceparent``
    headers.
    """

    schemas: SchemaRegistry | None = None
    check_schemas: bool = True
    cipher: Cipher | None = None
    gdpr_paths: Paths = "reference"
    idempotency: IdempotencyStore | None = None
    tracing: bool = False

    def __post_init__(self) -> None:
        from babelq.gdpr.fields import check_paths

        check_paths(self.gdpr_paths)
        if self.cipher is not None and self.schemas is None:
            from babelq.errors import ConfigurationError

            raise ConfigurationError("cipher: needs schemas (the x-gdpr-sensitive marks say what to protect)")

    def consume(self) -> list[Middleware]:
        """The consume-side middleware, outermost first."""
        chain: list[Middleware] = []
        if self.tracing:
            from babelq.tracing.consume import TraceConsumeMiddleware

            chain.append(TraceConsumeMiddleware())
        if self.idempotency is not None:
            from babelq.idempotency.middleware import IdempotencyMiddleware

            chain.append(IdempotencyMiddleware(self.idempotency))
        if self.cipher is not None and self.schemas is not None:
            from babelq.gdpr.middleware import UnprotectFields

            chain.append(UnprotectFields(self.schemas, self.cipher, paths=self.gdpr_paths))
        if self.schemas is not None and self.check_schemas:
            from babelq.schema.middleware import CheckSchema

            chain.append(CheckSchema(self.schemas))
        return chain

    def publish(self) -> list[PublishMiddleware]:
        """The publish-side middleware, outermost first."""
        chain: list[PublishMiddleware] = []
        if self.schemas is not None and self.check_schemas:
            from babelq.schema.middleware import CheckSchemaOnPublish

            chain.append(CheckSchemaOnPublish(self.schemas))
        if self.cipher is not None and self.schemas is not None:
            from babelq.gdpr.middleware import ProtectFields

            chain.append(ProtectFields(self.schemas, self.cipher, paths=self.gdpr_paths))
        if self.tracing:
            from babelq.tracing.publish import TracePublishMiddleware

            chain.append(TracePublishMiddleware())
        return chain

    def install(self, app: App) -> App:
        """Add both chains to ``app`` (after any middleware it already has); returns ``app``."""
        for layer in self.consume():
            app.use(layer)
        for step in self.publish():
            app.use_publish(step)
        return app


__all__ = ["Features"]
