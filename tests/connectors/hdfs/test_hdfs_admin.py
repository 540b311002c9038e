"""``eosink status`` and ``eosink recover`` on an HDFS target: what they read, through the CLI as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from eosink.connectors.hdfs import HdfsConfig, HdfsSink
from eosink.connectors.hdfs.admin import HdfsAdmin
from eosink.contract import BatchRef
from eosink.contracts._mini import FakeCheckpoint
from eosink.contracts._steps import prepare
from eosink.contracts.suite import bundle_for, rows_for
from eosink.errors import ConfigurationError

APP = "payments/2026 · ünï"
EOSINK = str(Path(sys.executable).with_name("eosink"))


def test_status_shows_the_epoch_the_last_batch_and_the_in_doubt_work_with_its_age(tmp_path: Path, target: str) -> None:
    """Pass: after batch 0 committed and batch 1 prepared by two participants, ``eosink status --sink hdfs
    --url ... --json`` names the app_id (unsafe characters and all), its epoch, batch 0 with its rows, and
    batch 1's two prepared attempts with a non-negative age; exit status 1 (work in doubt). After
    ``eosink recover --yes`` (2pc, Spark's commit log without batch 1) nothing is in doubt (exit 0) and
    batch 1 is still not visible."""
    sink = HdfsSink(HdfsConfig(target))
    epoch = sink.fence(APP)
    first = [prepare(sink, BatchRef(APP, 0), epoch, p, rows_for(APP, 0, p, 3)) for p in range(2)]
    sink.commit(BatchRef(APP, 0), first, bundle_for(BatchRef(APP, 0), epoch, first))
    for p in range(2):
        prepare(sink, BatchRef(APP, 1), epoch, p, rows_for(APP, 1, p, 3))
    status = subprocess.run(
        [EOSINK, "status", "--sink", "hdfs", "--url", target, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert status.returncode == 1, status.stderr
    [app] = json.loads(status.stdout)["apps"]
    assert app["app_id"] == APP and app["epoch"] == epoch
    assert app["last_bundle"]["batch_id"] == 0 and app["last_bundle"]["rows"] == 6
    assert sorted(w["batch_id"] for w in app["in_doubt"]) == [1, 1]
    assert all(w["age_s"] >= 0 for w in app["in_doubt"])
    checkpoint = str(FakeCheckpoint(tmp_path / "checkpoint").root)
    recovered = subprocess.run(
        [
            EOSINK,
            "recover",
            "--sink",
            "hdfs",
            "--url",
            target,
            "--app-id",
            APP,
            "--strategy",
            "2pc",
            "--yes",
            "--checkpoint",
            checkpoint,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    assert HdfsAdmin(HdfsConfig(target)).status(APP).apps[0].in_doubt == ()
    assert sink.fetch_last_bundle(APP) is not None and sink.fetch_last_bundle(APP).batch.batch_id == 0  # type: ignore[union-attr]


def test_an_unknown_app_id_is_a_configuration_error_naming_the_known_ones(target: str) -> None:
    sink = HdfsSink(HdfsConfig(target))
    sink.fence(APP)
    with pytest.raises(ConfigurationError) as err:
        HdfsAdmin(HdfsConfig(target)).status("nope")
    assert "nope" in err.value.problem and err.value.fix is not None and APP in err.value.fix


def test_a_kill_between_the_first_epoch_and_the_app_id_file_is_repaired_by_the_next_fence(target: str) -> None:
    """The app_id's name file is written after its first epoch file: a driver killed in between left an app
    that ``eosink status`` could not name. Pass: after the next fence it is known again."""
    sink = HdfsSink(HdfsConfig(target))
    sink.fence(APP)
    sink.fs.delete(f"{sink._app(APP)}/app_id", False)  # what the kill left
    assert HdfsAdmin(HdfsConfig(target)).app_ids() == []
    sink.fence(APP)
    assert HdfsAdmin(HdfsConfig(target)).app_ids() == [APP]
