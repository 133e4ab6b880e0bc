"""``babelq publish``: what is wrong with the command line is one line naming it, exit code 2,
before Spark starts, and a password in the broker URL is never printed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from babelq.cli.main import main

SECRET = "hunter2-publish"


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["publish", *args])
    err = capsys.readouterr().err
    return code, err


@pytest.fixture
def orders(tmp_path: Path) -> Path:
    source = tmp_path / "orders.csv"
    source.write_text("order_id,qty\nA1,1\n")
    return source


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--id-column", "sku"], "--id-column sku: {file} has no such column (it has order_id, qty)"),
        (["--schema", "{dir}/nope.json"], "--schema {dir}/nope.json: cannot read schema file"),
        (["--schema", "{dir}/ref.json"], "--schema {dir}/ref.json: "),
        (["--ttl", "0"], "--ttl: must be at least 1 second, got 0"),
        (["--format", "jsonl", "--batch-id", " "], "--batch-id: ' ' must be a non-empty single line"),
        (["--outbox", "sqlite:///{dir}/o.db"],
         "--outbox: stages for `babelq relay`; give it without --broker"),
        (["--schema", "{dir}/other.json"],
         "--schema {dir}/other.json: no schema for urn:babel:orders:created"),
    ],
    ids=["id column", "schema file", "schema keyword", "ttl", "batch id", "outbox and broker", "other urn"],
)
def test_a_bad_option_is_one_line_naming_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, orders: Path, extra: list[str], says: str
) -> None:
    (tmp_path / "ref.json").write_text(json.dumps({"type": "object", "properties": {"a": {"$ref": "#/x"}}}))
    (tmp_path / "other.json").write_text(json.dumps({"x-babel-urn": "urn:babel:orders:shipped"}))
    args = [a.replace("{dir}", str(tmp_path)) for a in extra]
    code, err = _run(capsys, str(orders), "--urn", "urn:babel:orders:created", "--rejects",
                     str(tmp_path / "rej"), "--broker", f"redis://:{SECRET}@127.0.0.1:6379/15", *args)
    assert code == 2
    assert err.startswith("babelq publish: error: " + says.format(file=orders, dir=tmp_path)), err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert SECRET not in err


def test_a_missing_file_and_a_missing_broker_are_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BABELQ_BROKER", raising=False)
    common = ["--urn", "urn:babel:orders:created", "--rejects", str(tmp_path / "rej")]
    missing = tmp_path / "none.csv"
    code, err = _run(capsys, str(missing), *common, "--broker", f"sqlite://u:{SECRET}@/{tmp_path}/q.db")
    assert (code, err.strip()) == (2, f"babelq publish: error: {missing}: no such file or directory")
    code, err = _run(capsys, str(missing), *common)
    assert code == 2
    assert err.strip() == ("babelq publish: error: --broker: no broker URL given; pass --broker URL or set "
                           "BABELQ_BROKER")
