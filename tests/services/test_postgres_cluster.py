"""A replicated PostgreSQL (primary, sync and async standbys): failovers as PostgreSQL makes them.

Every claim is read back by a reader that connects to a node directly with psycopg, never through the
harness's own bookkeeping. The clusters live under pytest's temporary directory (0700 under root: the
nodes' data goes to the service user's private directories). A test that changes the topology builds
a cluster of its own; the module's cluster is left as it was found.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from eosink._procs import is_alive
from eosink._waiting import wait_until
from eosink.errors import ServiceError
from eosink.services import cli
from eosink.services._process import Proc
from eosink.services.postgres_cluster import Mode, PostgresCluster, ReplicatedCluster
from eosink.services.postgres_replicated import ClusterControl, ReplicatedPostgresEndpoint, ReplicatedPostgresService

MakeCluster = Callable[[Mode], PostgresCluster]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresCluster]:
    """The module's cluster, in sync mode; no test leaves it changed."""
    with PostgresCluster(tmp_path_factory.mktemp("cluster") / "c", mode="sync") as made:
        _execute(made.url, "CREATE TABLE t (v int PRIMARY KEY)")
        yield made


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[MakeCluster]:
    """A factory of clusters of the test's own (with a table ``t``), closed after the test."""
    made: list[PostgresCluster] = []

    def make(mode: Mode) -> PostgresCluster:
        fresh = PostgresCluster(tmp_path / f"c{len(made)}", mode=mode)
        made.append(fresh)
        _execute(fresh.url, "CREATE TABLE t (v int PRIMARY KEY)")
        return fresh

    yield make
    for fresh in made:
        fresh.close()


def _execute(url: str, query: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(query)


def _insert(url: str, *values: int) -> None:
    """Insert ``values`` into ``t`` in one committed transaction."""
    with psycopg.connect(url) as conn:
        conn.cursor().executemany("INSERT INTO t VALUES (%s)", [(v,) for v in values])
        conn.commit()


def _rows(url: str) -> set[int]:
    """What ``t`` holds, read on one node directly."""
    with psycopg.connect(url, autocommit=True) as conn:
        return {int(v) for (v,) in conn.execute("SELECT v FROM t").fetchall()}


def _answer(url: str, query: str) -> object:
    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        row = conn.execute(query).fetchone()
        assert row is not None
        return row[0]


def _roles(cluster: ReplicatedCluster) -> dict[str, str]:
    return {n.name: n.role for n in cluster.status().nodes}


# -- the cluster as made -------------------------------------------------------------------------------------


def test_committed_row_reaches_both_standbys(cluster: PostgresCluster) -> None:
    """A row committed through the multi-host URL is on the primary ("primary") and, once replayed, on both
    standbys; status() shows one primary and two standbys of one system on timeline 1, "sync" as the
    synchronous standby and "async" as an asynchronous one; a standby refuses writes."""
    assert _answer(cluster.url, "SHOW cluster_name") == "primary"
    _insert(cluster.url, 1)
    for name in ("sync", "async"):
        cluster.wait_replayed(name, timeout_s=30)
        assert 1 in _rows(cluster.direct_url(name))
        assert _answer(cluster.direct_url(name), "SELECT pg_is_in_recovery()") is True
    status = cluster.status()
    assert status.primary == cluster.primary() == "primary"
    assert _roles(cluster) == {"primary": "primary", "sync": "standby", "async": "standby"}
    assert status.node("sync").sync_state == "sync"
    assert status.node("async").sync_state == "async"
    assert {n.timeline for n in status.nodes} == {1}
    assert len({n.system_identifier for n in status.nodes}) == 1
    with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        _insert(cluster.node_url("sync"), 2)
    assert json.loads(json.dumps(status.to_json()))["nodes"][1]["sync_state"] == "sync"


def test_commit_reply_cut_by_the_client_proxy(cluster: PostgresCluster) -> None:
    """proxy("primary") cuts the reply to a COMMIT: the client gets a connection error, the commit took effect
    on the primary and reached the synchronous standby."""
    proxy = cluster.proxy("primary")
    with psycopg.connect(cluster.url) as conn:
        conn.execute("INSERT INTO t VALUES (10)")
        proxy.cut_after_request(b"COMMIT\x00")
        with pytest.raises(psycopg.OperationalError):
            conn.commit()
    assert proxy.wait_for_cut(10)
    assert 10 in _rows(cluster.direct_url("primary"))
    cluster.wait_replayed("sync", timeout_s=30)
    assert 10 in _rows(cluster.direct_url("sync"))


def test_a_cut_sync_link_makes_commits_wait(cluster: PostgresCluster) -> None:
    """In sync mode, with the synchronous standby's link cut, a COMMIT waits for it (its backend waits on SyncRep,
    which statement_timeout does not end: PostgreSQL disables it before the commit). With the link back, the
    standby streams again, the COMMIT returns, and the standby has the row."""
    primary = cluster.direct_url("primary")
    outcome: list[BaseException | None] = []

    def commit() -> None:
        try:
            _insert(cluster.url, 20)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    cluster.cut_link("sync")
    committer = threading.Thread(target=commit, name="committer", daemon=True)
    try:
        committer.start()
        waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
        assert wait_until(lambda: _answer(primary, waiting) == 1, 30), "no COMMIT waits for the sync standby"
        assert committer.is_alive() and not outcome
        assert 20 not in _rows(cluster.direct_url("sync"))
    finally:
        cluster.restore_link("sync")
        committer.join(timeout=60)
    assert outcome == [None]
    cluster.wait_streaming("sync", timeout_s=30)
    cluster.wait_replayed("sync", timeout_s=30)
    assert 20 in _rows(cluster.direct_url("sync"))


# -- failovers, each on a cluster of its own -------------------------------------------------------------


def test_kill_primary_promote_sync(make_cluster: MakeCluster) -> None:
    """The primary is killed and "sync" promoted: it is on a higher timeline with every committed row; "async"
    follows it and streams; the multi-host URL connects to it; "async" is now the synchronous standby."""
    cluster = make_cluster("sync")
    _insert(cluster.url, 1, 2, 3)
    cluster.wait_replayed("sync", timeout_s=30)
    cluster.wait_replayed("async", timeout_s=30)  # "async" is not ahead of "sync": it can follow it
    before = cluster.status().node("primary").timeline
    cluster.kill("primary")
    cluster.promote("sync")
    status = cluster.status()
    assert cluster.primary() == "sync"
    assert _roles(cluster) == {"primary": "down", "sync": "primary", "async": "standby"}
    assert before is not None and (status.node("sync").timeline or 0) > before
    assert _rows(cluster.direct_url("sync")) == {1, 2, 3}
    cluster.wait_streaming("async", timeout_s=30)
    assert _answer(cluster.url, "SHOW cluster_name") == "sync"
    _insert(cluster.url, 4)
    cluster.wait_replayed("async", timeout_s=30)
    assert _rows(cluster.direct_url("async")) == {1, 2, 3, 4}
    status = cluster.status()
    assert status.node("async").timeline == status.node("sync").timeline
    assert status.node("async").sync_state == "sync"


def test_async_standby_promoted_loses_acknowledged_commits(make_cluster: MakeCluster) -> None:
    """Asynchronous loss is real: with "async"'s link cut, rows committed on the primary (and acknowledged by the
    synchronous standby) are absent on "async" once it is promoted after the primary's crash. The product must
    detect this; the harness shows it. ("sync" holds them: it went past the fork and cannot follow "async".)"""
    cluster = make_cluster("sync")
    _insert(cluster.url, 1, 2)
    cluster.wait_replayed("async", timeout_s=30)
    cluster.cut_link("async")
    _insert(cluster.url, 3, 4)
    cluster.wait_replayed("sync", timeout_s=30)
    cluster.kill("primary")
    cluster.promote("async")
    assert cluster.primary() == "async"
    assert _answer(cluster.direct_url("async"), "SELECT pg_is_in_recovery()") is False
    assert _rows(cluster.direct_url("async")) == {1, 2}
    assert _rows(cluster.direct_url("sync")) == {1, 2, 3, 4}
    assert (cluster.status().node("async").timeline or 0) > 1


def test_old_primary_rejoins_with_pg_rewind(make_cluster: MakeCluster) -> None:
    """An old primary that committed rows no standby got is rewound (pg_rewind, after its own crash recovery)
    into a standby of the new primary: its lost rows are gone, it streams and replays the new primary's rows,
    on the new primary's timeline."""
    cluster = make_cluster("async")
    _insert(cluster.url, 1)
    cluster.wait_replayed("sync", timeout_s=30)
    cluster.cut_link("sync")
    cluster.cut_link("async")
    _insert(cluster.url, 2)  # only the old primary has it
    cluster.kill("primary")
    cluster.restore_link("sync")
    cluster.restore_link("async")
    cluster.promote("sync")
    _insert(cluster.url, 3)
    cluster.rejoin("primary")
    cluster.wait_replayed("primary", timeout_s=30)
    assert _rows(cluster.direct_url("primary")) == {1, 3}
    assert _answer(cluster.direct_url("primary"), "SELECT pg_is_in_recovery()") is True
    status = cluster.status()
    assert status.node("primary").role == "standby"
    assert status.node("primary").timeline == status.node("sync").timeline
    assert status.node("primary").sync_state == "async"
    _insert(cluster.url, 4)
    cluster.wait_replayed("primary", timeout_s=30)
    assert _rows(cluster.direct_url("primary")) == {1, 3, 4}


def test_paused_primary_resumed_after_promotion_is_split_brain(make_cluster: MakeCluster) -> None:
    """A primary paused (SIGSTOP) while "sync" is promoted, then resumed, is still a read-write primary on the
    old timeline: both take writes the other never sees, and the multi-host URL reaches the old one first."""
    cluster = make_cluster("async")
    _insert(cluster.url, 1)
    cluster.wait_replayed("sync", timeout_s=30)
    cluster.pause("primary")
    assert _roles(cluster)["primary"] == "paused"
    cluster.promote("sync")
    cluster.resume("primary")
    for name in ("primary", "sync"):
        assert _answer(cluster.direct_url(name), "SELECT pg_is_in_recovery()") is False
        assert _answer(cluster.direct_url(name), "SHOW transaction_read_only") == "off"
    _insert(cluster.direct_url("primary"), 100)
    _insert(cluster.direct_url("sync"), 200)
    assert _rows(cluster.direct_url("primary")) == {1, 100}
    assert _rows(cluster.direct_url("sync")) == {1, 200}
    status = cluster.status()
    assert _roles(cluster) == {"primary": "primary", "sync": "primary", "async": "standby"}
    assert status.node("primary").timeline != status.node("sync").timeline
    assert _answer(cluster.url, "SHOW cluster_name") == "primary"


# -- the service -------------------------------------------------------------------------------------------


def test_not_started_by_default() -> None:
    """``eosink services up`` with no names leaves the replicated PostgreSQL out; named, it is chosen."""
    assert "postgres-replicated" not in cli.selected([], secure=False)
    assert "postgres-replicated" not in cli.selected([], secure=True)
    assert cli.selected(["postgres-replicated"], secure=False) == ["postgres-replicated"]


def test_control_without_supervisor_is_a_clear_error(tmp_path: Path) -> None:
    """A control call when no supervisor listens is a ServiceError that says so and how to start it."""
    endpoint = ReplicatedPostgresEndpoint(url="", ports={"primary": 1}, control=str(tmp_path / "ctl.sock"))
    with pytest.raises(ServiceError, match="supervisor is not running") as err:
        ClusterControl(endpoint).promote("sync")
    assert err.value.fix is not None and "eosink services up postgres-replicated" in err.value.fix


@pytest.mark.full  # about 20 s: a supervisor process and a cluster of its own
def test_service_up_check_promote_down(monkeypatch: pytest.MonkeyPatch) -> None:
    """``eosink services up|check|down postgres-replicated`` in a subprocess work; ClusterControl promotes
    "sync" through the control socket after the primary is killed; down leaves no process of the cluster and
    a control call after it is a ServiceError that says the supervisor is not running."""
    cache = Path(tempfile.mkdtemp(prefix="eosink-rep-"))  # short: the control socket's path must fit
    monkeypatch.setenv("EOSINK_CACHE", str(cache))
    env = {**os.environ, "EOSINK_CACHE": str(cache)}

    def services(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "eosink.cli", "services", *args, "postgres-replicated"]
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)

    service = ReplicatedPostgresService()
    try:
        up = services("up")
        assert up.returncode == 0, up.stderr
        check = services("check")
        assert check.returncode == 0, check.stdout + check.stderr
        assert "ok    postgres-replicated (sync): primary=primary tl1" in check.stdout
        control = ClusterControl(service.endpoint())
        assert oct(os.stat(control.endpoint.control).st_mode & 0o777) == "0o600"
        recorded = json.loads((service.data / "nodes.json").read_text())["nodes"]
        nodes = [Proc(int(r["pid"]), int(r["start_time"])) for r in recorded.values()]
        supervisor = service.pid()
        control.kill("primary")
        control.promote("sync")
        control.wait_streaming("async", timeout_s=30)
        assert control.primary() == "sync"
        assert _answer(control.url, "SHOW cluster_name") == "sync"
        assert control.status().node("sync").timeline == 2
        with pytest.raises(ServiceError, match="no node called"):
            control.kill("nobody")
        with pytest.raises(ServiceError, match="Unknown operation 'close'"):
            control.request("close")  # only the listed operations: not every method of the cluster
        down = services("down")
        assert down.returncode == 0, down.stderr
        assert supervisor is not None and not is_alive(supervisor)
        assert not any(node.alive() for node in nodes)
        with pytest.raises(ServiceError, match="not running"):
            control.status()
    finally:
        services("down")
        shutil.rmtree(cache, ignore_errors=True)
