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

Which positions: by default (``paths="reference"``) exactly those the reference path grammar
reaches (:func:`babelq.schema.sensitive.reference_reach`), so the package and the SDKs that
mirror it read what babelq writes and babelq reads what they write. A mark beyond that grammar
(under ``$ref``, a combinator, ``additionalProperties``, a tuple, in an array of arrays, or
under a property name the dotted form cannot write) refuses :func:`protect` with a
:class:`ProtectError` naming it, unless an enclosing marked value already covers it: publishing
it in clear would leak what the schema calls personal data, and encrypting it would hand
ciphertext to the other SDKs' handlers. :func:`unprotect` leaves such positions alone, as the
other SDKs do. ``paths="extended"`` protects and unprotects every mark; only babelq reads that.

Differences from the package, both on the safe side: a mark inside a marked container is not
applied a second time, and ``unprotect`` works through the positions in the reverse order of
``protect``. :func:`protect` and :func:`unprotect` change ``data`` in place, as the package does;
:func:`protected` and :func:`unprotected` return a new mapping and leave the argument (and every
object they did not need to change) alone.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from babelq.errors import ConfigurationError
from babelq.gdpr.cipher import Cipher
from babelq.gdpr.errors import ProtectError, UndecryptableError
from babelq.gdpr.paths import Position, outermost, rewrite
from babelq.schema.sensitive import Marked, covers, marked_positions, path_text

Schema = Mapping[str, Any] | bool | None
#: ``"reference"``: the positions the reference path grammar reaches; ``"extended"``: every mark.
Paths = Literal["reference", "extended"]
PATHS: Final = ("reference", "extended")


def check_paths(paths: object) -> Paths:
    """``paths`` itself, or ConfigurationError naming the option."""
    if paths == "reference":
        return "reference"
    if paths == "extended":
        return "extended"
    raise ConfigurationError(f"paths: must be 'reference' or 'extended', got {paths!r}")


@dataclass(frozen=True, slots=True)
class Plan:
    """What protecting under one schema does: the outermost positions rewritten, and (reference
    paths only) a mark beyond the grammar that no rewritten value covers, which refuses protect."""

    steps: list[Position]
    refused: Marked | None = None

    def refusal(self) -> ProtectError:
        """The error protect raises when ``refused`` is set (a new one each call: it is raised)."""
        assert self.refused is not None
        return ProtectError(
            path_text(self.refused.steps),
            f"marked x-gdpr-sensitive {self.refused.beyond}, which the reference path grammar does not "
            "reach (other SDKs neither protect nor unprotect it); mark an enclosing property, or use "
            "paths='extended' when only babelq consumers read this URN",
        )


def plan(schema: Schema, paths: Paths = "reference") -> Plan:
    """The :class:`Plan` of ``schema`` under ``paths``."""
    wide = check_paths(paths) == "extended"
    if schema is None or isinstance(schema, bool):
        return Plan([])
    marks = marked_positions(schema)
    steps = outermost([m.steps for m in marks if wide or not m.beyond])
    refused = next(
        (m for m in marks if m.beyond and not wide and not any(covers(s, m.steps) for s in steps)), None
    )
    return Plan(steps, refused)


def marked_steps(schema: Schema, paths: Paths = "reference") -> list[Position]:
    """The marked positions of ``schema`` that ``paths`` covers, outermost only."""
    return plan(schema, paths).steps


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


def protected_with(data: Mapping[str, Any], steps: list[Position], cipher: Cipher) -> Any:
    """``data`` with the values at ``steps`` protected (a copy; the runtime caches ``steps``)."""
    op = _encrypter(cipher)
    for path in steps:
        data = rewrite(data, path, op, copy=True)
    return data


def unprotected_with(data: Mapping[str, Any], steps: list[Position], cipher: Cipher) -> Any:
    """``data`` with the values at ``steps`` decrypted (a copy); raises :class:`UndecryptableError`."""
    op = _decrypter(cipher)
    for path in reversed(steps):
        data = rewrite(data, path, op, copy=True)
    return data


def _protecting(schema: Schema, paths: Paths) -> list[Position]:
    found = plan(schema, paths)
    if found.refused is not None:
        raise found.refusal()
    return found.steps


def protected(
    data: Mapping[str, Any], schema: Schema, cipher: Cipher, *, paths: Paths = "reference"
) -> dict[str, Any]:
    """A copy of ``data`` whose marked values are ciphertext strings; ``data`` is not changed.

    Raises :class:`ProtectError` for a value that cannot be encoded, and (``paths="reference"``)
    for a mark the reference path grammar does not reach.
    """
    return dict(protected_with(data, _protecting(schema, paths), cipher))


def unprotected(
    data: Mapping[str, Any], schema: Schema, cipher: Cipher, *, paths: Paths = "reference"
) -> dict[str, Any]:
    """A copy of ``data`` whose marked ciphertext strings are decrypted; ``data`` is not changed."""
    return dict(unprotected_with(data, marked_steps(schema, paths), cipher))


def protect(
    data: MutableMapping[str, Any], schema: Schema, cipher: Cipher, *, paths: Paths = "reference"
) -> None:
    """Encrypt, in place, every value of ``data`` that ``schema`` marks (the package's contract).

    If the cipher or the encoding fails part-way, ``data`` may be partly protected: do not
    publish it (use :func:`protected` to keep the original intact). A refused mark (see
    :func:`protected`) raises before anything changes.
    """
    op = _encrypter(cipher)
    for path in _protecting(schema, paths):
        rewrite(data, path, op, copy=False)


def unprotect(
    data: MutableMapping[str, Any], schema: Schema, cipher: Cipher, *, paths: Paths = "reference"
) -> None:
    """Decrypt, in place, every marked ciphertext string in ``data``; raises :class:`UndecryptableError`."""
    op = _decrypter(cipher)
    for path in reversed(marked_steps(schema, paths)):
        rewrite(data, path, op, copy=False)
