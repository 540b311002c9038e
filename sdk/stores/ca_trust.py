"""Trusting a private CA in libraries that take no CA option, only ``SSL_CERT_FILE``.

delta-rs (its object store, on rustls with the platform's roots) reads the CA certificates to trust
from ``SSL_CERT_FILE`` when that is set, and otherwise from the system. It has no storage option for
a CA file. :func:`trust_ca` therefore points ``SSL_CERT_FILE`` at a bundle of what the process
trusted until then (the file ``SSL_CERT_FILE`` named, else the system's CA file) plus the given CA,
so that nothing trusted before stops being trusted. The bundle lives in a private temporary
directory; the variable changes for the whole process, once per CA file.
"""

from __future__ import annotations

import hashlib
import os
import ssl
import tempfile
import threading
from pathlib import Path

from eosink.errors import ConfigurationError

__all__ = ["trust_ca"]

_LOCK = threading.Lock()
_TRUSTED: set[str] = set()


def trust_ca(ca_bundle: str) -> None:
    """Make this process's ``SSL_CERT_FILE`` trust the CA certificates in ``ca_bundle`` as well."""
    path = os.path.abspath(ca_bundle)
    with _LOCK:
        if path in _TRUSTED:
            return
        try:
            added = Path(path).read_bytes()
        except OSError as exc:
            raise ConfigurationError(
                f"The ca_bundle {path!r} cannot be read on this host ({exc.strerror or type(exc).__name__}).",
                "Put the CA's PEM file at the same path on the driver and on every executor host.",
            ) from None
        if b"-----BEGIN CERTIFICATE-----" not in added:
            raise ConfigurationError(
                f"The ca_bundle {path!r} holds no PEM certificate.",
                "Point ca_bundle at the CA certificate(s) in PEM form ('-----BEGIN CERTIFICATE-----').",
            )
        before = _trusted_until_now()
        bundle = before + b"\n" + added
        digest = hashlib.sha256(bundle).hexdigest()[:16]
        folder = Path(tempfile.gettempdir()) / f"eosink-ca-{os.getuid()}"
        folder.mkdir(mode=0o700, exist_ok=True)
        target = folder / f"bundle-{digest}.pem"
        if not target.exists():
            staging = folder / f".{digest}.{os.getpid()}.{threading.get_ident()}"
            staging.write_bytes(bundle)
            os.replace(staging, target)
        os.environ["SSL_CERT_FILE"] = str(target)
        _TRUSTED.add(path)


def _trusted_until_now() -> bytes:
    """The PEM certificates the process trusts today: ``SSL_CERT_FILE``'s file, else the system's CA file."""
    candidates = [os.environ.get("SSL_CERT_FILE", "")]
    paths = ssl.get_default_verify_paths()
    candidates += [paths.cafile or "", paths.openssl_cafile or "", "/etc/ssl/certs/ca-certificates.crt"]
    for candidate in candidates:
        if candidate and os.path.isfile(candidate):
            return Path(candidate).read_bytes()
    return b""
