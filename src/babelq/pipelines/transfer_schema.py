"""The JSON Schema of ``transfer.requested`` data: the one statement of the payment rules.

The BSB and account patterns, the currency list (ISO 4217, :mod:`~babelq.pipelines.currencies`),
the amount bounds and the reference length are written here and nowhere else; every check of a
payment is derived from this schema:

* ingest's SQL rules (:mod:`babelq.pipelines.ingest_rules`) read their patterns, currency list and
  default amount bounds through :func:`field_schema`, so a bad BSB is ``debtor_bsb_invalid`` in
  the rejects rather than a generic schema error;
* ingest then checks every row's whole data object against the schema in Spark before publishing
  (compiled to a Spark column by :mod:`babelq.spark.schema_check`; ``schema_invalid``);
* settle checks it again in Python before posting: :data:`obviously_valid`, compiled from the
  schema, accepts the common case cheaply, and :func:`schema_errors` (jsonschema) gives the verdict
  and the texts for the rest. A consumer never trusts a payload just because it decoded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from babelq.pipelines.currencies import ISO_4217
from babelq.schema.quick import quick_check

_BSB: dict[str, Any] = {"type": "string", "pattern": "^[0-9]{3}-[0-9]{3}$"}
_ACCOUNT: dict[str, Any] = {"type": "string", "pattern": "^[0-9]{6,10}$"}

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
        # integer cents: 0.01 .. 1,000,000.00; ingest's Limits may narrow these, never widen them
        "amount_cents": {"type": "integer", "minimum": 1, "maximum": 100_000_000},
        "currency": {"type": "string", "enum": sorted(ISO_4217)},
        "debtor_bsb": _BSB,
        "debtor_account": _ACCOUNT,
        "creditor_bsb": _BSB,
        "creditor_account": _ACCOUNT,
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


def field_schema(name: str) -> Mapping[str, Any]:
    """The schema of the data member ``name`` (``debtor_bsb`` -> its ``type`` and ``pattern``): where
    ingest's SQL rules read the pattern, currency list and amount bounds they apply."""
    schema: Mapping[str, Any] = TRANSFER_SCHEMA["properties"][name]
    return schema


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
