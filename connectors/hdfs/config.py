"""HdfsConfig: everything an HdfsSink needs, as one frozen, picklable value.

The target is an ``hdfs://`` URL (``hdfs://namenode:8020/data/events``, ``hdfs://nameservice/data/events``
for an HA name service) or an absolute path resolved against ``fs.defaultFS`` of a Hadoop
configuration directory. Kerberos options and extra client settings are passed through to
``hdfs-native`` untouched; what may be secret (a keytab path, token-like settings) never
appears in ``repr``, logs or error text: :meth:`HdfsConfig.scrub` removes it from any text.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from eosink._secrets import looks_secret, scrub
from eosink.errors import ConfigurationError
from eosink.stores.hdfs import (
    FAIL_FAST,
    MAX_COMPONENT_BYTES,
    MAX_PATH_CHARS,
    check_path,
    ha_settings,
    named_namenodes,
    split_url,
)

__all__ = ["MAX_COMPONENT_BYTES", "MAX_PATH_CHARS", "HdfsConfig", "known_namenodes"]

_NAME_SERVICES: dict[str, dict[str, str]] = {}
"""The NameNodes of each HA name service a configuration in this process named, by ``hdfs://<name service>``."""


def known_namenodes(authority: str) -> dict[str, str]:
    """The NameNodes a configuration in this process gave for the name service ``hdfs://<ns>`` (empty: none did).
    A Spark checkpoint on the sink's name service is read with them (:mod:`eosink.connectors.hdfs.checkpoint_fs`),
    so the driver needs no ``HADOOP_CONF_DIR`` for it."""
    return dict(_NAME_SERVICES.get(authority, {}))


@dataclass(frozen=True, repr=False)
class HdfsConfig:
    """Configuration of a :class:`~eosink.connectors.hdfs.HdfsSink`.

    * ``url``: the target directory, ``hdfs://<namenode or name service>[:port]/<path>``, or an
      absolute path when ``hadoop_conf_dir`` names a ``core-site.xml`` with ``fs.defaultFS``.
      Committed batches appear as directories below it, grouped in batch ranges (see
      :mod:`eosink.connectors.hdfs._layout`).
    * ``format``: ``"parquet"`` (default) or ``"jsonl"`` (JSON lines, one object per row).
    * ``partition_by``: columns to partition by, Hive-style (``col=value`` directories inside
      each batch directory; the columns leave the files, as Spark and Hive expect).
    * ``mode`` / ``key_columns``: ``"upsert"`` records the key columns in each batch record, so that
      :func:`~eosink.connectors.hdfs.read_committed` keeps the newest row per key (files are never
      rewritten: a listing reader sees every version); ``"append"`` (default) adds.
    * ``create_dirs``: create the target directory and its parents if missing (default); with
      False a missing target is a ConfigurationError.
    * ``hadoop_conf_dir``: a Hadoop configuration directory (``core-site.xml``, ``hdfs-site.xml``):
      ``fs.defaultFS`` and HA name services are read from it (default: ``$HADOOP_CONF_DIR``).
    * ``namenodes``: the NameNodes of the HA name service the URL names (``hdfs://ns1/path``), as
      ``{"nn0": "host:8020", "nn1": "host2:8020"}`` (NameNode ids to RPC addresses): the client fails over
      between them (without it, HA settings come from ``hadoop_conf_dir`` or ``client_config``).
      :meth:`spark_conf` gives Spark the same, for checkpoints on ``hdfs://ns1``.
    * ``client_config``: extra ``hdfs-native`` settings (``dfs.nameservices``,
      ``dfs.ha.namenodes.<ns>``, ``dfs.namenode.rpc-address.<ns>.<nn>`` for HA without a
      configuration directory, ...). Values of keys that look secret are never shown.
    * ``kerberos_principal``, ``kerberos_keytab``, ``kerberos_cache``: passed to ``hdfs-native``.
    * ``user``: the HDFS user on a cluster without Kerberos (default: ``$HADOOP_USER_NAME`` or the login).
    * ``replication``, ``block_size``: of the files written (None: the cluster's default).
    * ``namenode_http``: the NameNode's HTTP address (``http://namenode:9870``), used to check
      ``replication`` against the live DataNodes at setup (without it, no check).
    * ``row_group_rows``: rows per Parquet row group.
    * ``write_timeout_s``: how long one write, ``hsync`` or ``close`` of a file may take before the
      attempt fails with a TransientError (default 120 s). hdfs-native waits without limit on a
      DataNode pipeline that a dying node stalls; Spark's retry then writes new files.
    """

    url: str
    format: Literal["parquet", "jsonl"] = "parquet"
    partition_by: tuple[str, ...] = ()
    mode: Literal["append", "upsert"] = "append"
    key_columns: tuple[str, ...] = ()
    create_dirs: bool = True
    hadoop_conf_dir: str | None = None
    namenodes: Mapping[str, str] = field(default_factory=dict)
    client_config: Mapping[str, str] = field(default_factory=dict)
    kerberos_principal: str | None = None
    kerberos_keytab: str | None = None
    kerberos_cache: str | None = None
    user: str | None = None
    replication: int | None = None
    block_size: int | None = None
    namenode_http: str | None = None
    row_group_rows: int = 1 << 20
    write_timeout_s: float = 120.0
    namenode: str = field(init=False, compare=False)
    """``hdfs://authority`` of the file system (no path)."""
    path: str = field(init=False, compare=False)
    """The target directory's absolute path in that file system."""

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        if self.hadoop_conf_dir is None and os.environ.get("HADOOP_CONF_DIR"):
            set_(self, "hadoop_conf_dir", os.environ["HADOOP_CONF_DIR"])
        if not isinstance(self.url, str) or not self.url.strip():
            raise ConfigurationError("HdfsConfig needs a url.", "Pass url='hdfs://namenode:8020/path/to/target'.")
        namenode, path = split_url(self.url.strip(), self.hadoop_conf_dir)
        check_path(path)
        path = path.rstrip("/") or "/"
        set_(self, "namenode", namenode)
        set_(self, "path", path)
        if self.format not in ("parquet", "jsonl"):
            raise ConfigurationError(f"Unknown format {self.format!r} for HdfsSink.", "Use 'parquet' or 'jsonl'.")
        for name in ("partition_by", "key_columns"):
            raw: Any = getattr(self, name)
            set_(self, name, (raw,) if isinstance(raw, str) else tuple(raw))
        for column in (*self.partition_by, *self.key_columns):
            if not isinstance(column, str) or not column or "/" in column or "=" in column:
                raise ConfigurationError(
                    f"{column!r} is not a usable column name for HdfsSink.", "Name columns without '/' or '='."
                )
        for column in self.partition_by:
            if column.startswith(("_", ".")):
                raise ConfigurationError(
                    f"Partition column {column!r} starts with {column[0]!r}: its directories ({column}=...) would be "
                    "hidden from readers that skip '_' and '.' names (pyarrow, Hive), and from eosink's cleanup.",
                    "Partition by a column whose name starts with a letter or digit (rename it in the query).",
                )
        if self.mode not in ("append", "upsert"):
            raise ConfigurationError(f"Unknown mode {self.mode!r} for HdfsSink.", "Use 'append' or 'upsert'.")
        if self.mode == "upsert" and not self.key_columns:
            raise ConfigurationError("HdfsSink(mode='upsert') needs key columns.", "Pass key_columns=[...].")
        if set(self.key_columns) & set(self.partition_by):
            raise ConfigurationError(
                "A key column cannot also be a partition column.", "Partition by other columns, or not at all."
            )
        if self.replication is not None and not (isinstance(self.replication, int) and 0 < self.replication <= 512):
            raise ConfigurationError(
                f"replication={self.replication!r} is not a replication factor.", "Give 1..512, or None."
            )
        if self.block_size is not None and (not isinstance(self.block_size, int) or self.block_size < 1 << 20):
            raise ConfigurationError("block_size must be at least 1 MiB.", "Give e.g. 128 * 1024 * 1024, or None.")
        if self.row_group_rows < 1:
            raise ConfigurationError("row_group_rows must be positive.", "Give e.g. 1_000_000.")
        if not isinstance(self.write_timeout_s, int | float) or not 0 < self.write_timeout_s <= 86_400:
            raise ConfigurationError(
                f"write_timeout_s={self.write_timeout_s!r} is not a time in seconds.", "Give e.g. 120 (up to a day)."
            )
        set_(self, "client_config", {str(k): str(v) for k, v in dict(self.client_config).items()})
        set_(self, "namenodes", named_namenodes(self.namenodes))
        if self.namenodes:
            ha_settings(self.namenode, self.namenodes)  # refuses a bad address or a URL with a port now
            _NAME_SERVICES[self.namenode] = dict(self.namenodes)

    # -- derived -----------------------------------------------------------------------------

    @property
    def target_url(self) -> str:
        """The target as a full URL, ``hdfs://authority/path``."""
        return self.namenode + self.path

    def client_kwargs(self) -> dict[str, Any]:
        """Arguments for ``hdfs_native.Client``: fail-fast retries, the name service's NameNodes, then the user's
        settings."""
        config = {**FAIL_FAST, **self._ha(), **self.client_config}
        return {
            "url": self.namenode,
            "config": config,
            "config_dir": self.hadoop_conf_dir,
            "kerberos_principal": self.kerberos_principal,
            "kerberos_keytab": self.kerberos_keytab,
            "kerberos_cache": self.kerberos_cache,
        }

    def _ha(self) -> dict[str, str]:
        return ha_settings(self.namenode, self.namenodes) if self.namenodes else {}

    def spark_conf(self) -> dict[str, str]:
        """``spark.hadoop.*`` settings that let Spark reach this file system's HA name service (a checkpoint on
        ``hdfs://ns1/...``); empty without ``namenodes``."""
        return {f"spark.hadoop.{k}": v for k, v in self._ha().items()}

    def with_address(self, host: str, port: int) -> HdfsConfig:
        """The same target reached at ``host:port`` (e.g. through a fault proxy)."""
        return replace(self, url=f"hdfs://{host}:{port}{self.path}")

    def with_path(self, path: str) -> HdfsConfig:
        """The same file system, another target directory."""
        return replace(self, url=f"{self.namenode}{path}")

    # -- secrets -----------------------------------------------------------------------------

    def _secrets(self) -> list[str]:
        found = {v for k, v in self.client_config.items() if looks_secret(k) and v}
        for value in (self.kerberos_keytab, self.kerberos_cache):
            if value:
                found.add(value)
        return sorted(found, key=len, reverse=True)

    def scrub(self, text: str) -> str:
        """``text`` with every secret-looking setting (keytab and ticket cache paths, tokens) replaced by ``***``."""
        return scrub(text, self._secrets())

    def scrub_chain(self, exc: BaseException) -> None:
        """Scrub the arguments of ``exc`` and of every exception chained to it."""
        seen: set[int] = set()
        todo = [exc]
        while todo:
            current = todo.pop()
            if id(current) in seen:
                continue
            seen.add(id(current))
            with contextlib.suppress(Exception):
                current.args = tuple(self.scrub(a) if isinstance(a, str) else a for a in current.args)
            todo += [e for e in (current.__cause__, current.__context__) if e is not None]

    def __repr__(self) -> str:
        shown = {k: ("***" if looks_secret(k) else v) for k, v in self.client_config.items()}
        return (
            f"HdfsConfig(url={self.target_url!r}, format={self.format!r}, partition_by={self.partition_by!r}, "
            f"mode={self.mode!r}, key_columns={self.key_columns!r}, create_dirs={self.create_dirs!r}, "
            f"namenodes={named_namenodes(self.namenodes)!r}, client_config={shown!r}, "
            f"kerberos={'on' if self.kerberos_principal else 'off'})"
        )

    __str__ = __repr__
