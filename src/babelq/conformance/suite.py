"""Reading a suite directory: the manifest, fixture files and the envelope schema."""

from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path
from typing import Any

from babelq.envelope import Envelope, decode
from babelq.errors import ConfigurationError
from babelq.errors import SuiteError as SuiteError

MANIFEST = "manifest.json"
ENVELOPE_SCHEMA = "schema/message-envelope.schema.json"


class Suite:
    """A conformance suite directory."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        path = self.root / MANIFEST
        if not path.is_file():
            raise ConfigurationError(f"not a conformance suite: {path} does not exist")
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigurationError(f"cannot read {path}: {exc}") from None
        if not isinstance(manifest, dict):
            raise ConfigurationError(f"{path}: the manifest must be a JSON object")
        self.manifest: dict[str, Any] = manifest

    def read(self, relative: object) -> bytes:
        """The bytes of a file the manifest names (relative to the suite, never outside it)."""
        if not isinstance(relative, str) or not relative:
            raise SuiteError(f"a fixture path must be a non-empty string, got {relative!r}")
        path = (self.root / relative).resolve()
        if not path.is_relative_to(self.root.resolve()):
            raise SuiteError(f"fixture {relative!r} points outside the suite")
        try:
            return path.read_bytes()
        except OSError as exc:
            raise SuiteError(f"cannot read fixture {relative!r}: {exc.strerror or exc}") from None

    def envelope(self, relative: object) -> Envelope:
        """A fixture decoded as an envelope (raises SuiteError when it is not an accepted one)."""
        body = self.read(relative)
        env = decode(body)
        reason = env.rejection()
        if reason is not None:
            raise SuiteError(f"fixture {relative!r} is not an accepted envelope: {reason}")
        return env

    @cached_property
    def envelope_schema(self) -> Any:
        """The compiled validator of schema/message-envelope.schema.json."""
        from babelq.schema.validation import compile_schema

        try:
            schema = json.loads(self.read(ENVELOPE_SCHEMA))
        except json.JSONDecodeError as exc:
            raise SuiteError(f"{ENVELOPE_SCHEMA} is not JSON: {exc}") from None
        try:
            return compile_schema(schema)
        except ConfigurationError as exc:
            raise SuiteError(f"{ENVELOPE_SCHEMA}: {exc}") from None
