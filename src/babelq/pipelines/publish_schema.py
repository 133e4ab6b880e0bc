"""The JSON Schema ``babelq publish`` holds every row to, and the column types it declares.

``--schema PATH`` is read as the schema registry reads files (:mod:`babelq.schema.registry`): a
registry manifest (``registry.json``), a directory of schema files, a file mapping URNs to
schemas, or one schema (``x-babel-urn`` or a file named after its URN); one schema that names no
URN is taken as the schema of ``--urn``. The
schema must compile for jsonschema and for the Spark check (:mod:`babelq.spark.schema_check`),
which refuses keywords it cannot check rather than skip them.

:func:`declared_types` reads the JSON type the schema gives each top-level member, for the
readers that must type a column themselves: CSV cells are text until read as a declared
``integer``, ``number`` or ``boolean``; a JSON lines member is checked against its declared type.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from babelq.errors import ConfigurationError
from babelq.schema.manifest import is_manifest
from babelq.schema.registry import URN_KEYWORD, SchemaRegistry
from babelq.schema.subset import JsonSchema

#: the JSON types a column can be read as (``null`` beside one of them is allowed too)
SCALARS = ("string", "integer", "number", "boolean")


def load_schema(path: str | Path, urn: str) -> JsonSchema:
    """The schema of ``urn``'s data from ``path`` (module docstring), checked by both compilers."""
    from babelq.spark.schema_check import check_schema

    target = Path(path)
    registry = SchemaRegistry()
    try:
        if target.is_dir() or _names_urns(target):
            registry.load(target)
        else:
            registry.register(urn, _read(target))
    except ConfigurationError as exc:
        raise ConfigurationError(f"--schema {path}: {exc}") from None
    schema = registry.get(urn)
    if schema is None:
        known = ", ".join(sorted(registry)) or "none"
        raise ConfigurationError(f"--schema {path}: no schema for {urn} (it has: {known})")
    try:
        check_schema(schema)
    except ConfigurationError as exc:
        raise ConfigurationError(f"--schema {path}: {exc}") from None
    return schema


def _read(target: Path) -> Any:
    try:
        return json.loads(target.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigurationError(f"cannot read schema file: {exc}") from None


def _names_urns(target: Path) -> bool:
    """True when the file is a manifest, maps URNs to schemas or names its own URN (the registry's
    file forms)."""
    content = _read(target)
    if not isinstance(content, dict):
        return False
    if is_manifest(content) or URN_KEYWORD in content:
        return True
    return bool(content) and all(key.startswith("urn:") for key in content)


def declared_types(schema: JsonSchema) -> dict[str, str]:
    """Top-level member -> the one JSON type the schema gives it: one of :data:`SCALARS`,
    ``object`` or ``array``. A member whose ``type`` is missing or names several types (but
    ``null``) is left out: its values are read as they come."""
    if not isinstance(schema, Mapping):
        return {}
    found: dict[str, str] = {}
    for name, member in (schema.get("properties") or {}).items():
        if not isinstance(member, Mapping):
            continue
        kind = member.get("type")
        kinds = [kind] if isinstance(kind, str) else list(kind) if isinstance(kind, list) else []
        kinds = [k for k in kinds if k != "null"]
        if len(kinds) == 1 and kinds[0] in (*SCALARS, "object", "array"):
            found[str(name)] = kinds[0]
    return found
