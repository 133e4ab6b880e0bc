"""The babelq CLI: encode, inspect and conformance, as a subprocess and in-process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from babelq.cli.main import main
from babelq.envelope import decode
from conftest import CONFORMANCE_DIR, ROOT

BABELQ = ROOT / ".venv" / "bin" / "babelq"
FIXTURE = CONFORMANCE_DIR / "fixtures" / "order-created.json"


@pytest.fixture(autouse=True)
def _no_broker_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """conformance reads $BABELQ_BROKER like every broker command: a developer's own must not
    turn its memory:// round trip into one against their broker."""
    monkeypatch.delenv("BABELQ_BROKER", raising=False)


def babelq(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    command = [str(BABELQ)] if BABELQ.exists() else [sys.executable, "-m", "babelq.cli.main"]
    env = {**os.environ, "PYTHONWARNINGS": "default"}
    return subprocess.run(
        [*command, *args], input=stdin, capture_output=True, timeout=60, env=env, check=False
    )


# -- the executable -------------------------------------------------------------------------
def test_help_lists_the_commands() -> None:
    proc = babelq("--help")
    assert proc.returncode == 0
    out = proc.stdout.decode()
    for name in ("encode", "inspect", "conformance"):
        assert name in out


def test_help_imports_nothing_heavy() -> None:
    code = (
        "import sys; from babelq.cli.main import build_parser; build_parser(); "
        "heavy = ('pyspark', 'jsonschema', 'redis', 'pika', 'boto3', 'psycopg'); "
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, check=True)
    assert proc.stdout.decode().strip() == "[]"


def test_no_command_prints_usage_and_fails() -> None:
    proc = babelq()
    assert proc.returncode == 2
    assert b"usage" in proc.stderr


def test_encode_then_inspect_pipeline() -> None:
    data = '{"order_id": 1042, "note": "Café/☕"}'
    encoded = babelq("encode", "urn:babel:orders:created", data, "--queue", "orders")
    assert encoded.returncode == 0, encoded.stderr
    body = encoded.stdout.rstrip(b"\n")
    assert b"\n" not in body
    env = decode(body)
    assert (env.urn, env.data, env.queue, env.lang, env.attempts) == (
        "urn:babel:orders:created",
        {"order_id": 1042, "note": "Café/☕"},
        "orders",
        "python",
        0,
    )
    assert body == json.dumps(env.to_dict(), ensure_ascii=False, separators=(",", ":")).encode()
    inspected = babelq("inspect", "--json", stdin=encoded.stdout)
    assert inspected.returncode == 0
    [report] = json.loads(inspected.stdout)
    assert report["verdict"] == "accepted" and report["id"] == env.id


def test_conformance_over_the_vendored_suite() -> None:
    proc = babelq("conformance", str(CONFORMANCE_DIR))
    assert proc.returncode == 0, proc.stdout.decode()
    out = proc.stdout.decode()
    for block in ("cases", "sqs", "asb", "pulsar", "kafka", "artemis", "rabbitmq", "redis", "idempotency"):
        assert f"\n{block} " in out
    assert "PASSED" in out


# -- encode ------------------------------------------------------------------------------------
def test_encode_in_process(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    trace = "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b"
    code = main(["encode", "urn:babel:pay:charge", '{"cents": 100}', "--trace-id", trace, "--priority", "9"])
    assert code == 0
    env = decode(capsysbinary.readouterr().out)
    assert env.trace_id == trace and env.priority == 9 and env.queue == "default"


def test_encode_reads_stdin(
    monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO('{"a": [1, 2]}'))
    assert main(["encode", "urn:babel:a:b", "-"]) == 0
    assert decode(capsysbinary.readouterr().out).data == {"a": [1, 2]}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["urn:babel:a:b", "{nope"], "not JSON"),
        (["urn:babel:a:b", "[1]"], "must be a JSON object"),
        (["urn:babel:a:b", '{"x": NaN}'], "NaN"),
        (["Orders.Created", "{}", "--strict"], "URN"),
        (["", "{}"], "URN"),
    ],
)
def test_encode_refuses_bad_input(capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    assert main(["encode", *args]) == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert captured.out == ""


def test_encode_warns_on_a_badly_formed_urn_without_strict_in_one_line() -> None:
    proc = babelq("encode", "Orders.Created", "{}")
    assert proc.returncode == 0
    lines = proc.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("babelq encode: warning: URN"), lines  # no source path
    verbose = babelq("-v", "encode", "Orders.Created", "{}")
    assert b"URNFormatWarning" in verbose.stderr  # -v keeps Python's own form


# -- inspect ---------------------------------------------------------------------------------
def test_inspect_a_pretty_printed_single_body(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(FIXTURE)]) == 0
    out = capsys.readouterr().out
    assert "[1] accepted" in out
    assert "urn:babel:orders:created" in out
    assert "2025-06-05T14:12:07.000Z (1749132727000)" in out
    assert '"order_id": 1042' in out  # the pretty document
    assert "1 body: 1 accepted, 0 rejected, 0 poison" in out


def test_inspect_lines_gives_a_verdict_per_body(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = json.dumps(json.loads(FIXTURE.read_text()))
    meta = {"schema_version": 2}
    rejected = json.dumps({"job": "urn:babel:a:b", "trace_id": "t", "data": {}, "meta": meta})
    path = tmp_path / "bodies.ndjson"
    path.write_bytes(f"{good}\n\n{rejected}\nnot json\n".encode() + b"\xff\xfe\n")
    assert main(["inspect", "--json", str(path)]) == 1
    reports = json.loads(capsys.readouterr().out)
    assert [r["verdict"] for r in reports] == ["accepted", "rejected", "poison", "poison"]
    assert "schema_version" in reports[1]["reason"]
    assert "UTF-8" in reports[3]["reason"]
    assert reports[0]["created_at_iso"] == "2025-06-05T14:12:07.000Z"
    assert main(["inspect", "--brief", str(path)]) == 1
    text = capsys.readouterr().out
    assert "[2] rejected: meta.schema_version is 2" in text
    assert "[3] poison: body is not JSON" in text
    assert '"order_id"' not in text  # --brief leaves the document out
    assert "created_at  null" in text
    assert "4 bodies: 1 accepted, 1 rejected, 2 poison" in text


def test_inspect_array(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = json.loads(FIXTURE.read_text())
    path = tmp_path / "bodies.json"
    path.write_text(json.dumps([doc, json.dumps(doc), {"job": "urn:babel:a:b"}, 5]))
    assert main(["inspect", "--array", "--json", str(path)]) == 1
    verdicts = [r["verdict"] for r in json.loads(capsys.readouterr().out)]
    assert verdicts == ["accepted", "accepted", "rejected", "poison"]


def test_inspect_dead_letter_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--brief", str(CONFORMANCE_DIR / "fixtures" / "dead-lettered.json")]) == 0
    assert "dead_letter failed: Payment gateway timeout" in capsys.readouterr().out


def test_inspect_empty_missing_and_bad_array(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n\n")
    assert main(["inspect", str(empty)]) == 1  # one poison body, as a consumer would see it
    assert "1 body: 0 accepted, 0 rejected, 1 poison" in capsys.readouterr().out
    assert main(["inspect", str(tmp_path / "missing")]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main(["inspect", "--array", str(empty)]) == 2
    no_items = tmp_path / "no-items.json"
    no_items.write_text("[]")
    assert main(["inspect", "--array", str(no_items)]) == 1
    assert "holds no message bodies" in capsys.readouterr().err


# -- conformance -------------------------------------------------------------------------------
def test_conformance_reports_failures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = tmp_path / "suite"
    shutil.copytree(CONFORMANCE_DIR, suite)
    manifest = json.loads((suite / "manifest.json").read_text())
    manifest["pulsar"]["property_projection"]["properties"]["bq-attempts"] = "1"
    (suite / "manifest.json").write_text(json.dumps(manifest))
    assert main(["conformance", str(suite)]) == 1
    out = capsys.readouterr().out
    assert "FAIL pulsar/projection/properties" in out
    pulsar_row = next(line for line in out.splitlines() if line.startswith("pulsar "))
    assert "FAILED" in out
    assert main(["conformance", "--json", str(suite)]) == 1
    data = json.loads(capsys.readouterr().out)
    pulsar = [c for c in data["checks"] if c["block"] == "pulsar"]
    failed = [c["name"] for c in pulsar if not c["passed"]]
    assert data["passed"] is False and failed == ["projection/properties"]
    assert data["blocks"]["pulsar"] == {"passed": len(pulsar) - 1, "failed": 1}
    assert pulsar_row.split()[1:] == [str(len(pulsar) - 1), "1"]  # the table says the same


def test_conformance_all_lists_passing_checks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conformance", "--all", str(CONFORMANCE_DIR)]) == 0
    assert "PASS sqs/attempts/third-delivery" in capsys.readouterr().out


def test_conformance_on_a_non_suite_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["conformance", str(tmp_path)]) == 2
    assert "not a conformance suite" in capsys.readouterr().err
