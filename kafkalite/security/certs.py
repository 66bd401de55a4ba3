"""Certificates for a local secure cluster and the tests: a CA, and server and client
certificates it signs, written as PEM files.

:func:`make_ca` makes a self-signed CA; :func:`make_server_certificate` a broker certificate
(subject alternative names ``localhost`` and ``127.0.0.1`` unless told otherwise) and
:func:`make_client_certificate` a client certificate whose subject is ``CN=<user>`` (the
principal a broker with ``ssl.client.auth`` gives it is then ``User:CN=<user>``). Each writes
``<name>.key.pem`` (the private key, mode 0600, encrypted when a password is given),
``<name>.cert.pem`` (the certificate) and ``<name>.pem`` (key + certificate chain: what
``ssl.keystore.location`` reads).

Concurrency: pure functions writing the files they are told to; EC P-256 keys, so fast enough
for tests to make certificates per module.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: How long the certificates made here stay valid.
VALIDITY = datetime.timedelta(days=825)
#: The names a server certificate is valid for unless told otherwise.
DEFAULT_SERVER_NAMES = ("localhost", "127.0.0.1")


@dataclass(frozen=True)
class CertificateFiles:
    """The PEM files of one certificate: the key, the certificate, and both in one file."""

    key_path: Path
    certificate_path: Path
    keystore_path: Path


@dataclass(frozen=True)
class CertificateAuthority:
    """A CA that signs certificates: its key and certificate in memory, and its PEM file."""

    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate
    certificate_path: Path


def make_ca(directory: str | Path, common_name: str = "kafkalite-ca", name: str = "ca") -> CertificateAuthority:
    """A self-signed CA, written as ``<directory>/<name>.cert.pem`` (and its key as ``<name>.key.pem``)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
                   .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                   .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                                key_encipherment=False, data_encipherment=False,
                                                key_agreement=False, key_cert_sign=True, crl_sign=True,
                                                encipher_only=False, decipher_only=False), critical=True)
                   .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                   .sign(key, hashes.SHA256()))
    certificate_path = directory / f"{name}.cert.pem"
    certificate_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    _write_private(directory / f"{name}.key.pem", _key_bytes(key, None))
    return CertificateAuthority(key, certificate, certificate_path)


def make_server_certificate(ca: CertificateAuthority, directory: str | Path, name: str = "server",
                            hostnames: Sequence[str] = DEFAULT_SERVER_NAMES, password: str | None = None,
                            common_name: str | None = None) -> CertificateFiles:
    """A server certificate signed by ``ca``, valid for ``hostnames`` (DNS names or IP addresses)."""
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name or (hostnames[0] if hostnames else name))])
    alternative_names: list[x509.GeneralName] = []
    for hostname in hostnames:
        try:
            alternative_names.append(x509.IPAddress(ipaddress.ip_address(hostname)))
        except ValueError:
            alternative_names.append(x509.DNSName(hostname))
    return _issue(ca, directory, name, subject, alternative_names,
                  [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH], password)


def make_client_certificate(ca: CertificateAuthority, directory: str | Path, user: str, name: str | None = None,
                            password: str | None = None, organization: str | None = None) -> CertificateFiles:
    """A client certificate signed by ``ca`` with subject ``CN=<user>`` (``CN=<user>,O=<organization>``
    in RFC 2253 order when an organization is given)."""
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization)] if organization else []
    subject = x509.Name([*attributes, x509.NameAttribute(NameOID.COMMON_NAME, user)])
    return _issue(ca, directory, name or user, subject, [], [ExtendedKeyUsageOID.CLIENT_AUTH], password)


def _issue(ca: CertificateAuthority, directory: str | Path, name: str, subject: x509.Name,
           alternative_names: list[x509.GeneralName], usages: list[x509.ObjectIdentifier],
           password: str | None) -> CertificateFiles:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca.certificate.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
                              critical=False))
    if alternative_names:
        builder = builder.add_extension(x509.SubjectAlternativeName(alternative_names), critical=False)
    certificate = builder.sign(ca.key, hashes.SHA256())
    key_pem = _key_bytes(key, password)
    chain_pem = certificate.public_bytes(serialization.Encoding.PEM) + ca.certificate.public_bytes(
        serialization.Encoding.PEM)
    files = CertificateFiles(directory / f"{name}.key.pem", directory / f"{name}.cert.pem", directory / f"{name}.pem")
    _write_private(files.key_path, key_pem)
    files.certificate_path.write_bytes(chain_pem)
    _write_private(files.keystore_path, key_pem + chain_pem)
    return files


def _key_bytes(key: ec.EllipticCurvePrivateKey, password: str | None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode()) if password else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


def _write_private(path: Path, data: bytes) -> None:
    if path.exists():
        path.unlink()
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)
