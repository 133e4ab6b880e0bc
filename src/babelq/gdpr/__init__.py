"""GDPR field encryption (docs/standard.md §9): marked ``data`` fields travel as ciphertext.

A per-URN schema marks personal data with ``"x-gdpr-sensitive": true``
(:func:`babelq.schema.sensitive_paths`). :func:`protect` replaces each marked value by a
ciphertext string of its canonical JSON bytes; :func:`unprotect` restores it. The contract and
the wire format are the babelqueue package's, so a value protected here is opened there with
its reference AES-GCM cipher and the same key, and the reverse. By default only the marks the
reference path grammar reaches are protected, so that holds for every mark babelq protects; a
mark beyond it refuses :func:`protect` unless ``paths="extended"`` (babelq-only readers).

babelq ships the cipher the package leaves to the caller: :class:`AesGcmCipher`
(AES-256-GCM, ``pip install 'babelq[gdpr]'``, imported only when a cipher is made) over a
:class:`Keyring` of named keys read from ``BABELQ_GDPR_KEYS`` or ``BABELQ_GDPR_KEY_FILE``
(:mod:`babelq.gdpr.keys` documents both formats). Runtime middleware that protects on publish
and unprotects before the handler is in :mod:`babelq.gdpr.middleware`.

>>> from babelq.gdpr import AesGcmCipher, Keyring, generate_key, protected, unprotected
>>> cipher = AesGcmCipher(Keyring.parse("k1:" + generate_key()))
>>> schema = {"properties": {"email": {"type": "string", "x-gdpr-sensitive": True}}}
>>> sealed = protected({"email": "a@example.com", "n": 1}, schema, cipher)
>>> sealed["n"], sealed["email"] != "a@example.com"
(1, True)
>>> unprotected(sealed, schema, cipher)
{'email': 'a@example.com', 'n': 1}
"""

from __future__ import annotations

from babelq.gdpr.cipher import AesGcmCipher, Cipher
from babelq.gdpr.errors import ProtectError, UndecryptableError
from babelq.gdpr.fields import Paths, marked_steps, protect, protected, unprotect, unprotected
from babelq.gdpr.keys import ENV_KEY_FILE, ENV_KEYS, Keyring, generate_key


def load_cipher() -> AesGcmCipher:
    """The AES-256-GCM cipher over the keys the environment configures (ConfigurationError if none)."""
    return AesGcmCipher(Keyring.from_env())


__all__ = [
    "ENV_KEYS",
    "ENV_KEY_FILE",
    "AesGcmCipher",
    "Cipher",
    "Keyring",
    "Paths",
    "ProtectError",
    "UndecryptableError",
    "generate_key",
    "load_cipher",
    "marked_steps",
    "protect",
    "protected",
    "unprotect",
    "unprotected",
]
