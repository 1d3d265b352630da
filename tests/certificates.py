"""Throwaway TLS material for the tests, made with ``cryptography``: a CA, a server certificate
for the loopback address and ``localhost`` signed by it, a client certificate signed by it, and
a client certificate of another CA (which a server trusting the first must refuse). Written as
PEM files into a directory of the test's; nothing is reused across runs.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_FOR = datetime.timedelta(days=1)
_Key = ec.EllipticCurvePrivateKey


@dataclass(frozen=True)
class Pem:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Certificates:
    ca: Path  # the CA's certificate
    server: Pem  # for 127.0.0.1 and localhost, signed by ca
    client: Pem  # signed by ca
    stranger: Pem  # a client certificate signed by another CA
    other_ca: Path  # the stranger's CA (also: a CA the server's certificate is not signed by)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key() -> _Key:
    return ec.generate_private_key(ec.SECP256R1())


def _certificate(
    subject: str,
    key: _Key,
    issuer: tuple[x509.Name, _Key] | None,
    extensions: Sequence[x509.ExtensionType],
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    issuer_name, issuer_key = issuer or (_name(subject), key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALID_FOR)
    )
    for extension in extensions:
        builder = builder.add_extension(extension, critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(directory: Path, name: str, cert: x509.Certificate, key: _Key | None) -> Pem:
    cert_path = directory / f"{name}.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path = directory / f"{name}-key.pem"
    if key is not None:
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return Pem(cert_path, key_path)


def _ca(directory: Path, name: str) -> tuple[Path, x509.Name, _Key]:
    key = _key()
    cert = _certificate(name, key, None, [x509.BasicConstraints(ca=True, path_length=None)])
    return _write(directory, name, cert, None).cert, _name(name), key


def make_certificates(directory: Path) -> Certificates:
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_name, ca_key = _ca(directory, "ca")
    other_ca, other_name, other_key = _ca(directory, "other-ca")
    server_key = _key()
    server = _certificate(
        "127.0.0.1",
        server_key,
        (ca_name, ca_key),
        [
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
        ],
    )
    client_usage = [x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH])]
    client_key, stranger_key = _key(), _key()
    client = _certificate("app", client_key, (ca_name, ca_key), client_usage)
    stranger = _certificate("stranger", stranger_key, (other_name, other_key), client_usage)
    return Certificates(
        ca=ca,
        server=_write(directory, "server", server, server_key),
        client=_write(directory, "client", client, client_key),
        stranger=_write(directory, "stranger", stranger, stranger_key),
        other_ca=other_ca,
    )
