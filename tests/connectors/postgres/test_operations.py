"""``eosink status`` and ``eosink recover`` against real in-doubt work on a real PostgreSQL server.

Every test builds the same situation with the driver's own code: a 2PC coordinator writes batch 0
(committed, Spark's ``commits/0`` written) and batch 1 up to its manifest, then the driver is
dropped without committing: batch 1 is three prepared transactions and a manifest in a Spark-like
checkpoint directory. The CLI then runs on it: in this process (``eosink.cli.main``), and as a
subprocess (``eosink ...``) where the exit status and the output streams are what is tested.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from eosink.checkpoint import Manifest
from eosink.connectors.postgres import PostgresConfig, PostgresSink
from eosink.connectors.postgres._control import gid_prefix
from eosink.connectors.postgres.testing import PostgresHarness
from eosink.contract import BatchRef, Bundle, Fingerprint, TaskRef
from eosink.contracts._mini import FAST, FakeCheckpoint, MemoryBatch, NoWatcherCoordinator, canon, make_rows
from eosink.errors import FencedError
from eosink.services.postgres import PostgresEndpoint
from eosink.strategies import TwoPhaseCommit

APP = "ops-app"
HARNESS = PostgresHarness()
EOSINK = str(Path(sys.executable).parent / "eosink")


@dataclass
class Scene:
    """Batch 0 committed, batch 1 prepared (three gids) with its manifest; the driver still around."""

    endpoint: PostgresEndpoint
    config: PostgresConfig
    ckpt: FakeCheckpoint
    driver: NoWatcherCoordinator
    batches: list[MemoryBatch]
    password: str
    bare_conninfo: str  # the conninfo without its password

    def run(
        self, *args: str, env: dict[str, str] | None = None, subprocess_: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """``eosink ARGS --sink postgres --table T --control-schema S``, the password only in PGPASSWORD.

        In this process (``eosink.cli.main``, output captured), or with ``subprocess_`` as an
        operator runs it: a Python start costs a second or two, so only the tests of what
        differs between the two (the exit status, output streams) pay it.
        """
        full_env = {"PGPASSWORD": self.password, **(env or {})}
        common = [
            "--sink",
            "postgres",
            "--table",
            str(self.config.table),
            "--control-schema",
            self.config.control_schema,
        ]
        if "--conninfo" not in args and "--conninfo-env" not in args:
            common += ["--conninfo", self.bare_conninfo]
        if subprocess_:
            proc = subprocess.run(
                [EOSINK, *args, *common],
                capture_output=True,
                text=True,
                env={**os.environ, **full_env},
                timeout=120,
                check=False,
            )
        else:
            proc = _in_process([*args, *common], full_env)
        assert self.password not in proc.stdout + proc.stderr
        return proc

    def recover(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run("recover", "--app-id", APP, "--checkpoint", str(self.ckpt.root), *args)

    def admin(self) -> psycopg.Connection[tuple[Any, ...]]:
        return psycopg.connect(self.endpoint.url, autocommit=True)

    def state(self) -> dict[str, Any]:
        """Everything recover could change: prepared gids, txns, bundles, epoch, rows, manifests."""
        ctl = self.config.control_schema
        prefix = gid_prefix(ctl)
        with self.admin() as conn:
            gids = conn.execute(
                "SELECT gid FROM pg_prepared_xacts WHERE left(gid, %s) = %s ORDER BY gid", (len(prefix), prefix)
            ).fetchall()
            txns = conn.execute(sql.SQL("SELECT id, state FROM {} ORDER BY id").format(sql.Identifier(ctl, "txns")))
            bundles = conn.execute(
                sql.SQL("SELECT batch_id FROM {} ORDER BY batch_id").format(sql.Identifier(ctl, "bundles"))
            ).fetchall()
            epoch = conn.execute(
                sql.SQL("SELECT epoch FROM {} WHERE app_id = %s").format(sql.Identifier(ctl, "epochs")), (APP,)
            ).fetchone()
            return {
                "gids": [r[0] for r in gids],
                "txns": txns.fetchall(),
                "bundles": [r[0] for r in bundles],
                "epoch": epoch[0] if epoch else None,
                "manifests": self.ckpt.spark().manifest_batches(APP),
            }

    def visible(self) -> Any:
        return canon(HARNESS.read_rows(None, str(self.config.table)))

    def expected(self, upto: int) -> Any:
        return canon([r for b in self.batches[:upto] for r in b.rows])


def _in_process(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``eosink.cli.main(argv)`` with ``env`` set (libpq reads PGPASSWORD from it) and its output captured."""
    from eosink.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved = {k: os.environ.get(k) for k in env}
    try:
        os.environ.update(env)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return subprocess.CompletedProcess(["eosink", *argv], code, out.getvalue(), err.getvalue())


@pytest.fixture
def scene(tmp_path: Path, postgres_endpoint: PostgresEndpoint) -> Iterator[Scene]:
    tag = uuid.uuid4().hex[:10]
    table, ctl = f"ops_{tag}", f"ops_{tag}_ctl"
    config = PostgresConfig(postgres_endpoint.url, table=table, control_schema=ctl, create_table=True)
    ckpt = FakeCheckpoint(tmp_path / "checkpoint")
    batches = [MemoryBatch(make_rows(b)) for b in range(2)]
    driver = NoWatcherCoordinator(PostgresSink(config), APP, TwoPhaseCommit(), ckpt.spark(), FAST)
    try:
        ckpt.write_offsets(0)
        driver.process(0, batches[0])
        ckpt.write_commit(0)
        assert driver.commit_ready() == 1
        ckpt.write_offsets(1)
        driver.process(1, batches[1])  # prepared and in the manifest; the commit waits for Spark
        driver.sink.close()  # the driver "dies": its prepared transactions stay
        params = conninfo_to_dict(postgres_endpoint.url)
        password = str(params.pop("password"))
        made = Scene(postgres_endpoint, config, ckpt, driver, batches, password, make_conninfo("", **params))
        assert len(made.state()["gids"]) == 3 and made.state()["manifests"] == [1]
        yield made
    finally:
        driver.sink.close()
        HARNESS.drop(ctl, [sql.Identifier(table)])


def test_status_lists_in_doubt_work_with_its_age(scene: Scene) -> None:
    """Pass: exit 1 (work in doubt); the app's last bundle is batch 0 with its rows, batch 1's three
    prepared gids are listed with participant, age, owner and database, in JSON and as a table."""
    proc = scene.run("status", "--json")
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    (app,) = doc["apps"]
    assert app["app_id"] == APP and app["epoch"] == 1
    assert app["last_bundle"]["batch_id"] == 0
    assert app["last_bundle"]["rows"] == len(scene.batches[0].rows)
    assert app["last_bundle"]["strategy"] == "2pc"
    prepared = [w for w in app["in_doubt"] if w["kind"] == "prepared"]
    assert sorted(p["participant"] for p in prepared) == [0, 1, 2]
    assert {p["batch_id"] for p in prepared} == {1}
    assert all(p["age_s"] >= 0 and p["details"]["database"] == scene.endpoint.dbname for p in prepared)
    assert all(p["details"]["owner"] == scene.endpoint.user for p in prepared)
    assert len(app["in_doubt"]) == 3 and doc["orphans"] == [] and doc["in_doubt"] == 3

    table = scene.run("status", "--app-id", APP)
    assert table.returncode == 1
    lines = table.stdout.splitlines()
    assert re.search(
        rf"^{re.escape(APP)}\s+1\s+0\s+{len(scene.batches[0].rows)}\s+\d+s ago\s+2pc\s+3$", table.stdout, re.M
    )
    prepared = [line for line in lines if line.startswith("prepared ")]
    assert len(prepared) == 3
    assert all(re.match(r"prepared\s+1\s+[012]\s+1\s+\d+s\s+", line) for line in prepared)


def test_status_shows_staged_work_and_orphans(scene: Scene) -> None:
    """A gid COMMIT PREPARED but not moved (a crash mid-commit) is 'staged'; a gid of an app_id the
    control schema does not know is an orphan. Pass: both listed, in doubt counts them."""
    gid = scene.state()["gids"][0]
    with scene.admin() as conn:
        conn.execute(sql.SQL("COMMIT PREPARED {}").format(sql.Literal(gid)))
    ghost = PostgresSink(scene.config)
    try:
        txn = ghost.begin(TaskRef(BatchRef("ghost", 7), 1, 0, "g0"))
        ghost.write(txn, scene.batches[0].shares()[0][0])
        orphan = ghost.pre_commit(txn)
    finally:
        ghost.close()
    doc = json.loads(scene.run("status", "--json").stdout)
    (app,) = doc["apps"]
    staged = [w for w in app["in_doubt"] if w["kind"] == "staged"]
    assert [s["id"] for s in staged] == [gid] and staged[0]["rows"] > 0
    assert len([w for w in app["in_doubt"] if w["kind"] == "prepared"]) == 2
    assert [o["id"] for o in doc["orphans"]] == [orphan.id]
    assert doc["orphans"][0]["batch_id"] == 7
    assert doc["in_doubt"] == 4
    text = scene.run("status").stdout
    assert re.search(rf"^staged\s+1\s+\d\s+1\s+\d+s\s+\d+\s+-\s+-\s+{re.escape(gid)}$", text, re.M)
    assert "unknown app_id" in text and orphan.id in text
    only = json.loads(scene.run("status", "--json", "--app-id", APP).stdout)
    assert only["orphans"] == []  # another app's gid is no orphan of this app


def test_recover_dry_run_changes_nothing(scene: Scene) -> None:
    """Pass: exit 0; the plan aborts batch 1 because Spark's commit log lacks it; every prepared gid,
    txns row, bundle, the epoch and the manifest are exactly as before; the output says it fences."""
    before = scene.state()
    proc = scene.recover("--dry-run", "--json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)["plan"]
    assert plan["strategy"] == "2pc" and plan["last_batch_id"] == 0
    (batch,) = plan["batches"]
    assert (batch["batch_id"], batch["action"], batch["spark_committed"]) == (1, "abort", False)
    assert sorted(batch["abort"]) == before["gids"]
    text = scene.recover("--dry-run")
    assert text.returncode == 0
    assert "dry run: nothing changed" in text.stdout and "zombie" in text.stdout
    assert re.search(
        rf"^1\s+abort\s+no\s+0\s+3\s+{len(scene.batches[1].rows)}\s+Spark's commit log does not hold batch 1",
        text.stdout,
        re.M,
    )
    assert scene.state() == before


def test_recover_without_yes_refuses_and_changes_nothing(scene: Scene) -> None:
    before = scene.state()
    proc = scene.recover()
    assert proc.returncode == 2
    assert "--yes" in proc.stderr and "FENCES" in proc.stderr
    assert scene.state() == before


def test_recover_aborts_what_spark_did_not_commit_and_fences_the_old_driver(scene: Scene) -> None:
    """2PC without ``commits/1``: Spark replays batch 1, so recover aborts it.

    Pass: exit 0; the gids and the manifest are gone, the epoch is 2, only batch 0 is visible,
    status is clean (exit 0); the old driver, told later that Spark committed batch 1, is fenced.
    """
    proc = scene.recover("--yes")
    assert proc.returncode == 0, proc.stderr
    assert "epoch 1 -> 2" in proc.stdout and "zombie" in proc.stdout
    assert "0 batch(es) rolled forward, 1 aborted" in proc.stdout
    after = scene.state()
    assert after["gids"] == [] and after["manifests"] == [] and after["epoch"] == 2 and after["bundles"] == [0]
    assert scene.visible() == scene.expected(upto=1)
    status = scene.run("status", "--app-id", APP)
    assert status.returncode == 0 and "nothing in doubt" in status.stdout
    scene.ckpt.write_commit(1)
    with pytest.raises(FencedError):
        scene.driver.commit_ready()
    assert scene.visible() == scene.expected(upto=1)


def test_recover_rolls_forward_what_spark_committed(scene: Scene) -> None:
    """2PC with ``commits/1``: Spark never replays batch 1, so recover commits it.

    Pass: the plan says roll-forward; batch 1's rows and bundle are visible; nothing in doubt.
    """
    scene.ckpt.write_commit(1)
    dry = json.loads(scene.recover("--dry-run", "--json").stdout)["plan"]["batches"]
    assert [(b["action"], b["spark_committed"], b["rows"]) for b in dry] == [
        ("roll-forward", True, len(scene.batches[1].rows))
    ]
    proc = scene.recover("--yes", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["epoch"] == 2 and doc["in_doubt_after"] == 0
    assert doc["stats"]["recovered_forward"] == 1 and doc["stats"]["orphans_aborted"] == 0
    assert doc["plan"]["batches"][0]["action"] == "roll-forward"
    after = scene.state()
    assert after["gids"] == [] and after["manifests"] == [] and after["bundles"] == [0, 1]
    assert scene.visible() == scene.expected(upto=2)
    assert scene.run("status").returncode == 0


def test_recover_completes_a_half_committed_batch(scene: Scene) -> None:
    """One gid COMMIT PREPARED (staged), two still prepared, Spark committed: recover finishes the batch."""
    gid = scene.state()["gids"][0]
    with scene.admin() as conn:
        conn.execute(sql.SQL("COMMIT PREPARED {}").format(sql.Literal(gid)))
    scene.ckpt.write_commit(1)
    assert scene.recover("--yes").returncode == 0
    assert scene.visible() == scene.expected(upto=2)
    assert json.loads(scene.run("status", "--json").stdout)["in_doubt"] == 0


def test_a_batch_whose_prepared_work_was_rolled_back_by_hand_is_lost_and_a_rewind_brings_it_back(
    scene: Scene,
) -> None:
    """Spark committed batch 1 (commits/1), then an operator ran ROLLBACK PREPARED on its gids.

    Pass: ``status --checkpoint`` shows batch 1 as LOST (exit 1); ``recover --yes`` refuses to go on
    with PreparedWorkLostError naming the rewind; ``recover --rewind`` is a dry run that changes
    nothing; ``--rewind --yes`` moves commits/1 and the manifest aside (offsets/1 stays) and records
    it; a driver that then runs batch 1 again from the same checkpoint lands it exactly once.
    """
    scene.ckpt.write_commit(1)
    with scene.admin() as conn:
        for gid in scene.state()["gids"]:
            conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
    where = ["--app-id", APP, "--checkpoint", str(scene.ckpt.root)]
    status = scene.run("status", *where)
    assert status.returncode == 1 and "LOST: batch 1 of app_id" in status.stdout, status.stdout + status.stderr
    lost = json.loads(scene.run("status", *where, "--json").stdout)["lost"]
    assert [(b["batch_id"], b["action"]) for b in lost] == [(1, "lost")]
    refused = scene.recover("--yes")
    assert refused.returncode == 1 and "is lost" in refused.stderr and "--rewind" in refused.stderr
    before = scene.state()
    dry = scene.recover("--rewind")
    assert dry.returncode == 0 and "dry run: nothing changed" in dry.stdout and "commit log: 1" in dry.stdout
    assert scene.state() == before and scene.ckpt.has_commit(1)
    done = scene.recover("--rewind", "--yes", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["dry_run"] is False and doc["rewind"]["commits"] == [1] and doc["rewind"]["manifests"] == [1]
    assert not scene.ckpt.has_commit(1) and (scene.ckpt.root / "offsets" / "1").exists()
    assert (scene.ckpt.root / doc["record"]).is_file()
    driver = NoWatcherCoordinator(PostgresSink(scene.config), APP, TwoPhaseCommit(), scene.ckpt.spark(), FAST)
    try:
        driver.process(1, scene.batches[1])  # Spark runs batch 1 again, from offsets/1
        scene.ckpt.write_commit(1)
        assert driver.commit_ready() == 1
    finally:
        driver.close()
    assert scene.visible() == scene.expected(upto=2)
    assert scene.run("status", *where).returncode == 0


def test_conninfo_from_an_environment_variable(scene: Scene) -> None:
    """--conninfo-env reads the whole conninfo (password included) from the environment; never printed."""
    proc = scene.run("status", "--conninfo-env", "OPS_PG", env={"OPS_PG": scene.endpoint.url, "PGPASSWORD": ""})
    assert proc.returncode == 1 and APP in proc.stdout
    missing = scene.run("status", "--conninfo-env", "OPS_PG_UNSET")
    assert missing.returncode == 2 and "OPS_PG_UNSET" in missing.stderr


def test_password_in_the_conninfo_is_never_printed(scene: Scene) -> None:
    """Even given on the command line, and even in an error, the password stays out of the output."""
    ok = scene.run("status", "--conninfo", scene.endpoint.url, "--json", subprocess_=True)
    assert ok.returncode == 1
    params = conninfo_to_dict(scene.endpoint.url)
    wrong = make_conninfo("", **{**params, "password": "not-" + scene.password})
    bad = scene.run("status", "--conninfo", wrong, env={"PGPASSWORD": ""}, subprocess_=True)
    assert bad.returncode == 1 and "error" in bad.stderr
    assert "not-" + scene.password not in bad.stdout + bad.stderr


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--strategy", "txid-check", "--dry-run"], 1, "contradicts the strategy '2pc'"),
        (["--app-id", "nobody", "--dry-run"], 1, "knows no app_id 'nobody'"),
        (["--checkpoint", "/nonexistent/chk", "--dry-run"], 1, "is not a Spark checkpoint"),
        (["--strategy", "bogus", "--dry-run"], 2, "invalid choice"),
    ],
)
def test_recover_refuses_with_a_clear_error(scene: Scene, args: list[str], code: int, message: str) -> None:
    before = scene.state()
    proc = scene.run("recover", "--app-id", APP, "--checkpoint", str(scene.ckpt.root), *args)
    assert proc.returncode == code
    assert message in proc.stderr
    assert scene.state() == before


def test_usage_errors_exit_2(scene: Scene) -> None:
    proc = subprocess.run([EOSINK, "status", "--sink", "postgres"], capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "--table" in proc.stderr
    helped = subprocess.run([EOSINK, "recover", "--help"], capture_output=True, text=True, check=False)
    assert helped.returncode == 0 and "zombie" in helped.stdout and "--sink NAME --help" in helped.stdout
    assert "postgres: rows COPYed" in " ".join(helped.stdout.split())
    sink_help = subprocess.run([EOSINK, "recover", "--sink", "postgres", "--help"], capture_output=True, text=True)
    assert sink_help.returncode == 0 and "PGPASSWORD" in sink_help.stdout and "--conninfo-env" in sink_help.stdout


def test_recover_refuses_another_querys_checkpoint(scene: Scene) -> None:
    """The check a driver makes at start: the app_id's batches came from another Spark query.

    Pass: exit 1 naming both checkpoints' situation, also for a dry run; nothing changed."""
    before = scene.state()
    (scene.ckpt.root / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}) + "\n")
    for extra in (["--dry-run"], ["--yes"]):
        proc = scene.recover(*extra)
        assert proc.returncode == 1 and "another Spark checkpoint" in proc.stderr
    assert scene.state() == before


def test_strategy_comes_from_the_manifests_or_the_last_bundle(tmp_path: Path) -> None:
    """No manifest and no bundle: --strategy is required; a recorded but unknown name is refused."""
    from eosink.errors import ConfigurationError
    from eosink.recovery import recorded_strategy as _strategy

    ckpt = FakeCheckpoint(tmp_path / "chk").spark()
    assert _strategy(ckpt, APP, None, "txid-check").name == "txid-check"
    assert _strategy(ckpt, APP, "idempotent", None).name == "idempotent"
    with pytest.raises(ConfigurationError, match="Cannot tell the strategy"):
        _strategy(ckpt, APP, None, None)
    with pytest.raises(ConfigurationError, match="unknown to this eosink"):
        _strategy(ckpt, APP, None, "3pc")
    ckpt.write_manifest(APP, 5, Manifest((), Bundle(BatchRef(APP, 5), 1, Fingerprint(), strategy="2pc")))
    assert _strategy(ckpt, APP, None, "txid-check").name == "2pc"  # the manifest wins over an older bundle
