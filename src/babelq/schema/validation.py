"""Validating one value against one JSON Schema, with errors a person can act on.

Each error is ``"<JSON path>: <message>"`` (``$.items[2].price: -1 is less than the
minimum of 0``), sorted by path so the output is stable. The draft comes from the
schema's ``$schema`` (Draft 7 and 2020-12, and whatever else jsonschema supports); a
schema without one is read as 2020-12. ``format`` is asserted (uuid, date-time, email...),
because a payload schema that says ``"format": "uuid"`` means it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from babelq.errors import ConfigurationError


def _jsonschema() -> Any:
    try:
        import jsonschema
    except ImportError as exc:  # pragma: no cover - the dev environment has jsonschema
        raise ConfigurationError(
            f"payload schemas need jsonschema: pip install 'babelq[schema]' ({exc})"
        ) from exc
    return jsonschema


def compile_schema(schema: Mapping[str, Any] | bool) -> Any:
    """A ready jsonschema validator for ``schema``; raises ConfigurationError for an invalid schema."""
    jsonschema = _jsonschema()
    if not isinstance(schema, Mapping | bool):
        raise ConfigurationError(f"a JSON Schema must be an object or a boolean, got {type(schema).__name__}")
    body: Any = dict(schema) if isinstance(schema, Mapping) else schema
    cls = jsonschema.validators.validator_for(body, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(body)
    except jsonschema.SchemaError as exc:
        where = exc.json_path if hasattr(exc, "json_path") else "$"
        raise ConfigurationError(f"invalid JSON Schema at {where}: {exc.message}") from None
    return cls(body, format_checker=cls.FORMAT_CHECKER)


def errors_of(validator: Any, value: Any) -> list[str]:
    """Every error of ``value`` against a compiled validator, as ``"<path>: <message>"``."""
    found = [(error.json_path, error.message) for error in validator.iter_errors(value)]
    found.sort()
    return [f"{path}: {message}" for path, message in found]


def validate_data(schema: Mapping[str, Any] | bool, value: Any) -> list[str]:
    """Errors of ``value`` against ``schema`` (compiles it each call; registries cache)."""
    return errors_of(compile_schema(schema), value)
