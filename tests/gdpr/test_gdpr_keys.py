"""Key configuration: the two documented formats, rotation order, one-line errors without key bytes."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from babelq.errors import ConfigurationError
from babelq.gdpr import ENV_KEY_FILE, ENV_KEYS, AesGcmCipher, Keyring, generate_key, load_cipher

from .support import key_b64


def test_env_form_first_key_is_current() -> None:
    k1, k2 = key_b64(), key_b64()
    ring = Keyring.from_env({ENV_KEYS: f" new:{k1} , old:{k2} "})
    assert ring.current == "new" and ring.ids == ("new", "old")
    assert ring.key("old") == base64.b64decode(k2)
    assert k1 not in repr(ring) and k1 not in repr(AesGcmCipher(ring))


def test_url_safe_and_unpadded_keys_are_accepted() -> None:
    raw = bytes(range(256))[-32:]
    text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    assert Keyring.parse(f"k:{text}").key("k") == raw


def test_key_file_form(tmp_path: Path) -> None:
    k1, k2 = generate_key(), generate_key()
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"current": "2026-11", "keys": {"2026-05": k1, "2026-11": k2}}))
    ring = Keyring.from_env({ENV_KEY_FILE: str(path)})
    assert ring.current == "2026-11" and ring.ids == ("2026-11", "2026-05")


def test_load_cipher_reads_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_KEYS, "k1:" + generate_key())
    monkeypatch.delenv(ENV_KEY_FILE, raising=False)
    cipher = load_cipher()
    assert cipher.decrypt(cipher.encrypt(b'"x"')) == b'"x"'


SHORT = base64.b64encode(b"0123456789abcdef").decode()  # 16 bytes: AES-128, refused


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({}, r"^no GDPR keys configured: set BABELQ_GDPR_KEYS=id:base64key or BABELQ_GDPR_KEY_FILE="),
        (
            {ENV_KEYS: "k1:" + "A" * 43 + "=", ENV_KEY_FILE: "/x"},
            r"^set BABELQ_GDPR_KEYS or BABELQ_GDPR_KEY_FILE, not both$",
        ),
        ({ENV_KEYS: "justakey"}, r"^BABELQ_GDPR_KEYS: entry 1 must be id:base64key$"),
        (
            {ENV_KEYS: f"k1:{SHORT}"},
            r"^BABELQ_GDPR_KEYS: key 'k1' must be 32 bytes \(AES-256\) in base64, got 16 bytes$",
        ),
        ({ENV_KEYS: "k1:%%%notbase64%%%"}, r"^BABELQ_GDPR_KEYS: key 'k1' is not base64$"),
        (
            {ENV_KEYS: "bad id:" + "A" * 43 + "="},
            r"^BABELQ_GDPR_KEYS: key id 'bad id' must be 1-64 characters",
        ),
        ({ENV_KEYS: ",".join(["k:" + "A" * 43 + "="] * 2)}, r"^BABELQ_GDPR_KEYS: key id 'k' appears twice$"),
        ({ENV_KEYS: " , "}, r"^BABELQ_GDPR_KEYS: no keys"),
        ({ENV_KEY_FILE: "/nonexistent/keys.json"}, r"^key file /nonexistent/keys.json: cannot read it \("),
    ],
)
def test_bad_configuration_is_one_line_naming_the_source(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as info:
        Keyring.from_env(environ)
    text = str(info.value)
    assert "\n" not in text and SHORT not in text and "notbase64" not in text


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("not json", r"not a JSON document$"),
        ({"keys": {}}, r'must be \{"current": id'),
        ({"current": "x", "keys": {"k": "A" * 43 + "="}}, r'"current" must name one of the keys \(k\)$'),
        ({"current": "k", "keys": {"k": SHORT}}, r"key 'k' must be 32 bytes"),
        ({"current": "k", "keys": {"k": 12}}, r"key 'k' must be a base64 string$"),
    ],
)
def test_bad_key_files(tmp_path: Path, doc: object, message: str) -> None:
    path = tmp_path / "keys.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    with pytest.raises(ConfigurationError, match=rf"^key file {path}: .*{message}") as info:
        Keyring.from_file(path)
    assert SHORT not in str(info.value)
