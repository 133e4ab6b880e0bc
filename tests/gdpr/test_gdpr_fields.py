"""protect / unprotect on the fields a schema marks: what changes, what stays, what fails."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from typing import Any

import pytest

from babelq.gdpr import ProtectError, UndecryptableError, protect, protected, unprotect, unprotected

from .support import DATA, SCHEMA, cipher_for, key_b64


@pytest.fixture
def cipher():  # type: ignore[no-untyped-def]
    return cipher_for(("k1", key_b64()))


def test_marked_values_become_ciphertext_strings_and_nothing_else_changes(cipher) -> None:  # type: ignore[no-untyped-def]
    original = copy.deepcopy(DATA)
    sealed = protected(DATA, SCHEMA, cipher)
    assert original == DATA  # the argument is not touched
    for value in (sealed["email"], sealed["profile"]["full_name"], sealed["card"],
                  sealed["addresses"][0]["line"], sealed["addresses"][1]["line"]):  # fmt: skip
        assert isinstance(value, str) and value not in json.dumps(DATA)
    assert sealed["customer_id"] == 1042 and sealed["profile"]["tier"] == "gold"
    assert [a["city"] for a in sealed["addresses"]] == ["Ghent", "Lyon"]
    assert sealed.keys() == DATA.keys()
    assert unprotected(sealed, SCHEMA, cipher) == DATA


def test_in_place_versions_follow_the_package_contract(cipher) -> None:  # type: ignore[no-untyped-def]
    data = copy.deepcopy(DATA)
    profile = data["profile"]
    assert protect(data, SCHEMA, cipher) is None
    assert isinstance(profile["full_name"], str) and profile["full_name"] != DATA["profile"]["full_name"]
    unprotect(data, SCHEMA, cipher)
    assert data == DATA and data["profile"] is profile


def test_absent_paths_and_unmarked_schemas_are_no_ops(cipher) -> None:  # type: ignore[no-untyped-def]
    assert protected({"customer_id": 1}, SCHEMA, cipher) == {"customer_id": 1}
    assert protected({"profile": "not an object", "addresses": {"line": "x"}}, SCHEMA, cipher) == {
        "profile": "not an object", "addresses": {"line": "x"}}  # fmt: skip
    assert protected(DATA, None, cipher) == DATA
    assert protected(DATA, {"type": "object"}, cipher) == DATA


def test_unprotect_leaves_non_string_marked_values_alone(cipher) -> None:  # type: ignore[no-untyped-def]
    assert unprotected({"card": {"last4": "1"}}, SCHEMA, cipher) == {"card": {"last4": "1"}}


def test_extended_wildcards_nested_arrays_and_marks_inside_marks(cipher) -> None:  # type: ignore[no-untyped-def]
    schema = {
        "properties": {
            "labels": {"properties": {"vip": {"x-gdpr-sensitive": True}},
                       "additionalProperties": {"x-gdpr-sensitive": True}},
            "grid": {"items": {"items": {"x-gdpr-sensitive": True}}},
            "who": {"x-gdpr-sensitive": True, "properties": {"name": {"x-gdpr-sensitive": True}}},
        }
    }  # fmt: skip
    data = {"labels": {"vip": "yes", "a": 1}, "grid": [[1, "x"], []], "who": {"name": "Bob"}}
    sealed = protected(data, schema, cipher, paths="extended")
    assert all(isinstance(v, str) for v in sealed["labels"].values())
    assert all(isinstance(v, str) for row in sealed["grid"] for v in row)
    assert isinstance(sealed["who"], str)  # one ciphertext, the inner mark is inside it
    assert unprotected(sealed, schema, cipher, paths="extended") == data


def test_a_value_that_is_not_json_refuses_to_be_protected(cipher) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ProtectError, match=r"^data\.email: cannot be protected"):
        protected({"email": float("nan")}, SCHEMA, cipher)


@pytest.mark.parametrize(
    ("mangle", "problem"),
    [
        (lambda s: s[:-4] + ("AAAA" if s[-4:] != "AAAA" else "BBBB"), "any known key"),
        (lambda s: "not base64 at all!", "not base64"),
        (lambda s: "QUJD", "too short"),
    ],
)
def test_tampered_or_foreign_values_raise_naming_the_field(cipher, mangle: Any, problem: str) -> None:  # type: ignore[no-untyped-def]
    sealed = protected(DATA, SCHEMA, cipher)
    sealed["addresses"][1]["line"] = mangle(sealed["addresses"][1]["line"])
    with pytest.raises(UndecryptableError, match=rf"^data\.addresses\[1\]\.line: .*{problem}") as info:
        unprotected(sealed, SCHEMA, cipher)
    assert "Hiddenlane" not in str(info.value)


def test_a_wrong_key_fails_and_names_the_key_ids_tried() -> None:
    sealed = protected(DATA, SCHEMA, cipher_for(("old", key_b64())))
    with pytest.raises(UndecryptableError, match=r"^data\.\w+.*any known key \(tried 'k2', 'k3'\)$"):
        unprotected(sealed, SCHEMA, cipher_for(("k2", key_b64()), ("k3", key_b64())))


def test_rotation_encrypts_with_the_current_key_and_decrypts_with_any() -> None:
    old, new = key_b64(), key_b64()
    before = protected(DATA, SCHEMA, cipher_for(("2026-05", old)))
    rotated = cipher_for(("2026-11", new), ("2026-05", old))
    after = protected(DATA, SCHEMA, rotated)
    assert unprotected(before, SCHEMA, rotated) == DATA
    assert unprotected(after, SCHEMA, rotated) == DATA
    with pytest.raises(UndecryptableError):  # written under the new key, unreadable with the old alone
        unprotected(after, SCHEMA, cipher_for(("2026-05", old)))


def test_decrypted_bytes_that_are_not_json_are_undecryptable() -> None:
    class Echo:
        def encrypt(self, plaintext: bytes) -> str:
            return plaintext.decode()

        def decrypt(self, ciphertext: str) -> bytes:
            return ciphertext.encode()

    with pytest.raises(UndecryptableError, match=r"^data\.email: decrypted to bytes that are not JSON"):
        unprotected({"email": "{oops"}, SCHEMA, Echo())


def test_importing_gdpr_does_not_import_cryptography() -> None:
    code = "import sys, babelq.gdpr, babelq.gdpr.middleware; print('cryptography' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
