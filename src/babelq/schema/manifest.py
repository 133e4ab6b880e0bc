"""Reading a registry manifest (``registry.json``), the schema registry format the other SDKs read.

A manifest lists one entry per URN; each names the JSON Schema file of that URN's ``data``,
relative to the manifest's directory (or absolute), with optional ``owner`` and ``status``
strings::

    {"schemas": [
      {"urn": "urn:babel:orders:created", "schema": "schemas/orders-created.json",
       "owner": "orders", "status": "active"}
    ]}

Schemas without a ``$schema`` of their own are Draft 7 (:data:`MANIFEST_DRAFT`), as the format
says. Keys this module does not know are ignored, so a manifest written for a newer tool still
loads. Everything is read when the manifest is loaded, not when a message first needs it: a
missing or broken schema file fails the start of a service, not its thousandth message.

Every error is one :class:`~babelq.errors.ConfigurationError` line naming the manifest, the entry
(``schemas[2]``) or its URN, and the schema file when that is what failed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from babelq.errors import ConfigurationError

#: what a schema of a manifest without its own ``$schema`` is read as
MANIFEST_DRAFT: Final = "http://json-schema.org/draft-07/schema#"
#: the optional string fields of an entry, kept as they are written
_OPTIONAL: Final = ("owner", "status")


@dataclass(frozen=True)
class ManifestEntry:
    """One URN of a manifest: its schema (read from ``file``) and the entry's own fields."""

    urn: str
    #: the path as the manifest writes it
    schema_path: str
    #: that path resolved against the manifest's directory
    file: Path
    schema: Mapping[str, Any]
    owner: str | None = None
    status: str | None = None


@dataclass(frozen=True)
class Manifest:
    """A loaded manifest: where it is and its entries, in the manifest's order."""

    path: Path
    entries: tuple[ManifestEntry, ...]

    @property
    def urns(self) -> list[str]:
        return [entry.urn for entry in self.entries]

    def entry(self, urn: str) -> ManifestEntry | None:
        return next((entry for entry in self.entries if entry.urn == urn), None)


def is_manifest(content: object) -> bool:
    """Whether a JSON document is a manifest (an object whose ``schemas`` is a list)."""
    return isinstance(content, Mapping) and isinstance(content.get("schemas"), list)


def _read_json(path: Path, what: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"{what}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigurationError(f"{what}: not UTF-8 text") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(
            f"{what}: not JSON: {exc.msg} (line {exc.lineno} column {exc.colno})"
        ) from None
    except RecursionError:
        raise ConfigurationError(f"{what}: nested too deeply") from None


def _shown(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)[:60]


def _required(entry: Mapping[str, Any], key: str, where: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(f"{where}: {key!r} must be a non-empty string, got {_shown(value)}")
    return value


def _optional(entry: Mapping[str, Any], key: str, where: str) -> str | None:
    value = entry.get(key)
    if value is not None and not isinstance(value, str):
        raise ConfigurationError(f"{where}: {key!r} must be a string, got {_shown(value)}")
    return value


def read_manifest(path: str | Path) -> Manifest:
    """Load the manifest at ``path`` and every schema file it names (module docstring)."""
    target = Path(path)
    content = _read_json(target, f"registry {target}")
    if not isinstance(content, Mapping):
        raise ConfigurationError(f'registry {target}: must hold a JSON object with a "schemas" list')
    listed = content.get("schemas")
    if not isinstance(listed, list):
        got = "nothing" if listed is None else type(listed).__name__
        raise ConfigurationError(f'registry {target}: "schemas" must be a list of entries, got {got}')
    entries: list[ManifestEntry] = []
    seen: dict[str, int] = {}
    for index, item in enumerate(listed):
        where = f"registry {target}: schemas[{index}]"
        if not isinstance(item, Mapping):
            raise ConfigurationError(f"{where}: an entry must be an object, got {_shown(item)}")
        urn = _required(item, "urn", where)
        where = f"{where} ({urn if urn.isprintable() else _shown(urn)})"
        if urn in seen:
            raise ConfigurationError(f"{where}: the URN is declared twice (first at schemas[{seen[urn]}])")
        seen[urn] = index
        schema_path = _required(item, "schema", where)
        owner, status = (_optional(item, key, where) for key in _OPTIONAL)
        file = Path(schema_path)
        if not file.is_absolute():
            file = target.parent / file
        schema = _read_json(file, f"{where}: schema file {schema_path}")
        if not isinstance(schema, Mapping):
            raise ConfigurationError(f"{where}: schema file {schema_path}: must hold a JSON object")
        entries.append(ManifestEntry(urn, schema_path, file, schema, owner, status))
    return Manifest(target, tuple(entries))
