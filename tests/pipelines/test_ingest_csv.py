"""Ingest reads CSV per RFC 4180: quoted line breaks, doubled quotes and commas stay inside their
field, and a record whose field count is not the header's is rejected with its line number."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from babelq.envelope import decode
from babelq.transports import open_transport

pytestmark = [pytest.mark.spark, pytest.mark.slow]

HEADER = ("payment_reference,amount_cents,currency,debtor_bsb,debtor_account,creditor_bsb,creditor_account,"
          "narrative")
ACCOUNTS = "012-345,123456789,033-001,987654321"


def _ingest(spark: Any, tmp_path: Path, queue: str, text: str) -> tuple[Any, list[dict[str, Any]]]:
    """Ingest ``text`` as a CSV file; the result and the data of every envelope published."""
    from babelq.pipelines.ingest import ingest

    source = tmp_path / "bulk.csv"
    source.write_bytes(text.encode("utf-8"))
    url = f"sqlite://{tmp_path}/q.db"
    result = ingest(spark, source, url=url, queue=queue, rejects_path=tmp_path / "rejects")
    published = open_transport(url).reserve(queue, max_messages=100)
    return result, [decode(d.body).data for d in published]


def test_a_quoted_line_break_stays_in_its_reference(spark: Any, tmp_path: Path, unique_queue: str) -> None:
    from babelq.pipelines.progress import bulk_file_rows

    text = (
        "payment_reference,amount_cents,currency,debtor_bsb,debtor_account,creditor_bsb,creditor_account\n"
        f'"INV\n77",1500,AUD,{ACCOUNTS}\n'
        f"INV-78,2500,AUD,{ACCOUNTS}\n"
    )
    result, data = _ingest(spark, tmp_path, unique_queue, text)

    # the transfer schema allows any 1-64 character reference, a line break included
    assert (result.rows_in, result.published, result.rejected) == (2, 2, 0)
    assert sorted((d["payment_reference"], d["amount_cents"]) for d in data) == [
        ("INV\n77", 1500), ("INV-78", 2500)]
    assert bulk_file_rows(tmp_path / "bulk.csv") == 2


def test_rfc4180_fields_are_read_whole_and_a_wrong_field_count_is_rejected_with_its_line(
    spark: Any, tmp_path: Path, unique_queue: str
) -> None:
    lines = [
        HEADER,                                                               # line 1
        f'PAY-CSV-1,100,AUD,{ACCOUNTS},"Invoice ""77"", part 1"',             # 2: doubled quotes, a comma
        f'"PAY-CSV-2",200,AUD,{ACCOUNTS},"two',                               # 3-4: a quoted line break
        'lines"',
        f"PAY-CSV-9,300,AUD,{ACCOUNTS},Rent,extra 1,extra 2,extra 3",          # 5: 11 fields
        "PAY-CSV-4,400,AUD,012-345,123456789",                                # 6: 5 fields
        f'PAY-CSV-5,500,AUD,{ACCOUNTS},"a, b",9',                             # 7: 9 fields, a comma inside
        'PAY-CSV-6,600,AUD,012-345,"12345',                                   # 8-9: 7 fields, one of
        '6789",033-001,987654321',                                            #      them over two lines
        f"PAY-CSV-9,900,AUD,{ACCOUNTS},Payroll",                              # 10: the reference of line 5
    ]
    result, data = _ingest(spark, tmp_path, unique_queue, "\n".join(lines) + "\n")

    assert result.rows_in == 7  # records, not lines
    assert result.rows_in == result.published + result.rejected
    assert result.rejected_by_reason == {"field_count_mismatch": 4}
    assert sorted((d["payment_reference"], d["amount_cents"], d.get("narrative")) for d in data) == [
        ("PAY-CSV-1", 100, 'Invoice "77", part 1'),
        ("PAY-CSV-2", 200, "two\nlines"),
        # a rejected record of the wrong shape does not make a later valid payment a duplicate
        ("PAY-CSV-9", 900, "Payroll"),
    ]

    aside = spark.read.parquet(str(tmp_path / "rejects")).collect()
    assert {r["reasons"] for r in aside} == {"field_count_mismatch"}  # its cells are not judged
    assert sorted(r["record_error"] for r in aside) == [
        "line 5: 11 fields, the header has 8",
        "line 6: 5 fields, the header has 8",
        "line 7: 9 fields, the header has 8",
        "line 8: 7 fields, the header has 8",
    ]
    # the record as written is kept beside its reason: nothing of it is cut off or made up
    by_line = {r["record_error"].split(":")[0]: r["csv_record"] for r in aside}
    assert by_line["line 5"] == lines[4]
    assert by_line["line 6"] == lines[5]
    assert by_line["line 8"] == lines[7] + "\n" + lines[8]


def test_a_wrong_field_count_in_a_file_without_quotes(spark: Any, tmp_path: Path, unique_queue: str) -> None:
    text = "\n".join([
        HEADER,
        f"PAY-L-1,100,AUD,{ACCOUNTS},one",
        f"PAY-L-2,200,AUD,{ACCOUNTS},two,three",
        f"PAY-L-3,300,AUD,{ACCOUNTS},three",
    ])  # no line break at the end
    result, data = _ingest(spark, tmp_path, unique_queue, text)

    assert (result.rows_in, result.published, result.rejected) == (3, 2, 1)
    assert sorted(d["payment_reference"] for d in data) == ["PAY-L-1", "PAY-L-3"]
    [reject] = spark.read.parquet(str(tmp_path / "rejects")).collect()
    assert reject["record_error"] == "line 3: 9 fields, the header has 8"


def test_csv_rejects_are_rfc4180_too(spark: Any, tmp_path: Path, unique_queue: str) -> None:
    from babelq.pipelines.ingest import ingest

    bad = f'"PAY-Q-2",200,AUD,{ACCOUNTS},"say ""hi"", twice",extra'
    source = tmp_path / "bulk.csv"
    source.write_text("\n".join([HEADER, f"PAY-Q-1,100,AUD,{ACCOUNTS},fine", bad]) + "\n")
    result = ingest(spark, source, url=f"sqlite://{tmp_path}/q.db", queue=unique_queue,
                    rejects_path=tmp_path / "rejects", rejects_format="csv")

    assert (result.published, result.rejected) == (1, 1)
    [written] = (tmp_path / "rejects").glob("*.csv")
    with written.open(newline="") as fh:
        [reject] = list(csv.DictReader(fh))
    assert reject["csv_record"] == bad
    assert reject["record_error"] == "line 3: 9 fields, the header has 8"
