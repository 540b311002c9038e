"""The Delta sink's harness for the contract suite and the connector's own tests.

``store="file"``: each namespace is a table in the namespace's own directory. ``store="s3"``: each
namespace is a table under its own prefix in the bucket ``eosink-tests`` of the service harness's
MinIO (``eosink services up minio``, or your own S3 through ``EOSINK_S3_*``). ``store="hdfs"``: a
table under ``/eosink-tests/delta-<name>`` of the service harness's HDFS, or of the cluster
:meth:`DeltaHarness.use_hdfs` names. A missing server is an error, never a skip. Readers see what
any Delta reader sees: the table's current snapshot.
"""

from __future__ import annotations

import re
import shutil
import urllib.parse
from typing import Any, Literal

from eosink.connectors.delta import DeltaConfig, DeltaSink
from eosink.connectors.delta.profile import PROFILE
from eosink.contracts import Namespace, SinkHarness
from eosink.contracts.harness import CONTRACT_SCHEMA

__all__ = ["BUCKET", "COMMIT_REQUEST_MARKER", "DeltaHarness", "SecureDeltaS3Harness", "read_table"]

BUCKET = "eosink-tests"
"""The bucket of the harness's tables on MinIO (each namespace's table under a prefix of its own)."""

COMMIT_REQUEST_MARKER = PROFILE.commit_request_marker
"""The request that commits a batch on S3: the PUT of the log's next entry (``If-None-Match: *``)."""
HDFS_COMMIT_REQUEST_MARKER = re.compile(rb"rename2[\s\S]*/_delta_log/\d{20}\.json\x18")
"""The request that commits a batch on HDFS: the rename (without overwrite) of the entry's temporary file onto
``_delta_log/<version>.json``; Hadoop RPC names the method, then the destination, then the ``overwrite`` field."""


def read_table(config: DeltaConfig) -> list[dict[str, Any]]:
    """Every row of the table's current snapshot (none when there is no table)."""
    from eosink.connectors.delta import _log

    table = _log.load(config.table, config.delta_options())
    if table is None:
        return []
    rows: list[dict[str, Any]] = _log.read_rows(table).to_pylist()
    return rows


class DeltaHarness(SinkHarness):
    """One table per namespace, on local disk or in MinIO (see the module docstring)."""

    def __init__(self, store: Literal["file", "s3", "hdfs"] = "file", **options: Any) -> None:
        self.store = store
        self.options = options  # DeltaConfig options every sink of this harness gets
        self.commit_request_marker = HDFS_COMMIT_REQUEST_MARKER if store == "hdfs" else COMMIT_REQUEST_MARKER
        self._s3: Any = None
        self._hdfs_url: str | None = None

    def _hdfs(self) -> str:
        if self._hdfs_url is None:
            from eosink.services import get_service

            self._hdfs_url = str(get_service("hdfs").endpoint().url).rstrip("/")  # ServiceError: start HDFS
        return self._hdfs_url

    def use_hdfs(self, url: str) -> None:
        """Put the tables on the HDFS at ``url`` (a private cluster) instead of the shared one."""
        self._hdfs_url = url.rstrip("/")

    def _minio(self) -> Any:
        if self._s3 is None:
            from eosink.services import get_service
            from eosink.stores.s3 import ensure_bucket

            self._s3 = get_service(self.minio_service).endpoint()  # ServiceError: start MinIO
            ensure_bucket(self._client(), BUCKET)
        return self._s3

    minio_service = "minio"
    prefix_root = ""
    """Where the namespaces' tables go in the bucket (``""``: at its top)."""

    def _client(self) -> Any:
        from eosink.stores.s3 import S3Connection, client

        ep = self._s3
        return client(
            S3Connection(
                ep.endpoint_url,
                ep.region,
                access_key_id=ep.access_key,
                secret_access_key=ep.secret_key,
                ca_bundle=getattr(ep, "ca", None) or None,
            )
        )

    def _prefix(self, ns: Namespace) -> str:
        return f"{self.prefix_root}/{ns.name}" if self.prefix_root else ns.name

    def config(self, ns: Namespace, **options: Any) -> DeltaConfig:
        settings: dict[str, Any] = {**self.options, **options}
        if self.store == "s3":
            return DeltaConfig.on_endpoint(f"s3://{BUCKET}/{self._prefix(ns)}", self._minio(), **settings)
        if self.store == "hdfs":
            return DeltaConfig(f"{settings.pop('hdfs_url', self._hdfs())}/eosink-tests/delta-{ns.name}", **settings)
        return DeltaConfig(str(ns.path / "table"), **settings)

    def make_sink(self, ns: Namespace) -> DeltaSink:
        sink = DeltaSink(self.config(ns))
        sink.bind_schema(CONTRACT_SCHEMA)
        return sink

    def fault_endpoint(self) -> tuple[str, int] | None:
        if self.store == "s3":
            url = urllib.parse.urlsplit(self._minio().endpoint_url)
            return url.hostname or "127.0.0.1", int(url.port or 80)
        if self.store == "hdfs":
            parts = urllib.parse.urlsplit(self._hdfs())
            assert parts.hostname and parts.port, self._hdfs()
            return parts.hostname, parts.port
        return None

    def make_sink_via(self, ns: Namespace, host: str, port: int) -> DeltaSink:
        if self.store == "hdfs":
            sink = DeltaSink(self.config(ns, hdfs_url=f"hdfs://{host}:{port}"))
        else:
            # a cut reply is noticed after the read timeout: short ones keep the proxy's cases quick
            sink = DeltaSink(self.config(ns, endpoint_url=f"http://{host}:{port}", read_timeout_s=5.0))
        sink.bind_schema(CONTRACT_SCHEMA)
        return sink

    def read_committed(self, ns: Namespace) -> list[dict[str, Any]]:
        return read_table(self.config(ns))

    def cleanup(self, ns: Namespace) -> None:
        if self.store == "s3":
            from eosink.stores.s3 import empty_prefix

            self._minio()
            empty_prefix(self._client(), BUCKET, self._prefix(ns))
        elif self.store == "hdfs":
            from eosink.stores.hdfs import Fs, HdfsConnection

            target = HdfsConnection(f"{self._hdfs()}/eosink-tests/delta-{ns.name}")
            Fs(target).delete(target.path)
        else:
            shutil.rmtree(ns.path / "table", ignore_errors=True)


class SecureDeltaS3Harness(DeltaHarness):
    """The suite on the secured MinIO (``eosink services up minio-secure``) over ``https://`` (``ca_bundle``),
    as a user of its own whose policy allows exactly :func:`~eosink.connectors.delta.grants.writer_policy` on
    the tables under ``prefix_root``; the root credentials only make the bucket and read back. No fault proxy:
    it would have to terminate TLS."""

    minio_service = "minio-secure"
    prefix_root = "secured-delta"
    writer = "eosink-delta-writer"

    def __init__(self, **options: Any) -> None:
        super().__init__("s3", **options)
        self._writer_secret = ""

    def endpoint(self) -> Any:
        """The secured MinIO's endpoint; the first call makes the writer user and gives it the suite's policy."""
        if self._s3 is None:
            import secrets

            ep = self._minio()
            self._writer_secret = secrets.token_urlsafe(24)
            ep.admin().add_user(self.writer, self._writer_secret)
            self.allow()
        return self._s3

    @property
    def writer_secret(self) -> str:
        self.endpoint()
        return self._writer_secret

    def allow(self, *, without: str | None = None, prefix: str | None = None) -> None:
        """Attach the writer policy (all but ``without``) for ``prefix`` (default: every namespace's)."""
        from eosink.connectors.delta.grants import writer_policy

        admin = self.endpoint().admin()
        admin.set_policy(f"eosink-{self.writer}", writer_policy(BUCKET, prefix or self.prefix_root, without=without))
        admin.attach(self.writer, f"eosink-{self.writer}")

    def config(self, ns: Namespace | str, **options: Any) -> DeltaConfig:
        ep = self.endpoint()
        table = f"s3://{BUCKET}/{ns if isinstance(ns, str) else self._prefix(ns)}"
        settings: dict[str, Any] = {
            **self.options,
            "access_key_id": self.writer,
            "secret_access_key": self._writer_secret,
            "ca_bundle": ep.ca,
            **options,
        }
        return DeltaConfig.on_endpoint(table, ep, **settings)

    def admin_config(self, prefix: str) -> DeltaConfig:
        """The table under ``prefix`` as the administrator reaches it (the writer may lack GetObject)."""
        ep = self.endpoint()
        return DeltaConfig.on_endpoint(f"s3://{BUCKET}/{prefix}", ep, ca_bundle=ep.ca)

    def read_as_admin(self, prefix: str) -> list[dict[str, Any]]:
        """Every row a reader with the root credentials sees in the table under ``prefix``."""
        return read_table(self.admin_config(prefix))

    def fault_endpoint(self) -> tuple[str, int] | None:
        return None

    def read_committed(self, ns: Namespace) -> list[dict[str, Any]]:
        return self.read_as_admin(self._prefix(ns))
