"""A certificate authority made at run time for the secured servers: no network, no ``openssl`` binary.

:func:`make_ca` writes a CA and a server certificate for ``localhost`` and ``127.0.0.1`` into a
directory, as PEM files for the servers and Python clients and as a Java truststore for the JVMs
(Spark's ``s3a://`` client, Kafka's tools). The private keys are files of mode 0600 readable by
the server's user only when :meth:`TlsFiles.hand_to` gives them away. Tests make a second CA to
stand for an untrusted issuer, and :meth:`TestCA.issue` a certificate for another host name.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["LOCAL_HOSTS", "TestCA", "TlsFiles", "make_ca"]

#: The names every secured server's certificate carries: what the harness's clients connect to.
LOCAL_HOSTS: tuple[str, ...] = ("localhost", "127.0.0.1")
_VALID = datetime.timedelta(days=30)


@dataclass(frozen=True)
class TlsFiles:
    """Where one server's TLS material is: what it presents, and what its clients trust."""

    ca: Path
    """The CA certificate (PEM): a client's ``sslrootcert`` / ``ssl_cafile`` / ``verify``."""
    cert: Path
    """The server certificate (PEM)."""
    key: Path
    """The server's private key (PEM, PKCS#8, unencrypted, mode 0600)."""
    truststore: Path
    """The CA as a PKCS#12 Java truststore (``javax.net.ssl.trustStore``)."""
    truststore_password: str = field(repr=False)

    def hand_to(self, uid: int, gid: int) -> None:
        """Give the server's key and certificate to the user the server runs as (PostgreSQL checks the owner)."""
        for path in (self.cert, self.key):
            os.chown(path, uid, gid)


class TestCA:
    """A self-signed CA that issues server certificates (EC P-256, valid for 30 days)."""

    __test__ = False  # not a pytest class

    def __init__(self, name: str = "eosink test CA") -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.timezone.utc)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALID)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )

    def write_ca(self, path: Path) -> Path:
        """The CA certificate as PEM at ``path``."""
        _write(path, self.cert.public_bytes(serialization.Encoding.PEM), 0o644)
        return path

    def issue(self, directory: Path, stem: str, hosts: Sequence[str] = LOCAL_HOSTS) -> tuple[Path, Path]:
        """A certificate for ``hosts`` (DNS names, IP addresses): ``(stem.pem, stem.key)`` in ``directory``."""
        key = ec.generate_private_key(ec.SECP256R1())
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALID)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        directory.mkdir(parents=True, exist_ok=True)
        cert_path, key_path = directory / f"{stem}.pem", directory / f"{stem}.key"
        _write(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)
        pem_key = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        _write(key_path, pem_key, 0o600)
        return cert_path, key_path

    def write_truststore(self, path: Path, password: str) -> Path:
        """The CA as a PKCS#12 truststore a JVM reads (``-Djavax.net.ssl.trustStoreType=PKCS12``)."""
        entry = pkcs12.PKCS12Certificate(self.cert, b"eosink-test-ca")
        store = pkcs12.serialize_java_truststore([entry], serialization.BestAvailableEncryption(password.encode()))
        _write(path, store, 0o644)
        return path


def make_ca(directory: Path, hosts: Sequence[str] = LOCAL_HOSTS) -> TlsFiles:
    """A fresh CA and a server certificate for ``hosts`` in ``directory`` (``ca.pem``, ``server.pem``, ...)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = TestCA()
    cert, key = ca.issue(directory, "server", hosts)
    password = secrets.token_urlsafe(12)
    return TlsFiles(
        ca=ca.write_ca(directory / "ca.pem"),
        cert=cert,
        key=key,
        truststore=ca.write_truststore(directory / "truststore.p12", password),
        truststore_password=password,
    )


def _write(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.chmod(path, mode)
