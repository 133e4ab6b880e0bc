"""Where the AES keys come from: an environment variable or a key file, never the message.

Two formats, both naming every key by an id so keys can be rotated:

``BABELQ_GDPR_KEYS`` (environment)
    ``id:base64key[,id:base64key...]``; the **first** key is the current one (it encrypts),
    the others only decrypt. Rotate by putting a new key in front and keeping the old ones
    until nothing encrypted under them is left on any queue (DLQs included).

``BABELQ_GDPR_KEY_FILE`` (environment, the path of a JSON file)
    ``{"current": "2026-11", "keys": {"2026-11": "base64key", "2026-05": "base64key"}}``.

A key is 32 random bytes (AES-256) in base64 (standard or URL-safe alphabet); make one with
:func:`generate_key`. A key id is 1-64 characters of ``A-Z a-z 0-9 . _ -``. Setting both
variables, neither, or a malformed entry is a :class:`~babelq.errors.ConfigurationError` of
one line that names the variable or file and the key id, and never contains key bytes.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from babelq.errors import ConfigurationError

ENV_KEYS: Final = "BABELQ_GDPR_KEYS"
ENV_KEY_FILE: Final = "BABELQ_GDPR_KEY_FILE"
KEY_BYTES: Final = 32
_KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


def generate_key() -> str:
    """A new random AES-256 key, base64-encoded (for ``BABELQ_GDPR_KEYS`` or a key file)."""
    return base64.b64encode(os.urandom(KEY_BYTES)).decode("ascii")


def _decode_key(text: object, kid: str, source: str) -> bytes:
    if not isinstance(text, str):
        raise ConfigurationError(f"{source}: key {kid!r} must be a base64 string")
    cleaned = text.strip()
    alphabet = cleaned.replace("-", "+").replace("_", "/")
    try:
        raw = base64.b64decode(alphabet + "=" * (-len(alphabet) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ConfigurationError(f"{source}: key {kid!r} is not base64") from None
    if len(raw) != KEY_BYTES:
        raise ConfigurationError(
            f"{source}: key {kid!r} must be {KEY_BYTES} bytes (AES-256) in base64, got {len(raw)} bytes"
        )
    return raw


def _check_id(kid: object, source: str) -> str:
    if not isinstance(kid, str) or not _KEY_ID.fullmatch(kid):
        shown = kid if isinstance(kid, str) and len(kid) <= 64 and ":" not in kid else "<invalid>"
        raise ConfigurationError(f"{source}: key id {shown!r} must be 1-64 characters of A-Z a-z 0-9 . _ -")
    return kid


class Keyring:
    """Named AES-256 keys and which one encrypts. Its ``repr`` shows ids only, never key bytes."""

    __slots__ = ("_keys", "current", "source")

    def __init__(self, keys: Mapping[str, bytes], current: str, *, source: str = "keyring") -> None:
        if not keys:
            raise ConfigurationError(f"{source}: no keys")
        for kid, key in keys.items():
            _check_id(kid, source)
            if not isinstance(key, bytes) or len(key) != KEY_BYTES:
                raise ConfigurationError(f"{source}: key {kid!r} must be {KEY_BYTES} bytes (AES-256)")
        if current not in keys:
            raise ConfigurationError(f"{source}: current key {current!r} is not one of the keys")
        self._keys = dict(keys)
        self.current = current
        self.source = source

    @property
    def ids(self) -> tuple[str, ...]:
        """Every key id, the current one first."""
        return (self.current, *(k for k in self._keys if k != self.current))

    def key(self, kid: str) -> bytes:
        return self._keys[kid]

    def __repr__(self) -> str:
        return f"Keyring(current={self.current!r}, ids={list(self.ids)!r}, source={self.source!r})"

    # -- loading ------------------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str, *, source: str = ENV_KEYS) -> Keyring:
        """Read the ``id:base64key,id:base64key`` form (first = current)."""
        keys: dict[str, bytes] = {}
        for n, entry in enumerate(e.strip() for e in text.split(",")):
            if not entry:
                continue
            kid, sep, encoded = entry.partition(":")
            if not sep:
                raise ConfigurationError(f"{source}: entry {n + 1} must be id:base64key")
            kid = _check_id(kid.strip(), source)
            if kid in keys:
                raise ConfigurationError(f"{source}: key id {kid!r} appears twice")
            keys[kid] = _decode_key(encoded, kid, source)
        if not keys:
            raise ConfigurationError(f"{source}: no keys (expected id:base64key[,id:base64key...])")
        return cls(keys, next(iter(keys)), source=source)

    @classmethod
    def from_file(cls, path: str | Path) -> Keyring:
        """Read a JSON key file: ``{"current": id, "keys": {id: base64key, ...}}``."""
        source = f"key file {path}"
        try:
            doc = json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise ConfigurationError(f"{source}: cannot read it ({reason})") from None
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise ConfigurationError(f"{source}: not a JSON document") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("keys"), dict) or not doc["keys"]:
            raise ConfigurationError(f'{source}: must be {{"current": id, "keys": {{id: base64key, ...}}}}')
        keys = {_check_id(kid, source): _decode_key(v, kid, source) for kid, v in doc["keys"].items()}
        current = doc.get("current")
        if not isinstance(current, str) or current not in keys:
            raise ConfigurationError(f'{source}: "current" must name one of the keys ({", ".join(keys)})')
        return cls(keys, current, source=source)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Keyring:
        """The keyring configured by ``BABELQ_GDPR_KEYS`` or ``BABELQ_GDPR_KEY_FILE`` (exactly one)."""
        env = os.environ if environ is None else environ
        inline, file = env.get(ENV_KEYS, "").strip(), env.get(ENV_KEY_FILE, "").strip()
        if inline and file:
            raise ConfigurationError(f"set {ENV_KEYS} or {ENV_KEY_FILE}, not both")
        if file:
            return cls.from_file(file)
        if inline:
            return cls.parse(inline, source=ENV_KEYS)
        raise ConfigurationError(
            f"no GDPR keys configured: set {ENV_KEYS}=id:base64key or {ENV_KEY_FILE}=/path/keys.json"
        )
