"""Real Spark streaming queries writing into the real PostgreSQL, SIGKILLed and restarted from the checkpoint.

The PostgreSQL counterpart of ``test_kill_restart.py``: ``sink_driver.py --sink postgres`` runs in a session of its
own and writes through :class:`~eosink.connectors.postgres.PostgresSink` (executors COPY Arrow
batches; the driver collects only committables, ``spark.driver.maxResultSize=1m``). Each test
kills the driver's whole process group (at a named fault point, or at a random moment), restarts
it on the same checkpoint until its input is exhausted, and checks the table: exactly the expected
rows (multisets of full rows) or balances, one bundle per batch, no prepared transaction and no
staged row of the run left behind. A concurrent reader checks that batches of the atomic
strategies (2pc, txid-check) become visible whole. Every test has its own table and control
schema, dropped afterwards.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from eosink._procs import kill_session
from eosink.chaos.oracle import batch_of_file
from eosink.connectors.postgres import PostgresConfig
from eosink.connectors.postgres.admin import PostgresAdmin
from eosink.connectors.postgres.testing import PostgresHarness
from eosink.datasource import options_from_config
from eosink.errors import ServiceError
from eosink.services import get_service
from eosink.services.postgres import PostgresEndpoint

from .conftest import (
    Pipeline,
    Run,
    assert_clean,
    assert_killed,
    assert_stopped_as_lost,
    assert_zombie_fenced,
    closed_port,
    fault_point_cases,
    rewind_batch_1,
    run_script,
    wait_for,
)

pytestmark = pytest.mark.spark

SINK_DRIVER = Path(__file__).with_name("sink_driver.py")
HARNESS = PostgresHarness()

# Strategy variants: "idempotent" generates a key per row, "idempotent-key" upserts by the user's ``id``.
VARIANTS = {
    "2pc": ("2pc", ""),
    "txid-check": ("txid-check", ""),
    "idempotent": ("idempotent", ""),
    "idempotent-key": ("idempotent", "id"),
}
ATOMIC = {"2pc", "txid-check"}
# The fault points each strategy passes through with PostgresSink (F6: after COMMIT PREPARED, before the
# transaction that moves the staged rows and writes the bundle).
COMMON_POINTS = ["F1", "F2", "F3", "F4", "F6", "F8"]
# make test: one kill-and-restart per strategy (txid-check's is the running-balances upsert below, F8).
QUICK = {("idempotent", "F2")}  # 2pc kills into PostgreSQL run in make test-fanout and test-secured


def _cases() -> list[Any]:
    return fault_point_cases(VARIANTS, COMMON_POINTS, QUICK, matrix=True)


@pytest.fixture(scope="session")
def pg_url() -> str:
    """The PostgreSQL server's libpq URL; a missing server fails the test (never a skip)."""
    try:
        url: str = get_service("postgres").endpoint().url
    except ServiceError as exc:
        pytest.fail(str(exc), pytrace=False)
    return url


@dataclass
class PgPipeline(Pipeline):
    """A :class:`Pipeline` whose driver writes into one PostgreSQL table and control schema."""

    files: int = 3
    url: str = field(default="", repr=False)
    table: str = ""
    control_schema: str = ""
    variant: str = "2pc"
    query: str = "rows"
    extra_env: dict[str, str] = field(default_factory=dict)
    _admin: psycopg.Connection[tuple[Any, ...]] | None = field(default=None, repr=False)

    def environment(self) -> dict[str, str]:
        # the URL never in argv: it holds a password
        return {**super().environment(), "EOSINK_TEST_PG_URL": self.url, **self.extra_env}

    def command(self, mode: str, master: str) -> list[str]:
        strategy, keys = VARIANTS[self.variant]
        return [
            *(str(SINK_DRIVER), "--sink", "postgres"),
            *("--input", str(self.input), "--checkpoint", self.checkpoint_location()),
            *("--target", self.table, "--namespace", self.control_schema, "--app-id", self.app_id),
            *("--strategy", strategy, "--key-columns", keys, "--query", self.query),
            *("--master", master, "--stats-out", str(self.root / "stats.json"), "--way", self.way),
        ]

    # -- reading PostgreSQL back --------------------------------------------------------------------

    def admin(self) -> psycopg.Connection[tuple[Any, ...]]:
        if self._admin is None or self._admin.closed:
            self._admin = psycopg.connect(self.url, autocommit=True)
        return self._admin

    def _query(self, statement: sql.SQL | sql.Composed, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Rows of ``statement``; none while the table it reads is not created yet."""
        try:
            return self.admin().execute(statement, params).fetchall()
        except psycopg.errors.UndefinedTable:
            return []

    def ctl(self, name: str) -> sql.Identifier:
        return sql.Identifier(self.control_schema, name)

    def found(self, app_id: str | None = None) -> Counter[tuple[Any, ...]]:
        rows = self._query(sql.SQL("SELECT id, account, amount FROM {}").format(sql.Identifier(self.table)))
        return Counter(rows)

    def expected(self) -> Counter[tuple[Any, ...]]:
        rows = super().expected()
        if VARIANTS[self.variant][1]:  # upserts by ``id``: identical rows (same id) collapse into one
            return Counter(dict.fromkeys(rows, 1))
        return rows

    def balances(self) -> dict[str, int]:
        rows = self._query(sql.SQL("SELECT account, balance FROM {}").format(sql.Identifier(self.table)))
        return {account: int(balance) for account, balance in rows}

    def expected_balances(self) -> dict[str, int]:
        totals: Counter[str] = Counter()
        for (_, account, amount), n in super().expected().items():
            totals[account] += amount * n
        return dict(totals)

    def bundles(self) -> list[int]:
        statement = sql.SQL("SELECT batch_id FROM {} WHERE app_id = %s ORDER BY batch_id").format(self.ctl("bundles"))
        return [int(b) for (b,) in self._query(statement, (self.app_id,))]

    def prepared(self) -> list[str]:
        """Prepared transactions of this control schema (any app) in pg_prepared_xacts, as its admin lists them."""
        config = PostgresConfig(self.url, self.table, control_schema=self.control_schema)
        found = PostgresAdmin(config).status()
        work = [w for a in found.apps for w in a.in_doubt] + list(found.orphans)
        return [w.id for w in work if w.kind == "prepared"]

    def staged(self) -> int:
        """Rows left in the control schema's staging tables: templates ``s_<hash>``, attempts' own ``t_<hash>``
        (which should all be gone). The atomic strategies stage every batch, so their template must exist;
        idempotent writes go straight into the target unless a key conflicts."""
        tables = [
            name
            for (name,) in self._query(
                sql.SQL("SELECT tablename FROM pg_tables WHERE schemaname = %s AND tablename ~ '^[st]_'"),
                (self.control_schema,),
            )
        ]
        if self.variant in ATOMIC:
            assert any(t.startswith("s_") for t in tables), f"no staging template in {self.control_schema}"
        total = 0
        for name in tables:
            total += self._query(sql.SQL("SELECT count(*) FROM {}").format(self.ctl(name)))[0][0]
        return total

    def txn_states(self) -> Counter[str]:
        statement = sql.SQL("SELECT state, count(*) FROM {} WHERE app_id = %s GROUP BY state").format(self.ctl("txns"))
        return Counter(dict(self._query(statement, (self.app_id,))))

    def activity(self) -> int:
        """A number that grows as the driver prepares and commits: visible txns rows, prepared gids, bundles."""
        return sum(self.txn_states().values()) + len(self.prepared()) + len(self.bundles())

    # -- checks ---------------------------------------------------------------------------------------

    def assert_settled(self) -> None:
        """One bundle per batch of Spark's commit log; nothing prepared, staged or left 'prepared' in txns."""
        assert self.bundles() == self.spark_committed(), f"bundles {self.bundles()}"
        assert not self.prepared(), f"prepared transactions left: {self.prepared()}"
        assert self.staged() == 0, "staged rows left behind"
        assert self.txn_states()["prepared"] == 0, f"txns left in state 'prepared': {self.txn_states()}"

    def assert_exact(self) -> None:
        expected, found = self.expected(), self.found()
        lost, duplicated = expected - found, found - expected
        assert not lost and not duplicated, f"lost={dict(lost)} duplicated={dict(duplicated)}"
        self.assert_settled()

    def assert_balances(self) -> None:
        assert self.balances() == self.expected_balances()
        self.assert_settled()

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()


class PgAtomicityReader:
    """A concurrent reader of the target table: records every partial batch it sees.

    A row's file is ``id // 10000`` (see :class:`Pipeline`), and a batch is usually one input file
    (``maxFilesPerTrigger=1``); Spark's offsets log says which files each batch took (a kill between
    the file source's log and ``offsets/N`` makes one batch of two files).
    Each poll reads, in one REPEATABLE READ snapshot, the visible rows per file and the app's
    bundles. A batch is partial when some but not all of its rows are visible, or when the batches
    whose files are visible differ from the batches with a bundle (rows and bundle are one commit).
    """

    def __init__(self, pipeline: PgPipeline) -> None:
        self.pipeline = pipeline
        self.per_file: Counter[int] = Counter()
        for (row_id, _, _), n in pipeline.expected().items():
            self.per_file[row_id // 10_000] += n
        self.polls = 0
        self.partial: list[str] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _poll(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        p = self.pipeline
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            counts = dict(
                conn.execute(
                    sql.SQL("SELECT id / 10000, count(*) FROM {} GROUP BY 1").format(sql.Identifier(p.table))
                ).fetchall()
            )
            bundles = {
                int(b)
                for (b,) in conn.execute(
                    sql.SQL("SELECT batch_id FROM {} WHERE app_id = %s").format(p.ctl("bundles")), (p.app_id,)
                )
            }
        self.polls += 1
        for f, n in counts.items():
            if n != self.per_file[f]:
                self.partial.append(f"file {f}: {n} of {self.per_file[f]} rows visible")
        planned = batch_of_file(p.checkpoint)  # offsets/N is written before batch N writes anything
        visible = {planned.get(int(f), -1) for f in counts}
        if visible != bundles:
            self.partial.append(f"batches {sorted(visible)} visible (-1: unplanned), bundles {sorted(bundles)}")

    def _run(self) -> None:
        try:
            with psycopg.connect(self.pipeline.url, autocommit=True) as conn:
                while not self._stop.wait(0.05):
                    try:
                        self._poll(conn)
                    except psycopg.errors.UndefinedTable:
                        continue  # the target or control schema is not created yet
        except BaseException as exc:  # reported by __exit__: a dead reader must not pass silently
            self.error = exc

    def __enter__(self) -> PgAtomicityReader:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), "the atomicity reader did not stop"
        assert self.error is None, f"the atomicity reader failed: {self.error!r}"


@pytest.fixture
def pg_pipeline(tmp_path: Path, driver_java_opts: str, pg_url: str) -> Iterator[PgPipeline]:
    tag = uuid.uuid4().hex[:10]
    pipeline = PgPipeline(
        tmp_path, java_opts=driver_java_opts, url=pg_url, table=f"sparkpg_{tag}", control_schema=f"sparkpg_{tag}_ctl"
    )
    yield pipeline
    pipeline.close()
    HARNESS.drop(pipeline.control_schema, [sql.Identifier(pipeline.table)])


# -- 1 and 4: a kill at each fault point, then a restart ----------------------------------------------


@pytest.mark.full
@pytest.mark.parametrize("point", ["F1", "F4", "F5", "F8"])
@pytest.mark.parametrize("variant", ["txid-check", "idempotent-key"])
def test_kill_through_the_data_source_then_restart_is_exact(pg_pipeline: PgPipeline, variant: str, point: str) -> None:
    """The same job through ``writeStream.format("eosink")`` (string options, the URL from the environment),
    SIGKILLed at ``point`` of batch 1 (F5: when batch 2 is planned), then restarted.

    Pass: the kill happened; the restart ends cleanly; the table holds every input row once (by ``id`` for
    the upsert), one bundle per batch, nothing prepared or staged left.
    """
    p = pg_pipeline
    p.variant, p.way = variant, "datasource"
    assert_killed(p.run(f"{point}@1:kill"), point)
    assert_clean(p.run())
    p.assert_exact()


@pytest.mark.full
def test_a_zombie_driver_writing_through_the_data_source_is_fenced(pg_pipeline: PgPipeline) -> None:
    """F10 through ``format("eosink")`` (txid-check): the driver is frozen after batch 1's manifest (F4), a new
    driver takes over and finishes, then the old one is thawed.

    Pass: the new driver ends with the table exact; the zombie stops with FencedError (its commit carries
    an older epoch) or on Spark's own concurrent-writer check, and the table is still exact.
    """
    p = pg_pipeline
    p.variant, p.way = "txid-check", "datasource"
    assert_zombie_fenced(p, "F4")


@pytest.mark.parametrize(("variant", "point"), _cases())
def test_kill_at_fault_point_then_restart_is_exact(pg_pipeline: PgPipeline, variant: str, point: str) -> None:
    """SIGKILL of the driver's process group at ``point`` of batch 1, then a restart from the checkpoint.

    Pass: the table holds exactly the input rows (by ``id`` for the user-keyed upsert), one bundle
    per batch, no prepared transaction or staged row left; for 2pc and txid-check a concurrent
    reader never saw part of a batch. Idempotent writes are visible before their bundle: killed
    after pre_commit (F3, F4), the same reader must have seen batch 1 without its bundle.
    """
    p = pg_pipeline
    p.variant = variant
    with PgAtomicityReader(p) as reader:
        assert_killed(p.run(f"{point}@1:kill"), point)
        assert_clean(p.run())
    p.assert_exact()
    assert reader.polls > 0
    if variant in ATOMIC:
        assert not reader.partial, reader.partial[:5]
    elif point in ("F3", "F4"):  # idempotent rows are visible at pre_commit: batch 1 stood without its bundle
        assert any("bundles" in seen for seen in reader.partial), "the reader cannot see partial batches"


# -- 2: kills at random moments ----------------------------------------------------------------------


def _run_and_kill(p: PgPipeline, steps: int, jitter_s: float) -> Run:
    """Start the driver; once PostgreSQL shows ``steps`` more activity, wait ``jitter_s`` and SIGKILL its group."""
    before = p.activity()
    proc = p.start()
    wait_for(lambda: proc.poll() is not None or p.activity() >= before + steps, 240, "the driver to make progress")
    t0 = time.monotonic()
    wait_for(lambda: proc.poll() is not None or time.monotonic() - t0 >= jitter_s, jitter_s + 30, "the kill moment")
    if proc.poll() is None:
        kill_session(proc.pid)  # the whole driver at once: its Python workers run in groups of their own
    return p.finish(proc)


def _run_with_random_kills(p: PgPipeline, rng: random.Random, kills: int) -> list[Run]:
    """Run the driver, killing its process group up to ``kills`` times at random moments, then run it to the end.

    A moment is a random amount of progress in PostgreSQL (prepared transactions, committed
    participants and bundles appearing: about ``participants + 1`` per batch) plus a random
    delay, so kills land while batches are written and committed, not during the JVM's start.
    """
    runs: list[Run] = []
    for _ in range(kills):
        run = _run_and_kill(p, rng.randint(1, 6), rng.uniform(0, 0.5))
        runs.append(run)
        if run.returncode == 0:
            return runs  # the input ran out before the kill
        assert run.returncode == -signal.SIGKILL, f"driver failed ({run.returncode}):\n{run.stderr[-4000:]}"
    runs.append(p.run())
    assert_clean(runs[-1])
    return runs


@pytest.mark.parametrize(
    ("variant", "seed"),
    [
        pytest.param("2pc", 1, marks=pytest.mark.full),
        pytest.param("txid-check", 2, marks=pytest.mark.full),
    ],
)
def test_random_kills_then_restart_is_exact(pg_pipeline: PgPipeline, variant: str, seed: int) -> None:
    """Seeded random-moment SIGKILLs of the driver's group, restarts until the input is exhausted.

    Pass: exactly the input rows, one bundle per batch, nothing prepared or staged left, and the
    concurrent reader never saw part of a batch.
    """
    p = pg_pipeline
    p.variant = variant
    p.files = 4
    p.__post_init__()  # rewrite the input: four batches
    with PgAtomicityReader(p) as reader:
        runs = _run_with_random_kills(p, random.Random(seed), kills=2)
    killed = sum(r.returncode == -signal.SIGKILL for r in runs)
    assert killed >= 1, "no run was killed: the test proved nothing"
    p.assert_exact()
    assert reader.polls > 0
    assert not reader.partial, reader.partial[:5]


# -- 3: running balances upserted by account -----------------------------------------------------------


@pytest.mark.parametrize(
    ("variant", "point"),
    [
        pytest.param("txid-check", "F8"),
        pytest.param("txid-check", "F2", marks=pytest.mark.full),
        pytest.param("2pc", "F4", marks=pytest.mark.full),
        pytest.param("2pc", "F5", marks=pytest.mark.full),
    ],
)
def test_upsert_running_balances_after_kill_and_restart(pg_pipeline: PgPipeline, variant: str, point: str) -> None:
    """An update-mode aggregation (balance per account) upserted by ``account``; killed at ``point`` of batch 1.

    Pass: after the restart each account's balance is the sum of its input amounts, with one
    bundle per batch and nothing prepared or staged left.
    """
    p = pg_pipeline
    p.variant = variant
    p.query = "balance"
    assert_killed(p.run(f"{point}@1:kill"), point)
    assert_clean(p.run())
    p.assert_balances()


# -- 4: prepared work lost after Spark's commit log, and the rewind ---------------------------------------


@pytest.mark.full
def test_prepared_work_rolled_back_by_hand_stops_the_query_and_a_rewind_lands_it_once(pg_pipeline: PgPipeline) -> None:
    """A running sum per account under 2pc, SIGKILLed at F5 of batch 1 (Spark committed it, the sink did not);
    then an operator runs ROLLBACK PREPARED on batch 1's prepared transactions.

    Pass: the restart stops with PreparedWorkLostError (exit 3) naming batch 1 and the rewind;
    ``eosink recover --rewind`` prints its plan and changes nothing, ``--yes`` carries it out; the next
    restart completes, and every account's balance is the sum of its input amounts, with one bundle
    per batch and nothing prepared or staged left.
    """
    p = pg_pipeline
    p.variant, p.query = "2pc", "balance"
    assert_killed(p.run("F5@1:kill"), "F5")
    lost = p.prepared()
    assert lost, "batch 1 should be prepared after a kill at F5"
    for gid in lost:
        p.admin().execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
    assert_stopped_as_lost(p.run())
    cli = [
        *("recover", "--sink", "postgres", "--conninfo-env", "EOSINK_TEST_PG_URL", "--table", p.table),
        *("--control-schema", p.control_schema, "--app-id", p.app_id, "--checkpoint", str(p.checkpoint), "--rewind"),
    ]
    rewind_batch_1(p.checkpoint, cli, {**os.environ, "EOSINK_TEST_PG_URL": p.url})
    assert_clean(p.run())
    p.assert_balances()


OPTIONS_JOB = Path(__file__).with_name("datasource_options_job.py")


def _options_job(p: PgPipeline, cases: dict[str, dict[str, str]]) -> dict[str, str]:
    """Each case's result ("ok" or its error line) from one Spark session starting the cases in order."""
    plan, out = p.root / "plan.json", p.root / "results.json"
    body = [{"name": name, "options": options} for name, options in cases.items()]
    plan.write_text(json.dumps({"input": str(p.input), "checkpoint": str(p.checkpoint), "cases": body}))
    out.unlink(missing_ok=True)
    code, stderr = run_script([str(OPTIONS_JOB), str(plan), str(out)], p.environment())
    assert code == 0 and out.exists(), stderr[-4000:]
    results: dict[str, str] = json.loads(out.read_text())
    return results


@pytest.mark.full
def test_bad_data_source_options_stop_the_query_before_anything_is_written(pg_pipeline: PgPipeline) -> None:
    """format("eosink") started with bad options, one after another on one checkpoint (one Spark session):
    no app_id, an unknown sink, a misspelt option, a malformed number, 2pc; then (a second session) the
    fixed options.

    Pass: each bad start stops with ConfigurationError naming the problem and its fix; after them the
    table does not exist and nothing is prepared or bundled; the fixed start lands every row once with
    one bundle per batch; no error text holds the server's password.
    """
    p = pg_pipeline
    p.variant = "txid-check"
    config = PostgresConfig(p.url, p.table, control_schema=p.control_schema, create_table=True)
    good = {
        "sink": "postgres",
        "app_id": p.app_id,
        "strategy": "txid-check",
        **options_from_config("postgres", config, from_env={"conninfo": "EOSINK_TEST_PG_URL"}),
    }
    bad = {
        "no-app-id": ({k: v for k, v in good.items() if k != "app_id"}, "Option 'app_id' is missing"),
        "unknown-sink": ({**good, "sink": "postgresql"}, "Unknown sink 'postgresql'"),
        "misspelt-option": ({**good, "postgres.tabel": p.table}, "Unknown option 'postgres.tabel'"),
        "malformed-number": ({**good, "postgres.connect_timeout_s": "ten"}, "must be a number"),
        "2pc": ({**good, "strategy": "2pc"}, "not offered through format('eosink')"),
    }
    results = _options_job(p, {name: options for name, (options, _) in bad.items()})
    for name, (_, expected) in bad.items():
        assert results[name].startswith("EOSINK-ERROR ConfigurationError: "), f"{name}: {results[name]}"
        assert expected in results[name] and "Fix: " in results[name], f"{name}: {results[name]}"
    password = PostgresEndpoint.from_url(p.url).password
    assert not password or all(password not in text for text in results.values())
    exists = p.admin().execute("SELECT to_regclass(%s)", (sql.Identifier(p.table).as_string(p.admin()),)).fetchone()
    assert exists == (None,), "a bad start created the table"
    assert not p.prepared() and not p.bundles()
    assert _options_job(p, {"fixed": good}) == {"fixed": "ok"}
    p.assert_exact()


# -- a new user's mistakes, stopped by writer.start() -------------------------------------------------------


PREFLIGHT_JOB = Path(__file__).with_name("preflight_job.py")


@pytest.fixture
def no_prepared(tmp_path: Path) -> Iterator[str]:
    """A private PostgreSQL with max_prepared_transactions = 0 (the shared one is never restarted)."""
    from tests.connectors.postgres._badinput import PrivatePostgres

    server = PrivatePostgres()
    try:
        server.start(0)
        yield server.url
    finally:
        server.destroy()


def test_each_mistake_is_the_eosink_error_before_the_query_starts_and_the_fixed_start_lands_every_row_once(
    pg_pipeline: PgPipeline, no_prepared: str
) -> None:
    """In order: a wrong password, an unreachable server, a missing table, a column of the wrong type (a
    string into bigint), then a table that refuses rows while a batch runs (a CHECK constraint), the fix,
    a reused app_id with a new checkpoint, and 2pc on a server without prepared transactions.

    Pass: each start-time mistake raises its eosink error class itself (AuthenticationError, TransientError,
    SchemaError, SchemaError naming the column and both types, CheckpointMismatchError, ConfigurationError
    naming max_prepared_transactions) and Spark never started the query (no checkpoint metadata, no active
    query); the refused rows raise BadRecordError from the query itself (not Spark's
    StreamingQueryException); after the fix every row is in the table once, one bundle per batch, nothing in
    doubt; no message holds a password.
    """
    p = pg_pipeline
    params = conninfo_to_dict(p.url)
    bad_password = make_conninfo("", **{**params, "password": "not-the-password"})
    down = make_conninfo("", **{**params, "port": str(closed_port())})
    table, ctl = p.table, p.control_schema
    t = sql.Identifier(table).as_string(None)
    base = {"table": table, "control_schema": ctl, "app_id": p.app_id, "checkpoint": str(p.checkpoint)}
    base |= {"url_env": "EOSINK_TEST_PG_URL", "create_table": False, "strategy": "2pc"}
    other = f"{table}_np"
    cases: list[dict[str, Any]] = [
        {**base, "name": "wrong-password", "url_env": "EOSINK_TEST_BAD_PW", "create_table": True},
        {**base, "name": "unreachable", "url_env": "EOSINK_TEST_DOWN", "create_table": True},
        {**base, "name": "missing-table"},
        {**base, "name": "wrong-type", "sql": [f"CREATE TABLE {t} (id bigint, account bigint, amount bigint)"]},
        {
            **base,
            "name": "refused-rows",
            "sql": [
                f"DROP TABLE {t}",
                f"CREATE TABLE {t} (id bigint, account text, amount bigint CONSTRAINT neg CHECK (amount < 0))",
            ],
        },
        {**base, "name": "fixed", "sql": [f"ALTER TABLE {t} DROP CONSTRAINT neg"]},
        {**base, "name": "new-checkpoint", "checkpoint": str(p.root / "another-checkpoint")},
        {
            **base,
            "name": "2pc-without-prepared",
            "url_env": "EOSINK_TEST_NO_PREPARED",
            "table": other,
            "create_table": True,
            "checkpoint": str(p.root / "np-checkpoint"),
        },
    ]
    plan, out = p.root / "plan.json", p.root / "results.json"
    plan.write_text(json.dumps({"input": str(p.input), "cases": cases}))
    env = {
        **p.environment(),
        "EOSINK_TEST_BAD_PW": bad_password,
        "EOSINK_TEST_DOWN": down,
        "EOSINK_TEST_NO_PREPARED": no_prepared,
    }
    code, stderr = run_script([str(PREFLIGHT_JOB), str(plan), str(out)], env)
    assert code == 0 and out.exists(), stderr[-4000:]
    results: dict[str, dict[str, Any]] = json.loads(out.read_text())

    expected = {
        "wrong-password": ("AuthenticationError", "password"),
        "unreachable": ("TransientError", "Retry"),
        "missing-table": ("SchemaError", "does not exist"),
        "wrong-type": ("SchemaError", "Column 'account': the stream's type string"),
        "new-checkpoint": ("CheckpointMismatchError", "is new"),
        "2pc-without-prepared": ("ConfigurationError", "max_prepared_transactions"),
    }
    for name, (error, text) in expected.items():
        got = results[name]
        assert (got["error"], got["eosink"]) == (error, True), f"{name}: {got}"
        assert text in got["message"] and "Fix: " in got["message"], f"{name}: {got['message']}"
        assert not got["started"] and got["active"] == 0, f"{name}: Spark started the query: {got}"
    assert "BIGINT" in results["wrong-type"]["message"], results["wrong-type"]["message"]
    refused = results["refused-rows"]
    assert (refused["error"], refused["eosink"], refused["active"]) == ("BadRecordError", True, 0), refused
    assert "StreamingQueryException" not in refused["error"]
    assert results["fixed"]["error"] is None, results["fixed"]
    password = PostgresEndpoint.from_url(p.url).password
    assert not password or all(password not in json.dumps(r) for r in results.values())
    p.assert_exact()


@pytest.mark.full
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_a_signal_stops_the_pipeline_after_the_batch_in_flight_and_a_restart_is_exact(
    pg_pipeline: PgPipeline, signum: signal.Signals
) -> None:
    """A 2pc stream waited for by ``writer.start(...).run()`` (a 500 ms trigger, one file per batch) gets Ctrl-C
    (SIGINT to the driver's whole process group, as a terminal sends it) or a scheduler's SIGTERM (to the
    driver's process) once its first batch is committed.

    Pass: the driver exits 0 with no eosink error; every batch Spark committed is committed in PostgreSQL, one
    bundle each, nothing prepared or staged (the writer was closed, nothing in doubt); a restart with
    ``availableNow`` lands every row once.
    """
    p = pg_pipeline
    p.variant = "2pc"
    proc = p.start(args=["--until-signal"])
    wait_for(lambda: proc.poll() is not None or bool(p.bundles()), 180, "the first committed batch")
    assert proc.poll() is None, proc.communicate()[1][-4000:]
    if signum == signal.SIGINT:
        os.killpg(proc.pid, signal.SIGINT)
    else:
        os.kill(proc.pid, signal.SIGTERM)
    stopped = p.finish(proc, timeout_s=120)
    assert_clean(stopped)
    assert "EOSINK-ERROR" not in stopped.stderr and "StackOverflowError" not in stopped.stderr
    p.assert_settled()
    assert_clean(p.run())
    p.assert_exact()


@pytest.mark.full
def test_executors_without_the_connector_extra_stop_the_query_with_its_pip_install_and_the_fix_is_exact(
    pg_pipeline: PgPipeline,
) -> None:
    """The driver has psycopg, the executors' Python does not (a folder that shadows it, first on their path
    through ``spark.executorEnv.PYTHONPATH``), as on a cluster whose nodes lack ``eosink[postgres]``.

    Pass: the query stops with ConfigurationError naming ``pip install 'eosink[postgres]'``, nothing is in the
    table; with the executors fixed, a restart lands every row once and nothing is left in doubt.
    """
    p = pg_pipeline
    p.way = "start"
    shadow = p.root / "no-psycopg" / "psycopg"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        'raise ModuleNotFoundError("No module named \'psycopg\'", name="psycopg")  # this executor lacks the extra\n'
    )
    submit = f"--conf spark.executorEnv.PYTHONPATH={shadow.parent} pyspark-shell"
    run = p.run(env={"PYSPARK_SUBMIT_ARGS": submit})
    assert run.error_kind == "ConfigurationError", run.stderr[-4000:]
    assert "pip install 'eosink[postgres]'" in run.stderr, run.stderr[-4000:]
    assert not p.found(), "rows became visible before the query stopped"
    assert_clean(p.run())
    p.assert_exact()
