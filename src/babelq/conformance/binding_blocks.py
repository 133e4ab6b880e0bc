"""The broker binding blocks: projections equal to the manifest, every reconciliation case.

Each binding block has sub-blocks (``attribute_projection``, ``attempts_reconciliation``,
``payload_identity``...). A sub-block this runner does not know is a failing check.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any

from babelq.bindings import artemis, asb, kafka, pulsar, rabbitmq, schema_gate, sqs
from babelq.conformance.result import Recorder
from babelq.conformance.suite import Suite, SuiteError
from babelq.envelope import decode

Block = Mapping[str, Any]
SubRunner = Callable[[Suite, Recorder, Block, str | None], None]


# -- projections ---------------------------------------------------------------------------
def _sqs_projection(suite: Suite, out: Recorder, block: Block, _url: str | None) -> None:
    env = suite.envelope(block.get("envelope_file"))
    out.equal("projection/message_attributes", sqs.project(env), block.get("message_attributes"))


def _asb_projection(suite: Suite, out: Recorder, block: Block, _url: str | None) -> None:
    env = suite.envelope(block.get("envelope_file"))
    got = asb.project(env)
    wanted = block.get("message")
    if not isinstance(wanted, Mapping):
        out.check("projection/message", False, "'message' must be an object")
    else:
        out.equal("projection/message", {key: got.get(key) for key in wanted}, wanted)
    out.equal(
        "projection/application_properties",
        got.get("application_properties"),
        block.get("application_properties"),
    )


def _pulsar_projection(suite: Suite, out: Recorder, block: Block, _url: str | None) -> None:
    env = suite.envelope(block.get("envelope_file"))
    out.equal("projection/properties", pulsar.project(env), block.get("properties"))


def _kafka_projection(suite: Suite, out: Recorder, block: Block, _url: str | None) -> None:
    env = suite.envelope(block.get("envelope_file"))
    pairs = kafka.headers(env)
    problems = [f"header {name!r} is not bytes" for name, value in pairs if type(value) is not bytes]
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names):
        problems.append(f"repeated header names: {names}")
    if problems:
        out.check("projection/headers", False, "; ".join(problems))
    else:
        decoded = {name: value.decode("utf-8") for name, value in pairs}
        out.equal("projection/headers", decoded, block.get("headers"))
    out.equal("projection/record_timestamp", kafka.record_timestamp(env), env.meta.get("created_at"))


def _artemis_projection(suite: Suite, out: Recorder, block: Block, _url: str | None) -> None:
    env = suite.envelope(block.get("envelope_file"))
    got = artemis.project(env)
    annotation = block.get("jms_type_annotation")
    out.equal(
        "projection/jms_type",
        got.get("message_annotations", {}).get(str(annotation)),
        block.get("jms_type"),
    )
    out.equal("projection/correlation_id", got.get("correlation_id"), block.get("correlation_id"))
    out.equal("projection/creation_time", got.get("creation_time"), env.meta.get("created_at"))
    out.equal("projection/properties", got.get("application_properties"), block.get("properties"))


def _rabbitmq_projection(suite: Suite, out: Recorder, block: Block, _url: str | None) -> None:
    env = suite.envelope(block.get("envelope_file"))
    got = rabbitmq.project(env)
    wanted = block.get("properties")
    if not isinstance(wanted, Mapping):
        out.check("projection/properties", False, "'properties' must be an object")
    else:
        out.equal("projection/properties", {key: got.get(key) for key in wanted}, wanted)
    out.equal("projection/headers", got.get("headers"), block.get("headers"))
    out.equal("projection/delivery_mode", got.get("delivery_mode"), rabbitmq.PERSISTENT)


# -- reconciliation ------------------------------------------------------------------------
def _kafka_native(value: object) -> list[tuple[str, bytes | None]]:
    return [] if value is None else [(kafka.ATTEMPTS_HEADER, str(value).encode("utf-8"))]


def _reconciliation(
    reconcile: Callable[[int, Any], int], native_key: str, to_native: Callable[[object], Any] = lambda v: v
) -> SubRunner:
    def run(_suite: Suite, out: Recorder, block: Block, _url: str | None) -> None:
        cases = block.get("cases")
        if not isinstance(cases, list) or not cases:
            out.check("attempts/cases", False, "'cases' must be a non-empty list")
            return
        for index, case in enumerate(cases):
            name = case.get("name", f"#{index}") if isinstance(case, Mapping) else f"#{index}"
            if not isinstance(case, Mapping) or native_key not in case:
                needs = f"a case needs body_attempts, {native_key} and expected_attempts"
                out.check(f"attempts/{name}", False, needs)
                continue
            body_attempts = case.get("body_attempts")
            if type(body_attempts) is not int:
                bad = f"body_attempts must be an integer, got {body_attempts!r}"
                out.check(f"attempts/{name}", False, bad)
                continue
            got = reconcile(body_attempts, to_native(case.get(native_key)))
            out.equal(f"attempts/{name}", got, case.get("expected_attempts"))

    return run


# -- redis ---------------------------------------------------------------------------------
def _redis_payload_identity(suite: Suite, out: Recorder, block: Block, url: str | None) -> None:
    """The queue element is the body itself: babelq adds nothing and a transport changes nothing."""
    raw = suite.read(block.get("envelope_file"))
    canonical_body = decode(raw).encode()
    out.equal("payload-identity/stable", decode(canonical_body).encode() == canonical_body, True)
    from babelq.transports import open_transport

    transport = open_transport(url or "memory://")
    queue = f"bq-conformance-{uuid.uuid4().hex[:12]}"
    try:
        for label, body in (("canonical", canonical_body), ("fixture-bytes", raw)):
            transport.publish(queue, body)
            got = transport.reserve(queue, max_messages=1, timeout=5.0)
            same = len(got) == 1 and got[0].body == body
            detail = "" if same else f"published {body!r}, reserved {[d.body for d in got]!r}"
            out.check(f"payload-identity/round-trip:{label}", same, detail)
            if got:
                transport.ack_many(got)
    finally:
        try:
            transport.purge(queue)
        finally:
            transport.close()


def _schema_version_gate(property_name: str) -> SubRunner:
    """Each case's native property value (or its absence) against babelq's gate, judged before the
    body is read: a "reject" must come from the property alone (the fixture body is valid)."""

    def run(suite: Suite, out: Recorder, block: Block, _url: str | None) -> None:
        out.equal("schema_version_gate/property", block.get("property"), property_name)
        body = suite.read(block.get("fixture"))
        out.check("schema_version_gate/fixture-decodes", decode(body).accepts(), "the fixture must be valid")
        cases = block.get("cases")
        if not isinstance(cases, list) or not cases:
            out.check("schema_version_gate/cases", False, "'cases' must be a non-empty list")
            return
        for index, case in enumerate(cases):
            if not isinstance(case, Mapping) or case.get("expect") not in ("decode", "reject"):
                out.check(f"schema_version_gate/#{index}", False, "a case needs 'expect': decode|reject")
                continue
            value = None if case.get("absent") is True else case.get("value")
            refusal = schema_gate.refusal(value)
            verdict = "reject" if refusal is not None else "decode"
            label = "absent" if case.get("absent") is True else repr(value)
            why = f": {refusal}" if refusal else ""
            out.check(f"schema_version_gate/{label}", verdict == case["expect"],
                      f"babelq would {verdict} with {property_name}={label}{why}")

    return run


SUB_BLOCKS: dict[str, dict[str, SubRunner]] = {
    "sqs": {
        "attribute_projection": _sqs_projection,
        "attempts_reconciliation": _reconciliation(sqs.reconcile_attempts, "approximate_receive_count"),
        "schema_version_gate": _schema_version_gate(schema_gate.PROPERTY),
    },
    "asb": {
        "property_projection": _asb_projection,
        "attempts_reconciliation": _reconciliation(asb.reconcile_attempts, "delivery_count"),
        "schema_version_gate": _schema_version_gate(schema_gate.PROPERTY),
    },
    "pulsar": {
        "property_projection": _pulsar_projection,
        "attempts_reconciliation": _reconciliation(pulsar.reconcile_attempts, "redelivery_count"),
        "schema_version_gate": _schema_version_gate(schema_gate.PROPERTY),
    },
    "kafka": {
        "property_projection": _kafka_projection,
        "attempts_reconciliation": _reconciliation(
            kafka.reconcile_attempts, "header_attempts", _kafka_native
        ),
        "schema_version_gate": _schema_version_gate(schema_gate.PROPERTY),
    },
    "artemis": {
        "property_projection": _artemis_projection,
        "attempts_reconciliation": _reconciliation(artemis.reconcile_attempts, "delivery_count"),
        "schema_version_gate": _schema_version_gate(schema_gate.ARTEMIS_PROPERTY),
    },
    "rabbitmq": {"property_projection": _rabbitmq_projection},
    "redis": {"payload_identity": _redis_payload_identity},
}


def run(binding: str, suite: Suite, out: Recorder, block: object, transport_url: str | None) -> None:
    if not isinstance(block, Mapping):
        out.check("manifest", False, f"the {binding!r} block must be an object")
        return
    runners = SUB_BLOCKS[binding]
    for key, sub in block.items():
        if key == "description":
            continue
        runner = runners.get(key)
        if runner is None:
            unknown = f"unknown {binding} sub-block {key!r}: this runner cannot check it"
            out.check(f"{key}/unknown", False, unknown)
            continue
        if not isinstance(sub, Mapping):
            out.check(f"{key}/manifest", False, f"{binding}.{key} must be an object")
            continue
        try:
            runner(suite, out, sub, transport_url)
        except SuiteError as exc:
            out.check(f"{key}/fixture", False, str(exc))
