"""The JSON Schema of ``transfer.requested`` data, and a Python validator for it.

Ingest checks every row's data against it in Spark before publishing (compiled to a Spark
column by :mod:`babelq.spark.schema_check`, on top of the SQL rules), and settle checks it
again in Python before posting (:func:`schema_errors`): a consumer never trusts a payload just
because it decoded.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

from babelq.schema.quick import quick_check

TRANSFER_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "urn:babel:payments:transfer.requested data",
    "type": "object",
    "required": [
        "payment_reference",
        "amount_cents",
        "currency",
        "debtor_bsb",
        "debtor_account",
        "creditor_bsb",
        "creditor_account",
        "validation_result",
    ],
    "properties": {
        "payment_reference": {"type": "string", "minLength": 1, "maxLength": 64},
        "amount_cents": {"type": "integer", "minimum": 1},
        "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "debtor_bsb": {"type": "string", "pattern": "^[0-9]{3}-[0-9]{3}$"},
        "debtor_account": {"type": "string", "pattern": "^[0-9]{6,10}$"},
        "creditor_bsb": {"type": "string", "pattern": "^[0-9]{3}-[0-9]{3}$"},
        "creditor_account": {"type": "string", "pattern": "^[0-9]{6,10}$"},
        "validation_result": {
            "type": "object",
            "required": ["passed", "checks"],
            "properties": {
                "passed": {"type": "boolean"},
                "checks": {"type": "array", "items": {"type": "string"}},
            },
        },
    },
}


@lru_cache(maxsize=1)
def _validator() -> Any:
    import jsonschema

    cls = jsonschema.validators.validator_for(TRANSFER_SCHEMA)
    return cls(TRANSFER_SCHEMA)


#: True only for data :data:`TRANSFER_SCHEMA` accepts, compiled from it once (far cheaper than
#: jsonschema: settle runs it on every message); anything it does not accept goes to the full
#: validator for the verdict (:func:`schema_errors`).
obviously_valid: Callable[[Any], bool] = quick_check(TRANSFER_SCHEMA)


def schema_errors(data: Any) -> list[str]:
    """Problems of ``data`` against :data:`TRANSFER_SCHEMA` (empty when it is valid)."""
    if obviously_valid(data):
        return []
    validator = _validator()
    if validator.is_valid(data):
        return []
    return sorted(
        f"{'.'.join(str(p) for p in err.absolute_path) or '(root)'}: {err.message}"
        for err in validator.iter_errors(data)
    )
