"""DeltaConfig: everything a DeltaSink needs, as one frozen, picklable value.

The table is a URI: ``s3://bucket/path`` (AWS S3 or an S3-compatible store such as MinIO),
``hdfs://namenode:port/path``, or a local directory (``/data/events`` or ``file:///data/events``).
How to reach an S3 store is said as for the S3 sink (``endpoint_url``, ``region``, credentials: an
:class:`~eosink.connectors.s3.S3Connection`); other delta-rs storage settings pass through
``storage_options``. Secrets (the S3 secret
key and session token, storage options whose names look secret) never appear in ``repr``, logs
or error text: :meth:`DeltaConfig.scrub` removes them from any text.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from eosink._secrets import looks_secret, scrub
from eosink.errors import ConfigurationError
from eosink.stores.ca_trust import trust_ca
from eosink.stores.hdfs import ha_settings, named_namenodes
from eosink.stores.s3 import S3Connection

__all__ = ["DeltaConfig"]


@dataclass(frozen=True, repr=False)
class DeltaConfig:
    """Configuration of a :class:`~eosink.connectors.delta.DeltaSink`.

    * ``table``: the table's URI (see the module docstring).
    * ``endpoint_url``, ``region``, ``path_style``, ``access_key_id``, ``secret_access_key``,
      ``session_token``, ``connect_timeout_s``, ``read_timeout_s``, ``max_attempts``, ``ca_bundle``: how to
      reach an ``s3://`` table's store, as for the S3 sink. None of the first six given: the service harness's
      ``EOSINK_S3_*`` variables, else the ``AWS_*`` chain. delta-rs takes no CA file of its own: with
      ``ca_bundle``, the process's ``SSL_CERT_FILE`` becomes a bundle of the CAs it trusted plus this one
      (:func:`eosink.stores.ca_trust.trust_ca`), which delta-rs reads. On ``hdfs://``, ``read_timeout_s``
      also bounds each read of the log (delta-rs's HDFS client would wait without limit).
    * ``storage_options``: further delta-rs storage settings, passed through untouched.
    * ``namenodes``: on ``hdfs://<name service>/...``, the HA name service's NameNodes,
      ``{"nn0": "host:8020", "nn1": "host2:8020"}``: delta-rs and eosink's own HDFS client fail over between
      them (see :class:`~eosink.connectors.hdfs.HdfsConfig`).
    * ``create_table``: create a missing table (default) with the stream's schema (``foreach_batch``
      and ``format("eosink")`` hand it over before the first batch; with the sink API, call
      :meth:`DeltaSink.bind_schema`); with False a missing table is a ConfigurationError.
    * ``partition_by``: partition columns of a table eosink creates (an existing table keeps its own).
    * ``schema_evolution``: ``"none"`` (default: a batch whose columns differ from the table's is a
      SchemaError) or ``"add_columns"`` (a batch may bring new columns: a commit of their own, just
      before the batch's, adds them to the table's schema, nullable).
    * ``compact_every``: compact the table's small files every N committed batches of an app_id
      (None: never). Compaction rewrites files without changing what a reader sees.
    * ``row_group_rows`` and ``file_rows``: rows per Parquet row group, and per data file (a
      participant starts a new file beyond it).
    * ``commit_attempts``: how many times a commit is retried after another writer committed first.
    * ``check_conditional_writes``: on S3, check at setup that the store refuses a second create-only PUT
      (``If-None-Match: *``), which Delta's log entries rely on (default True).
    """

    table: str
    endpoint_url: str | None = None
    region: str | None = None
    path_style: bool | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 60.0
    max_attempts: int = 3
    ca_bundle: str | None = None
    storage_options: Mapping[str, str] = field(default_factory=dict)
    namenodes: Mapping[str, str] = field(default_factory=dict)
    create_table: bool = True
    partition_by: tuple[str, ...] = ()
    schema_evolution: Literal["none", "add_columns"] = "none"
    compact_every: int | None = None
    row_group_rows: int = 1 << 20
    file_rows: int = 8 << 20
    commit_attempts: int = 100
    check_conditional_writes: bool = True
    scheme: Literal["s3", "hdfs", "file"] = field(init=False, compare=False)
    """Where the table lives."""
    s3: S3Connection | None = field(init=False, compare=False)
    """How to reach an ``s3://`` table's store (None for other tables)."""

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        if not isinstance(self.table, str) or not self.table.strip():
            raise ConfigurationError("DeltaConfig needs a table URI.", "Pass table='s3://bucket/path' or a directory.")
        table, scheme = _normalised(self.table.strip())
        set_(self, "table", table)
        set_(self, "scheme", scheme)
        explicit = {
            name: getattr(self, name)
            for name in ("endpoint_url", "region", "path_style", "access_key_id", "secret_access_key", "session_token")
            if getattr(self, name) is not None
        }
        limits = {n: getattr(self, n) for n in ("connect_timeout_s", "read_timeout_s", "max_attempts")}
        if self.ca_bundle is not None:
            limits["ca_bundle"] = self.ca_bundle
        if scheme != "s3":
            set_(self, "s3", None)
        elif explicit:
            set_(self, "s3", S3Connection(**explicit, **limits))
        else:
            set_(self, "s3", S3Connection.from_env(**limits))
        raw: Any = self.partition_by
        set_(self, "partition_by", (raw,) if isinstance(raw, str) else tuple(raw))
        for column in self.partition_by:
            if not isinstance(column, str) or not column or "/" in column or "=" in column:
                raise ConfigurationError(
                    f"{column!r} is not a usable partition column.", "Partition by columns named without '/' or '='."
                )
        if self.schema_evolution not in ("none", "add_columns"):
            raise ConfigurationError(
                f"Unknown schema_evolution {self.schema_evolution!r}.", "Use 'none' or 'add_columns'."
            )
        if self.compact_every is not None and (not isinstance(self.compact_every, int) or self.compact_every < 1):
            raise ConfigurationError(
                f"compact_every={self.compact_every!r} is not a number of batches.", "Give e.g. 50, or None."
            )
        for name in ("row_group_rows", "file_rows", "commit_attempts"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"{name}={value!r} must be a positive integer.", "Give e.g. 1_000_000.")
        set_(self, "storage_options", {str(k): str(v) for k, v in dict(self.storage_options).items()})
        set_(self, "namenodes", named_namenodes(self.namenodes))
        if self.namenodes and scheme != "hdfs":
            raise ConfigurationError(
                f"namenodes are given for a table on {scheme}.",
                "Give namenodes only for hdfs://<name service>/ tables.",
            )
        self._ha()  # refuses a bad address, or a NameNode's port in the URI, now
        if scheme == "s3":
            taken = sorted(k for k in self.storage_options if k.lower().removeprefix("aws_") in _CONNECTION_OPTIONS)
            if taken:
                raise ConfigurationError(
                    f"storage_options sets {taken}, which say how to reach the store: delta-rs would write the log "
                    "through them while eosink writes the data files through the sink's own S3 connection.",
                    "Give them as DeltaConfig's own fields (endpoint_url, region, path_style, access_key_id, "
                    "secret_access_key, session_token), which both use.",
                )

    @classmethod
    def from_env(cls, table: str, **options: Any) -> DeltaConfig:
        """A configuration whose S3 connection comes from :meth:`S3Connection.from_env` (the harness's
        ``EOSINK_S3_*``, else the ``AWS_*`` chain), with ``options`` winning one by one: giving the endpoint
        keeps the environment's credentials and region (the constructor, given any, takes none from it)."""
        conn = S3Connection.from_env()
        reach = ("endpoint_url", "region", "path_style", "access_key_id", "secret_access_key", "session_token")
        settings: dict[str, Any] = {name: getattr(conn, name) for name in reach}
        if conn.ca_bundle is not None:
            settings["ca_bundle"] = conn.ca_bundle
        return cls(table, **{**settings, **options})

    @classmethod
    def on_endpoint(cls, table: str, endpoint: Any, **options: Any) -> DeltaConfig:
        """A table on an S3-compatible store described as the service harness describes MinIO (an object with
        ``endpoint_url``, ``access_key``, ``secret_key`` and ``region``); ``options`` may override any of them."""
        reach = {
            "endpoint_url": endpoint.endpoint_url,
            "access_key_id": endpoint.access_key,
            "secret_access_key": endpoint.secret_key,
            "region": endpoint.region,
        }
        return cls(table, **{**reach, **options})

    # -- what delta-rs gets ----------------------------------------------------------------------

    def delta_options(self) -> dict[str, str]:
        """The storage options handed to delta-rs: the S3 connection's, then ``storage_options``. With a
        ``ca_bundle``, this process trusts it from here on (delta-rs reads no CA option, only ``SSL_CERT_FILE``)."""
        options: dict[str, str] = {}
        if self.scheme == "s3" and self.s3 is not None:
            options.update(_s3_options(self.s3))
            if self.s3.ca_bundle:
                trust_ca(self.s3.ca_bundle)
        options.update(self._ha())
        options.update(self.storage_options)
        return options

    def _ha(self) -> dict[str, str]:
        """The HA name service's settings (:func:`~eosink.stores.hdfs.ha_settings`); empty without ``namenodes``."""
        if not self.namenodes:
            return {}
        return ha_settings("hdfs://" + self.table.removeprefix("hdfs://").split("/", 1)[0], self.namenodes)

    # -- secrets ---------------------------------------------------------------------------------

    def secrets(self) -> list[str]:
        """The secrets this configuration holds (longest first), for scrubbing."""
        found = set(self.s3.secrets()) if self.s3 is not None else set()
        found.update(v for k, v in self.storage_options.items() if v and looks_secret(k))
        return sorted(found, key=len, reverse=True)

    def scrub(self, text: str) -> str:
        """``text`` with every secret replaced by ``***``."""
        return scrub(text, self.secrets())

    def __repr__(self) -> str:
        shown = [f"table={self.table!r}"]
        if self.s3 is not None and self.scheme == "s3":
            shown.append(f"s3={self.s3!r}")
        if self.storage_options:
            options = {k: ("***" if looks_secret(k) else v) for k, v in self.storage_options.items()}
            shown.append(f"storage_options={options!r}")
        if self.namenodes:
            shown.append(f"namenodes={named_namenodes(self.namenodes)!r}")
        if self.partition_by:
            shown.append(f"partition_by={self.partition_by!r}")
        if self.schema_evolution != "none":
            shown.append(f"schema_evolution={self.schema_evolution!r}")
        if self.compact_every is not None:
            shown.append(f"compact_every={self.compact_every!r}")
        return f"DeltaConfig({', '.join(shown)})"

    __str__ = __repr__


def _normalised(uri: str) -> tuple[str, Literal["s3", "hdfs", "file"]]:
    """The table URI as delta-rs takes it, and its scheme."""
    parts = urllib.parse.urlsplit(uri)
    scheme = parts.scheme.lower()
    if scheme in ("", "file"):
        path = urllib.parse.unquote(parts.path) if scheme == "file" else uri
        if not os.path.isabs(path):
            path = os.path.abspath(path)
        return os.path.normpath(path), "file"
    if scheme in ("s3", "s3a"):
        if not parts.netloc:
            raise ConfigurationError(f"The table {uri!r} names no bucket.", "Use s3://<bucket>/<path>.")
        return f"s3://{parts.netloc}/{parts.path.strip('/')}".rstrip("/"), "s3"
    if scheme == "hdfs":
        if not parts.netloc:
            raise ConfigurationError(f"The table {uri!r} names no NameNode.", "Use hdfs://<namenode>:<port>/<path>.")
        if parts.username or parts.password:
            raise ConfigurationError("The hdfs:// URI holds user information.", "Remove it from the URI.")
        return f"hdfs://{parts.netloc}/{parts.path.strip('/')}".rstrip("/"), "hdfs"
    raise ConfigurationError(
        f"DeltaSink cannot write tables at {parts.scheme}:// URIs.",
        "Use s3://bucket/path, hdfs://namenode:port/path or a local directory.",
    )


#: delta-rs's S3 storage options (without ``aws_``, lower case) that DeltaConfig's own fields set.
_CONNECTION_OPTIONS = frozenset(
    {
        "endpoint",
        "endpoint_url",
        "region",
        "default_region",
        "access_key_id",
        "secret_access_key",
        "session_token",
        "token",
        "virtual_hosted_style_request",
        "allow_http",
    }
)


def _s3_options(s3: S3Connection) -> dict[str, str]:
    """delta-rs's ``AWS_*`` options for an S3 connection."""
    options: dict[str, str] = {}
    if s3.endpoint_url:
        options["AWS_ENDPOINT_URL"] = s3.endpoint_url
        if s3.endpoint_url.startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
    if s3.region:
        options["AWS_REGION"] = s3.region
    if s3.access_key_id and s3.secret_access_key:
        options["AWS_ACCESS_KEY_ID"] = s3.access_key_id
        options["AWS_SECRET_ACCESS_KEY"] = s3.secret_access_key
    if s3.session_token:
        options["AWS_SESSION_TOKEN"] = s3.session_token
    if s3.uses_path_style:
        options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false"
    # The S3 sink's timeouts and attempts, as delta-rs's object store takes them: a request that hangs fails
    # after read_timeout_s, and is tried max_attempts times in all (its defaults wait up to 3 minutes).
    options["connect_timeout"] = f"{s3.connect_timeout_s:g}s"
    options["timeout"] = f"{s3.read_timeout_s:g}s"
    options["max_retries"] = str(max(0, s3.max_attempts - 1))
    options["retry_timeout"] = f"{s3.max_attempts * (s3.connect_timeout_s + s3.read_timeout_s):g}s"
    return options
