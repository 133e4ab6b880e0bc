"""``amqps://`` with a private CA and a client certificate, over a real TLS handshake.

The machine's RabbitMQ listens in plain TCP and is not reconfigured: a TLS-terminating proxy
in this process (Python's ``ssl`` server, which *requires* a client certificate signed by the
test CA) forwards the decrypted bytes to 127.0.0.1:5672. The CA, the server certificate (for
the name ``broker.test`` only, so that ``server_hostname`` matters) and the client
certificate are made afresh for the module with ``cryptography``.
"""

from __future__ import annotations

import datetime as dt
import select
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from babelq.errors import BabelqError, ConfigurationError
from babelq.transports.amqp import AMQPTransport
from conftest import require_service

x509 = pytest.importorskip("cryptography.x509")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # noqa: E402

SECRET = "s3cr3t-Tls"
BROKER = ("127.0.0.1", 5672)


def _name(common_name: str) -> Any:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )


def _certificate(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[str, ec.EllipticCurvePrivateKey] | None,
    *,
    usage: Any = None,
    dns: str | None = None,
) -> Any:
    now = dt.datetime.now(dt.UTC)
    issuer_name, issuer_key = issuer if issuer is not None else (subject, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if issuer is None:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )  # fmt: skip
    else:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False
        )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if dns is not None:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(dns)]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """PEM files: ``ca``, ``other_ca``, ``server``/``server_key``, ``client``/``client_key``."""
    folder = tmp_path_factory.mktemp("pki")
    paths = {
        name: folder / f"{name}.pem"
        for name in ("ca", "other_ca", "server", "server_key", "client", "client_key")
    }
    ca_key, other_key, server_key, client_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(4))
    ca = ("babelq test CA", ca_key)
    certificates = {
        "ca": _certificate("babelq test CA", ca_key, None),
        "other_ca": _certificate("some other CA", other_key, None),
        "server": _certificate(
            "broker.test", server_key, ca, usage=ExtendedKeyUsageOID.SERVER_AUTH, dns="broker.test"
        ),
        "client": _certificate("babelq test client", client_key, ca, usage=ExtendedKeyUsageOID.CLIENT_AUTH),
    }
    for name, certificate in certificates.items():
        paths[name].write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    _write_key(paths["server_key"], server_key)
    _write_key(paths["client_key"], client_key)
    return paths


def _close_gracefully(raw: socket.socket) -> None:
    """Close after a refused handshake the way a TLS server does: half-close, then read what the
    client already sent. Closing with unread bytes makes the kernel send a reset, which can
    discard the alert ("certificate required") before the client has read it."""
    try:
        raw.shutdown(socket.SHUT_WR)
        raw.settimeout(1.0)
        while raw.recv(1 << 16):
            pass
    except OSError:
        pass
    finally:
        raw.close()


class TLSProxy:
    """Terminates TLS (client certificate required, signed by the test CA) and forwards to RabbitMQ."""

    def __init__(self, pki: dict[str, Path]) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(pki["server"], pki["server_key"])
        self.context.load_verify_locations(pki["ca"])
        self.context.verify_mode = ssl.CERT_REQUIRED
        self.clients: list[str] = []  # common names of the client certificates that got through
        self.refused: list[str] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self._open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                raw, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        raw.settimeout(10)
        try:
            tls = self.context.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            self.refused.append(str(exc))
            _close_gracefully(raw)
            return
        subject: Any = (tls.getpeercert() or {}).get("subject", ())
        self.clients += [value for rdn in subject for key, value in rdn if key == "commonName"]
        upstream = socket.create_connection(BROKER)
        tls.settimeout(None)
        self._open += [tls, upstream]
        try:
            while True:
                ready = [tls] if tls.pending() else select.select([tls, upstream], [], [], 1.0)[0]
                for source in ready:
                    data = source.recv(1 << 16)
                    if not data:
                        return
                    (upstream if source is tls else tls).sendall(data)
        except OSError:
            return
        finally:
            tls.close()
            upstream.close()

    def url(self, query: str, password: str = "guest") -> str:
        return f"amqps://guest:{password}@127.0.0.1:{self.port}/%2F?{query}"

    def close(self) -> None:
        self.listener.close()
        for sock in self._open:
            sock.close()


@pytest.fixture
def proxy(pki: dict[str, Path]) -> Iterator[TLSProxy]:
    require_service("rabbitmq")
    made = TLSProxy(pki)
    yield made
    made.close()


def _tls_query(pki: dict[str, Path], *, ca: str = "ca", client: bool = True, hostname: bool = True) -> str:
    parts = [f"cafile={pki[ca]}"]
    if client:
        parts += [f"certfile={pki['client']}", f"keyfile={pki['client_key']}"]
    if hostname:
        parts.append("server_hostname=broker.test")
    return "&".join(parts)


@pytest.mark.live
def test_publish_and_consume_over_tls_with_a_client_certificate(
    proxy: TLSProxy, pki: dict[str, Path], unique_queue: str
) -> None:
    transport = AMQPTransport(proxy.url(_tls_query(pki)))
    try:
        transport.publish(unique_queue, b'{"tls": 1}')
        transport.publish(unique_queue, b'{"tls": 2}')
        got = transport.reserve(unique_queue, max_messages=2, timeout=3)
        got += transport.reserve(unique_queue, max_messages=2 - len(got), timeout=3) if len(got) < 2 else []
        transport.ack_many(got)
        assert sorted(d.body for d in got) == [b'{"tls": 1}', b'{"tls": 2}']
        assert transport.size(unique_queue) == 0
    finally:
        transport.delete_queues(unique_queue)
        transport.close()
    assert proxy.clients == ["babelq test client"]  # the broker side saw our certificate


@pytest.mark.live
@pytest.mark.parametrize(
    ("problem", "expected"),
    [("wrong-ca", "certificate"), ("wrong-hostname", "mismatch")],
)
def test_a_certificate_that_does_not_verify_is_one_clear_line(
    proxy: TLSProxy, pki: dict[str, Path], problem: str, expected: str
) -> None:
    query = _tls_query(pki, ca="other_ca") if problem == "wrong-ca" else _tls_query(pki, hostname=False)
    transport = AMQPTransport(proxy.url(query + "&connection_attempts=2&retry_delay=5", password=SECRET))
    with pytest.raises(ConfigurationError) as caught:  # not retried: the same files fail the same way
        transport.publish("t-tls-never", b"{}")
    text = str(caught.value)
    print(text)
    assert "\n" not in text
    assert SECRET not in text
    assert "TLS" in text
    assert expected in text
    assert f"amqps://guest:***@127.0.0.1:{proxy.port}/" in text
    transport.close()


@pytest.mark.live
def test_without_a_client_certificate_the_refusal_is_one_clear_line(
    proxy: TLSProxy, pki: dict[str, Path]
) -> None:
    transport = AMQPTransport(proxy.url(_tls_query(pki, client=False), password=SECRET))
    with pytest.raises(BabelqError) as caught:
        transport.publish("t-tls-never", b"{}")
    text = str(caught.value)
    print(text)
    assert "\n" not in text
    assert SECRET not in text
    assert "certificate required" in text
    transport.close()


def test_a_missing_certificate_file_is_a_configuration_error_naming_it(pki: dict[str, Path]) -> None:
    transport = AMQPTransport(f"amqps://guest:{SECRET}@127.0.0.1:1/?cafile={pki['ca']}.missing")
    with pytest.raises(ConfigurationError, match="cafile") as caught:
        transport.publish("t-tls-never", b"{}")
    assert SECRET not in str(caught.value)
    transport.close()
