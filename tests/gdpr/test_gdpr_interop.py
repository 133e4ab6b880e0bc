"""Differential: babelq's cipher and the babelqueue package's reference AES-GCM cipher, same key.

Both directions, at the level of the values (babelq.gdpr <-> babelqueue.gdpr with each side's
own protect/unprotect and sensitive-path reader) and at the level of whole envelope bytes.
"""

from __future__ import annotations

import base64
import copy

import pytest
from babelqueue import gdpr as bq_gdpr
from babelqueue.codec import EnvelopeCodec
from babelqueue.exceptions import DecryptError

from babelq.envelope import decode, make
from babelq.gdpr import UndecryptableError, protected, unprotected

from .support import DATA, SCHEMA, URN, ReferenceAesGcm, cipher_for, key_b64

# babelqueue's unprotect applies a mark inside an already-marked container a second time
# (see test_gdpr_fields: babelq does not), so the shared schema marks no nested pairs.


def test_babelq_protects_babelqueue_reference_cipher_decrypts() -> None:
    key = key_b64()
    sealed = protected(DATA, SCHEMA, cipher_for(("k1", key)))
    theirs = copy.deepcopy(sealed)
    bq_gdpr.unprotect(theirs, SCHEMA, ReferenceAesGcm(base64.b64decode(key)))
    assert theirs == DATA


def test_babelqueue_protects_babelq_decrypts_even_after_rotation() -> None:
    old = key_b64()
    theirs = copy.deepcopy(DATA)
    bq_gdpr.protect(theirs, SCHEMA, ReferenceAesGcm(base64.b64decode(old)))
    rotated = cipher_for(("new", key_b64()), ("old", old))
    assert unprotected(theirs, SCHEMA, rotated) == DATA


def test_the_wire_format_is_the_reference_layout() -> None:
    key = key_b64()
    value = protected({"email": "a@b.c"}, SCHEMA, cipher_for(("k1", key)))["email"]
    raw = base64.b64decode(value, validate=True)
    assert len(raw) == 12 + len(b'"a@b.c"') + 16  # nonce | ciphertext | tag, nothing else
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    assert AESGCM(base64.b64decode(key)).decrypt(raw[:12], raw[12:], None) == b'"a@b.c"'


def test_whole_envelopes_cross_both_ways() -> None:
    key = key_b64()
    ours = cipher_for(("k1", key))
    ref = ReferenceAesGcm(base64.b64decode(key))
    body = make(URN, protected(DATA, SCHEMA, ours), queue="customers").encode()
    assert b"Secretstreet" not in body
    env = EnvelopeCodec.decode(body)
    bq_gdpr.unprotect(env["data"], SCHEMA, ref)
    assert env["data"] == DATA

    data = copy.deepcopy(DATA)
    bq_gdpr.protect(data, SCHEMA, ref)
    their_body = EnvelopeCodec.encode(EnvelopeCodec.make(URN, data))
    assert "Secretstreet" not in their_body
    assert unprotected(decode(their_body.encode()).data, SCHEMA, ours) == DATA


def test_a_value_under_an_unknown_key_fails_on_both_sides() -> None:
    sealed = protected(DATA, SCHEMA, cipher_for(("k1", key_b64())))
    with pytest.raises(DecryptError):
        bq_gdpr.unprotect(copy.deepcopy(sealed), SCHEMA, ReferenceAesGcm(base64.b64decode(key_b64())))
    with pytest.raises(UndecryptableError):
        unprotected(sealed, SCHEMA, cipher_for(("k2", key_b64())))


def test_pinned_difference_nested_marks() -> None:
    """A mark inside a marked object: babelq applies it once; the package's unprotect trips on it."""
    schema = {
        "properties": {"who": {"x-gdpr-sensitive": True, "properties": {"name": {"x-gdpr-sensitive": True}}}}
    }
    data = {"who": {"name": "Bob", "age": 3}}
    key = key_b64()
    ours, ref = cipher_for(("k1", key)), ReferenceAesGcm(base64.b64decode(key))
    sealed = protected(data, schema, ours)
    assert isinstance(sealed["who"], str)
    theirs = copy.deepcopy(data)
    bq_gdpr.protect(theirs, schema, ref)
    assert isinstance(theirs["who"], str)  # the package also seals the outer value once
    assert unprotected(theirs, schema, ours) == data  # and babelq opens it
    with pytest.raises(DecryptError):  # but the package cannot open its own (nor babelq's)
        bq_gdpr.unprotect(copy.deepcopy(sealed), schema, ref)
