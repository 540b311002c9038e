"""The private HDFS that the chaos harness and the HDFS demo restart and crash on purpose."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from eosink._procs import is_alive
from eosink.services.hdfs import HdfsServer
from eosink.services.proxy import FaultProxy

pytestmark = pytest.mark.timeout(300)

#: Fail fast, as the connector's clients do: hdfs-native's defaults retry a down NameNode for minutes.
_CONF = {"dfs.client.failover.max.attempts": "2"}


def _write(client: object, path: str, data: bytes) -> None:
    from hdfs_native import WriteOptions

    writer = client.create(path, WriteOptions(create_parent=True))  # type: ignore[attr-defined]
    writer.write(data)
    writer.close()


def _read(client: object, path: str) -> bytes:
    reader = client.read(path)  # type: ignore[attr-defined]
    try:
        data: bytes = reader.readall()
    finally:
        reader.close()
    return data


def test_a_crashed_private_hdfs_comes_back_on_its_ports_with_its_data(tmp_path: Path) -> None:
    """Pass: a file written before a SIGKILL of the cluster reads back afterwards (the NameNode replayed its
    edit log, the DataNodes reported the file's blocks) at the same RPC and HTTP ports, through the same
    fault proxy and client; the killed JVM is gone and the restarted one is another process."""
    from hdfs_native import Client

    server = HdfsServer(tmp_path / "hdfs")
    payload = os.urandom(300 * 1024)
    try:
        endpoint = server.start()
        assert endpoint.url == f"hdfs://127.0.0.1:{server.port}" and str(server.http_port) in endpoint.webhdfs_url
        assert repr(server) == f"HdfsServer({endpoint.url}, root={str(tmp_path / 'hdfs')!r})"
        with FaultProxy("127.0.0.1", server.port) as proxy:
            client = Client(f"hdfs://127.0.0.1:{proxy.port}", _CONF)
            _write(client, "/kept/before-crash.bin", payload)
            first = server.proc
            assert first is not None
            server.restart(crash=True)
            assert not is_alive(first.pid) and server.proc is not None and server.proc.pid != first.pid
            assert server.endpoint == endpoint
            assert _read(client, "/kept/before-crash.bin") == payload
            _write(client, "/kept/after-crash.bin", b"after")  # writable: out of safe mode
            assert proxy.stats.connections >= 2  # the client reconnected through the proxy
        server.restart(crash=False)  # a clean stop keeps the data too
        direct = Client(endpoint.url, _CONF)
        assert _read(direct, "/kept/before-crash.bin") == payload
        assert _read(direct, "/kept/after-crash.bin") == b"after"
    finally:
        proc = server.proc
        server.close()
    assert proc is not None and not is_alive(proc.pid) and server.proc is None
