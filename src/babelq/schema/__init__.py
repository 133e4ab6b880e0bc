"""Per-URN JSON Schemas of ``data`` (docs/standard.md §9).

A :class:`SchemaRegistry` maps a URN to the JSON Schema of its ``data``; validation uses
the maintained ``jsonschema`` library (Draft 7 and 2020-12, chosen by ``$schema``),
imported only when a schema is first compiled (``pip install 'babelq[schema]'``).
Validation is opt-in: a URN without a registered schema validates as-is.

>>> from babelq.schema import SchemaRegistry
>>> reg = SchemaRegistry()
>>> reg.register("urn:babel:orders:created", {"type": "object", "required": ["order_id"]})
>>> reg.validate("urn:babel:orders:created", {})
["$: 'order_id' is a required property"]

:func:`sensitive_paths` lists the fields a schema marks ``"x-gdpr-sensitive"``
(``true`` or a category string).

:func:`quick_check` compiles a schema of :mod:`babelq.schema.subset` into a cheap accept-only
Python test for a hot path (settle's transfer check), with the full validator behind it.

The runtime's checks (:mod:`babelq.schema.middleware`): :class:`CheckSchema` dead-letters a
consumed message whose data breaks its schema, :class:`CheckSchemaOnPublish` refuses such a
publish with :class:`SchemaViolationError`. They are imported on first use, so importing
``babelq.schema`` does not load the runtime.
"""

from typing import Any

from babelq.schema.quick import quick_check
from babelq.schema.registry import SchemaRegistry, default_registry, validate
from babelq.schema.sensitive import SENSITIVE_KEYWORD, sensitive_paths
from babelq.schema.validation import compile_schema, validate_data

_LAZY = {
    "CheckSchema": "babelq.schema.middleware",
    "CheckSchemaOnPublish": "babelq.schema.middleware",
    "SchemaViolationError": "babelq.schema.errors",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'babelq.schema' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "SENSITIVE_KEYWORD",
    "CheckSchema",
    "CheckSchemaOnPublish",
    "SchemaRegistry",
    "SchemaViolationError",
    "compile_schema",
    "default_registry",
    "quick_check",
    "sensitive_paths",
    "validate",
    "validate_data",
]
