"""Registry manifests (registry.json): loading, their one-line errors, and every consumer of them
(the runtime's schema checks, GDPR protection, the Spark-side schema of ``babelq publish``)."""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from babelq.envelope import decode, make
from babelq.errors import ConfigurationError
from babelq.runtime import App, Message
from babelq.schema import CheckSchema, CheckSchemaOnPublish, SchemaRegistry, SchemaViolationError
from babelq.schema.manifest import is_manifest, read_manifest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "registry" / "registry.json"
ORDERS = {
    "type": "object",
    "required": ["order_id"],
    "properties": {
        "order_id": {"type": "integer", "minimum": 1},
        "email": {"type": "string", "x-gdpr-sensitive": True},
    },
}


def write_registry(root: Path, entries: list[Any], schemas: dict[str, Any] | None = None) -> Path:
    for name, schema in (schemas or {}).items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(json.dumps(schema), encoding="utf-8")
    manifest = root / "registry.json"
    manifest.write_text(json.dumps({"schemas": entries}), encoding="utf-8")
    return manifest


def test_the_example_registry_loads_with_its_entries() -> None:
    registry = SchemaRegistry()
    assert registry.load(EXAMPLE) == ["urn:babel:orders:created", "urn:babel:users:registered"]
    entry = registry.entry("urn:babel:orders:created")
    assert entry is not None and (entry.owner, entry.status) == ("orders", "active")
    assert entry.file == EXAMPLE.parent / "schemas" / "orders-created.json"
    assert registry.validate("urn:babel:orders:created", {"order_id": 0, "amount": 1}) == [
        "$.order_id: 0 is less than the minimum of 1"
    ]
    assert SchemaRegistry.from_manifest(EXAMPLE).get("urn:babel:users:registered") == json.loads(
        (EXAMPLE.parent / "schemas" / "users-registered.json").read_text()
    )


def test_paths_resolve_against_the_manifest_and_absolute_paths_work(tmp_path: Path) -> None:
    absolute = tmp_path / "elsewhere" / "shipped.json"
    absolute.parent.mkdir()
    absolute.write_text('{"type": "object", "required": ["carrier"]}')
    (tmp_path / "reg").mkdir()
    manifest = write_registry(
        tmp_path / "reg",
        [
            {"urn": "urn:babel:orders:created", "schema": "s/orders.json"},
            {"urn": "urn:babel:orders:shipped", "schema": str(absolute), "extra": "ignored"},
        ],
        {"s/orders.json": ORDERS},
    )
    registry = SchemaRegistry.from_manifest(manifest)
    assert sorted(registry) == ["urn:babel:orders:created", "urn:babel:orders:shipped"]
    assert registry.validate("urn:babel:orders:shipped", {}) == ["$: 'carrier' is a required property"]


def test_schemas_without_schema_keyword_are_draft_7(tmp_path: Path) -> None:
    # the array form of items is a Draft 7 tuple; 2020-12 refuses it as a schema
    tuple_schema = {"type": "array", "items": [{"type": "string"}, {"type": "integer"}]}
    data_schema = {"type": "object", "properties": {"pair": tuple_schema}}
    manifest = write_registry(
        tmp_path, [{"urn": "urn:babel:pairs:made", "schema": "p.json"}], {"p.json": data_schema}
    )
    registry = SchemaRegistry.from_manifest(manifest)
    assert registry.validate("urn:babel:pairs:made", {"pair": ["a", 1]}) == []
    assert registry.validate("urn:babel:pairs:made", {"pair": [1, 1]}) == [
        "$.pair[0]: 1 is not of type 'string'"
    ]
    with pytest.raises(ConfigurationError):
        SchemaRegistry().register("urn:babel:pairs:made", data_schema)  # read as 2020-12


BAD_REGISTRIES = [
    ("not json", "{", r"registry .*registry\.json: not JSON: .*line 1 column 2"),
    ("a list", "[]", r"registry .*registry\.json: must hold a JSON object"),
    ("no schemas list", '{"schemas": {}}', r'"schemas" must be a list of entries, got dict'),
    ("an entry not an object", '{"schemas": [1]}', r"schemas\[0\]: an entry must be an object, got 1"),
    ("no urn", '{"schemas": [{"schema": "a.json"}]}', r"schemas\[0\]: 'urn' must be a non-empty string"),
    ("blank urn", '{"schemas": [{"urn": " ", "schema": "a.json"}]}', r"schemas\[0\]: 'urn' must be"),
    (
        "no schema path",
        '{"schemas": [{"urn": "urn:babel:a:b"}]}',
        r"schemas\[0\] \(urn:babel:a:b\): 'schema' must be a non-empty string, got null",
    ),
    (
        "owner not a string",
        '{"schemas": [{"urn": "urn:babel:a:b", "schema": "a.json", "owner": 5}]}',
        r"schemas\[0\] \(urn:babel:a:b\): 'owner' must be a string, got 5",
    ),
    (
        "a URN twice",
        '{"schemas": [{"urn": "urn:babel:a:b", "schema": "ok.json"},'
        ' {"urn": "urn:babel:a:b", "schema": "ok.json"}]}',
        r"schemas\[1\] \(urn:babel:a:b\): the URN is declared twice \(first at schemas\[0\]\)",
    ),
    (
        "a missing schema file",
        '{"schemas": [{"urn": "urn:babel:a:b", "schema": "gone.json"}]}',
        r"schemas\[0\] \(urn:babel:a:b\): schema file gone.json: cannot read: No such file",
    ),
    (
        "a schema file not JSON",
        '{"schemas": [{"urn": "urn:babel:a:b", "schema": "broken.json"}]}',
        r"schema file broken.json: not JSON: .*line 1",
    ),
    (
        "a schema file not an object",
        '{"schemas": [{"urn": "urn:babel:a:b", "schema": "list.json"}]}',
        r"schema file list.json: must hold a JSON object",
    ),
    (
        "an invalid schema",
        '{"schemas": [{"urn": "urn:babel:a:b", "schema": "invalid.json"}]}',
        r"registry .*: urn:babel:a:b: schema file invalid.json: "
        r"invalid JSON Schema at \$\.properties\.x\.type",
    ),
]


@pytest.mark.parametrize(("case", "manifest", "message"), BAD_REGISTRIES, ids=[c[0] for c in BAD_REGISTRIES])
def test_a_bad_registry_is_one_line_naming_the_file_the_entry_and_the_schema(
    tmp_path: Path, case: str, manifest: str, message: str
) -> None:
    (tmp_path / "ok.json").write_text('{"type": "object"}')
    (tmp_path / "broken.json").write_text('{"type": ')
    (tmp_path / "list.json").write_text("[]")
    (tmp_path / "invalid.json").write_text('{"properties": {"x": {"type": "strin"}}}')
    (tmp_path / "registry.json").write_text(manifest)
    registry = SchemaRegistry()
    with pytest.raises(ConfigurationError, match=message) as caught:
        registry.load_manifest(tmp_path / "registry.json")
    assert "\n" not in str(caught.value)
    assert str(tmp_path / "registry.json") in str(caught.value)
    assert len(registry) == 0  # nothing of a bad manifest is registered


def test_a_urn_with_a_newline_stays_on_one_line(tmp_path: Path) -> None:
    (tmp_path / "registry.json").write_text(json.dumps({"schemas": [{"urn": "urn:a\nb", "schema": 3}]}))
    with pytest.raises(ConfigurationError) as caught:
        read_manifest(tmp_path / "registry.json")
    assert "\n" not in str(caught.value) and '"urn:a\\nb"' in str(caught.value)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)
ENTRY = st.fixed_dictionaries(
    {},
    optional={
        "urn": st.sampled_from(["urn:babel:a:b", "urn:babel:c:d", "", 7]) | JSON_VALUES,
        "schema": st.sampled_from(["ok.json", "missing.json", "list.json", ""]) | JSON_VALUES,
        "owner": st.sampled_from(["team", None]) | JSON_VALUES,
        "status": st.sampled_from(["active", "deprecated"]) | JSON_VALUES,
    },
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    document=st.one_of(
        JSON_VALUES, st.fixed_dictionaries({"schemas": st.lists(ENTRY | JSON_VALUES, max_size=4)})
    )
)
def test_any_manifest_loads_or_fails_in_one_line(tmp_path: Path, document: Any) -> None:
    (tmp_path / "ok.json").write_text('{"type": "object"}')
    (tmp_path / "list.json").write_text("[]")
    path = tmp_path / "registry.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    try:
        manifest = read_manifest(path)
    except ConfigurationError as exc:
        text = str(exc)
        assert text.startswith(f"registry {path}") and "\n" not in text
        return
    assert is_manifest(document)
    listed = document["schemas"]
    assert manifest.urns == [entry["urn"] for entry in listed]
    assert len(set(manifest.urns)) == len(manifest.urns)
    for entry in manifest.entries:
        assert entry.schema == {"type": "object"} and entry.schema_path == "ok.json"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    urns=st.lists(st.text(string.ascii_lowercase + ":.-", min_size=1, max_size=12), unique=True, max_size=5),
    owner=st.none() | st.text(max_size=10),
)
def test_written_manifests_read_back(tmp_path: Path, urns: list[str], owner: str | None) -> None:
    entries = [
        {"urn": urn, "schema": f"s{i}.json", **({"owner": owner} if owner is not None else {})}
        for i, urn in enumerate(urns)
    ]
    schemas = {f"s{i}.json": {"type": "object", "required": [f"f{i}"]} for i in range(len(urns))}
    registry = SchemaRegistry.from_manifest(write_registry(tmp_path, entries, schemas))
    assert list(registry) == urns
    for i, urn in enumerate(urns):
        entry = registry.entry(urn)
        assert entry is not None and entry.owner == owner and entry.status is None
        assert registry.validate(urn, {}) == [f"$: 'f{i}' is a required property"]


def test_the_runtime_checks_messages_against_the_manifest(tmp_path: Path) -> None:
    manifest = write_registry(
        tmp_path, [{"urn": "urn:babel:orders:created", "schema": "orders.json"}], {"orders.json": ORDERS}
    )
    registry = SchemaRegistry.from_manifest(manifest)
    app = App(
        "memory://",
        queue="orders",
        middleware=[CheckSchema(registry)],
        publish_middleware=[CheckSchemaOnPublish(registry)],
    )
    handled: list[Any] = []

    @app.handler("urn:babel:orders:created")
    def on_created(message: Message) -> None:
        handled.append(dict(message.data))

    with pytest.raises(SchemaViolationError, match=r"\$\.order_id: 0 is less than the minimum of 1"):
        app.publish("urn:babel:orders:created", {"order_id": 0})
    app.publish("urn:babel:orders:created", {"order_id": 3})
    app.transport.publish(
        "orders", make("urn:babel:orders:created", {"order_id": -1}, queue="orders").encode()
    )
    app.run_until_empty(timeout=10)
    assert handled == [{"order_id": 3}]
    [dead] = app.transport.reserve("orders.dlq", max_messages=10)
    block = decode(dead.body).dead_letter or {}
    assert block["cause"] == "schema" and "$.order_id" in block["error"]


def test_gdpr_protection_reads_the_marks_of_a_manifest_schema(tmp_path: Path) -> None:
    from babelq.gdpr import AesGcmCipher, Keyring, generate_key
    from babelq.gdpr.middleware import ProtectFields, UnprotectFields

    manifest = write_registry(
        tmp_path, [{"urn": "urn:babel:orders:created", "schema": "orders.json"}], {"orders.json": ORDERS}
    )
    registry = SchemaRegistry.from_manifest(manifest)
    cipher = AesGcmCipher(Keyring.parse(f"k1:{generate_key()}"))
    producer = App("memory://", queue="orders", publish_middleware=[ProtectFields(registry, cipher)])
    producer.publish("urn:babel:orders:created", {"order_id": 1, "email": "ann@example.org"})
    [sent] = producer.transport.reserve("orders", max_messages=10)
    data = decode(sent.body).data
    assert data["order_id"] == 1 and data["email"] != "ann@example.org"  # ciphertext on the broker

    consumer = App("memory://", queue="orders", middleware=[UnprotectFields(registry, cipher)])
    seen: list[Any] = []
    consumer.handler("urn:babel:orders:created")(lambda message: seen.append(dict(message.data)))
    consumer.transport.publish("orders", sent.body)
    consumer.run_until_empty(timeout=10)
    assert seen == [{"order_id": 1, "email": "ann@example.org"}]


def test_publish_reads_a_manifest_for_the_spark_schema_check(tmp_path: Path) -> None:
    from babelq.pipelines.publish_schema import load_schema

    manifest = write_registry(
        tmp_path,
        [
            {"urn": "urn:babel:orders:created", "schema": "orders.json"},
            {"urn": "urn:babel:orders:refunded", "schema": "refunded.json"},
        ],
        {"orders.json": ORDERS, "refunded.json": {"type": "object", "allOf": [{"required": ["x"]}]}},
    )
    assert load_schema(manifest, "urn:babel:orders:created") == ORDERS
    with pytest.raises(ConfigurationError, match=r"--schema .*registry\.json: no schema for urn:babel:x:y"):
        load_schema(manifest, "urn:babel:x:y")
    with pytest.raises(ConfigurationError, match=r"allOf.*not supported by the Spark schema check"):
        load_schema(manifest, "urn:babel:orders:refunded")
