"""The HDFS connector's bad-input catalogue, driven through the real protocol into the real MiniDFSCluster.

Each case runs batches through the real Coordinator in Spark's order
(:class:`~eosink.contracts._mini.SparkOrderDriver`) until the bad input stops the query, then checks:

1. the error's class (ConfigurationError / SchemaError / BadRecordError / TransientError), that its
   problem names what is wrong and its fix names what to change;
2. nothing of the failing batch is visible: ``read_committed`` and a reader that lists the target
   see the batches committed before it, once;
3. after the fix, a restart (a new sink and Coordinator, the same checkpoint and app_id) resumes,
   and the target holds every batch exactly once, each with its record, no prepared work left and
   no manifest left in the checkpoint.

Settings that cannot be right (a path with ``..``, an over-long path, a URL of another scheme) are
refused when the HdfsConfig is made, before any query exists.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import eosink
from eosink.connectors.hdfs import HdfsConfig, HdfsSink, committed_batches, read_committed
from eosink.connectors.hdfs._read import read_rows
from eosink.contracts._mini import (
    SCHEMA,
    VARIANTS,
    FakeCheckpoint,
    MemoryBatch,
    SparkOrderDriver,
    Variant,
    canon,
    make_rows,
)
from eosink.errors import BadRecordError, ConfigurationError, EosinkError, SchemaError, TransientError
from eosink.services import get_service
from eosink.services._process import free_port
from eosink.stores.hdfs import Fs

APP = "app_bad"
TWO_PC = next(v for v in VARIANTS if v.id == "2pc")
UNREACHABLE_WITHIN_S = 30.0


class Driver(SparkOrderDriver[HdfsConfig]):
    """:class:`~eosink.contracts._mini.SparkOrderDriver` around :class:`HdfsSink`, with a fixed query id."""

    def __init__(self, tmp_path: Path, config: HdfsConfig, variant: Variant = TWO_PC, query_id: str = "q-bad") -> None:
        super().__init__(tmp_path, variant, config, HdfsSink, APP)
        self.ckpt = FakeCheckpoint(tmp_path / "checkpoint", query_id)
        self.coordinator = self._new()


class StringAmounts(MemoryBatch):
    """A batch whose ``amount`` column is a string: another schema than the target's."""

    def shares(self, by_hash: bool = False) -> list[list[pa.RecordBatch]]:
        schema = SCHEMA.set(SCHEMA.get_field_index("amount"), pa.field("amount", pa.string()))
        size = -(-len(self.rows) // self.participants)
        groups = [self.rows[i * size : (i + 1) * size] for i in range(self.participants)]
        return [
            [pa.RecordBatch.from_pylist(g[j : j + self.chunk], schema=schema) for j in range(0, len(g), self.chunk)]
            for g in groups
        ]


def work(n: int = 3, *, bad: dict[str, Any] | None = None, at: int = 1) -> list[MemoryBatch]:
    """``n`` batches; ``bad`` overrides fields of batch ``at``'s last row (the last participant's)."""
    out = []
    for b in range(n):
        rows = make_rows(b)
        if bad is not None and b == at:
            rows[-1] = {**rows[-1], **bad}
        out.append(MemoryBatch(rows))
    return out


def expected(batches: Sequence[MemoryBatch]) -> Counter[str]:
    return canon([r for b in batches for r in b.rows])


def only(config: HdfsConfig, batches: Sequence[MemoryBatch], partitioned: bool = False) -> None:
    """Exactly ``batches`` are visible, each once with its record, to ``read_committed`` and to a reader that
    lists the target alike (partition values read back as strings by the latter)."""
    assert canon(read_committed(config, APP).to_pylist()) == expected(batches)
    assert [r.bundle.batch.batch_id for _, r in committed_batches(config, APP)] == list(range(len(batches)))
    listed = read_rows(Fs(config), config.path, config.format)
    if not partitioned:
        assert canon(listed) == expected(batches)
    else:
        assert len(listed) == sum(len(b.rows) for b in batches)


def stop_fix_resume(
    driver: Driver,
    bad: Sequence[MemoryBatch],
    error: type[EosinkError],
    *,
    fixed: Sequence[MemoryBatch] | None = None,
    config: HdfsConfig | None = None,
    fix: Callable[[], object] = lambda: None,
    committed: int = 0,
) -> EosinkError:
    """Run the ``bad`` batches until the query stops with ``error``; check that only the first ``committed``
    batches are visible; restart with the fix; check that every batch is there once, no prepared work is
    left and no manifest is in the checkpoint. The error, to check."""
    err = driver.fail(bad, error)
    fix()
    fixed = bad if fixed is None else fixed
    good = config or driver.config
    only(good, fixed[:committed], partitioned=bool(good.partition_by))
    driver.restart(config)
    driver.run(fixed)
    driver.close()
    only(driver.config, fixed, partitioned=bool(good.partition_by))
    assert HdfsSink(driver.config).recover(APP) == []
    assert driver.ckpt.spark().manifest_batches(APP) == []
    return err


def assert_names(err: EosinkError, problem: Sequence[str], fix: Sequence[str]) -> None:
    """The error says what is wrong (``problem``) and what to change (``fix``), each as given words."""
    assert err.fix, f"no fix in {err!r}"
    for word in problem:
        assert word.lower() in err.problem.lower(), f"{word!r} not in the problem: {err.problem}"
    for word in fix:
        assert word.lower() in err.fix.lower(), f"{word!r} not in the fix: {err.fix}"


def webhdfs(path: str, op: str, method: str = "PUT", **params: str) -> Any:
    """A WebHDFS call to the harness's NameNode as its superuser (quota and ownership are admin calls)."""
    endpoint = get_service("hdfs").endpoint()
    query = "&".join([f"op={op}", *(f"{k}={v}" for k, v in params.items())])
    url = f"{endpoint.webhdfs_url}{path}?{query}"
    request = urllib.request.Request(url, method=method)
    with urllib.request.urlopen(request, timeout=30) as reply:
        body = reply.read()
    return json.loads(body) if body else None


def superuser() -> str:
    """The harness's HDFS superuser: the login that runs the cluster (this process's)."""
    import getpass

    return os.environ.get("HADOOP_USER_NAME") or getpass.getuser()


# -- where the target is, and who may write -----------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("hdfs://127.0.0.1:1/data/../etc", ["'..'"]),
        ("hdfs://127.0.0.1:1/" + "d" * 300, ["bytes"]),
        ("hdfs://127.0.0.1:1/" + "/".join(["d" * 200] * 40), ["characters"]),
        ("s3://bucket/data", ["not an hdfs:// URL"]),
        ("hdfs://user:secret@127.0.0.1:1/data", ["user information"]),
        ("/data/events", ["no fs.defaultFS"]),
        ("hdfs://127.0.0.1:1/", ["root"]),
    ],
)
def test_an_impossible_target_is_refused_when_the_config_is_made(
    url: str, words: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A path with ``..``, a component over 255 bytes, a path over HDFS's length, another scheme, a password
    in the URL, a bare path without a default file system, the root: ConfigurationError at HdfsConfig(...),
    naming the problem (and never the password)."""
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    with pytest.raises(ConfigurationError) as err:
        HdfsConfig(url)
    assert_names(err.value, words, [])
    assert "secret" not in str(err.value)


@pytest.mark.parametrize("column", ["_tag", ".tag"])
def test_a_partition_column_with_a_hidden_name_is_refused_when_the_config_is_made(column: str) -> None:
    """Partition directories ``_tag=...`` or ``.tag=...`` would be skipped by listing readers (pyarrow, Hive)
    and by the idempotent commit's cleanup: ConfigurationError at HdfsConfig(...), naming the column."""
    with pytest.raises(ConfigurationError) as err:
        HdfsConfig("hdfs://127.0.0.1:1/data", partition_by=(column,))
    assert_names(err.value, [repr(column), "hidden"], ["Partition by"])


def test_an_unreachable_namenode_is_a_transient_error_within_seconds(tmp_path: Path, target: str) -> None:
    """A NameNode nobody listens on: TransientError naming the target and saying the NameNode must be up,
    within 30 s (hdfs-native's own retries would take minutes); with the right address, every batch once."""
    good = HdfsConfig(target)
    port = free_port()
    bad = good.with_address("127.0.0.1", port)
    began = time.monotonic()
    err = stop_fix_resume(Driver(tmp_path, bad), work(), TransientError, config=good)
    assert time.monotonic() - began < UNREACHABLE_WITHIN_S + 60  # the resume included
    assert_names(err, [f"127.0.0.1:{port}"], ["NameNode"])


def test_a_user_without_permission_is_refused_and_a_permitted_writer_resumes(tmp_path: Path, target: str) -> None:
    """The target belongs to the superuser (mode 755) and the sink writes as another user: PermissionDeniedError
    naming the user and the permission, whose fix is the ``hdfs dfs -chown``; nothing is written. (In a
    process of its own: hdfs-native takes one user per process.) A permitted writer then writes every batch
    once from the same checkpoint."""
    sink = HdfsSink(HdfsConfig(target))
    sink._ensure_target()
    script = textwrap.dedent(
        """
        import json, sys
        from pathlib import Path
        from tests.connectors.hdfs.test_hdfs_bad_input import Driver, work
        from eosink.connectors.hdfs import HdfsConfig
        from eosink.errors import PermissionDeniedError

        driver = Driver(Path(sys.argv[1]), HdfsConfig(sys.argv[2], user="mallory"))
        err = driver.fail(work(), PermissionDeniedError)
        print(json.dumps({"problem": err.problem, "fix": err.fix, "permission": err.permission}))
        """
    )
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path), target], capture_output=True, text=True, timeout=120, cwd=root
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    err = ConfigurationError(found["problem"], found["fix"])
    assert_names(err, ["refused", "Permission denied", "mallory"], ["mallory", "chown"])
    assert found["permission"] == f"rwx on {HdfsConfig(target).path} (its owner)"
    only(HdfsConfig(target), [])
    driver = Driver(tmp_path, HdfsConfig(target))
    driver.run(work())
    only(HdfsConfig(target), work())


def test_a_target_that_is_a_file_stops_the_query_and_resumes_once_it_is_moved(tmp_path: Path, target: str) -> None:
    """A file where the target directory should be: ConfigurationError "is a file", fix "Point the sink at a
    directory"; once the file is gone, every batch once."""
    config = HdfsConfig(target)
    fs = Fs(config)
    writer = fs.create(config.path, parents=True)
    writer.write(b"not a directory")
    writer.close()
    err = stop_fix_resume(Driver(tmp_path, config), work(), ConfigurationError, fix=lambda: fs.delete(config.path))
    assert_names(err, [config.path, "is a file"], ["directory"])


def test_a_missing_parent_with_create_dirs_off_names_what_is_missing(tmp_path: Path, target: str) -> None:
    """``create_dirs=False`` and the target's parent missing: ConfigurationError naming the missing directory,
    fix "create it"; once made, every batch once."""
    config = HdfsConfig(f"{target}/parent/events", create_dirs=False)
    fs = Fs(config)
    err = stop_fix_resume(Driver(tmp_path, config), work(), ConfigurationError, fix=lambda: fs.mkdirs(config.path))
    assert_names(err, [f"{target.split('//', 1)[1].split('/', 1)[1]}/parent", "does not exist"], ["mkdir"])


def test_a_replication_above_the_live_datanodes_is_refused_at_setup(tmp_path: Path, target: str) -> None:
    """``replication=3`` against the harness's two live DataNodes (read from the NameNode's JMX):
    ConfigurationError at the query's start naming the count, fix "replication <= 2"; with replication=2,
    every batch once."""
    webhdfs_url = get_service("hdfs").endpoint().webhdfs_url
    http = webhdfs_url.rsplit("/webhdfs", 1)[0]
    bad = HdfsConfig(target, replication=3, namenode_http=http)
    err = stop_fix_resume(
        Driver(tmp_path, bad), work(), ConfigurationError, config=dataclasses.replace(bad, replication=2)
    )
    assert_names(err, ["replication=3", "2 live DataNode"], ["replication <= 2"])


def test_an_exceeded_space_quota_stops_the_query_before_its_batch_is_visible(tmp_path: Path, target: str) -> None:
    """A space quota on the target smaller than a block, set after batch 0 committed: ConfigurationError
    about the quota whose fix names the dfsadmin command; batch 1 is invisible; with the quota cleared,
    every batch once."""
    config = HdfsConfig(target)
    driver = Driver(tmp_path, config)
    batches = work()
    driver.run(batches[:1])
    path = config.path
    webhdfs(path, "SETQUOTA", namespacequota="-1", storagespacequota="1024", **{"user.name": superuser()})

    def clear() -> None:
        webhdfs(path, "SETQUOTA", namespacequota="-1", storagespacequota="-1", **{"user.name": superuser()})

    err = stop_fix_resume(driver, batches, ConfigurationError, fix=clear, committed=1)
    assert_names(err, ["quota"], ["setSpaceQuota"])


# -- what the rows hold --------------------------------------------------------------------------------


def test_a_schema_change_between_batches_is_a_schema_error(tmp_path: Path, target: str) -> None:
    """Batch 1 writes ``amount`` as a string where batch 0 committed a double: SchemaError naming both
    schemas, nothing of batch 1 visible; with the original schema, every batch once."""
    rows = [make_rows(b) for b in range(3)]
    bad = [MemoryBatch(rows[0]), StringAmounts([{**r, "amount": str(r["amount"])} for r in rows[1]])]
    fixed = [MemoryBatch(r) for r in rows]
    err = stop_fix_resume(Driver(tmp_path, HdfsConfig(target)), bad, SchemaError, fixed=fixed, committed=1)
    assert_names(err, ["amount: string", "amount: double"], ["same columns"])


@pytest.mark.parametrize(
    "value",
    ["../escape", *(pytest.param(v, marks=pytest.mark.full) for v in ("a/b", ".", "..")), "tab\there", "x" * 300],
)
def test_a_hostile_partition_value_is_a_bad_record(tmp_path: Path, target: str, value: str) -> None:
    """A partition value that is a path (``..``, a slash), a control character or over 255 bytes: BadRecordError
    naming the column before any byte is written; with clean values, every batch once."""
    config = HdfsConfig(target, partition_by=("tag",))
    err = stop_fix_resume(
        Driver(tmp_path, config),
        work(bad={"tag": value}),
        BadRecordError,
        fixed=work(bad={"tag": "clean"}),
        committed=1,
    )
    assert_names(err, ["'tag'"], ["tag"])


def test_a_null_key_under_the_idempotent_strategy_is_a_bad_record(tmp_path: Path, target: str) -> None:
    """Idempotent by ``id`` and a row whose ``id`` is null: BadRecordError naming the key column; with the
    key filled, every batch once (newest row per key)."""
    variant = Variant("idempotent-id", lambda: eosink.Idempotent(["id"]), user_keys=True)
    rows = [make_rows(b, duplicate=False) for b in range(3)]
    bad = [MemoryBatch(r) for r in rows]
    bad[1] = MemoryBatch([*rows[1][:-1], {**rows[1][-1], "id": None}])
    fixed = [MemoryBatch(r) for r in rows]
    driver = Driver(tmp_path, HdfsConfig(target), variant)
    err = driver.fail(bad, BadRecordError)
    assert_names(err, ["'id'", "null"], ["id"])
    driver.restart()
    driver.run(fixed)
    assert canon(read_committed(HdfsConfig(target), APP).to_pylist()) == expected(fixed)
