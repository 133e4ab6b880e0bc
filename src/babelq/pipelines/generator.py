"""A realistic bulk payments file with known defects, so a demo or a test can reconcile to the row.

Every injected row carries exactly one defect, so the expected outcome of each row is known
in advance: rejected at ingest for one named reason, dead-lettered at settle (expired TTL,
closed account), retried then posted (a transient core-banking failure), or posted. The
core-banking simulator recognises its accounts by suffix (:mod:`core_banking`); clean rows
never use those suffixes. Poison bodies are not file rows: the demo injects them straight
onto the queue, as a misbehaving producer would.
"""

from __future__ import annotations

import csv
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from babelq.envelope import now_ms
from babelq.pipelines.core_banking import CLOSED_SUFFIX, TRANSIENT_SUFFIX

COLUMNS = [
    "payment_reference", "amount_cents", "currency", "debtor_bsb", "debtor_account",
    "creditor_bsb", "creditor_account", "requested_at", "ttl_seconds", "narrative",
]

#: defect -> share of rows. Rejections are named after ingest's reasons.
DEFAULT_MIX: dict[str, float] = {
    "currency_unknown": 0.004,
    "amount_not_integer": 0.004,
    "amount_out_of_range": 0.002,
    "debtor_bsb_invalid": 0.002,
    "creditor_account_invalid": 0.002,
    "missing_reference": 0.001,
    "duplicate_reference": 0.003,
    "expired": 0.003,
    "transient_failure": 0.005,
    "closed_account": 0.002,
}
#: poison bodies injected per file row
POISON_SHARE = 0.001

REJECT_DEFECTS = frozenset(
    {"currency_unknown", "amount_not_integer", "amount_out_of_range", "debtor_bsb_invalid",
     "creditor_account_invalid", "missing_reference", "duplicate_reference"}
)
_CURRENCIES = ["AUD"] * 16 + ["USD", "NZD", "EUR", "GBP"]
_NARRATIVES = ["Invoice", "Payroll", "Supplier", "Rent", "Refund", "Dividend"]


@dataclass(slots=True)
class GeneratedFile:
    """The file written and what each of its rows should become."""

    path: Path
    rows: int
    defects: Counter[str] = field(default_factory=Counter)

    @property
    def expected_rejected(self) -> int:
        return sum(n for d, n in self.defects.items() if d in REJECT_DEFECTS)

    @property
    def expected_posted(self) -> int:
        return self.rows - self.expected_rejected - self.defects["expired"] - self.defects["closed_account"]


def _account(rng: random.Random) -> str:
    while True:
        acct = str(rng.randrange(10**5, 10**10)).zfill(rng.choice((6, 8, 9, 10)))
        if not acct.endswith((TRANSIENT_SUFFIX, CLOSED_SUFFIX)):
            return acct


def _bsb(rng: random.Random) -> str:
    return f"{rng.randrange(1000):03d}-{rng.randrange(1000):03d}"


def _clean_row(rng: random.Random, ref: str, now: int) -> dict[str, str]:
    amount = rng.choice((rng.randrange(100, 10_000), rng.randrange(10_000, 5_000_000)))
    return {
        "payment_reference": ref,
        "amount_cents": str(amount),
        "currency": rng.choice(_CURRENCIES),
        "debtor_bsb": _bsb(rng),
        "debtor_account": _account(rng),
        "creditor_bsb": _bsb(rng),
        "creditor_account": _account(rng),
        "requested_at": str(now - rng.randrange(0, 3_600_000)),
        "ttl_seconds": "86400",
        "narrative": f"{rng.choice(_NARRATIVES)} {rng.randrange(1, 9999)}",
    }


def _inject(row: dict[str, str], defect: str, rng: random.Random, earlier_refs: list[str], now: int) -> None:
    if defect == "currency_unknown":
        row["currency"] = rng.choice(("AUX", "XYZ", "usd", "A$"))
    elif defect == "amount_not_integer":
        row["amount_cents"] = rng.choice(("12.50", "1500.0", "1e3", "ten"))
    elif defect == "amount_out_of_range":
        row["amount_cents"] = rng.choice(("0", "-500", "250000000000"))
    elif defect == "debtor_bsb_invalid":
        row["debtor_bsb"] = rng.choice(("12-345", "012345", "ABC-123"))
    elif defect == "creditor_account_invalid":
        row["creditor_account"] = rng.choice(("12345", "12AB5678", "12345678901"))
    elif defect == "missing_reference":
        row["payment_reference"] = ""
    elif defect == "duplicate_reference" and earlier_refs:
        row["payment_reference"] = rng.choice(earlier_refs)
    elif defect == "expired":
        row["requested_at"] = str(now - 2 * 86_400_000)
    elif defect == "transient_failure":
        row["creditor_account"] = row["creditor_account"][:-4] + TRANSIENT_SUFFIX
    elif defect == "closed_account":
        row["creditor_account"] = row["creditor_account"][:-4] + CLOSED_SUFFIX


def generate_bulk_file(
    path: str | Path, rows: int, *, seed: int = 42, mix: dict[str, float] | None = None,
    batch_label: str = "ANZ",
) -> GeneratedFile:
    """Write ``rows`` payments to ``path`` (``.csv``, or ``.parquet``) and return the defect counts."""
    rng = random.Random(seed)
    shares = DEFAULT_MIX if mix is None else mix
    now = now_ms()
    out = GeneratedFile(Path(path), rows)
    clean_refs: list[str] = []
    records: list[dict[str, str]] = []
    thresholds: list[tuple[float, str]] = []
    acc = 0.0
    for name, share in shares.items():
        acc += share
        thresholds.append((acc, name))
    for i in range(rows):
        row = _clean_row(rng, f"PAY-{batch_label}-{seed:04d}-{i:08d}", now)
        draw = rng.random()
        defect: str | None = next((d for limit, d in thresholds if draw < limit), None)
        if defect == "duplicate_reference" and not clean_refs:
            defect = None
        if defect is None:
            clean_refs.append(row["payment_reference"])
        else:
            _inject(row, defect, rng, clean_refs, now)
            out.defects[defect] += 1
        records.append(row)
    _write(out.path, records)
    return out


def _write(path: Path, records: list[dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.table({c: [r[c] for r in records] for c in COLUMNS})
        pq.write_table(table, path)
        return
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(records)


def poison_bodies(count: int) -> list[bytes]:
    """Bodies no consumer can handle: bad UTF-8, not JSON, a JSON array, an unsupported version, text."""
    out: list[bytes] = []
    for i in range(count):
        kind = i % 5
        if kind == 0:
            out.append(b"\xff\xfe not utf-8 \x80 %d" % i)
        elif kind == 1:
            out.append(b"{not json %d" % i)
        elif kind == 2:
            out.append(b'["an","array",%d]' % i)
        elif kind == 3:
            out.append(b'{"job":"urn:babel:payments:transfer.requested","trace_id":"t-%d","data":{},'
                       b'"meta":{"schema_version":2},"attempts":0}' % i)
        else:
            out.append(b"plain text %d" % i)
    return out
