"""The private HA HDFS of the failover tests: hdfs-native's client of ``hdfs://ns1`` follows every failover by itself.

One cluster for the module (one JVM: three JournalNodes, two NameNodes, two DataNodes); each test leaves nn0 active
and both NameNodes running. The cluster is stopped by its PID at the end.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eosink._procs import is_alive
from eosink.errors import ServiceError
from eosink.services.hdfs_ha import HdfsHaCluster

pytestmark = [pytest.mark.full, pytest.mark.timeout(600)]


def test_the_ha_service_fails_over_through_its_control_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    """``eosink services up|check|down hdfs-ha`` in a subprocess work (it is started only when named); through the
    control socket the active NameNode is killed, a client of ns1 follows it to nn1, nn0 comes back active; down
    leaves no cluster running, and a control call after it says the supervisor is not running. Runs before the
    module's own cluster starts (one JVM at a time)."""
    import json
    import shutil
    import subprocess
    import sys
    import tempfile

    from eosink.services import cli
    from eosink.services._process import Proc
    from eosink.services.hdfs_ha_service import PIDS, HdfsHaControl, HdfsHaService

    assert "hdfs-ha" not in cli.selected([], secure=False)
    shared = os.environ.get("EOSINK_CACHE")
    cache = Path(tempfile.mkdtemp(prefix="eosink-ha-"))  # short: the control socket's path must fit
    monkeypatch.setenv("EOSINK_CACHE", str(cache))
    env = {**os.environ, "EOSINK_CACHE": str(cache)}
    if shared and (Path(shared) / "services" / "hdfs").is_dir():  # the Hadoop jars already fetched
        (cache / "services").mkdir(parents=True)
        os.symlink(Path(shared) / "services" / "hdfs", cache / "services" / "hdfs")

    def services(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "eosink.cli", "services", *args, "hdfs-ha"]
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=500, check=False)

    service = HdfsHaService()
    try:
        up = services("up")
        assert up.returncode == 0, up.stdout + up.stderr
        check = services("check")
        assert check.returncode == 0, check.stdout + check.stderr
        assert "hdfs-ha hdfs://ns1: NameNodes" in check.stdout, check.stdout
        control = HdfsHaControl(service.endpoint())
        pid, start_time = json.loads((service.data / PIDS).read_text())
        launcher = Proc(int(pid), int(start_time))
        client = _client(control)
        _write(client, "/svc/before.bin", b"before")
        assert control.kill_active() == 0
        assert control.state() == {0: "stopped", 1: "active"}
        assert _read(client, "/svc/before.bin") == b"before"
        control.fail_back()
        assert control.active() == 0
        assert control.proxy(1).stats.connections >= 1
        with pytest.raises(ServiceError, match="failover needs to"):
            control.request("failover")
        down = services("down")
        assert down.returncode == 0, down.stderr
        assert not launcher.alive()
        with pytest.raises(ServiceError, match="not running"):
            control.state()
    finally:
        services("down")
        shutil.rmtree(cache, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HdfsHaCluster]:
    ha = HdfsHaCluster(Path(tmp_path_factory.mktemp("hdfs-ha")))
    started = time.monotonic()
    try:
        ha.start()
        print(f"HA HDFS up in {time.monotonic() - started:.1f} s")
        yield ha
    finally:
        proc = ha.proc
        ha.close()
        assert proc is None or not is_alive(proc.pid)  # stopped by its PID's process group
        assert ha.proc is None


def _client(cluster: Any) -> Any:
    """An hdfs-native client of ns1 through the proxies of ``cluster`` (an HdfsHaCluster, or the service's control)."""
    from hdfs_native import Client

    return Client(cluster.url, cluster.client_config())


def _write(client: Any, path: str, data: bytes) -> None:
    from hdfs_native import WriteOptions

    writer = client.create(path, WriteOptions(create_parent=True))
    writer.write(data)
    writer.close()


def _read(client: Any, path: str) -> bytes:
    reader = client.read(path)
    try:
        data: bytes = reader.readall()
    finally:
        reader.close()
    return data


def test_the_cluster_is_an_ha_name_service_behind_proxies(cluster: HdfsHaCluster) -> None:
    """Pass: nn0 active, nn1 standby; the client settings name both NameNodes at their proxies, with failover
    patience; Spark's are the same under spark.hadoop.; the launcher refuses a bad command with its reason."""
    assert cluster.state() == {0: "active", 1: "standby"}
    assert cluster.active() == 0
    config = cluster.client_config()
    assert config["dfs.ha.namenodes.ns1"] == "nn0,nn1"
    for nn in (0, 1):
        assert config[f"dfs.namenode.rpc-address.ns1.nn{nn}"] == f"127.0.0.1:{cluster.proxy(nn).port}"
        assert cluster.proxy(nn).target == ("127.0.0.1", cluster.rpc_port(nn))
    assert int(config["dfs.client.failover.max.attempts"]) >= 15
    assert cluster.spark_conf()["spark.hadoop.dfs.ha.namenodes.ns1"] == "nn0,nn1"
    with pytest.raises(ServiceError, match="NameNode 1 is running"):
        cluster.start_namenode(1)


def test_a_client_follows_a_killed_active_namenode_and_a_fail_back(cluster: HdfsHaCluster) -> None:
    """Pass: a file written before the active NameNode is stopped reads back afterwards, and another is written,
    through the same client (it fails over to nn1 by itself); after nn0 is started again and made active, both
    read back through that client once more."""
    client = _client(cluster)
    payload = os.urandom(300 * 1024)
    _write(client, "/ha/before.bin", payload)
    started = time.monotonic()
    assert cluster.kill_active() == 0
    print(f"kill_active (stop nn0, fail over to nn1) took {time.monotonic() - started:.1f} s")
    assert cluster.state() == {0: "stopped", 1: "active"}
    assert _read(client, "/ha/before.bin") == payload
    _write(client, "/ha/after.bin", b"after")
    started = time.monotonic()
    cluster.fail_back()
    print(f"fail_back (start nn0, fail over to it) took {time.monotonic() - started:.1f} s")
    assert cluster.state() == {0: "active", 1: "standby"}
    assert _read(client, "/ha/before.bin") == payload
    assert _read(client, "/ha/after.bin") == b"after"


def test_a_client_reaches_the_active_namenode_past_a_cut_proxy(cluster: HdfsHaCluster) -> None:
    """Pass: with nn1 active and nn0's proxy refusing connections, a new client (which tries nn0 first) writes and
    reads through nn1; with the proxy passing again and nn0 active, so does another."""
    cluster.failover(1)
    assert cluster.active() == 1
    cluster.proxy(0).refuse()
    through = [cluster.proxy(nn).stats.connections for nn in (0, 1)]
    try:
        client = _client(cluster)
        _write(client, "/ha/past-the-cut.bin", b"past")
        assert _read(client, "/ha/past-the-cut.bin") == b"past"
        assert cluster.proxy(0).stats.connections == through[0]  # refused: nothing got through nn0's proxy
        assert cluster.proxy(1).stats.connections > through[1]
    finally:
        cluster.proxy(0).passthrough()
        cluster.fail_back()
    assert cluster.active() == 0
    assert _read(_client(cluster), "/ha/past-the-cut.bin") == b"past"


def test_a_namenode_killed_mid_commit_leaves_the_commit_to_the_new_active(cluster: HdfsHaCluster) -> None:
    """Pass: with nn0's reply to ``complete`` cut, the client's close fails (hdfs-native does not replay an
    ambiguous write on the other NameNode); nn0 is then killed and nn1 takes over, and through the same client the
    file is there, closed, at its full length: the commit reached the shared edit log before the reply was lost."""
    client = _client(cluster)
    payload = os.urandom(100 * 1024)
    cluster.proxy(0).cut_after_request(b"complete")
    with pytest.raises(OSError, match="RPC listener disconnected"):
        _write(client, "/ha/mid-commit.bin", payload)
    assert cluster.proxy(0).wait_for_cut(10)
    assert cluster.kill_active() == 0
    try:
        status = client.get_file_info("/ha/mid-commit.bin")
        assert status.length == len(payload)
        assert _read(client, "/ha/mid-commit.bin") == payload
    finally:
        cluster.proxy(0).passthrough()
        cluster.fail_back()


def test_a_datanode_stops_and_starts_under_both_namenodes(cluster: HdfsHaCluster) -> None:
    """Pass: with DataNode 1 stopped, a file written before reads back from the other replica; started again, it is
    registered with both NameNodes, and a failover to nn1 still reads the file."""
    client = _client(cluster)
    _write(client, "/ha/two-replicas.bin", b"replicated")
    cluster.stop_datanode(1)
    try:
        assert _read(client, "/ha/two-replicas.bin") == b"replicated"
    finally:
        cluster.start_datanode(1)
    cluster.failover(1)
    try:
        assert _read(client, "/ha/two-replicas.bin") == b"replicated"
    finally:
        cluster.fail_back()


def test_a_crashed_cluster_comes_back_on_its_ports_behind_its_proxies(cluster: HdfsHaCluster) -> None:
    """Pass: after a SIGKILL of the whole JVM and a start on the same data (nn1 active, as it was), the files
    written before read back through the same client and proxies, and the cluster takes writes; nn0 is made
    active again."""
    client = _client(cluster)
    _write(client, "/ha/before-crash.bin", b"kept")
    cluster.failover(1)
    ports = [cluster.rpc_port(nn) for nn in (0, 1)], [cluster.proxy(nn).port for nn in (0, 1)]
    first = cluster.proc
    started = time.monotonic()
    cluster.restart(crash=True)
    print(f"restart after SIGKILL took {time.monotonic() - started:.1f} s")
    assert first is not None and not is_alive(first.pid)
    assert ports == ([cluster.rpc_port(nn) for nn in (0, 1)], [cluster.proxy(nn).port for nn in (0, 1)])
    assert cluster.state() == {0: "standby", 1: "active"}
    assert _read(client, "/ha/before-crash.bin") == b"kept"
    _write(client, "/ha/after-crash.bin", b"new")
    cluster.fail_back()
    assert _read(client, "/ha/after-crash.bin") == b"new"
