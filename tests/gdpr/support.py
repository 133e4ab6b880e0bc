"""Shared schema, keys and the babelqueue package's documented reference cipher (written from its docs)."""

from __future__ import annotations

import base64
import os
from typing import Any

from babelq.gdpr import AesGcmCipher, Keyring

URN = "urn:babel:customers:registered"

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "customer_id": {"type": "integer"},
        "email": {"type": "string", "x-gdpr-sensitive": True},
        "profile": {
            "type": "object",
            "properties": {
                "full_name": {"type": "string", "x-gdpr-sensitive": True},
                "tier": {"type": "string"},
            },
        },
        "addresses": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "line": {"type": "string", "x-gdpr-sensitive": True},
                    "city": {"type": "string"},
                },
            },
        },
        "card": {"type": "object", "x-gdpr-sensitive": True},
    },
}

DATA: dict[str, Any] = {
    "customer_id": 1042,
    "email": "alice.cleartext@example.com",
    "profile": {"full_name": "Alice Cleartext-Secret", "tier": "gold"},
    "addresses": [{"line": "1 Secretstreet", "city": "Ghent"}, {"line": "2 Hiddenlane", "city": "Lyon"}],
    "card": {"last4": "4242", "holder": "ALICE CARDHOLDER"},
}

#: Strings that must never appear on a broker once DATA is protected.
CLEARTEXTS = ["alice.cleartext@example.com", "Cleartext-Secret", "Secretstreet", "Hiddenlane", "CARDHOLDER"]


def key_b64() -> str:
    return base64.b64encode(os.urandom(32)).decode("ascii")


def cipher_for(*entries: tuple[str, str]) -> AesGcmCipher:
    return AesGcmCipher(Keyring.parse(",".join(f"{kid}:{k}" for kid, k in entries)))


class ReferenceAesGcm:
    """The babelqueue package's documented reference cipher (gdpr module docs): AES-GCM,
    random 12-byte nonce in front of the sealed bytes, standard base64 out; no key ids."""

    def __init__(self, key: bytes) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self.aead = AESGCM(key)

    def encrypt(self, plaintext: bytes) -> str:
        nonce = os.urandom(12)
        return base64.b64encode(nonce + self.aead.encrypt(nonce, plaintext, None)).decode("ascii")

    def decrypt(self, ciphertext: str) -> bytes:
        raw = base64.b64decode(ciphertext)
        return bytes(self.aead.decrypt(raw[:12], raw[12:], None))
