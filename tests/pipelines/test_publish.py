"""``publish``: any CSV, JSON lines or Parquet file checked row by row and published once.

CSV per RFC 4180 (quoted line breaks, quotes and commas stay in their field; a record of the
wrong field count is rejected with its line), cells read as the schema's types, rejects with
reasons naming the column, ``meta.id`` from ``id_column`` (uuid5) or the row's position, and the
journal: a re-run publishes nothing, ``republish`` the same ids again.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from babelq.envelope import decode
from babelq.pipelines.message_ids import message_id
from babelq.transports import open_transport

pytestmark = [pytest.mark.spark, pytest.mark.slow]

URN = "urn:babel:orders:created"
ORDER = {
    "type": "object",
    "required": ["order_id", "qty"],
    "properties": {
        "order_id": {"type": "string", "minLength": 1},
        "qty": {"type": "integer", "minimum": 1},
        "price": {"type": "number"},
        "gift": {"type": "boolean"},
        "note": {"type": "string"},
    },
}


def _published(url: str, queue: str) -> list[Any]:
    transport = open_transport(url)
    try:
        held = transport.reserve(queue, max_messages=1000)
        transport.release_many(held)
        return [decode(d.body) for d in held]
    finally:
        transport.close()


def test_csv_rows_are_read_whole_typed_by_the_schema_and_published_once(
    spark: Any, tmp_path: Path, unique_queue: str
) -> None:
    from babelq.pipelines.batch_runs import ALREADY_PUBLISHED, PUBLISHED_NOW, REPUBLISHED
    from babelq.pipelines.publish import PublishSpec, publish

    lines = [
        "order_id,qty,price,gift,note",                      # line 1
        'A1,2,9.5,true,"say ""hi"", twice"',                 # 2: doubled quotes and a comma
        'A2, 3 ,1e2,FALSE,"two',                             # 3-4: a quoted line break
        'lines"',
        "A3,x,1,false,plain",                                # 5: qty is no integer
        "A4,1,1,false,too,many",                             # 6: 6 fields
        "A5,1,1",                                            # 7: 3 fields
        "A1,5,1,false,again",                                # 8: A1 again
        ",1,1,false,no id",                                  # 9: blank id
        "A6,0,1,false,none",                                 # 10: qty below the minimum
        "A7,1,,,",                                           # 11: empty cells are no values
        "A8,1,1,yes,bad boolean",                            # 12
    ]
    source = tmp_path / "orders.csv"
    source.write_text("\n".join(lines) + "\n")
    url = f"sqlite://{tmp_path}/q.db"
    spec = PublishSpec(URN, ORDER, id_column="order_id")
    common: dict[str, Any] = {"url": url, "queue": unique_queue, "rejects_path": tmp_path / "rejects"}

    first = publish(spark, source, spec, **common)

    assert first.status == PUBLISHED_NOW
    assert (first.rows_in, first.published, first.rejected) == (10, 3, 7)
    assert first.rejected_by_reason == {"field_count_mismatch": 2, "type_mismatch": 2, "duplicate_id": 1,
                                        "missing_id": 1, "schema_invalid": 1, }
    envelopes = _published(url, unique_queue)
    assert sorted((e.data for e in envelopes), key=lambda d: d["order_id"]) == [
        {"order_id": "A1", "qty": 2, "price": 9.5, "gift": True, "note": 'say "hi", twice'},
        {"order_id": "A2", "qty": 3, "price": 100.0, "gift": False, "note": "two\nlines"},
        {"order_id": "A7", "qty": 1},
    ]
    for env in envelopes:
        assert env.urn == URN and env.queue == unique_queue and env.correlation_id == first.batch_id
        assert env.id == message_id(URN, first.batch_id, env.data["order_id"])

    aside = {r["reject_error"]: r for r in spark.read.parquet(str(tmp_path / "rejects")).collect()}
    assert sorted(aside) == sorted([
        '$.qty: the cell "x" is not an integer (64-bit)',
        "line 6: 6 fields, the header has 5",
        "line 7: 3 fields, the header has 5",
        "$.order_id: the id A1 is an earlier row's too",
        "$.order_id: no id value",
        "$.qty: 0 is less than the minimum of 1",
        '$.gift: the cell "yes" is not a boolean (true or false)',
    ])
    assert aside["line 6: 6 fields, the header has 5"]["csv_record"] == lines[5]
    assert aside['$.qty: the cell "x" is not an integer (64-bit)']["qty"] == "x"  # the cell as written
    assert aside["$.qty: 0 is less than the minimum of 1"]["reasons"] == "schema_invalid"

    again = publish(spark, source, spec, **common)
    assert again.status == ALREADY_PUBLISHED and again.published == 0
    assert len(_published(url, unique_queue)) == 3

    forced = publish(spark, source, spec, republish=True, **common)
    assert forced.status == REPUBLISHED and forced.published == 3
    ids = [e.id for e in _published(url, unique_queue)]
    assert sorted(ids) == sorted([e.id for e in envelopes] * 2)  # the same meta.ids: consumers drop them


def test_json_lines_keep_their_types_and_a_declared_type_is_checked(
    spark: Any, tmp_path: Path, unique_queue: str
) -> None:
    from babelq.pipelines.publish import PublishSpec, publish

    rows = [
        '{"order_id": "J1", "qty": 2, "price": 3, "tags": ["a", "b"], "ship": {"city": "Perth"}}',
        '{"order_id": "J2", "qty": "2"}',
        "",
        "[1, 2]",
        "{not json",
        '{"order_id": "J3", "qty": 1, "gift": "true"}',
        '{"order_id": "J4", "qty": 7, "note": null}',
        '{"order_id": "J5", "qty": 12345678901234567890}',
    ]
    source = tmp_path / "orders.jsonl"
    source.write_text("\n".join(rows) + "\n")
    url = f"sqlite://{tmp_path}/q.db"
    result = publish(spark, source, PublishSpec(URN, ORDER), url=url, queue=unique_queue,
                     rejects_path=tmp_path / "rejects", rejects_format="csv")

    assert (result.rows_in, result.published, result.rejected) == (7, 2, 5)
    assert result.rejected_by_reason == {"not_a_json_object": 2, "type_mismatch": 3}
    envelopes = {e.data["order_id"]: e for e in _published(url, unique_queue)}
    assert envelopes["J1"].data == {"order_id": "J1", "qty": 2, "price": 3.0, "tags": ["a", "b"],
                                    "ship": {"city": "Perth"}}
    assert envelopes["J4"].data == {"order_id": "J4", "qty": 7}
    # without an id column a row's key is its position among the file's rows (blank lines not counted)
    assert envelopes["J1"].id == message_id(URN, result.batch_id, "#1")
    assert envelopes["J4"].id == message_id(URN, result.batch_id, "#6")

    [written] = (tmp_path / "rejects").glob("*.csv")
    import csv

    with written.open(newline="") as fh:
        aside = {r["json_line"]: r["reject_error"] for r in csv.DictReader(fh)}
    assert aside == {
        rows[1]: """$.qty: "2" is not of type 'integer'""",
        rows[3]: "not a JSON object",
        rows[4]: "not JSON",
        rows[5]: """$.gift: "true" is not of type 'boolean'""",
        rows[7]: "$.qty: 12345678901234567890 is outside the 64-bit integer range",
    }


def test_parquet_keeps_its_types_and_without_a_schema_every_row_is_published_to_redis(
    spark: Any, tmp_path: Path, unique_queue: str
) -> None:
    from babelq.pipelines.publish import PublishSpec, publish
    from conftest import require_service

    require_service("redis")
    source = tmp_path / "orders.parquet"
    spark.createDataFrame(
        [(1, "P1", 2.5, True, None), (2, "P2", None, False, ["x"])],
        "id long, name string, amount double, paid boolean, tags array<string>",
    ).coalesce(1).write.parquet(str(source))
    url = "redis://127.0.0.1:6379/15"
    try:
        result = publish(spark, source, PublishSpec(URN, id_column="id"), url=url, queue=unique_queue,
                         rejects_path=tmp_path / "rejects")
        envelopes = sorted(_published(url, unique_queue), key=lambda e: e.data["id"])
    finally:
        transport = open_transport(url)
        transport.purge(unique_queue)
        transport.close()

    assert (result.rows_in, result.published, result.rejected) == (2, 2, 0)
    assert [e.data for e in envelopes] == [
        {"id": 1, "name": "P1", "amount": 2.5, "paid": True},
        {"id": 2, "name": "P2", "paid": False, "tags": ["x"]},
    ]
    assert [e.id for e in envelopes] == [message_id(URN, result.batch_id, str(n)) for n in (1, 2)]


def _reference(kind: str, text: str) -> object:
    """What a CSV cell reads as, by the rule publish documents (None: not that type)."""
    t = text.strip(" ")
    if kind == "integer":
        if re.fullmatch(r"[+-]?[0-9]{1,19}", t) and -(2**63) <= int(t) < 2**63:
            return int(t)
        return None
    if kind == "number":
        if re.fullmatch(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?", t):
            value = float(t)
            return value if abs(value) < float("inf") else None
        return None
    return {"true": True, "false": False}.get(t.lower())


CELLS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(alphabet=" +-.eE0123456789xtrueFALS", max_size=10),
)


@settings(max_examples=6, deadline=None)
@given(cells=st.lists(CELLS, min_size=1, max_size=40))
def test_csv_cells_read_as_integers_numbers_and_booleans_by_the_documented_rule(
    spark: Any, cells: list[str]
) -> None:
    from pyspark.sql import functions as sf

    from babelq.pipelines.publish_rows import cell_value

    df = spark.createDataFrame([(c,) for c in cells], "v string")
    kinds = ("integer", "number", "boolean")
    read = df.select(*[sf.struct(*(c if c is not None else sf.lit(None) for c in cell_value("v", k))
                                 ).alias(k) for k in kinds]).collect()
    for cell, row in zip(cells, read, strict=True):
        for kind in kinds:
            value, error = row[kind]
            expected = _reference(kind, cell)
            assert value == expected, (kind, cell)
            assert (error is not None) == (expected is None), (kind, cell, error)
            if error is not None:
                assert error.startswith('$.v: the cell "'), error


def test_a_schema_is_read_from_a_file_or_a_registry_of_urns(tmp_path: Path) -> None:
    from babelq.errors import ConfigurationError
    from babelq.pipelines.publish_schema import declared_types, load_schema

    plain = tmp_path / "order.json"
    plain.write_text(json.dumps(ORDER))
    assert load_schema(plain, URN) == ORDER
    several = tmp_path / "schemas.json"
    several.write_text(json.dumps({URN: ORDER, "urn:babel:orders:cancelled": {"type": "object"}}))
    assert load_schema(several, URN) == ORDER
    with pytest.raises(ConfigurationError, match=r"no schema for urn:babel:orders:shipped \(it has: "):
        load_schema(several, "urn:babel:orders:shipped")
    ref = tmp_path / "ref.json"
    ref.write_text(json.dumps({"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}}}))
    with pytest.raises(ConfigurationError, match=r"--schema .*ref\.json: .*\$ref"):
        load_schema(ref, URN)
    members = {"a": {"type": ["integer", "null"]}, "b": {"type": ["string", "integer"]},
               "c": {"type": "object"}}
    assert declared_types({"properties": members}) == {"a": "integer", "c": "object"}


def test_the_command_publishes_once_and_says_so_the_second_time(
    spark: Any, tmp_path: Path, unique_queue: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from babelq.cli.main import main

    source = tmp_path / "events.ndjson"
    source.write_text('{"event": "signup", "user": 1}\n{"event": "login", "user": 1}\n"just text"\n')
    url = f"sqlite://{tmp_path}/q.db"
    args = ["publish", str(source), "--urn", "urn:babel:users:event", "--broker", url, "--queue",
            unique_queue, "--rejects", str(tmp_path / "rejects"), "--progress", "none",
            "--master", "local[2]"]

    assert main(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("batch bulk_") and out[0].endswith(
        f": 3 rows, 2 published to {unique_queue}, 1 rejected -> {tmp_path / 'rejects'}")
    assert out[1:] == ["  not_a_json_object: 1"]
    assert (tmp_path / "publish-journal.db").is_file()
    # the command took the test session (getOrCreate) rather than starting a second one
    assert spark.sparkContext._jsc is not None and type(spark).getActiveSession() is spark

    assert main(args) == 0
    [again] = capsys.readouterr().out.splitlines()
    assert "was already published at" in again
    assert "(2 envelopes to the broker); nothing published now" in again
    assert sorted(e.data["event"] for e in _published(url, unique_queue)) == ["login", "signup"]


def test_the_command_stages_in_an_outbox_once(
    spark: Any, tmp_path: Path, unique_queue: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import sqlite3

    from babelq.cli.main import main

    source = tmp_path / "events.csv"
    source.write_text('event,user\nsignup,1\n"log\nin",2\nbroken\n')
    outbox = tmp_path / "outbox.db"
    args = ["publish", str(source), "--urn", "urn:babel:users:event", "--outbox", f"sqlite:///{outbox}",
            "--queue", unique_queue, "--rejects", str(tmp_path / "rejects"), "--progress", "none",
            "--id-column", "user", "--master", "local[2]"]

    assert main(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith(f": 3 rows, 2 staged in the outbox for {unique_queue}, 1 rejected -> "
                           f"{tmp_path / 'rejects'}")
    assert out[1:] == ["  field_count_mismatch: 1"]
    with sqlite3.connect(outbox) as conn:
        rows = conn.execute("SELECT queue, body FROM babelq_outbox").fetchall()
        [(batch, staged)] = conn.execute(
            "SELECT batch_id, staged FROM babelq_outbox_ingest_batches").fetchall()
    envelopes = sorted((decode(bytes(body)) for _, body in rows), key=lambda e: e.data["user"])
    assert {q for q, _ in rows} == {unique_queue} and staged == 2
    assert [e.data for e in envelopes] == [{"event": "signup", "user": "1"},
                                           {"event": "log\nin", "user": "2"}]
    assert [e.id for e in envelopes] == [message_id("urn:babel:users:event", batch, u) for u in ("1", "2")]

    assert main(args) == 0
    assert capsys.readouterr().out.startswith(f"batch {batch} is already staged in the outbox (2 envelopes)")
    with sqlite3.connect(outbox) as conn:
        assert conn.execute("SELECT COUNT(*) FROM babelq_outbox").fetchone() == (2,)
