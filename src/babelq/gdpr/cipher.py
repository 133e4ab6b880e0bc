"""The cipher babelq ships: AES-256-GCM with key ids for rotation, in the package's wire format.

Wire format of one protected value (the babelqueue package's documented reference cipher, so
either side decrypts the other): ``base64(nonce || ciphertext || tag)``, standard alphabet with
padding, a fresh random 12-byte nonce per value, the 16-byte GCM tag at the end, no
associated data.

That format has no room for a key id, and adding one would break the package's reader. So
rotation works by trying keys: encrypt with the current key, decrypt with the current key
first and then every other known key. GCM's tag makes a wrong key fail (a false accept has
probability about 2**-128), so trying is safe; it costs one failed tag check per older key,
only for values written before the last rotation. The key that opened the last value is
tried first next time, so a backlog written under an old key costs one try per value.

``cryptography`` is imported when a cipher is made, never when :mod:`babelq.gdpr` is
imported (``pip install 'babelq[gdpr]'``).
"""

from __future__ import annotations

import base64
import binascii
import os
from typing import Any, Protocol, runtime_checkable

from babelq.extras import optional_import
from babelq.gdpr.errors import UndecryptableError
from babelq.gdpr.keys import Keyring

NONCE_BYTES = 12
TAG_BYTES = 16


@runtime_checkable
class Cipher(Protocol):
    """What :func:`babelq.gdpr.protect` needs: bytes -> JSON-safe string and back (raise on failure)."""

    def encrypt(self, plaintext: bytes) -> str: ...

    def decrypt(self, ciphertext: str) -> bytes: ...


def _aesgcm() -> Any:
    aead = optional_import("cryptography.hazmat.primitives.ciphers.aead", needed_for="GDPR field encryption")
    return aead.AESGCM


class AesGcmCipher:
    """AES-256-GCM over a :class:`~babelq.gdpr.keys.Keyring` (thread-safe)."""

    def __init__(self, keyring: Keyring) -> None:
        aesgcm = _aesgcm()
        self.keyring = keyring
        self._current = aesgcm(keyring.key(keyring.current))
        self._all: dict[str, Any] = {kid: aesgcm(keyring.key(kid)) for kid in keyring.ids}
        self._last_opened = keyring.current

    def encrypt(self, plaintext: bytes) -> str:
        nonce = os.urandom(NONCE_BYTES)
        sealed: bytes = self._current.encrypt(nonce, plaintext, None)
        return base64.b64encode(nonce + sealed).decode("ascii")

    def decrypt(self, ciphertext: str) -> bytes:
        """The plaintext; :class:`UndecryptableError` (field ``""``) when no known key opens it."""
        try:
            raw = base64.b64decode(ciphertext.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError, ValueError):
            raise UndecryptableError("", "is not a ciphertext (not base64)") from None
        if len(raw) < NONCE_BYTES + TAG_BYTES:
            raise UndecryptableError("", "is not a ciphertext (too short)") from None
        nonce, sealed = raw[:NONCE_BYTES], raw[NONCE_BYTES:]
        first = self._last_opened
        for kid in (first, *(k for k in self._all if k != first)):
            try:
                plaintext: bytes = self._all[kid].decrypt(nonce, sealed, None)
            except Exception:  # cryptography's InvalidTag: not this key
                continue
            self._last_opened = kid
            return plaintext
        raise UndecryptableError(
            "", f"cannot be decrypted with any known key (tried {', '.join(repr(k) for k in self._all)})"
        )

    def __repr__(self) -> str:
        return f"AesGcmCipher(current={self.keyring.current!r}, keys={list(self.keyring.ids)!r})"
