"""A realistic bulk payments file with known defects, so a demo or a test can reconcile to the row.

Every injected row carries exactly one defect, so the expected outcome of each row is known
in advance: rejected at ingest for one named reason, dead-lettered at settle (expired TTL,
closed account), retried then posted (a transient core-banking failure), or posted. The
core-banking simulator recognises its accounts by suffix (:mod:`core_banking`); clean rows
never use those suffixes. Poison bodies are not file rows: the demo injects them straight
onto the queue, as a misbehaving producer would.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


def _digits(values: Any, width: int) -> Any:
    """Non-negative integers as decimal text, left-padded with zeros to ``width``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.utf8_lpad(pc.cast(pa.array(values), pa.string()), width=width, padding="0")


def _accounts(rng: Any, n: int) -> Any:
    """``n`` account numbers: a number in [10^5, 10^10) zero-padded to 6, 8, 9 or 10 digits, never
    ending with a core-banking suffix (clean rows must not fail or be refused)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    numbers = rng.integers(10**5, 10**10, size=n)
    while True:  # redraw the few that end with a suffix (about 1 in 5,000)
        tails = numbers % 10_000
        bad = (tails == int(TRANSIENT_SUFFIX)) | (tails == int(CLOSED_SUFFIX))
        if not bad.any():
            break
        numbers[bad] = rng.integers(10**5, 10**10, size=int(bad.sum()))
    widths = rng.choice(np.array([6, 8, 9, 10]), size=n)
    text = pc.cast(pa.array(numbers), pa.string())
    padded = {w: pc.utf8_lpad(text, width=w, padding="0") for w in (6, 8, 9, 10)}
    conditions = pc.make_struct(*[pa.array(widths == w) for w in (6, 8, 9)])
    return pc.case_when(conditions, padded[6], padded[8], padded[9], padded[10])


def _bsbs(rng: Any, n: int) -> Any:
    import pyarrow.compute as pc

    return pc.binary_join_element_wise(
        _digits(rng.integers(0, 1000, size=n), 3), _digits(rng.integers(0, 1000, size=n), 3), "-"
    )


def _clean_columns(rng: Any, n: int, refs: Any, now: int) -> dict[str, Any]:
    """Every column of ``n`` clean payments, drawn column by column (no Python object per row)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    small = rng.integers(100, 10_000, size=n)
    large = rng.integers(10_000, 5_000_000, size=n)
    amounts = np.where(rng.random(n) < 0.5, small, large)
    narratives = pc.binary_join_element_wise(
        pa.array(np.array(_NARRATIVES)[rng.integers(0, len(_NARRATIVES), size=n)]),
        pc.cast(pa.array(rng.integers(1, 9999, size=n)), pa.string()),
        " ",
    )
    return {
        "payment_reference": refs,
        "amount_cents": pc.cast(pa.array(amounts), pa.string()),
        "currency": pa.array(np.array(_CURRENCIES)[rng.integers(0, len(_CURRENCIES), size=n)]),
        "debtor_bsb": _bsbs(rng, n),
        "debtor_account": _accounts(rng, n),
        "creditor_bsb": _bsbs(rng, n),
        "creditor_account": _accounts(rng, n),
        "requested_at": pc.cast(pa.array(now - rng.integers(0, 3_600_000, size=n)), pa.string()),
        "ttl_seconds": pa.array(["86400"] * n),
        "narrative": narratives,
    }


def _defect_value(defect: str, column: str, current: str, rng: random.Random, now: int) -> str:
    """The value a row with ``defect`` gets in ``column`` (its clean value ``current``)."""
    if defect == "currency_unknown":
        return rng.choice(("AUX", "XYZ", "usd", "A$"))
    if defect == "amount_not_integer":
        return rng.choice(("12.50", "1500.0", "1e3", "ten"))
    if defect == "amount_out_of_range":
        return rng.choice(("0", "-500", "250000000000"))
    if defect == "debtor_bsb_invalid":
        return rng.choice(("12-345", "012345", "ABC-123"))
    if defect == "creditor_account_invalid":
        return rng.choice(("12345", "12AB5678", "12345678901"))
    if defect == "missing_reference":
        return ""
    if defect == "expired":
        return str(now - 2 * 86_400_000)
    if defect == "transient_failure":
        return current[:-4] + TRANSIENT_SUFFIX
    if defect == "closed_account":
        return current[:-4] + CLOSED_SUFFIX
    raise ValueError(f"unknown defect {defect!r}")


#: the column each defect changes
_DEFECT_COLUMN = {
    "currency_unknown": "currency",
    "amount_not_integer": "amount_cents",
    "amount_out_of_range": "amount_cents",
    "debtor_bsb_invalid": "debtor_bsb",
    "creditor_account_invalid": "creditor_account",
    "missing_reference": "payment_reference",
    "duplicate_reference": "payment_reference",
    "expired": "requested_at",
    "transient_failure": "creditor_account",
    "closed_account": "creditor_account",
}


#: rows drawn and written at a time: the driver holds one chunk, whatever the file's size
CHUNK_ROWS = 100_000


def generate_bulk_file(
    path: str | Path, rows: int, *, seed: int = 42, mix: dict[str, float] | None = None,
    batch_label: str = "ANZ",
) -> GeneratedFile:
    """Write ``rows`` payments to ``path`` (``.csv``, or ``.parquet``) and return the defect counts.

    Deterministic for a seed. Clean values are drawn column by column (numpy's generator, pyarrow's
    string kernels) and written :data:`CHUNK_ROWS` at a time, so a million rows take a few seconds
    and the memory of one chunk, never a Python object per row. Only the few rows with a defect
    are touched one by one. A duplicate reference repeats the reference of a clean row earlier
    in the file, as a re-keyed line of a real file would.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    shares = DEFAULT_MIX if mix is None else mix
    now = now_ms()
    out = GeneratedFile(Path(path), rows)
    draws = np.random.default_rng(seed)
    rng = random.Random(seed)
    names = list(shares)
    limits = np.cumsum([shares[name] for name in names])
    picked = np.searchsorted(limits, draws.random(rows), side="right")  # len(names): no defect
    clean_rows = np.flatnonzero(picked == len(names))
    prefix = f"PAY-{batch_label}-{seed:04d}-"
    with _Writer(out.path) as writer:
        for first in range(0, max(rows, 1), CHUNK_ROWS):
            n = min(CHUNK_ROWS, rows - first)
            refs = pc.binary_join_element_wise(prefix, _digits(np.arange(first, first + n), 8), "")
            columns = _clean_columns(draws, n, refs, now)
            changes: dict[str, dict[int, str]] = {}
            for i in (np.flatnonzero(picked[first:first + n] < len(names)) + first).tolist():
                defect = names[picked[i]]
                column = _DEFECT_COLUMN[defect]
                if defect == "duplicate_reference":
                    before = int(np.searchsorted(clean_rows, i))  # clean rows earlier in the file
                    if before == 0:  # nothing to repeat yet: the row stays a clean payment
                        continue
                    value = f"{prefix}{int(clean_rows[int(draws.integers(0, before))]):08d}"
                else:
                    value = _defect_value(defect, column, columns[column][i - first].as_py(), rng, now)
                changes.setdefault(column, {})[i - first] = value
                out.defects[defect] += 1
            for column, values in changes.items():
                mask = np.zeros(n, dtype=bool)
                mask[list(values)] = True
                ordered = [values[i] for i in sorted(values)]
                columns[column] = pc.replace_with_mask(columns[column], pa.array(mask), pa.array(ordered))
            writer.write(pa.table({c: columns[c] for c in COLUMNS}))
    return out


class _Writer:
    """A CSV or Parquet file written a table at a time (an empty file still gets its header)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._out: Any = None

    def __enter__(self) -> _Writer:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return self

    def write(self, table: Any) -> None:
        if self._out is None:
            if self.path.suffix == ".parquet":
                import pyarrow.parquet as pq

                self._out = pq.ParquetWriter(self.path, table.schema)
            else:
                import pyarrow.csv as pa_csv

                self._out = pa_csv.CSVWriter(self.path, table.schema)
        self._out.write_table(table)

    def __exit__(self, *exc: object) -> None:
        if self._out is not None:
            self._out.close()


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
