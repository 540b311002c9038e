"""The S3 sink's harness for the contract suite and the connector's own tests.

It writes against the service harness's MinIO (``eosink services up minio``, or your own S3 through
``EOSINK_S3_ENDPOINT`` and its keys); a missing server is an error, never a skip. Every namespace
is a prefix of its own in one bucket (created on first use); ``cleanup`` removes the prefix's
objects and aborts its uploads.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from eosink.connectors.s3 import S3Config, S3Sink, read_committed
from eosink.connectors.s3._markers import FORMAT
from eosink.contracts import Namespace, SinkHarness
from eosink.services import get_service
from eosink.stores.parquet import parquet_table
from eosink.stores.s3 import empty_prefix, ensure_bucket, incomplete_uploads

__all__ = ["COMMIT_REQUEST_MARKER", "S3Harness", "empty_prefix", "incomplete_uploads", "listed_parquet"]

BUCKET = "eosink-tests"

COMMIT_REQUEST_MARKER = FORMAT.encode()
"""What the fault proxy matches to cut the reply of a batch's commit: the commit marker's PUT, the one request
of a commit that carries ``If-None-Match: *`` (its CompleteMultipartUpload requests come before it: a cut
there leaves the batch prepared, which the suite's retry case covers)."""


class S3Harness(SinkHarness):
    """One prefix per namespace in the bucket ``eosink-tests`` of the service harness's MinIO.

    The endpoint is resolved at first use, not at import (the suite class is built at import), unless one
    is given (``endpoint``: another store, such as a private :class:`~eosink.services.minio.MinioServer`).
    """

    commit_request_marker = COMMIT_REQUEST_MARKER

    def __init__(self, bucket: str = BUCKET, *, endpoint: Any = None, **options: Any) -> None:
        self.bucket = bucket
        self.options = options  # S3Config options every sink of this harness gets
        self._endpoint: Any = endpoint
        self._made = False
        self._lock = threading.Lock()

    def endpoint(self) -> Any:
        if self._endpoint is None:
            self._endpoint = get_service("minio").endpoint()  # ServiceError: start the server
        return self._endpoint

    def config(self, ns: Namespace | str, **options: Any) -> S3Config:
        ep = self.endpoint()
        prefix = ns if isinstance(ns, str) else ns.name
        settings: dict[str, Any] = {
            "endpoint_url": ep.endpoint_url,
            "access_key_id": ep.access_key,
            "secret_access_key": ep.secret_key,
            "region": ep.region,
            "part_size_bytes": 5 << 20,
            **self.options,
            **options,
        }
        self.ensure_bucket()
        return S3Config(self.bucket, prefix, **settings)

    def ensure_bucket(self, bucket: str | None = None) -> None:
        """Create the bucket if it does not exist (once per harness)."""
        with self._lock:
            if self._made and bucket is None:
                return
            ensure_bucket(self.client(), bucket or self.bucket)
            if bucket is None:
                self._made = True

    def client(self) -> Any:
        """An admin client of the endpoint (the harness's own)."""
        import boto3
        from botocore.config import Config

        ep = self.endpoint()
        return boto3.client(
            "s3",
            endpoint_url=ep.endpoint_url,
            aws_access_key_id=ep.access_key,
            aws_secret_access_key=ep.secret_key,
            region_name=ep.region,
            config=Config(s3={"addressing_style": "path"}, retries={"mode": "standard", "max_attempts": 3}),
            verify=getattr(ep, "ca", None) or None,
        )

    def make_sink(self, ns: Namespace) -> S3Sink:
        return S3Sink(self.config(ns))

    def fault_endpoint(self) -> tuple[str, int] | None:
        from urllib.parse import urlsplit

        url = urlsplit(self.endpoint().endpoint_url)
        return url.hostname or "127.0.0.1", int(url.port or 80)

    def make_sink_via(self, ns: Namespace, host: str, port: int) -> S3Sink:
        return S3Sink(self.config(ns).with_endpoint(f"http://{host}:{port}"))

    def read_committed(self, ns: Namespace) -> list[dict[str, Any]]:
        table: Any = read_committed(self.config(ns))
        rows: list[dict[str, Any]] = table.to_pylist()
        return rows

    def cleanup(self, ns: Namespace) -> None:
        empty_prefix(self.client(), self.bucket, ns.name)


def listed_parquet(s3: Any, bucket: str, prefix: str, columns: Sequence[str] | None = None) -> pa.Table | None:
    """What a reader that lists ``prefix/`` reads (``spark.read.parquet``): every Parquet object under it, but
    names with a part starting with ``_`` or ``.`` (``_eosink/``, ``_temporary/``, ``_SUCCESS``); None when
    there is none. It lists the keys and reads each object itself, so a half-visible batch shows up."""
    root = f"{prefix.strip('/')}/"
    tables = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=root):
        for obj in page.get("Contents", []):
            if any(part.startswith(("_", ".")) for part in obj["Key"][len(root) :].split("/")):
                continue
            try:
                body = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
            except s3.exceptions.NoSuchKey:  # replaced meanwhile
                continue
            tables.append(parquet_table(body, columns))
    return pa.concat_tables(tables, promote_options="default") if tables else None


class SecureS3Harness(S3Harness):
    """The suite as the secured MinIO's writer user over ``https://`` (``ca_bundle``), whose policy allows exactly
    :func:`~eosink.connectors.s3.grants.writer_policy` on the harness's bucket and prefixes under ``PREFIX``;
    the root credentials only make the bucket and read back. No fault proxy: it would have to terminate TLS."""

    prefix_root = "secured"

    def endpoint(self) -> Any:
        if self._endpoint is None:
            self._endpoint = get_service("minio-secure").endpoint()
            self.allow()
        return self._endpoint

    def allow(self, *, without: str | None = None, user: str | None = None, prefix: str | None = None) -> None:
        """Attach the writer policy (all but ``without``) for ``prefix`` (default: every namespace's) to ``user``."""
        from eosink.connectors.s3.grants import writer_policy

        ep = self.endpoint()
        who = user or ep.writer
        admin = ep.admin()
        admin.set_policy(f"eosink-{who}", writer_policy(self.bucket, prefix or self.prefix_root, without=without))
        admin.attach(who, f"eosink-{who}")

    def config(self, ns: Namespace | str, **options: Any) -> S3Config:
        ep = self.endpoint()
        prefix = ns if isinstance(ns, str) else f"{self.prefix_root}/{ns.name}"
        settings: dict[str, Any] = {
            "access_key_id": ep.writer,
            "secret_access_key": ep.writer_secret,
            "ca_bundle": ep.ca,
            **options,
        }
        return super().config(prefix, **settings)

    def fault_endpoint(self) -> tuple[str, int] | None:
        return None

    def read_as_admin(self, prefix: str) -> list[dict[str, Any]]:
        """What a reader with the root credentials reads under ``prefix`` (the writer may lack GetObject)."""
        ep = self.endpoint()
        config = super().config(prefix, ca_bundle=ep.ca)
        rows: list[dict[str, Any]] = read_committed(config).to_pylist()
        return rows

    def cleanup(self, ns: Namespace) -> None:
        empty_prefix(self.client(), self.bucket, f"{self.prefix_root}/{ns.name}")
