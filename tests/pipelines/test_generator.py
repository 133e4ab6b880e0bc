"""The demo's bulk file: deterministic for a seed, and every row carries the defect it is counted for."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import pytest

from babelq.pipelines import generator
from babelq.pipelines.core_banking import CLOSED_SUFFIX, TRANSIENT_SUFFIX
from babelq.pipelines.currencies import ISO_4217
from babelq.pipelines.generator import generate_bulk_file

pytest.importorskip("pyarrow")


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _kept(rows: list[dict[str, str]]) -> list[tuple[str, ...]]:
    """The columns a seed fixes (requested_at follows the clock)."""
    return [tuple(v for k, v in row.items() if k != "requested_at") for row in rows]


def test_the_same_seed_writes_the_same_payments(tmp_path: Path) -> None:
    one = _rows(generate_bulk_file(tmp_path / "a.csv", 5_000, seed=7).path)
    two = _rows(generate_bulk_file(tmp_path / "b.csv", 5_000, seed=7).path)
    other = _rows(generate_bulk_file(tmp_path / "c.csv", 5_000, seed=8).path)
    assert _kept(one) == _kept(two)
    assert _kept(one) != _kept(other)
    assert list(one[0]) == generator.COLUMNS


def test_every_row_has_the_defect_it_is_counted_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(generator, "CHUNK_ROWS", 7_000)  # several chunks, and duplicates across them
    mix = {name: 0.02 for name in generator.DEFAULT_MIX}
    made = generate_bulk_file(tmp_path / "bulk.csv", 30_000, seed=3, mix=mix)
    rows = _rows(made.path)
    assert len(rows) == 30_000
    seen: set[str] = set()
    found: Counter[str] = Counter()
    for row in rows:
        ref, amount, account = row["payment_reference"], row["amount_cents"], row["creditor_account"]
        if ref == "":
            found["missing_reference"] += 1
        elif ref in seen:
            found["duplicate_reference"] += 1
        seen.add(ref)
        found["currency_unknown"] += row["currency"] not in ISO_4217
        found["amount_not_integer"] += not amount.lstrip("-").isdigit()
        found["amount_out_of_range"] += amount.lstrip("-").isdigit() and not 1 <= int(amount) <= 100_000_000
        found["debtor_bsb_invalid"] += not (len(row["debtor_bsb"]) == 7 and row["debtor_bsb"][3] == "-"
                                            and row["debtor_bsb"].replace("-", "").isdigit())
        found["creditor_account_invalid"] += not (account.isdigit() and 6 <= len(account) <= 10)
        found["transient_failure"] += account.endswith(TRANSIENT_SUFFIX)
        found["closed_account"] += account.endswith(CLOSED_SUFFIX)
        found["expired"] += int(row["requested_at"]) < generator.now_ms() - 86_400_000
    assert {name: found[name] for name in mix} == {name: made.defects[name] for name in mix}
    assert all(made.defects[name] > 400 for name in mix)
    assert made.expected_posted == 30_000 - made.expected_rejected - made.defects["expired"] \
        - made.defects["closed_account"]


@pytest.mark.parametrize("rows", [0, 1, 100_001])
def test_every_row_is_written_whatever_the_size(tmp_path: Path, rows: int) -> None:
    made = generate_bulk_file(tmp_path / "bulk.csv", rows, seed=1)
    assert len(_rows(made.path)) == rows
    header = made.path.read_text(encoding="utf-8").splitlines()[0]
    assert header.replace('"', "").split(",") == generator.COLUMNS


def test_parquet_output_has_the_same_columns(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    made = generate_bulk_file(tmp_path / "bulk.parquet", 2_000, seed=5)
    table = pq.read_table(made.path)
    assert table.num_rows == 2_000 and table.schema.names == generator.COLUMNS
