"""``protect`` / ``unprotect``: the values a per-URN schema marks, as ciphertext strings
(docs/standard.md §9).

Same contract as the babelqueue package's ``gdpr`` module, so either side can read the other:

* each marked value is encoded as canonical JSON (sorted keys, no spaces, ``\\uXXXX``
  escapes; exactly what the package encodes) and replaced by ``cipher.encrypt(bytes)``, a
  string; everything else in ``data`` and the envelope stays as it was;
* ``unprotect`` decrypts each marked **string** and JSON-decodes it back; a marked value that
  is not a string was never protected and is left alone, so running it twice is harmless;
* a marked path absent from the message is skipped; a whole object or array may be marked
  and travels as one ciphertext.

Differences from the package, both on the safe side: a mark inside a marked container (or
under a marked ``*``) is not applied a second time, and ``unprotect`` works through the paths in
the reverse order of ``protect``. :func:`protect` and :func:`unprotect` change ``data`` in
place, as the package does; :func:`protected` and :func:`unprotected` return a new mapping and
leave the argument (and every object they did not need to change) alone.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, MutableMapping
from typing import Any

from babelq.gdpr.cipher import Cipher
from babelq.gdpr.errors import ProtectError, UndecryptableError
from babelq.gdpr.paths import Step, outermost, rewrite
from babelq.schema.sensitive import sensitive_paths

Schema = Mapping[str, Any] | bool | None


def marked_steps(schema: Schema) -> list[tuple[Step, ...]]:
    """The parsed positions ``schema`` marks ``x-gdpr-sensitive``, outermost only."""
    if schema is None or isinstance(schema, bool):
        return []
    return outermost(sensitive_paths(schema))


def encode_value(value: Any, field: str = "") -> bytes:
    """The canonical JSON bytes of one field value (the plaintext a cipher sees)."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise ProtectError(field, f"cannot be protected: not JSON ({exc})") from None


def _encrypter(cipher: Cipher) -> Any:
    def op(value: Any, field: str) -> Any:
        return cipher.encrypt(encode_value(value, field))

    return op


def _decrypter(cipher: Cipher) -> Any:
    def op(value: Any, field: str) -> Any:
        if not isinstance(value, str):
            return value
        try:
            plaintext = cipher.decrypt(value)
        except UndecryptableError as exc:
            raise UndecryptableError(field, exc.problem) from None
        except Exception as exc:  # any cipher failure is this field's failure
            raise UndecryptableError(field, f"cannot be decrypted ({type(exc).__name__})") from None
        try:
            return json.loads(plaintext)
        except (ValueError, TypeError):
            raise UndecryptableError(field, "decrypted to bytes that are not JSON") from None

    return op


def protected_with(data: Mapping[str, Any], steps: list[tuple[Step, ...]], cipher: Cipher) -> Any:
    """``data`` with the values at ``steps`` protected (a copy; the runtime caches ``steps``)."""
    op = _encrypter(cipher)
    for path in steps:
        data = rewrite(data, path, op, copy=True)
    return data


def unprotected_with(data: Mapping[str, Any], steps: list[tuple[Step, ...]], cipher: Cipher) -> Any:
    """``data`` with the values at ``steps`` decrypted (a copy); raises :class:`UndecryptableError`."""
    op = _decrypter(cipher)
    for path in reversed(steps):
        data = rewrite(data, path, op, copy=True)
    return data


def protected(data: Mapping[str, Any], schema: Schema, cipher: Cipher) -> dict[str, Any]:
    """A copy of ``data`` whose marked values are ciphertext strings; ``data`` is not changed."""
    return dict(protected_with(data, marked_steps(schema), cipher))


def unprotected(data: Mapping[str, Any], schema: Schema, cipher: Cipher) -> dict[str, Any]:
    """A copy of ``data`` whose marked ciphertext strings are decrypted; ``data`` is not changed."""
    return dict(unprotected_with(data, marked_steps(schema), cipher))


def protect(data: MutableMapping[str, Any], schema: Schema, cipher: Cipher) -> None:
    """Encrypt, in place, every value of ``data`` that ``schema`` marks (the package's contract).

    If the cipher or the encoding fails part-way, ``data`` may be partly protected: do not
    publish it (use :func:`protected` to keep the original intact).
    """
    op = _encrypter(cipher)
    for path in marked_steps(schema):
        rewrite(data, path, op, copy=False)


def unprotect(data: MutableMapping[str, Any], schema: Schema, cipher: Cipher) -> None:
    """Decrypt, in place, every marked ciphertext string in ``data``; raises :class:`UndecryptableError`."""
    op = _decrypter(cipher)
    for path in reversed(marked_steps(schema)):
        rewrite(data, path, op, copy=False)
