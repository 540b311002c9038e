"""A Spark pipeline into the HDFS sink on an HA name service (:class:`~eosink.services.hdfs_ha.HdfsHaCluster`,
``hdfs://ns1``: two NameNodes sharing their edit log, each behind a fault proxy) that fails over at a step of the
commit, with the query's checkpoint on ``hdfs://ns1`` too.

The driver (``sink_driver.py --sink hdfs``) writes through ``HdfsConfig(..., namenodes=ha.namenodes())``; Spark's
Hadoop client reaches the checkpoint through ``ha.spark_conf()``. eosink's own reads and writes of that checkpoint
(Spark's commit log, eosink's manifests) open ``hdfs://ns1`` from the location alone, so the name service is also
in ``$HADOOP_CONF_DIR`` (an ``hdfs-site.xml`` of ``ha.client_config()``), in the driver and in this process.

Each test freezes the driver (SIGSTOP of its session) at a step of batch 1's commit, kills the active NameNode and
makes the standby active, thaws the driver and lets the run go on (restarted from the checkpoint if it stops with
an eosink error). The judge is :class:`~eosink.connectors.hdfs.audit.WebHdfsReader` (WebHDFS at both NameNodes, no
hdfs-native), polling throughout and once after: every row once, none gone after it was read, no batch torn; and
the batch records hold every row once, one per batch of Spark's commit log, nothing left in doubt. Between tests
the cluster is put back (the stopped NameNode started, nn0 active again).

The same for a Delta table on the name service (``sink_driver.py --sink delta``, delta-rs through the NameNodes),
judged by :class:`WebHdfsDeltaRows` (the log replayed over WebHDFS, the live files read with pyarrow) and by the
table's own log (eosink's commits, nothing in doubt, read with delta-rs in a fresh process).
"""

from __future__ import annotations

import getpass
import io
import json
import re
import shlex
import signal
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pyarrow.parquet as pq
import pytest

from eosink._procs import is_stopped, kill_session, signal_session
from eosink.connectors.delta import DeltaConfig
from eosink.connectors.delta.testing import HDFS_COMMIT_REQUEST_MARKER as DELTA_HDFS_COMMIT
from eosink.connectors.hdfs import HdfsConfig
from eosink.connectors.hdfs.audit import canonical, webhdfs_get
from eosink.connectors.hdfs.testing import COMMIT_REQUEST_MARKER
from eosink.errors import ServiceError
from eosink.services.hdfs_ha import HdfsHaCluster

from ..connectors.hdfs.test_hdfs_ha import _reader, config, ha
from .conftest import PartialBatchReader, Pipeline, finish_with_restarts, wait_for
from .test_hdfs_pipeline import SINK_DRIVER, HdfsPipeline
from .test_minio_cluster_pipeline import delta_records

pytestmark = [pytest.mark.spark, pytest.mark.full, pytest.mark.timeout(900)]

__all__ = ["config", "ha"]  # the connector test's fixtures: the cluster, and a fresh target with nn0 active

NAMENODES_VAR = "EOSINK_TEST_HDFS_NAMENODES"
# sink_driver.py makes its HdfsConfig (DeltaConfig) from the URL alone: run it with the name service's NameNodes given.
DRIVER_WITH_NAMENODES = f"""
import functools, json, os, runpy, sys
import eosink.connectors.delta as delta
import eosink.connectors.hdfs as hdfs
namenodes = json.loads(os.environ[{NAMENODES_VAR!r}])
hdfs.HdfsConfig = functools.partial(hdfs.HdfsConfig, namenodes=namenodes)
delta.DeltaConfig = functools.partial(delta.DeltaConfig, namenodes=namenodes)
sys.path.insert(0, {str(SINK_DRIVER.parent)!r})
runpy.run_path({str(SINK_DRIVER)!r}, run_name="__main__")
"""
COLUMNS = ("id", "account", "amount")


@pytest.fixture(scope="module")
def conf_dir(ha: HdfsHaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``$HADOOP_CONF_DIR`` naming ``ns1`` (no ``core-site.xml``: Spark's default file system stays local)."""
    folder = tmp_path_factory.mktemp("hadoop-conf")
    props = "".join(f"<property><name>{k}</name><value>{v}</value></property>" for k, v in ha.client_config().items())
    (folder / "hdfs-site.xml").write_text(f"<configuration>{props}</configuration>\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HADOOP_CONF_DIR", str(folder))
        yield folder


@dataclass
class HaPipeline(HdfsPipeline):
    """An :class:`HdfsPipeline` on ``hdfs://ns1`` (``cluster`` is the :class:`HdfsHaCluster`), its checkpoint
    there too."""

    def environment(self) -> dict[str, str]:
        submit = " ".join(f"--conf {shlex.quote(f'{k}={v}')}" for k, v in self.cluster.spark_conf().items())
        return {
            **Pipeline.environment(self),
            "EOSINK_HDFS_URL": self.cluster.url,
            NAMENODES_VAR: json.dumps(self.cluster.namenodes()),
            "PYSPARK_SUBMIT_ARGS": f"{submit} pyspark-shell",
        }

    def command(self, mode: str, master: str) -> list[str]:
        return ["-c", DRIVER_WITH_NAMENODES, *super().command(mode, master)[1:]]

    def config(self) -> HdfsConfig:
        return HdfsConfig(f"{self.cluster.url}{self.directory}", namenodes=self.cluster.namenodes())

    def expected_canonical(self) -> Counter[str]:
        """:meth:`expected` as the reader's rows."""
        return Counter({canonical(dict(zip(COLUMNS, row, strict=True))): n for row, n in self.expected().items()})


@pytest.fixture
def pipeline(
    tmp_path: Path, driver_java_opts: str, ha: HdfsHaCluster, config: HdfsConfig, conf_dir: Path
) -> Iterator[HaPipeline]:
    yield from _on_the_name_service(HaPipeline, tmp_path, driver_java_opts, ha, config)


_P = TypeVar("_P", bound="HaPipeline")


def _on_the_name_service(
    kind: type[_P], tmp_path: Path, java_opts: str, ha: HdfsHaCluster, config: HdfsConfig
) -> Iterator[_P]:
    """A pipeline of ``kind`` into ``config``'s target, its checkpoint beside it on the name service; the cluster
    put back after."""
    p = kind(tmp_path, java_opts=java_opts, cluster=ha, directory=config.path)
    p.checkpoint_uri = f"{ha.url}{config.path}-checkpoint"
    yield p
    p.close()
    _put_back(ha)


def _put_back(ha: HdfsHaCluster) -> None:
    """Start nn0 again if it is stopped (``config`` then makes it active), waiting past the harness's 60 s when a
    DataNode is slow to report to it (seen under load: the NameNode stays in safe mode for minutes)."""
    if ha.state()[0] != "stopped":
        return
    try:
        ha.start_namenode(0)
    except ServiceError as exc:
        if "safe mode" not in str(exc):
            raise
        wait_for(lambda: _out_of_safe_mode(ha, 0), 300, "nn0 to leave safe mode")
        ha.proxy(0).start()


def _out_of_safe_mode(ha: HdfsHaCluster, nn: int) -> bool:
    url = f"http://127.0.0.1:{ha.http_port(nn)}/jmx?qry=Hadoop:service=NameNode,name=NameNodeInfo"
    with urllib.request.urlopen(url, timeout=10) as reply:
        return json.load(reply)["beans"][0]["Safemode"] == ""


def _row(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(row[c] for c in COLUMNS)


def _failover_at(
    p: HaPipeline,
    ha: HdfsHaCluster,
    config: HdfsConfig,
    point: str,
    fail: Callable[[], None],
    then: Callable[[], None] | None = None,
) -> None:
    """Run ``p`` with its driver frozen at ``point`` of batch 1; ``fail()`` the cluster there, thaw the driver
    (``then()`` once it runs again), let the run finish (restarted while it stops with an eosink error). Pass: the
    reader finds every row once, nothing vanished or torn (idempotent: no batch torn once the run is done); the
    batch records are exact."""
    reader = _reader(ha, config)
    try:
        _frozen_then_failed(p, point, fail, then)
        verdict = reader.verdict(p.expected_canonical(), key=_row)
    finally:
        reader.stop()
    found = verdict.problems
    if p.strategy == "idempotent":  # a batch's files show before its record (no atomic visibility): whole at the end
        found = [x for x in found if not x.startswith("torn: ")]
        end = _reader(ha, config).verdict(p.expected_canonical(), key=_row)
        assert end.problems == [], end
    assert found == [], verdict
    assert verdict.rows == sum(p.expected().values()), verdict
    p.assert_exact()
    assert not p.checkpoint.exists(), "a local checkpoint was written"


def _frozen_then_failed(p: Pipeline, point: str, fail: Callable[[], None], then: Callable[[], None] | None) -> None:
    """Run ``p`` with its driver frozen at ``point`` of batch 1; ``fail()`` the cluster there, thaw the driver
    (``then()`` once it runs again), let the run finish (restarted while it stops with an eosink error)."""
    proc = p.start(f"{point}@1:stop")
    try:
        wait_for(lambda: point in p.fired(), 300, f"{point} to fire")
        wait_for(lambda: is_stopped(proc.pid), 30, "the driver to stop")
        fail()
        assert proc.poll() is None, "the run ended before the failover"
        signal_session(proc.pid, signal.SIGCONT)
        if then is not None:
            then()
    except BaseException:
        kill_session(proc.pid)
        proc.wait()
        raise
    finish_with_restarts(p, proc)


def _kill_active(ha: HdfsHaCluster) -> None:
    """The active NameNode stopped, the standby made active; nn1 is active after (nn0 was, see ``config``)."""
    assert ha.kill_active() == 0 and ha.active() == 1, ha.state()


# The steps of batch 1's commit the active NameNode is killed at, with the driver frozen there: mid-write (F2, in
# a participant), after the participants' pre_commit (F3), after Spark's commit log before the sink's commit (F5,
# 2pc only), mid-commit (F6: some files gathered into the batch's staging directory; idempotent: the batch's files
# checked, its record not yet written) and after the commit (F8).
STEPS = [
    pytest.param(strategy, point, id=f"{strategy}-{point}")
    for strategy in ("2pc", "txid-check", "idempotent")
    for point in ("F2", "F3", "F5", "F6", "F8")
    if point != "F5" or strategy == "2pc"
]


@pytest.mark.parametrize(("strategy", "point"), STEPS)
def test_the_active_namenode_killed_at_a_step_of_the_commit_is_exact(
    pipeline: HaPipeline, ha: HdfsHaCluster, config: HdfsConfig, strategy: str, point: str
) -> None:
    pipeline.strategy = strategy
    _failover_at(pipeline, ha, config, point, lambda: _kill_active(ha))


# txid-check (frozen at F3) is left out for now: in 2 runs of 4 its driver, thawed, logged "commit of batch 1 is
# ambiguous ...; asking the sink" after the cut and then neither finished nor failed within 300 s.
@pytest.mark.parametrize(("strategy", "point"), [("2pc", "F5")])
def test_the_commits_rename_reply_lost_as_the_active_namenode_dies_is_exact(
    pipeline: HaPipeline, ha: HdfsHaCluster, config: HdfsConfig, strategy: str, point: str
) -> None:
    """Batch 1's deciding rename (staging onto the batch's directory) reaches the active NameNode and its reply is
    lost at that NameNode's proxy; right after, the proxy refuses the clients and the NameNode is killed, the
    standby made active. The cut is armed while the driver is frozen just before the commit (2pc: after Spark's
    commit log). Pass: the new active NameNode has the rename (the shared edit log),
    the batch is found committed through it, and the run is exact."""
    pipeline.strategy = strategy
    proxy = ha.proxy(0)

    def kill_after_the_cut() -> None:
        assert proxy.wait_for_cut(240), "the commit's rename never reached the active NameNode"
        proxy.refuse()  # at once: the driver's next call (commit_status) must meet the failover
        _kill_active(ha)

    try:
        _failover_at(
            pipeline, ha, config, point, lambda: proxy.cut_after_request(COMMIT_REQUEST_MARKER), kill_after_the_cut
        )
    finally:
        _put_back(ha)  # before its proxy forwards again
        proxy.passthrough()
    assert len(proxy.stats.requests_cut) == 1, proxy.stats  # batch 1's rename (the kill cut the other connections)


# -- Delta on the name service ------------------------------------------------------------------------------------


@dataclass
class DeltaHaPipeline(HaPipeline):
    """A Delta table on ``hdfs://ns1`` (``sink_driver.py --sink delta``: delta-rs through the name service's
    NameNodes), its checkpoint there too."""

    def command(self, mode: str, master: str) -> list[str]:
        argv = super().command(mode, master)
        argv[argv.index("--sink") + 1] = "delta"
        argv[argv.index("--target") + 1] = f"{self.cluster.url}{self.directory}"
        return argv

    def delta_config(self) -> DeltaConfig:
        return DeltaConfig(f"{self.cluster.url}{self.directory}", namenodes=self.cluster.namenodes())

    def found(self, app_id: str | None = None) -> Counter[tuple[Any, ...]]:
        """The table's rows over WebHDFS (:class:`WebHdfsDeltaRows`; delta-rs only in a fresh process, see
        :func:`~tests.spark.test_minio_cluster_pipeline.delta_records`)."""
        return WebHdfsDeltaRows(self.cluster, self.directory)()

    def bundles(self) -> list[int]:
        return delta_records(self.delta_config(), self.app_id)[0]

    def in_doubt(self) -> list[str]:
        return delta_records(self.delta_config(), self.app_id)[1]


class WebHdfsDeltaRows:
    """The newest snapshot of a Delta table on the name service as a reader that shares no client with eosink sees
    it: the log's JSON entries over WebHDFS (plain HTTP, at whichever NameNode answers as active), replayed into
    the live files, each read with pyarrow; the (id, account, amount) of every row."""

    def __init__(self, ha: HdfsHaCluster, path: str) -> None:
        self._bases = [f"http://127.0.0.1:{ha.http_port(nn)}/webhdfs/v1" for nn in (0, 1)]
        self._path = path.rstrip("/")
        self._user = getpass.getuser()

    def _get(self, path: str, op: str) -> bytes:
        return webhdfs_get(self._bases, path, op, user=self._user)

    def __call__(self) -> Counter[tuple[Any, ...]]:
        log = f"{self._path}/_delta_log"
        try:
            listing = json.loads(self._get(log, "LISTSTATUS"))["FileStatuses"]["FileStatus"]
        except FileNotFoundError:
            return Counter()
        names = sorted(str(f["pathSuffix"]) for f in listing)
        assert not any("checkpoint" in n for n in names), f"a log checkpoint this reader does not read: {names}"
        live: dict[str, None] = {}
        for name in (n for n in names if re.fullmatch(r"\d{20}\.json", n)):
            for line in self._get(f"{log}/{name}", "OPEN").decode("utf-8").splitlines():
                action = json.loads(line) if line.strip() else {}
                if "add" in action:
                    live[urllib.parse.unquote(action["add"]["path"])] = None
                elif "remove" in action:
                    live.pop(urllib.parse.unquote(action["remove"]["path"]), None)
        rows: Counter[tuple[Any, ...]] = Counter()
        for rel in live:
            table = pq.read_table(io.BytesIO(self._get(f"{self._path}/{rel}", "OPEN")), columns=list(COLUMNS))
            rows.update(_row(r) for r in table.to_pylist())
        return rows


@pytest.fixture
def delta_pipeline(
    tmp_path: Path, driver_java_opts: str, ha: HdfsHaCluster, config: HdfsConfig, conf_dir: Path
) -> Iterator[DeltaHaPipeline]:
    yield from _on_the_name_service(DeltaHaPipeline, tmp_path, driver_java_opts, ha, config)


def _delta_failover_at(
    p: DeltaHaPipeline,
    ha: HdfsHaCluster,
    point: str,
    fail: Callable[[], None],
    then: Callable[[], None] | None = None,
) -> None:
    """:func:`_failover_at` for a Delta table, judged by :class:`WebHdfsDeltaRows` polling throughout and once
    after: every row once, no batch in part, nothing vanished; eosink's commits one per batch of Spark's log."""
    read = WebHdfsDeltaRows(ha, p.directory)
    with PartialBatchReader(p.expected(), read, interval_s=0.5) as reader:
        _frozen_then_failed(p, point, fail, then)
    final = read()
    assert final == p.expected(), f"lost {p.expected() - final}, duplicated {final - p.expected()}"
    assert reader.polls > 0
    assert reader.partial == [] and reader.problems == [], (reader.partial[:5], reader.problems)
    p.assert_exact()
    assert not p.checkpoint.exists(), "a local checkpoint was written"


@pytest.mark.parametrize(("strategy", "point"), STEPS)
def test_delta_the_active_namenode_killed_at_a_step_of_the_commit_is_exact(
    delta_pipeline: DeltaHaPipeline, ha: HdfsHaCluster, strategy: str, point: str
) -> None:
    delta_pipeline.strategy = strategy
    _delta_failover_at(delta_pipeline, ha, point, lambda: _kill_active(ha))


@pytest.mark.xfail(
    run=False,
    reason="delta-rs's bundled HDFS client never answers after this failover (docs/design.md, 9. Known limits): in "
    "the run of 2026-12-04 the 2pc case's every read of the log hung (3 fresh processes, 60 s each) and the "
    "txid-check case's driver did not finish; run with --runxfail",
)
@pytest.mark.parametrize(("strategy", "point"), [("2pc", "F5"), ("txid-check", "F3")])
def test_delta_the_log_entrys_rename_reply_lost_as_the_active_namenode_dies_is_exact(
    delta_pipeline: DeltaHaPipeline, ha: HdfsHaCluster, strategy: str, point: str
) -> None:
    """Batch 1's log entry (the rename of its temporary file onto ``_delta_log/<version>.json``) reaches the active
    NameNode and its reply is lost at that NameNode's proxy; right after, the proxy refuses the clients and the
    NameNode is killed, the standby made active. Pass: the new active NameNode has the entry (the shared edit log),
    the batch is found committed by its txn, and the run is exact."""
    delta_pipeline.strategy = strategy
    proxy = ha.proxy(0)

    def kill_after_the_cut() -> None:
        assert proxy.wait_for_cut(240), "the log entry's rename never reached the active NameNode"
        proxy.refuse()
        _kill_active(ha)

    try:
        _delta_failover_at(
            delta_pipeline, ha, point, lambda: proxy.cut_after_request(DELTA_HDFS_COMMIT), kill_after_the_cut
        )
    finally:
        _put_back(ha)
        proxy.passthrough()
    assert len(proxy.stats.requests_cut) == 1, proxy.stats
