"""The local CSV scan ingest uses before Spark reads a file, checked against Python's csv module."""

from __future__ import annotations

import csv
import io
import random
from pathlib import Path

import pytest

from babelq.pipelines.csv_layout import CsvLayout, csv_layout, field_count, wrong_field_counts

_CELLS = ["plain", "a, b", 'say ""hi""', "two\nlines", "crlf\r\nend", '"', "", "x" * 700]


def _file(rng: random.Random, records: int, multiline: bool) -> str:
    """A CSV text of ``records`` records after a header, every cell quoted when it needs to be."""
    out = io.StringIO(newline="")
    writer = csv.writer(out, lineterminator=rng.choice(["\n", "\r\n"]))
    writer.writerow(["payment_reference", "narrative", "amount_cents"])
    cells = _CELLS if multiline else [c for c in _CELLS if "\n" not in c]
    for i in range(records):
        writer.writerow([f"PAY-{i}", rng.choice(cells).replace('""', '"'), str(i)])
    return out.getvalue()


@pytest.mark.parametrize("multiline", [False, True])
def test_records_and_quoted_line_breaks_across_read_chunks(tmp_path: Path, multiline: bool) -> None:
    rng = random.Random(7)
    path = tmp_path / "bulk.csv"
    for records in (0, 1, 5, 30_000):  # the last spans several of the scan's 1 MiB chunks
        text = _file(rng, records, multiline)
        path.write_bytes(text.encode())
        rows = list(csv.reader(io.StringIO(text, newline="")))
        layout = csv_layout(path)
        assert layout is not None
        assert (layout.records, layout.quoted_line_breaks) == (
            len(rows) - 1, any("\n" in c for row in rows for c in row))
        # only a file without a quoted comma or line break can be seen to agree without parsing it
        assert layout.fields_agree == (records == 0 or not any(
            "," in c or "\n" in c for row in rows for c in row)), records


@pytest.mark.parametrize(("text", "agree"), [
    ('"a","b"\n"1","2"\n3,4', True),
    ('a,b\n"1,5",2\n', False),  # a quoted comma: not seen without parsing
    ("a,b\n1,2,3\n4,5\n", False),
    ("a,b\n1,2\n4\n", False),
    ("a,b\n1,2\n\n4,5\n", False),  # a blank line
    ('a,b\n1,2\n"4",5,\n', False),
    ('a,b\n1,"say ""hi"""\n', True),
])
def test_fields_agree_only_when_every_line_has_the_headers_field_count(
    tmp_path: Path, text: str, agree: bool
) -> None:
    path = tmp_path / "bulk.csv"
    path.write_text(text)
    layout = csv_layout(path)
    assert layout is not None and layout.fields_agree == agree
    assert layout.header_fields == (2 if agree else 0)


@pytest.mark.parametrize(("tail", "at", "expected"), [
    (b'"x\ny",z\n9,x\n', 0, CsvLayout(2, True)),  # a quote opened on a chunk's last byte
    (b'"a""\nb",x', 2, CsvLayout(1, True)),  # a doubled quote split between two chunks
    (b'"a"",b"\n9,x\n', 2, CsvLayout(2, False)),
    (b'"a""b"\n9,x\n', 2, CsvLayout(2, False, True, 2)),
])
def test_a_quoted_field_split_between_read_chunks(tmp_path: Path, tail: bytes, at: int,
                                                  expected: CsvLayout) -> None:
    path = tmp_path / "bulk.csv"
    head = b"h,i\n" + b"a" * ((1 << 20) - 6 - at) + b","
    assert len(head) + at == (1 << 20) - 1  # tail[at] is the first chunk's last byte
    path.write_bytes(head + tail)
    assert csv_layout(path) == expected
    assert csv_layout(tmp_path / "missing.csv") is None


def test_wrong_field_counts_name_the_line_each_record_starts_on(tmp_path: Path) -> None:
    path = tmp_path / "bulk.csv"
    path.write_text('a,b,c\r\n1,"2\r\n2",3\r\n\r\n4,5\r\n"6\n6",7,8,9\r\n10,11,12', newline="")
    assert wrong_field_counts(path, 3) == [(5, 2), (6, 4)]
    assert field_count('"6\n6",7,8,9') == 4
