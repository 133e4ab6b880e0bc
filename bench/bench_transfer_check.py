"""Settle's quick transfer check: the one compiled from the schema, next to the hand-written one it replaced.

Run: ``.venv/bin/python bench/bench_transfer_check.py [--rounds N]``

Per call, on one ``transfer.requested`` data object as settle's handler sees it (decoded by
orjson), in the same run:

* ``derived quick check``: :data:`babelq.pipelines.transfer_schema.obviously_valid`, compiled
  from ``TRANSFER_SCHEMA`` by :func:`babelq.schema.quick.quick_check` (what settle runs);
* ``hand-written (old)``: the check settle ran before, a copy of the schema's rules written by
  hand; kept here, and only here, as the baseline the derived one must not be slower than;
* ``jsonschema, prebuilt``: ``is_valid`` of a validator built once, what every message would
  cost without a quick check.

Valid data is the common case (every posted payment); an invalid object (a 5-digit account) is
timed too, though there the quick check only says "ask the full validator".
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import sys
from functools import partial
from typing import Any

import orjson

from _util import interleaved_best, print_table
from babelq.pipelines.transfer_schema import TRANSFER_SCHEMA, obviously_valid, schema_errors

VALID: dict[str, Any] = orjson.loads(orjson.dumps({
    "payment_reference": "PAY-20250605-000421",
    "amount_cents": 1_254_990,
    "currency": "AUD",
    "debtor_bsb": "012-345",
    "debtor_account": "123456789",
    "creditor_bsb": "033-001",
    "creditor_account": "987654321",
    "validation_result": {
        "passed": True,
        "checks": ["reference_present", "amount_integer_cents", "amount_within_limits", "currency_iso4217",
                   "bsb_format", "account_format", "reference_unique_in_file", "schema"],
        "validated_at": 1_749_132_727_000,
    },
    "narrative": "Invoice 4211",
}))
INVALID: dict[str, Any] = {**VALID, "creditor_account": "12345"}

# -- the hand-written check settle ran before the rules came from the schema (baseline only) --------

_BSB = re.compile(r"[0-9]{3}-[0-9]{3}").fullmatch
_ACCOUNT = re.compile(r"[0-9]{6,10}").fullmatch
_CCY = re.compile(r"[A-Z]{3}").fullmatch


def hand_written(data: Any) -> bool:
    if type(data) is not dict:
        return False
    get = data.get
    ref, amount, currency = get("payment_reference"), get("amount_cents"), get("currency")
    if type(ref) is not str or not 1 <= len(ref) <= 64 or type(amount) is not int or amount < 1:
        return False
    if type(currency) is not str or _CCY(currency) is None:
        return False
    for key in ("debtor_bsb", "creditor_bsb"):
        value = get(key)
        if type(value) is not str or _BSB(value) is None:
            return False
    for key in ("debtor_account", "creditor_account"):
        value = get(key)
        if type(value) is not str or _ACCOUNT(value) is None:
            return False
    proof = get("validation_result")
    if type(proof) is not dict or type(proof.get("passed")) is not bool:
        return False
    checks = proof.get("checks")
    if type(checks) is not list:
        return False
    for check in checks:  # noqa: SIM110 - as it was
        if type(check) is not str:
            return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()

    import jsonschema

    prebuilt = jsonschema.validators.validator_for(TRANSFER_SCHEMA)(TRANSFER_SCHEMA)
    assert obviously_valid(VALID) and hand_written(VALID) and prebuilt.is_valid(VALID)
    assert not obviously_valid(INVALID) and not hand_written(INVALID) and schema_errors(INVALID)

    rows: list[list[str]] = []
    for label, data in (("valid", VALID), ("invalid", INVALID)):
        timings = interleaved_best(
            {
                "derived quick check": partial(obviously_valid, data),
                "hand-written (old)": partial(hand_written, data),
                "jsonschema, prebuilt": partial(prebuilt.is_valid, data),
            },
            rounds=args.rounds,
        )
        base = timings["hand-written (old)"]
        for name, timing in timings.items():
            rows.append([
                f"{label}: {name}", f"{timing.seconds_per_call * 1e9:,.0f}",
                f"{base.seconds_per_call / timing.seconds_per_call:.2f}x",
            ])
    version = importlib.metadata.version("jsonschema")
    print(f"transfer.requested data checks, jsonschema {version}, best of {args.rounds} rounds")
    print_table(["check", "ns per call", "speed vs hand-written"], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
