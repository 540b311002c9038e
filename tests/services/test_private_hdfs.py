"""The private HDFS that the chaos harness and the HDFS demo restart and crash on purpose."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from eosink._procs import is_alive
from eosink._waiting import wait_until
from eosink.errors import ServiceError
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


@pytest.mark.full  # make test-hdfs crashes and restarts a private HDFS under the connector (test_hdfs_restarts.py)
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


def _datanodes(server: HdfsServer) -> tuple[int, int, int]:
    """Live and dead DataNodes, and the capacity the NameNode places blocks on."""
    stats = server.namenode_stats()
    return int(stats["NumLiveDataNodes"]), int(stats["NumDeadDataNodes"]), int(stats["CapacityTotal"])


@pytest.mark.full  # make test-hdfs stops a private HDFS's DataNode under the connector's participants
def test_one_datanode_of_a_private_hdfs_stops_and_starts_while_the_rest_runs(tmp_path: Path) -> None:
    """Pass: with DataNode 1 stopped, a file written before reads back from the other replica, the NameNode
    declares the DataNode dead within a minute (12-17 s here) and stops placing blocks on it, and a new file
    is then written on one DataNode; stopping it twice or starting a running one is a ServiceError naming
    the refusal; started again, the NameNode counts two live DataNodes; commands reach only a running
    launcher."""
    from hdfs_native import Client

    server = HdfsServer(tmp_path / "hdfs")
    payload = os.urandom(300 * 1024)
    try:
        with pytest.raises(ServiceError, match="is not running"):
            server.stop_datanode(0)
        server.start()
        client = Client(server.endpoint.url, _CONF)
        _write(client, "/kept/before.bin", payload)
        assert wait_until(lambda: _datanodes(server)[0] == 2, 30.0)  # the NameNode's counts are refreshed
        capacity = _datanodes(server)[2]
        server.stop_datanode(1)
        with pytest.raises(ServiceError, match="DataNode 1 is stopped already"):
            server.stop_datanode(1)
        assert _read(client, "/kept/before.bin") == payload
        assert wait_until(lambda: _datanodes(server)[:2] == (1, 1), 60.0)
        assert wait_until(lambda: _datanodes(server)[2] < capacity * 3 // 4, 30.0)  # no longer placed on
        _write(client, "/kept/during.bin", b"during")
        with pytest.raises(ServiceError, match="DataNode 0 is running"):
            server.start_datanode(0)
        server.start_datanode(1)
        assert wait_until(lambda: _datanodes(server)[:2] == (2, 0), 30.0)
        assert _read(client, "/kept/during.bin") == b"during"
    finally:
        server.close()
    with pytest.raises(ServiceError, match="is not running"):
        server.start_datanode(1)
