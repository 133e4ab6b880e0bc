"""Schema checks: what caching the compiled validator per URN buys, next to calling jsonschema directly.

Run: ``.venv/bin/python bench/bench_schema.py [--rounds N]``

One payment-shaped ``data`` object against its URN's schema (Draft 2020-12, formats asserted),
valid data (the common case), per validation:

* ``CheckSchema (cached)``: the consume middleware on a message, validator compiled once per URN
  by the registry (what the runtime does per message);
* ``registry.validate (cached)``: the registry call alone;
* ``compile each time``: :func:`babelq.schema.validate_data`, which builds (and checks) the
  validator on every call, as a check without a cache would;
* ``jsonschema.validate()``: the library's one-call API, which also checks the schema and builds
  a validator every time;
* ``jsonschema validator, prebuilt``: ``validator.is_valid`` on a validator built once, the floor
  any wrapper can reach.

Invalid data is timed too (one error): the dead-letter path builds the error texts.
The ratios are against ``compile each time``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from typing import Any

import jsonschema

from _util import format_rate, interleaved_best, print_table
from babelq.envelope import make
from babelq.runtime import Message, Outcome
from babelq.schema import CheckSchema, SchemaRegistry, validate_data
from babelq.transports import Delivery

URN = "urn:babel:payments:payment.requested"
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": [
        "reference", "amount_cents", "currency", "debtor_account", "creditor_account", "requested_at"
    ],
    "properties": {
        "reference": {"type": "string", "minLength": 1, "maxLength": 35},
        "amount_cents": {"type": "integer", "minimum": 1},
        "currency": {"enum": ["AUD", "NZD", "USD", "EUR"]},
        "debtor_account": {"type": "string", "pattern": "^[0-9]{6,10}$"},
        "creditor_account": {"type": "string", "pattern": "^[0-9]{6,10}$"},
        "requested_at": {"type": "string", "format": "date-time"},
        "payer_email": {"type": "string", "format": "email", "x-gdpr-sensitive": True},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
    },
    "additionalProperties": False,
}
VALID: dict[str, Any] = {
    "reference": "INV-2025-004211/7",
    "amount_cents": 1_254_990,
    "currency": "AUD",
    "debtor_account": "12345678",
    "creditor_account": "87654321",
    "requested_at": "2025-06-05T14:12:07Z",
    "payer_email": "ann@example.org",
    "tags": ["bulk", "priority"],
}
INVALID = {**VALID, "amount_cents": -5}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()

    registry = SchemaRegistry()
    registry.register(URN, SCHEMA)
    check = CheckSchema(registry)
    prebuilt = jsonschema.Draft202012Validator(SCHEMA)
    handled = Outcome.ack()

    def message_of(data: dict[str, Any]) -> Message:
        env = make(URN, data, queue="payments")
        return Message.of(env, Delivery(body=env.encode(), queue="payments"))

    good, bad = message_of(VALID), message_of(INVALID)
    assert check(good, lambda m: handled) is handled
    assert check(bad, lambda m: handled).cause == "schema"
    assert registry.validate(URN, VALID) == [] and validate_data(SCHEMA, VALID) == []
    assert registry.validate(URN, INVALID) == validate_data(SCHEMA, INVALID) != []

    def direct(data: dict[str, Any]) -> bool:
        try:
            jsonschema.validate(data, SCHEMA)
        except jsonschema.ValidationError:
            return False
        return True

    rows: list[list[str]] = []
    for label, data, msg in (("valid", VALID, good), ("invalid", INVALID, bad)):
        contenders = {
            "CheckSchema (cached)": lambda msg=msg: check(msg, lambda m: handled),
            "registry.validate (cached)": lambda data=data: registry.validate(URN, data),
            "compile each time": lambda data=data: validate_data(SCHEMA, data),
            "jsonschema.validate()": lambda data=data: direct(data),
            "jsonschema validator, prebuilt": lambda data=data: prebuilt.is_valid(data),
        }
        timings = interleaved_best(contenders, rounds=args.rounds)
        base = timings["compile each time"]
        for name, timing in timings.items():
            rows.append([
                f"{label}: {name}", format_rate(timing.per_second), f"{timing.seconds_per_call * 1e6:.1f}",
                f"{base.seconds_per_call / timing.seconds_per_call:.1f}x",
            ])
    version = importlib.metadata.version("jsonschema")
    print(f"schema checks, one payment object, jsonschema {version}, best of {args.rounds} rounds")
    print_table(["validation", "per second", "us each", "vs compile each time"], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
