"""The URN -> data schema registry.

Schemas come from code (:meth:`SchemaRegistry.register`) or from JSON files
(:meth:`SchemaRegistry.load`). A file is a registry manifest, one schema or a mapping of several:

- a manifest (``registry.json``: an object whose ``schemas`` is a list of
  ``{"urn", "schema", "owner", "status"}`` entries, :mod:`babelq.schema.manifest`) registers
  each entry's schema file under its URN, read as Draft 7 unless it says otherwise; the entry
  stays available as :meth:`SchemaRegistry.entry`;
- a mapping whose every key starts with ``urn:`` registers each value under its key;
- a single schema is registered under its ``x-babel-urn`` keyword, else under the file
  name without ``.json`` / ``.schema.json`` when that starts with ``urn:``
  (``urn:babel:orders:created.schema.json``).

A directory loads every ``*.json`` file in it (sorted, not recursive). Validators are
compiled once per URN, when the schema is registered, and kept with the marked fields whose
values an error text must not quote (:func:`~babelq.schema.validation.hidden_patterns`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from babelq.errors import ConfigurationError
from babelq.schema.manifest import MANIFEST_DRAFT, ManifestEntry, is_manifest, read_manifest
from babelq.schema.validation import Pattern, compile_schema, errors_of, hidden_patterns

URN_KEYWORD: Final = "x-babel-urn"


def _urn_from_name(path: Path) -> str | None:
    name = path.name
    for suffix in (".schema.json", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return name if name.startswith("urn:") else None


class SchemaRegistry:
    """URN -> JSON Schema of ``data``, with cached compiled validators (thread-safe)."""

    def __init__(self) -> None:
        self._schemas: dict[str, Mapping[str, Any] | bool] = {}
        self._compiled: dict[str, tuple[Any, tuple[Pattern, ...]]] = {}
        self._entries: dict[str, ManifestEntry] = {}
        self._lock = threading.Lock()

    def register(self, urn: str, schema: Mapping[str, Any] | bool, *, draft: str | None = None) -> None:
        """Register (or replace) the schema of ``urn``'s data; raises if the schema is invalid.

        ``draft``: the ``$schema`` a schema without one is read as (2020-12 when None).
        """
        if type(urn) is not str or not urn:
            raise ConfigurationError(f"urn must be a non-empty string, got {urn!r}")
        compiled = (compile_schema(schema, draft=draft), hidden_patterns(schema))
        with self._lock:
            self._schemas[urn] = schema
            self._compiled[urn] = compiled
            self._entries.pop(urn, None)

    def register_type(self, urn: str, payload_type: Any) -> dict[str, Any]:
        """Register the JSON Schema of a payload type (a pydantic model, a msgspec Struct, a
        dataclass or a TypedDict: :mod:`babelq.schema.from_type`) as ``urn``'s; returns it."""
        from babelq.schema.from_type import json_schema_of

        schema = json_schema_of(payload_type)
        self.register(urn, schema)
        return schema

    def load(self, path: str | Path) -> list[str]:
        """Load a schema file or a directory of them; returns the URNs registered."""
        target = Path(path)
        if target.is_dir():
            urns: list[str] = []
            for child in sorted(target.glob("*.json")):
                urns.extend(self.load_file(child))
            return urns
        return self.load_file(target)

    def load_file(self, path: str | Path) -> list[str]:
        """Load one JSON file (one schema or a URN -> schema mapping); returns the URNs registered."""
        target = Path(path)
        try:
            content = json.loads(target.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigurationError(f"cannot read schema file {target}: {exc}") from None
        if not isinstance(content, dict):
            raise ConfigurationError(f"{target}: a schema file must hold a JSON object")
        if is_manifest(content):
            return self.load_manifest(target)
        if content and all(key.startswith("urn:") for key in content):
            for urn, schema in content.items():
                self._register_from(target, urn, schema)
            return list(content)
        urn = content.get(URN_KEYWORD)
        if not isinstance(urn, str) or not urn:
            urn = _urn_from_name(target)
        if urn is None:
            raise ConfigurationError(
                f"{target}: no URN for this schema; add \"{URN_KEYWORD}\": \"urn:babel:...\" "
                "or name the file after the URN"
            )
        self._register_from(target, urn, content)
        return [urn]

    def load_manifest(self, path: str | Path) -> list[str]:
        """Load a registry manifest (``registry.json``) and every schema it names; returns its URNs.

        Nothing is registered unless the whole manifest loads: a bad entry or schema file raises
        one :class:`ConfigurationError` line naming the manifest, the entry and the file.
        """
        manifest = read_manifest(path)
        compiled: list[tuple[ManifestEntry, Any]] = []
        for entry in manifest.entries:
            try:
                validator = compile_schema(entry.schema, draft=MANIFEST_DRAFT)
            except ConfigurationError as exc:
                raise ConfigurationError(
                    f"registry {manifest.path}: {entry.urn}: schema file {entry.schema_path}: {exc}"
                ) from None
            compiled.append((entry, validator))
        with self._lock:
            for entry, validator in compiled:
                self._schemas[entry.urn] = entry.schema
                self._compiled[entry.urn] = (validator, hidden_patterns(entry.schema))
                self._entries[entry.urn] = entry
        return manifest.urns

    @classmethod
    def from_manifest(cls, path: str | Path) -> SchemaRegistry:
        """A new registry holding the manifest at ``path`` (:meth:`load_manifest`)."""
        registry = cls()
        registry.load_manifest(path)
        return registry

    def entry(self, urn: str) -> ManifestEntry | None:
        """The manifest entry ``urn`` was loaded from (owner, status, schema file), or None."""
        return self._entries.get(urn)

    def _register_from(self, source: Path, urn: str, schema: Any) -> None:
        try:
            self.register(urn, schema)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{source}: {urn}: {exc}") from None

    def get(self, urn: str) -> Mapping[str, Any] | bool | None:
        """The schema registered for ``urn``, or None."""
        return self._schemas.get(urn)

    def __contains__(self, urn: object) -> bool:
        return urn in self._schemas

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._schemas))

    def __len__(self) -> int:
        return len(self._schemas)

    def validate(self, urn: str, data: Any, *, required: bool = False) -> list[str]:
        """Errors of ``data`` against ``urn``'s schema; ``[]`` when valid.

        A URN without a schema validates (``[]``) unless ``required`` is set, in which case
        that absence is the one error.
        """
        compiled = self._compiled.get(urn)
        if compiled is None:
            return [f"$: no schema is registered for {urn!r}"] if required else []
        validator, hidden = compiled
        if validator.is_valid(data):  # the common case: one pass, no error objects
            return []
        return errors_of(validator, data, hidden)

    def is_valid(self, urn: str, data: Any) -> bool:
        compiled = self._compiled.get(urn)
        return compiled is None or bool(compiled[0].is_valid(data))

    def validator(self, urn: str) -> Any:
        """The compiled jsonschema validator of ``urn`` (None without a schema), for callers
        that want jsonschema's own error objects."""
        compiled = self._compiled.get(urn)
        return None if compiled is None else compiled[0]


#: The process-wide registry used by :func:`validate` when none is passed.
default_registry: Final = SchemaRegistry()


def validate(
    urn: str, data: Any, *, registry: SchemaRegistry | None = None, required: bool = False
) -> list[str]:
    """Errors of ``data`` against the schema registered for ``urn`` (default registry unless given)."""
    return (default_registry if registry is None else registry).validate(urn, data, required=required)
