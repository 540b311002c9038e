"""The HDFS sink's harness for the contract suite and the connector's own tests.

It writes against the service harness's HDFS (``eosink services up hdfs``, or your own cluster
through ``EOSINK_HDFS_URL``); a missing cluster is an error, never a skip. Each namespace is one
target directory ``/eosink-tests/<name>``.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import urllib.parse
import urllib.request
from typing import Any

from eosink.connectors.hdfs import HdfsConfig, HdfsSink, read_committed
from eosink.connectors.hdfs._layout import COMMIT_REQUEST_MARKER
from eosink.connectors.hdfs._read import read_rows
from eosink.contracts import Namespace, SinkHarness
from eosink.services import get_service
from eosink.stores.hdfs import Fs

__all__ = [
    "COMMIT_REQUEST_MARKER",
    "HdfsHarness",
    "SecureHdfsHarness",
    "as_superuser",
    "files_under",
    "listed_rows",
    "remove",
]

TEST_ROOT = "/eosink-tests"


class HdfsHarness(SinkHarness):
    """One target directory per namespace; the endpoint is resolved at first use, not at import."""

    commit_request_marker = COMMIT_REQUEST_MARKER

    def __init__(self, **options: Any) -> None:
        self.options = options  # HdfsConfig options every sink of this harness gets
        self._url: str | None = None

    def url(self) -> str:
        if self._url is None:
            self._url = str(get_service("hdfs").endpoint().url).rstrip("/")  # ServiceError: start the cluster
        return self._url

    def config(self, ns: Namespace, **options: Any) -> HdfsConfig:
        return HdfsConfig(f"{self.url()}{TEST_ROOT}/{ns.name}", **{**self.options, **options})

    def make_sink(self, ns: Namespace) -> HdfsSink:
        return HdfsSink(self.config(ns))

    def fault_endpoint(self) -> tuple[str, int]:
        parts = urllib.parse.urlsplit(self.url())
        assert parts.hostname and parts.port, self.url()
        return parts.hostname, parts.port

    def make_sink_via(self, ns: Namespace, host: str, port: int) -> HdfsSink:
        return HdfsSink(self.config(ns).with_address(host, port))

    def read_committed(self, ns: Namespace) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = read_committed(self.config(ns)).to_pylist()
        return rows

    def cleanup(self, ns: Namespace) -> None:
        config = self.config(ns)
        with contextlib.suppress(Exception):
            Fs(config).delete(config.path)


def listed_rows(config: HdfsConfig) -> list[dict[str, Any]]:
    """What a reader that lists the target reads (``spark.read.parquet``): every file outside hidden names,
    partition columns (as strings) from the directory names."""
    return read_rows(Fs(config), config.path, config.format)


def files_under(url: str) -> list[str]:
    """The paths of every file below an ``hdfs://`` URL (none when it is missing)."""
    config = HdfsConfig(url)
    return [status.path for status in Fs(config).walk_files(config.path)]


def remove(url: str | HdfsConfig) -> None:
    """Delete an ``hdfs://`` URL's directory (or file), or a configuration's target, and everything below it; no
    error when missing."""
    config = url if isinstance(url, HdfsConfig) else HdfsConfig(url)
    Fs(config).delete(config.path)


def as_superuser(path: str, op: str, method: str = "PUT", *, webhdfs_url: str | None = None, **params: str) -> Any:
    """A WebHDFS call as HDFS's superuser (the login that runs the harness's cluster), whatever user this
    process's HDFS clients are: ownership, modes and directories an administrator makes. ``webhdfs_url``:
    another cluster's (a private :class:`~eosink.services.hdfs.HdfsServer`) instead of the service's."""
    base = webhdfs_url or get_service("hdfs").endpoint().webhdfs_url
    query = urllib.parse.urlencode({"op": op, "user.name": getpass.getuser(), **params})
    request = urllib.request.Request(f"{base}{path}?{query}", method=method)
    with urllib.request.urlopen(request, timeout=30) as reply:
        body = reply.read()
    return json.loads(body) if body else None


class SecureHdfsHarness(HdfsHarness):
    """The suite as an ordinary HDFS user (``HADOOP_USER_NAME``, not the superuser) that owns only its root,
    ``/eosink-secured/<user>``, made and handed over by the superuser; the harness's NameNode checks
    permissions. The process's HDFS clients all act as that user (hdfs-native: one user per process)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.user = os.environ.get("HADOOP_USER_NAME", "")
        self._prepared = False

    def root(self) -> str:
        if not self.user or self.user == getpass.getuser():
            raise AssertionError("run the secured HDFS tests with HADOOP_USER_NAME set to an ordinary user")
        root = f"/eosink-secured/{self.user}"
        if not self._prepared:
            as_superuser(root, "MKDIRS", permission="755")
            as_superuser(root, "SETOWNER", owner=self.user)
            self._prepared = True
        return root

    def config(self, ns: Namespace, **options: Any) -> HdfsConfig:
        return HdfsConfig(f"{self.url()}{self.root()}/{ns.name}", **{**self.options, **options})
