"""Validating one value against one JSON Schema, with errors a person can act on.

Each error is ``"<JSON path>: <message>"`` (``$.items[2].price: -1 is less than the
minimum of 0``), sorted by path so the output is stable. The draft comes from the
schema's ``$schema`` (Draft 7 and 2020-12, and whatever else jsonschema supports); a
schema without one is read as 2020-12. ``format`` is asserted (uuid, date-time, email...),
because a payload schema that says ``"format": "uuid"`` means it.

Personal data never reaches an error text. jsonschema's messages quote the value
(``'ann@example.org' is not a 'email'``), and these texts end up in logs and in the
``dead_letter.error`` of a DLQ message whose data is otherwise ciphertext. So an error whose
value is, contains or lies inside a field the schema marks ``"x-gdpr-sensitive": true``
(:func:`hidden_patterns`) is written without the value:
``$.email: value not shown (x-gdpr-sensitive), fails "format": "email"``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from babelq.errors import ConfigurationError
from babelq.extras import optional_import
from babelq.schema.sensitive import ANY_KEY, ITEMS, Position, marked_positions

#: One marked field as steps (every mark, the reference grammar's reach or not: hiding more is safe).
Pattern = Position
#: keywords whose jsonschema message names keys, never the value itself
_VALUE_FREE: Final = frozenset(
    {"required", "additionalProperties", "dependentRequired", "unevaluatedProperties"}
)
#: the longest text of one error (a message may quote a whole object)
MAX_ERROR_CHARS: Final = 300


def _jsonschema() -> Any:
    return optional_import("jsonschema", needed_for="payload schema validation")


def compile_schema(schema: Mapping[str, Any] | bool, *, draft: str | None = None) -> Any:
    """A ready jsonschema validator for ``schema``; raises ConfigurationError for an invalid schema.

    ``draft``: the ``$schema`` URI a schema without its own is read as (2020-12 when None).
    """
    jsonschema = _jsonschema()
    if not isinstance(schema, Mapping | bool):
        raise ConfigurationError(f"a JSON Schema must be an object or a boolean, got {type(schema).__name__}")
    body: Any = dict(schema) if isinstance(schema, Mapping) else schema
    default = jsonschema.Draft202012Validator
    if draft is not None:
        default = jsonschema.validators.validator_for({"$schema": draft}, default=default)
    cls = jsonschema.validators.validator_for(body, default=default)
    try:
        cls.check_schema(body)
    except jsonschema.SchemaError as exc:
        where = exc.json_path if hasattr(exc, "json_path") else "$"
        raise ConfigurationError(f"invalid JSON Schema at {where}: {exc.message}") from None
    return cls(body, format_checker=cls.FORMAT_CHECKER)


def hidden_patterns(schema: Mapping[str, Any] | bool) -> tuple[Pattern, ...]:
    """The fields ``schema`` marks ``x-gdpr-sensitive``, as step patterns for :func:`errors_of`."""
    return tuple(marked.steps for marked in marked_positions(schema))


def _touches(where: Sequence[Any], patterns: Iterable[Pattern]) -> bool:
    """Whether the value at ``where`` is, contains or lies inside a marked field."""
    for pattern in patterns:
        for step, want in zip(where, pattern, strict=False):
            if want.kind == ITEMS:
                if type(step) is not int:
                    break
            elif type(step) is int or (want.kind != ANY_KEY and want.name != step):
                break
        else:
            return True
    return False


def _clip(text: str) -> str:
    text = " ".join(text.split())  # one line, whatever the message quoted
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


def _hidden_message(error: Any) -> str:
    if error.validator in _VALUE_FREE:
        return str(error.message)
    try:
        wanted = json.dumps(error.validator_value, ensure_ascii=False, separators=(",", ":"), default=str)
    except ValueError:
        wanted = "…"
    if len(wanted) > 80:
        wanted = wanted[:79] + "…"
    return f'value not shown (x-gdpr-sensitive), fails "{error.validator}": {wanted}'


def errors_of(validator: Any, value: Any, hidden: Sequence[Pattern] = ()) -> list[str]:
    """Every error of ``value`` against a compiled validator, as ``"<path>: <message>"``.

    ``hidden``: the marked fields (:func:`hidden_patterns`) whose values must not be quoted.
    """
    found = []
    for error in validator.iter_errors(value):
        secret = hidden and _touches(error.absolute_path, hidden)
        message = _hidden_message(error) if secret else error.message
        found.append((error.json_path, message))
    found.sort()
    return [_clip(f"{path}: {message}") for path, message in found]


def validate_data(schema: Mapping[str, Any] | bool, value: Any) -> list[str]:
    """Errors of ``value`` against ``schema`` (compiles it each call; registries cache)."""
    return errors_of(compile_schema(schema), value, hidden_patterns(schema))
