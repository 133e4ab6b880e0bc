"""Envelope codec throughput: babelq against the babelqueue SDK, same payloads, same process.

Run: ``.venv/bin/python bench/bench_codec.py [--rounds N]``

Two operations per payload:

* make+encode: build a new envelope from (urn, data) and produce its wire form;
* decode+accepts: read wire bytes back and run the consumer's acceptance rules;
* decode+accepts+data: the same, then read the payload a handler would get. babelq's
  decode is lazy, so this row shows the cost a real consumer pays.

Each side is called the way its users call it (babelqueue's codec works on ``str``, babelq's
on ``bytes``). Before timing, the script proves both sides write the same bytes for the
benchmark payloads, so the comparison is between equivalent outputs.
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from typing import Any

from babelqueue import EnvelopeCodec

from _util import interleaved_best, print_table, ratio_row
from babelq.envelope import decode, make

URN = "urn:babel:payments:payment.requested"
QUEUE = "payments"
TRACE_ID = "5f0c6a1e-2b7d-4c39-8e51-0a9d3b7f6c24"
MESSAGE_ID = "c1d2e3f4-a5b6-4c7d-8e9f-0a1b2c3d4e5f"
CREATED_AT = 1_749_132_727_000

PAYMENT: dict[str, Any] = {
    "reference": "INV-2025-004211/7",
    "amount_cents": 1_254_990,
    "currency": "AUD",
    "debtor_bsb": "062-000",
    "debtor_account": "12345678",
    "creditor_bsb": "083-170",
    "creditor_account": "98765432",
    "creditor_name": "Zoë Ōtsuka-Müller — Café Ψ",
    "value_date": "2025-06-05",
    "validation_result": {
        "status": "passed",
        "checks": ["bsb_exists", "account_format", "sanctions", "duplicate_window"],
        "scored_by": "rules-v7",
    },
}

PAYMENT_WITH_FLOATS: dict[str, Any] = {
    **PAYMENT,
    "fx_rate": 0.6543,
    "fee_ratio": 0.0125,
    "risk_score": 12.75,
    "validation_result": {**PAYMENT["validation_result"], "confidence": 0.987},
}


def ours_make_encode(data: dict[str, Any]) -> bytes:
    return make(URN, data, queue=QUEUE).encode()


def theirs_make_encode(data: dict[str, Any]) -> str:
    return EnvelopeCodec.encode(EnvelopeCodec.make(URN, data, queue=QUEUE))


def ours_decode_accepts(body: bytes) -> bool:
    return decode(body).accepts()


def theirs_decode_accepts(text: str) -> bool:
    return EnvelopeCodec.accepts(EnvelopeCodec.decode(text))


def ours_decode_accepts_read(body: bytes) -> object:
    """The consumer's full step: verdict, then the payload a handler gets (exact integers settled)."""
    env = decode(body)
    return env.accepts() and env.data


def theirs_decode_accepts_read(text: str) -> object:
    doc = EnvelopeCodec.decode(text)
    return EnvelopeCodec.accepts(doc) and doc["data"]


def assert_same_bytes(data: dict[str, Any]) -> bytes:
    """Both SDKs' bytes for one logical message (fixed ids and time) must be identical."""
    ours = make(URN, data, queue=QUEUE, trace_id=TRACE_ID, message_id=MESSAGE_ID, created_at=CREATED_AT)
    theirs = EnvelopeCodec.make(URN, data, queue=QUEUE, trace_id=TRACE_ID)
    theirs["meta"]["id"] = MESSAGE_ID
    theirs["meta"]["created_at"] = CREATED_AT
    theirs_bytes = EnvelopeCodec.encode(theirs).encode("utf-8")
    if ours.encode() != theirs_bytes:
        raise SystemExit(f"byte mismatch:\n ours   {ours.encode()!r}\n theirs {theirs_bytes!r}")
    return theirs_bytes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30, help="timed rounds per contender (best kept)")
    args = parser.parse_args(argv)

    rows: list[list[str]] = []
    for label, data in (("payment", PAYMENT), ("payment+floats", PAYMENT_WITH_FLOATS)):
        body = assert_same_bytes(data)
        text = body.decode("utf-8")
        assert decode(body).accepts() and EnvelopeCodec.accepts(EnvelopeCodec.decode(text))

        timings = interleaved_best(
            {
                "ours_make": partial(ours_make_encode, data),
                "theirs_make": partial(theirs_make_encode, data),
                "ours_decode": partial(ours_decode_accepts, body),
                "theirs_decode": partial(theirs_decode_accepts, text),
                "ours_read": partial(ours_decode_accepts_read, body),
                "theirs_read": partial(theirs_decode_accepts_read, text),
            },
            rounds=args.rounds,
            target_seconds=0.02,
        )
        rows.append(ratio_row(f"{label}: make+encode", timings["ours_make"], timings["theirs_make"]))
        rows.append(ratio_row(f"{label}: decode+accepts", timings["ours_decode"], timings["theirs_decode"]))
        rows.append(ratio_row(f"{label}: decode+accepts+data", timings["ours_read"], timings["theirs_read"]))
        print(f"{label}: {len(body)} bytes on the wire, identical on both sides", file=sys.stderr)

    print_table(["operation", "babelq msgs/s", "babelqueue msgs/s", "babelq speed-up"], rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
