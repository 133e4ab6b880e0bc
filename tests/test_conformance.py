"""The vendored cross-SDK conformance suite, run through babelq.conformance.

Every check of every block is its own test id (``cases/order-created/expect``,
``sqs/attempts/third-delivery``...), so a regression names exactly what broke. The runner
itself is tested too: a deliberately broken copy of the suite must fail, loudly.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from babelq.conformance import KNOWN_BLOCKS, Check, run_suite
from babelq.errors import ConfigurationError
from conftest import CONFORMANCE_DIR

RESULT = run_suite(CONFORMANCE_DIR)


@pytest.mark.parametrize("check", RESULT.checks, ids=[check.id for check in RESULT.checks])
def test_check_passes(check: Check) -> None:
    assert check.passed, check.message


def test_every_manifest_block_produced_checks() -> None:
    manifest = json.loads((CONFORMANCE_DIR / "manifest.json").read_text())
    blocks = set(RESULT.blocks())
    for name in manifest:
        if name in ("schema_version", "description"):
            continue
        assert name in KNOWN_BLOCKS
        assert name in blocks, f"block {name} produced no checks"
    ids = [check.id for check in RESULT.checks]
    assert len(ids) == len(set(ids)), "check ids must be unique"
    assert RESULT.passed


def test_every_case_and_reconciliation_is_covered() -> None:
    manifest = json.loads((CONFORMANCE_DIR / "manifest.json").read_text())
    ids = {check.id for check in RESULT.checks}
    for case in manifest["cases"]:
        suffix = "accepted" if case["valid"] else "rejected"
        assert f"cases/{case['name']}/{suffix}" in ids
    for binding in ("sqs", "asb", "pulsar", "kafka", "artemis"):
        for case in manifest[binding]["attempts_reconciliation"]["cases"]:
            assert f"{binding}/attempts/{case['name']}" in ids
    for case in manifest["idempotency"]["sequences"]["cases"]:
        assert f"idempotency/sequences/{case['name']}" in ids
    for case in manifest["payload_schema"]["cases"]:
        assert f"payload_schema/{case['name']}" in ids


@pytest.fixture
def suite_copy(tmp_path: Path) -> Path:
    target = tmp_path / "suite"
    shutil.copytree(CONFORMANCE_DIR, target)
    return target


def _edit_manifest(root: Path, change: Any) -> None:
    path = root / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))


def _failed(root: Path) -> dict[str, str]:
    result = run_suite(root)
    assert not result.passed
    return {check.id: check.message for check in result.failures()}


def test_an_unbroken_copy_passes(suite_copy: Path) -> None:
    assert run_suite(suite_copy).passed


def test_a_broken_copy_fails_on_exactly_the_broken_checks(suite_copy: Path) -> None:
    def breaks(manifest: dict[str, Any]) -> None:
        manifest["sqs"]["attribute_projection"]["message_attributes"]["bq-created-at"]["DataType"] = "String"
        manifest["kafka"]["attempts_reconciliation"]["cases"][0]["expected_attempts"] = 9
        manifest["idempotency"]["sequences"]["cases"][0]["expected_effects"] = 2
        manifest["payload_schema"]["cases"][0]["valid"] = False
        manifest["cases"][0]["expect"]["lang"] = "go"
        manifest["rabbitmq"]["property_projection"]["headers"]["x-attempts"] = "0"  # must stay an int

    _edit_manifest(suite_copy, breaks)
    failed = _failed(suite_copy)
    assert set(failed) == {
        "sqs/projection/message_attributes",
        "kafka/attempts/header-matches-body",
        "idempotency/sequences/duplicate-delivery-runs-once",
        "idempotency/sequences/duplicate-delivery-runs-once[seen-set]",
        "payload_schema/valid-minimal",
        "cases/order-created/expect",
        "rabbitmq/projection/headers",
    }
    assert "lang" in failed["cases/order-created/expect"]


def test_a_broken_fixture_is_reported(suite_copy: Path) -> None:
    fixture = suite_copy / "fixtures" / "invalid-missing-urn.json"
    doc = json.loads(fixture.read_text())
    doc["job"] = "urn:babel:orders:created"  # now it is valid, but the manifest says it must be rejected
    fixture.write_text(json.dumps(doc))
    (suite_copy / "fixtures" / "urn-alias.json").unlink()
    failed = _failed(suite_copy)
    assert set(failed) == {"cases/invalid-missing-urn/rejected", "cases/urn-alias/fixture"}


def test_unknown_blocks_are_reported_not_ignored(suite_copy: Path) -> None:
    def adds(manifest: dict[str, Any]) -> None:
        manifest["nats"] = {"description": "a future binding"}
        manifest["sqs"]["fifo_projection"] = {"envelope_file": "fixtures/order-created.json"}
        manifest["idempotency"]["ttl"] = {}

    _edit_manifest(suite_copy, adds)
    failed = _failed(suite_copy)
    assert set(failed) == {
        "manifest/unknown-block:nats",
        "sqs/fifo_projection/unknown",
        "idempotency/ttl/unknown",
    }


def test_a_crashing_block_does_not_hide_the_others(suite_copy: Path) -> None:
    _edit_manifest(suite_copy, lambda m: m.__setitem__("asb", {"property_projection": {"envelope_file": 5}}))
    result = run_suite(suite_copy)
    assert {c.id for c in result.failures()} == {"asb/property_projection/fixture"}
    assert result.blocks()["sqs"][1] == 0


def test_a_broken_envelope_schema_fails_schema_checks(suite_copy: Path) -> None:
    (suite_copy / "schema" / "message-envelope.schema.json").write_text('{"type": "nonsense"}')
    failed = _failed(suite_copy)
    assert "schema/message-envelope" in failed
    assert "cases/order-created/schema:re-encoded" in failed


def test_not_a_suite_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"manifest\.json"):
        run_suite(tmp_path)
    (tmp_path / "manifest.json").write_text("[]")
    with pytest.raises(ConfigurationError, match="JSON object"):
        run_suite(tmp_path)


def test_result_serialises(suite_copy: Path) -> None:
    data = json.loads(run_suite(suite_copy).to_json())
    assert data["passed"] is True
    sqs = [c for c in data["checks"] if c["block"] == "sqs"]
    assert data["blocks"]["sqs"] == {"passed": len(sqs), "failed": 0}
    gate_cases = json.loads((suite_copy / "manifest.json").read_text())["sqs"]["schema_version_gate"]["cases"]
    gated = [c for c in sqs if c["name"].startswith("schema_version_gate/") and c["name"].count("/") == 1]
    # every gate case is a check of its own, beside the property name and the fixture
    assert len(gated) == len(gate_cases) + 2
    assert all(set(c) == {"id", "block", "name", "passed", "message"} for c in data["checks"])
