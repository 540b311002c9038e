"""S3-compatible stores as every file sink reaches them: the connection, its boto3 clients, s3a's settings.

:class:`S3Connection` is how to reach one S3 API (endpoint, region, addressing, credentials, timeouts):
the S3 sink's and the Delta sink's configurations hold one. The secret key and the session token travel
with it (executors need them to sign requests) but never appear in ``repr``/``str``;
:meth:`S3Connection.scrub` removes them from any text that might echo them. Without explicit keys,
boto3's usual chain applies (environment, shared files, instance or container roles).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar
from urllib.parse import urlsplit

from eosink._secrets import scrub
from eosink.errors import ConfigurationError
from eosink.stores._s3_client import client, forget

__all__ = [
    "ENV_VARS",
    "MAX_PARTS",
    "MIN_PART_BYTES",
    "NOT_FOUND_SETTLE_S",
    "S3Connection",
    "asked_again",
    "client",
    "empty_prefix",
    "ensure_bucket",
    "forget",
    "incomplete_uploads",
    "open_uploads",
    "s3a_options",
    "show_url",
    "uploads_of_key",
]

MIN_PART_BYTES = 5 << 20
"""S3's smallest part (all but the last part of a multipart upload)."""
MAX_PARTS = 10_000
"""S3's most parts per upload."""
NOT_FOUND_SETTLE_S = 2.5
"""How long a 404 that would make work lost is asked again first: a MinIO node restarted a moment ago answers
404 for objects written while it was down until it has reached its peers' drives (up to 1.6 s seen)."""
_T = TypeVar("_T")


def asked_again(look: Callable[[], _T], settled: Callable[[_T], bool], settle_s: float = NOT_FOUND_SETTLE_S) -> _T:
    """``look()``'s answer, asked again every 0.25 s for ``settle_s`` while it is not ``settled`` (an object not
    found yet, where not finding it would make work lost)."""
    answer = look()
    deadline = time.monotonic() + settle_s
    while not settled(answer) and time.monotonic() < deadline:
        time.sleep(0.25)
        answer = look()
    return answer


ENV_VARS = ("EOSINK_S3_ENDPOINT", "EOSINK_S3_ACCESS_KEY", "EOSINK_S3_SECRET_KEY", "EOSINK_S3_REGION")
"""Where :meth:`S3Connection.from_env` looks first (the service harness's variables); boto3's chain after."""


@dataclass(frozen=True, repr=False)
class S3Connection:
    """How to reach one S3 API: endpoint, region, addressing, credentials, timeouts. Hashable: clients are
    cached per process and per connection.

    * ``endpoint_url``: None for AWS; ``http(s)://host:port`` for S3-compatible stores (MinIO, ...).
    * ``path_style``: path-style addressing (``host/bucket/key``); None: on for a custom endpoint, off for AWS.
    * ``access_key_id`` / ``secret_access_key`` / ``session_token``: explicit credentials, or None for
      boto3's chain (``profile`` picks a shared-config profile).
    * ``max_attempts``: botocore's attempts for reads and data uploads (commit requests are never retried
      by botocore: eosink resolves them itself).
    * ``ca_bundle``: the CA certificates (PEM) an ``https://`` endpoint's certificate is checked against
      (default: the system's, or ``AWS_CA_BUNDLE``); it must exist on every driver and executor host.
    """

    endpoint_url: str | None = None
    region: str | None = None
    path_style: bool | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    profile: str | None = None
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 60.0
    max_attempts: int = 3
    ca_bundle: str | None = None

    def __post_init__(self) -> None:
        if self.endpoint_url is not None:
            url = self.endpoint_url.strip().rstrip("/")
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc or parts.path or "@" in parts.netloc:
                raise ConfigurationError(
                    f"endpoint_url {show_url(url)!r} is not an http:// or https:// base URL.",
                    "Give the S3 API's base URL without a path or user info, e.g. http://127.0.0.1:9000 "
                    "(credentials go in access_key_id and secret_access_key).",
                )
            object.__setattr__(self, "endpoint_url", url)
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ConfigurationError(
                "Only one of access_key_id and secret_access_key is given.",
                "Give both, or neither to use boto3's credential chain (environment, profile, role).",
            )
        if self.session_token is not None and self.access_key_id is None:
            raise ConfigurationError("A session_token needs access_key_id and secret_access_key.", "Give all three.")
        for name in ("connect_timeout_s", "read_timeout_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value <= 0:
                raise ConfigurationError(f"{name} must be a positive number of seconds, not {value!r}.", "Use e.g. 10.")
        if not isinstance(self.max_attempts, int) or not 1 <= self.max_attempts <= 20:
            raise ConfigurationError(f"max_attempts must be 1..20, not {self.max_attempts!r}.", "Use e.g. 3.")

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides: Any) -> S3Connection:
        """The service harness's ``EOSINK_S3_*`` variables when set (``EOSINK_S3_CA_BUNDLE``: the CA of an
        ``https://`` endpoint), else boto3's chain (``AWS_*`` variables,
        ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` for a custom endpoint, profiles, roles)."""
        env = os.environ if environ is None else environ
        settings: dict[str, Any] = {}
        endpoint = env.get("EOSINK_S3_ENDPOINT", "").strip()
        if endpoint:
            settings.update(
                endpoint_url=endpoint,
                access_key_id=env.get("EOSINK_S3_ACCESS_KEY") or None,
                secret_access_key=env.get("EOSINK_S3_SECRET_KEY") or None,
                region=env.get("EOSINK_S3_REGION") or "us-east-1",
                ca_bundle=env.get("EOSINK_S3_CA_BUNDLE") or None,
            )
        else:
            aws_endpoint = (env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or "").strip()
            settings["endpoint_url"] = aws_endpoint or None
            settings["region"] = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None
        settings.update(overrides)
        return cls(**settings)

    @property
    def uses_path_style(self) -> bool:
        return self.path_style if self.path_style is not None else self.endpoint_url is not None

    def secrets(self) -> list[str]:
        """The secrets this connection holds (longest first), for scrubbing."""
        found = {s for s in (self.secret_access_key, self.session_token) if s}
        return sorted(found, key=len, reverse=True)

    def scrub(self, text: str) -> str:
        """``text`` with the secret key and session token replaced by ``***``."""
        return scrub(text, self.secrets())

    def describe(self) -> str:
        """Where the store is, for people (no secret)."""
        return self.endpoint_url or f"AWS S3 ({self.region or 'default region'})"

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr and getattr(self, f.name) != f.default
        )
        keys = ", credentials=explicit" if self.secret_access_key else ""
        return f"S3Connection({shown}{keys})"

    __str__ = __repr__


def s3a_options(connection: S3Connection, *, builder: bool = False) -> dict[str, str]:
    """The ``fs.s3a.*`` settings of ``connection``: for ``spark.conf.set`` on a running session (what its
    DataFrame reads and writes use), or with ``builder=True`` prefixed ``spark.hadoop.`` for
    ``SparkSession.builder.config`` (what every Hadoop filesystem of the application uses, checkpoints too).

    Without explicit credentials S3A's own provider chain applies (environment, ``AWS_PROFILE``, instance role).
    """
    out: dict[str, str] = {"fs.s3a.attempts.maximum": str(connection.max_attempts)}
    if connection.endpoint_url is not None:
        out["fs.s3a.endpoint"] = connection.endpoint_url
        out["fs.s3a.connection.ssl.enabled"] = str(connection.endpoint_url.startswith("https://")).lower()
    out["fs.s3a.path.style.access"] = str(connection.uses_path_style).lower()
    if connection.region is not None:
        out["fs.s3a.endpoint.region"] = connection.region
    if connection.access_key_id is not None and connection.secret_access_key is not None:
        out["fs.s3a.access.key"] = connection.access_key_id
        out["fs.s3a.secret.key"] = connection.secret_access_key
        provider = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        if connection.session_token is not None:
            out["fs.s3a.session.token"] = connection.session_token
            provider = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
        out["fs.s3a.aws.credentials.provider"] = provider
    # Plain milliseconds: Hadoop 3.3 (Spark 3.5) reads these as integers, 3.4 as durations in ms.
    out["fs.s3a.connection.establish.timeout"] = str(int(connection.connect_timeout_s * 1000))
    out["fs.s3a.connection.timeout"] = str(int(connection.read_timeout_s * 1000))
    return {f"spark.hadoop.{k}" if builder else k: v for k, v in out.items()}


def show_url(url: str) -> str:
    """A URL without user info (it may hold a password)."""
    parts = urlsplit(url)
    if "@" in parts.netloc:
        return url.replace(parts.netloc, "***@" + parts.netloc.rsplit("@", 1)[1])
    return url


def ensure_bucket(s3: Any, bucket: str) -> None:
    """Create ``bucket`` with the boto3 client ``s3`` unless it exists already."""
    from botocore.exceptions import ClientError

    try:
        s3.create_bucket(Bucket=bucket)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            raise


def incomplete_uploads(s3: Any, bucket: str, prefix: str) -> list[dict[str, Any]]:
    """The incomplete multipart uploads under ``prefix/`` (each with ``Key`` and ``UploadId``), as the store
    still has them (:func:`open_uploads`).

    The whole bucket is listed and filtered here: MinIO lists only the uploads of a key equal to the
    ``Prefix`` it is given, so a prefix filter on the request finds nothing there.
    """
    root = f"{prefix.strip('/')}/" if prefix else ""
    found: list[dict[str, Any]] = []
    for page in s3.get_paginator("list_multipart_uploads").paginate(Bucket=bucket):
        found += [u for u in page.get("Uploads", []) if str(u["Key"]).startswith(root)]
    return open_uploads(s3, bucket, found)


def _upload_gone(exc: BaseException) -> bool:
    """Whether an S3 error says the multipart upload does not exist (completed, aborted or never made)."""
    from eosink.stores.s3_errors import error_code

    return error_code(exc) == "NoSuchUpload"


def _abort_quietly(s3: Any, bucket: str, upload: dict[str, Any]) -> None:
    """AbortMultipartUpload; an upload gone meanwhile is fine."""
    from botocore.exceptions import ClientError

    try:
        s3.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
    except ClientError as exc:
        if not _upload_gone(exc):
            raise


def open_uploads(s3: Any, bucket: str, listed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The uploads of a ``ListMultipartUploads`` answer that the store still has (``ListParts`` finds them).

    A node of a MinIO cluster lists the uploads on its own drives, which may still hold one that was completed
    or aborted through another node, for minutes: a listed upload is not proof that it exists."""
    from botocore.exceptions import ClientError

    still: list[dict[str, Any]] = []
    for upload in listed:
        try:
            s3.list_parts(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"], MaxParts=1)
        except ClientError as exc:
            if not _upload_gone(exc):
                raise
            continue
        still.append(upload)
    return still


def uploads_of_key(s3: Any, bucket: str, key: str) -> list[dict[str, Any]]:
    """The incomplete uploads of exactly ``key`` that the store still has (:func:`open_uploads`).

    ``ListMultipartUploads`` with the key as its prefix: AWS lists the uploads of keys under a prefix; a MinIO
    node lists those of a whole key from one drive of its own, so it misses an upload created while it was
    down (a caller that knows the upload id asks ``ListParts`` instead, as :func:`open_uploads` does)."""
    args: dict[str, Any] = {"Bucket": bucket, "Prefix": key}
    found: list[dict[str, Any]] = []
    while True:
        reply = s3.list_multipart_uploads(**args)
        found += [u for u in reply.get("Uploads", []) if u["Key"] == key]
        if not reply.get("IsTruncated"):
            return open_uploads(s3, bucket, found)
        args["KeyMarker"] = reply.get("NextKeyMarker")
        args["UploadIdMarker"] = reply.get("NextUploadIdMarker")


def empty_prefix(s3: Any, bucket: str, prefix: str) -> None:
    """Abort every upload and delete every object under ``prefix/``."""
    root = f"{prefix.strip('/')}/" if prefix else ""
    for upload in incomplete_uploads(s3, bucket, prefix):
        _abort_quietly(s3, bucket, upload)
    paginator = s3.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Prefix=root):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            s3.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
