"""``babelq schema``: check, compat, gdpr and asyncapi over the example registry, their exit codes,
and their one-line errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from babelq.cli.main import main
from babelq.envelope import make
from conftest import ROOT

REGISTRY = ROOT / "examples" / "registry"
MANIFEST = str(REGISTRY / "registry.json")
BABELQ = ROOT / ".venv" / "bin" / "babelq"


def run(capsysbinary: pytest.CaptureFixture[bytes], *args: str) -> tuple[int, str, str]:
    code = main(["schema", *args])
    captured = capsysbinary.readouterr()
    return code, captured.out.decode(), captured.err.decode()


def test_check_lists_the_registry(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    code, out, _ = run(capsysbinary, "check", "--registry", MANIFEST)
    assert code == 0
    assert out.splitlines() == [
        "ok urn:babel:orders:created (owner orders, status active)",
        "ok urn:babel:users:registered (owner identity, status active)",
        f"2 URNs in {MANIFEST}",
    ]


def test_check_messages(capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path) -> None:
    code, out, _ = run(
        capsysbinary, "check", "--registry", MANIFEST, str(REGISTRY / "messages" / "orders.jsonl")
    )
    assert code == 1
    assert out.splitlines()[1:] == [
        f"{REGISTRY / 'messages' / 'orders.jsonl'}:2 [urn:babel:orders:created]: 3 problems",
        "    $.amount: -5 is less than the minimum of 0",
        "    $.currency: 'GBP' is not one of ['USD', 'EUR', 'TRY']",
        "    $.order_id: 0 is less than the minimum of 1",
        "2 messages: 1 valid, 1 invalid, 0 unchecked",
    ]
    other = tmp_path / "other.json"
    other.write_bytes(make("urn:babel:stock:moved", {"sku": "A"}).encode())
    assert run(capsysbinary, "check", "--registry", MANIFEST, str(other))[0] == 0
    code, out, _ = run(capsysbinary, "check", "--registry", MANIFEST, "--required", str(other))
    assert code == 1 and "[urn:babel:stock:moved]: no schema for this URN" in out
    poison = tmp_path / "poison.json"
    poison.write_bytes(b"[1, 2]")
    code, out, _ = run(capsysbinary, "check", "--registry", MANIFEST, str(poison))
    assert code == 1 and "poison:" in out


def test_check_bare_data_with_urn(capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text('{"order_id": 1, "amount": 2}\n{"order_id": 1}\n')
    code, out, _ = run(
        capsysbinary, "check", "--registry", MANIFEST, "--urn", "urn:babel:orders:created", str(data)
    )
    assert code == 1
    assert f"{data}:1 [urn:babel:orders:created]: ok" in out
    assert "$: 'amount' is a required property" in out


def test_compat_of_two_schema_files(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    old, new = REGISTRY / "schemas" / "orders-created.json", REGISTRY / "schemas" / "orders-created.next.json"
    code, out, _ = run(capsysbinary, "compat", str(old), str(new))
    assert code == 1
    assert out.splitlines() == [
        f"{new}: 4 breaking changes (publish it under a new URN instead)",
        '    property "currency" is now required',
        '    currency: enum value "TRY" removed',
        "    lines[].qty: property removed",
        "    order_id: type changed integer -> string",
    ]
    assert run(capsysbinary, "compat", str(old), str(old)) == (0, f"{old}: compatible\n", "")


def test_compat_of_two_registries(capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path) -> None:
    shutil.copytree(REGISTRY, tmp_path / "next")
    manifest = tmp_path / "next" / "registry.json"
    content = json.loads(manifest.read_text())
    content["schemas"] = [e for e in content["schemas"] if e["urn"] != "urn:babel:users:registered"]
    content["schemas"][0]["schema"] = "schemas/orders-created.next.json"
    manifest.write_text(json.dumps(content))
    code, out, _ = run(capsysbinary, "compat", MANIFEST, str(manifest))
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == "urn:babel:orders:created: 4 breaking changes (publish it under a new URN instead)"
    assert "urn:babel:users:registered: 1 breaking change (publish it under a new URN instead)" in lines
    assert "    no longer in the registry" in lines
    assert lines[-1] == "2 URNs compared: 2 breaking"
    code, out, _ = run(
        capsysbinary,
        "compat",
        MANIFEST,
        str(manifest),
        "--urn",
        "urn:babel:orders:created",
        "--mode",
        "forward",
    )
    assert code == 1 and out.startswith("urn:babel:orders:created: ")
    # a registry against a schema file needs the URN
    code, _, err = run(capsysbinary, "compat", MANIFEST, str(REGISTRY / "schemas" / "orders-created.json"))
    assert (
        code == 2
        and err.strip()
        == "babelq schema: error: compat: comparing a schema file with a registry needs --urn URN"
    )
    code, out, _ = run(
        capsysbinary,
        "compat",
        MANIFEST,
        str(REGISTRY / "schemas" / "orders-created.json"),
        "--urn",
        "urn:babel:orders:created",
    )
    assert code == 0 and out == "urn:babel:orders:created: compatible\n"


def test_gdpr_inventory_and_audit(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    code, out, _ = run(capsysbinary, "gdpr", "--registry", MANIFEST)
    assert code == 0
    assert out.splitlines() == [
        "urn:babel:orders:created: no sensitive fields",
        "urn:babel:users:registered: 3 sensitive fields",
        "    email (email)",
        "    profile.full_name",
        "    addresses[].line",
        "2 URNs, 3 sensitive fields",
    ]
    code, out, _ = run(capsysbinary, "gdpr", "--registry", MANIFEST, "--require")
    assert code == 1
    assert (
        "unmarked: urn:babel:users:registered: phone looks like personal data but has no "
        "x-gdpr-sensitive mark" in out
    )
    code, out, _ = run(capsysbinary, "gdpr", "--registry", MANIFEST, "--require", "--pattern", "e_?mail")
    assert code == 0 and out.endswith("0 unmarked personal fields\n")
    code, _, err = run(capsysbinary, "gdpr", "--registry", MANIFEST, "--require", "--pattern", "(")
    assert code == 2 and err.startswith("babelq schema: error: --pattern '(': not a regular expression")


def test_gdpr_mask(capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path) -> None:
    code, out, _ = run(
        capsysbinary,
        "gdpr",
        "--registry",
        MANIFEST,
        "--mask",
        str(REGISTRY / "messages" / "user-registered.json"),
    )
    assert code == 0
    document = json.loads(out)
    assert document["job"] == "urn:babel:users:registered" and document["meta"]["queue"] == "users"
    assert document["data"]["email"] == "a***" and document["data"]["addresses"] == [
        {"line": "1***", "country": "TR"}
    ]
    assert "ann@example.org" not in out and "Ann Smith" not in out
    bare = tmp_path / "data.json"
    bare.write_text('{"email": "bob@example.org", "user_id": 1}')
    code, out, err = run(capsysbinary, "gdpr", "--registry", MANIFEST, "--mask", str(bare))
    assert code == 1 and out == "" and "bare data needs --urn URN" in err
    code, out, _ = run(
        capsysbinary,
        "gdpr",
        "--registry",
        MANIFEST,
        "--urn",
        "urn:babel:users:registered",
        "--mask",
        str(bare),
    )
    assert code == 0 and json.loads(out) == {"email": "b***", "user_id": 1}
    unknown = tmp_path / "unknown.json"
    unknown.write_bytes(make("urn:babel:stock:moved", {"email": "x@y.z"}).encode())
    code, out, err = run(capsysbinary, "gdpr", "--registry", MANIFEST, "--mask", str(unknown))
    assert code == 1 and out == "" and "not printed: no schema for urn:babel:stock:moved" in err


def test_asyncapi_to_a_file(capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path) -> None:
    target = tmp_path / "asyncapi.json"
    code, out, err = run(
        capsysbinary, "asyncapi", "--registry", MANIFEST, "-o", str(target), "--title", "Shop"
    )
    assert (code, out, err) == (0, "", f"wrote {target} (2 URNs)\n")
    document = json.loads(target.read_text())
    assert document["info"] == {
        "title": "Shop",
        "version": "1.0.0",
        "description": document["info"]["description"],
    }
    assert sorted(document["channels"]) == ["urn_babel_orders_created", "urn_babel_users_registered"]


def test_a_bad_registry_fails_in_one_line_naming_it(
    capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path
) -> None:
    manifest = tmp_path / "registry.json"
    manifest.write_text('{"schemas": [{"urn": "urn:babel:a:b", "schema": "schemas/a.json"}]}')
    for action in ("check", "gdpr", "asyncapi"):
        code, out, err = run(capsysbinary, action, "--registry", str(manifest))
        assert code == 2 and out == ""
        assert err == (
            f"babelq schema: error: registry {manifest}: schemas[0] (urn:babel:a:b): schema file "
            "schemas/a.json: cannot read: No such file or directory\n"
        )
    code, _, err = run(capsysbinary, "check", "--registry", str(tmp_path / "none.json"))
    assert (
        code == 2
        and err == f"babelq schema: error: --registry {tmp_path / 'none.json'}: no such file or directory\n"
    )
    code, _, err = run(capsysbinary, "compat", str(tmp_path / "none.json"), MANIFEST)
    assert code == 2 and err.startswith(f"babelq schema: error: OLD {tmp_path / 'none.json'}: cannot read")


def test_the_executable_runs_schema_check() -> None:
    command = [str(BABELQ)] if BABELQ.exists() else [sys.executable, "-m", "babelq.cli.main"]
    proc = subprocess.run(
        [*command, "schema", "check", "--registry", MANIFEST], capture_output=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode().endswith(f"2 URNs in {MANIFEST}\n")
