"""MinIO secured as production runs it: TLS only, and a writer user whose policy allows only the sink's actions.

``eosink services up minio-secure`` starts a second MinIO (the same build) beside the plain one:

* its certificate, from a CA made at start (:mod:`eosink.services._tls`), names ``localhost`` and
  ``127.0.0.1``; the S3 API answers ``https://`` only;
* a ``writer`` user (a real MinIO user, made through the admin API) with no policy until a test
  attaches exactly :func:`eosink.connectors.s3.grants.writer_policy` (or less) to it. The root
  credentials are the administrator's, for setting up and reading back, never the writer's.
"""

from __future__ import annotations

import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from eosink.services._layout import provision_dir
from eosink.services._minio_admin import MinioAdmin
from eosink.services._tls import make_ca
from eosink.services.minio import MinioService, S3Endpoint

__all__ = ["WRITER", "SecureMinioService", "SecureS3Endpoint"]

WRITER = "eosink-writer"


@dataclass(frozen=True)
class SecureS3Endpoint(S3Endpoint):
    """An ``https://`` MinIO: root credentials (administration), the CA, and the writer user's keys."""

    ca: str = ""
    writer: str = WRITER
    writer_secret: str = field(default="", repr=False)

    def admin(self) -> MinioAdmin:
        return MinioAdmin(self.endpoint_url, self.access_key, self.secret_key, self.region, self.ca)

    def env(self) -> dict[str, str]:
        return {"EOSINK_SECURE_S3_ENDPOINT": self.endpoint_url, "EOSINK_SECURE_S3_CA": self.ca}


class SecureMinioService(MinioService):
    """The same MinIO, TLS-only, with a writer user that holds no policy yet."""

    name = "minio-secure"
    endpoint_type = SecureS3Endpoint
    override_vars: ClassVar[tuple[str, ...]] = ()

    def __init__(self) -> None:
        self._writer_secret = secrets.token_urlsafe(24)

    @property
    def home(self) -> Path:
        return provision_dir("minio")  # the plain service's build: one binary for both

    def external(self) -> SecureS3Endpoint | None:
        return None  # the secured tests need the harness's own server: they create users and policies

    def certificates(self, certs: Path) -> str:
        files = make_ca(self.run / "tls")
        shutil.copyfile(files.cert, certs / "public.crt")
        shutil.copyfile(files.key, certs / "private.key")
        (certs / "private.key").chmod(0o600)
        return "https"

    def make_endpoint(self, url: str, access_key: str, secret_key: str) -> S3Endpoint:
        return SecureS3Endpoint(
            url,
            access_key,
            secret_key,
            "us-east-1",
            ca=str(self.run / "tls" / "ca.pem"),
            writer_secret=self._writer_secret,
        )

    def started(self, endpoint: S3Endpoint) -> None:
        assert isinstance(endpoint, SecureS3Endpoint)
        endpoint.admin().add_user(endpoint.writer, endpoint.writer_secret)
