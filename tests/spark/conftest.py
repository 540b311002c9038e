"""Fixtures for tests that run real Spark drivers as separate process groups and kill them."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from eosink._procs import (
    driver_env,
    is_stopped,
    kill_session,
    parse_error_line,
    session_members,
    signal_session,
    spark_cds_options,
)
from eosink._waiting import wait_until
from eosink.chaos.oracle import file_batch_ends
from eosink.checkpoint import SparkCheckpoint
from eosink.connectors.reference import ReferenceSink

DRIVER = Path(__file__).with_name("driver.py")
CACHE = Path(os.environ.get("EOSINK_CACHE", Path(__file__).resolve().parents[2] / ".cache"))
DRIVER_TIMEOUT_S = float(os.environ.get("EOSINK_TEST_DRIVER_TIMEOUT", "300"))
INPUT_MTIME_BASE = 1_600_000_000  # input file i is modified at this + i seconds


def wait_for(predicate: Any, timeout_s: float, what: str) -> None:
    """Poll ``predicate`` until true; fail after ``timeout_s``."""
    if not wait_until(predicate, timeout_s, max_interval_s=0.05):
        raise AssertionError(f"timed out waiting for {what}")


@dataclass
class Run:
    returncode: int
    stderr: str
    stats: dict[str, Any] | None
    faults_fired: list[str] = field(default_factory=list)
    stdout: str = ""

    @property
    def output(self) -> str:
        """Everything the driver printed: its own and its JVM's (local executors and their Python workers)."""
        return f"{self.stdout}\n{self.stderr}"

    @property
    def error_kind(self) -> str | None:
        return parse_error_line(self.stderr)[0]


@dataclass
class Pipeline:
    """One streaming pipeline: input files, a checkpoint, a reference sink, and how to run it."""

    root: Path
    strategy: str = "2pc"
    files: int = 4
    rows_per_file: int = 30
    atomic: bool = True
    master: str = field(default_factory=lambda: os.environ.get("EOSINK_TEST_MASTER", "local[2,4]"))
    app_id: str = "test-app"
    extra_args: list[str] = field(default_factory=list)
    java_opts: str = ""
    way: str = "foreach_batch"
    """How a production sink's driver (sink_driver.py) writes: foreach_batch or datasource (format("eosink"))."""
    whole_row_keys: bool = False
    """Idempotent by whole-row keys: identical input rows are one key, so the sink holds them once."""
    checkpoint_uri: str = ""
    """A checkpoint location on a store (``hdfs://``, ``s3a://``) instead of the local ``checkpoint`` directory:
    what a driver on a cluster uses, its executors sharing no disk with it."""

    def __post_init__(self) -> None:
        self.input = self.root / "input"
        self.checkpoint = self.root / "checkpoint"
        self.sink_path = self.root / "sink.db"
        self.fault_log = self.root / "faults.log"
        self.input.mkdir(parents=True, exist_ok=True)
        for f in range(self.files):
            lines = []
            for i in range(self.rows_per_file):
                rid = f * 10_000 + i
                # a few identical rows per file, so generated keys must tell duplicates apart
                amount = 7 if i % 10 == 0 else rid % 97
                row_id = f * 10_000 if i % 10 == 0 else rid
                lines.append(json.dumps({"id": row_id, "account": f"acct-{rid % 5}", "amount": amount}))
            path = self.input / f"part-{f:04d}.json"
            path.write_text("\n".join(lines) + "\n")
            # Spark's file source takes files in modification-time order; files written in the same
            # clock tick would be planned in any order, and the checks map file i to batch i.
            os.utime(path, (INPUT_MTIME_BASE + f, INPUT_MTIME_BASE + f))

    def expected(self) -> Counter[tuple[Any, ...]]:
        rows: Counter[tuple[Any, ...]] = Counter()
        for path in sorted(self.input.iterdir()):
            for line in path.read_text().splitlines():
                r = json.loads(line)
                rows[(r["id"], r["account"], r["amount"])] += 1
        return Counter(set(rows)) if self.whole_row_keys else rows

    def start(
        self,
        faults: str | None = None,
        *,
        mode: str = "eosink",
        args: list[str] | None = None,
        master: str | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.Popen[str]:
        """Start the driver in a session of its own, with fault points ``faults`` armed (only those), and ``env``
        over its environment."""
        env = {**self.environment(), **(env or {})}
        if faults:
            env["EOSINK_FAULTS"] = faults
        (self.root / "stats.json").unlink(missing_ok=True)
        cmd = [sys.executable, *self.command(mode, master or self.master), *self.extra_args, *(args or [])]
        return subprocess.Popen(
            cmd, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def environment(self) -> dict[str, str]:
        """The driver's environment (Spark on loopback, the virtualenv's Python, the fault log, no fault armed)."""
        return driver_env(self.fault_log, self.java_opts)

    def command(self, mode: str, master: str) -> list[str]:
        """The driver script and its arguments."""
        return [
            str(DRIVER),
            *("--input", str(self.input), "--checkpoint", self.checkpoint_location(), "--sink", str(self.sink_path)),
            *("--strategy", self.strategy, "--app-id", self.app_id, "--mode", mode, "--master", master),
            *("--atomic", str(int(self.atomic)), "--stats-out", str(self.root / "stats.json")),
        ]

    def finish(self, proc: subprocess.Popen[str], timeout_s: float = DRIVER_TIMEOUT_S) -> Run:
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_session(proc.pid)
            _, stderr = proc.communicate()
            raise AssertionError(f"driver did not finish in {timeout_s} s:\n{stderr[-4000:]}") from None
        except BaseException:  # Ctrl-C or a stopped test run: the driver's session must not outlive the test
            kill_session(proc.pid)
            raise
        if proc.returncode == -signal.SIGKILL:  # a crash must have ended the whole driver by itself
            left = _session_left(proc.pid, 10.0)
            kill_session(proc.pid)
            assert not left, f"the crash left processes of the driver's session alive: {left}"
        kill_session(proc.pid)  # a clean exit's JVM and Python workers may take a moment: reap them
        stats_path = self.root / "stats.json"
        stats = json.loads(stats_path.read_text()) if stats_path.exists() else None
        return Run(proc.returncode, stderr, stats, self.fired(), stdout or "")

    def run(self, faults: str | None = None, **kw: Any) -> Run:
        return self.finish(self.start(faults, **kw))

    def fired(self) -> list[str]:
        if not self.fault_log.exists():
            return []
        return [line.split()[0] for line in self.fault_log.read_text().splitlines() if line.strip()]

    def sink(self) -> ReferenceSink:
        return ReferenceSink(self.sink_path, atomic=self.atomic)

    def found(self, app_id: str | None = None) -> Counter[tuple[Any, ...]]:
        rows = self.sink().rows(app_id or self.app_id)
        return Counter((r["id"], r["account"], r["amount"]) for r in rows)

    def bundles(self) -> list[int]:
        """The batches the sink holds a commit (bundle) of, oldest first."""
        return [b.batch.batch_id for b in self.sink().bundles(self.app_id)]

    def in_doubt(self) -> list[str]:
        """The prepared work the sink holds that no commit has settled."""
        return [f"in doubt #{i}" for i in range(self.sink().in_doubt_count(self.app_id))]

    def assert_exact(self) -> None:
        """Every input row once, one commit per batch in Spark's commit log, nothing left in doubt."""
        expected, found = self.expected(), self.found()
        lost, duplicated = expected - found, found - expected
        assert not lost and not duplicated, f"lost={dict(lost)} duplicated={dict(duplicated)}"
        bundles = self.bundles()
        assert bundles == self.spark_committed(), f"commits of {bundles}, Spark's commit log {self.spark_committed()}"
        assert not self.in_doubt(), f"work left in doubt: {self.in_doubt()}"

    def spark_committed(self) -> list[int]:
        """The batch ids in Spark's commit log: one bundle each, whatever files each batch took.

        A batch is usually one input file, but a kill between the file source's log and
        ``offsets/N`` makes the restart plan one batch over two files; the commit log, not the
        number of files, says which batches exist. It must be 0..N without gaps.
        """
        committed = self.spark_checkpoint().committed_batches()
        assert committed == list(range(len(committed))) and committed, f"Spark's commit log: {committed}"
        return committed

    def checkpoint_location(self) -> str:
        """Where the driver keeps the query's checkpoint: ``checkpoint_uri``, else the local directory."""
        return self.checkpoint_uri or str(self.checkpoint)

    def spark_checkpoint(self) -> SparkCheckpoint:
        """The query's checkpoint, as eosink reads it (``s3a://`` needs its store registered: S3 pipelines do)."""
        return SparkCheckpoint(self.checkpoint_location())

    def batch_rows(self, batch_id: int) -> int | None:
        """How many input rows Spark planned into ``batch_id`` (None while it is not planned)."""
        ends = file_batch_ends(self.checkpoint)
        if batch_id >= len(ends):
            return None
        start = ends[batch_id - 1] + 1 if batch_id else 0
        return (ends[batch_id] - start + 1) * self.rows_per_file


def _session_left(sid: int, timeout_s: float) -> list[int]:
    """Processes of session ``sid`` still alive after waiting up to ``timeout_s`` (polled, not reaped)."""
    wait_until(lambda: not session_members(sid), timeout_s, max_interval_s=0.05)
    return session_members(sid)


def run_script(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run a driver script in a session of its own (killed whole afterwards); its exit code and stderr."""
    proc = subprocess.Popen(
        [sys.executable, *argv],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, stderr = proc.communicate(timeout=DRIVER_TIMEOUT_S)
    finally:
        kill_session(proc.pid)
    return proc.returncode, stderr


def assert_clean(run: Run) -> None:
    assert run.returncode == 0, f"driver failed ({run.returncode}):\n{run.stderr[-6000:]}"


def assert_killed(run: Run, point: str) -> None:
    assert point in run.faults_fired, f"fault {point} never fired; fired={run.faults_fired}\n{run.stderr[-4000:]}"
    assert run.returncode == -signal.SIGKILL, f"expected SIGKILL, got {run.returncode}:\n{run.stderr[-4000:]}"


def assert_stopped_as_lost(run: Run) -> None:
    """The driver stopped with PreparedWorkLostError (exit 3) naming batch 1 and the rewind."""
    assert run.returncode == 3 and run.error_kind == "PreparedWorkLostError", run.stderr[-3000:]
    assert "Batch 1 of app_id" in run.stderr and "--rewind" in run.stderr


def rewind_batch_1(checkpoint: Path | SparkCheckpoint, recover_args: Sequence[str], env: dict[str, str]) -> str:
    """``eosink recover ... --rewind`` (``recover_args`` name the sink, app_id and checkpoint): the dry run
    prints its plan and changes nothing; ``--yes`` moves batch 1 out of Spark's commit log, its offsets kept.
    Both runs' output, for checks of what they must not print. ``checkpoint``: a local directory, or any
    location as eosink reads it."""
    ckpt = SparkCheckpoint(str(checkpoint)) if isinstance(checkpoint, Path) else checkpoint

    def holds(folder: str) -> bool:
        return "1" in ckpt.names(folder)

    eosink = [sys.executable, "-m", "eosink.cli", *recover_args]
    dry = subprocess.run(eosink, capture_output=True, text=True, env=env, timeout=120)
    assert dry.returncode == 0 and "dry run: nothing changed" in dry.stdout, dry.stdout + dry.stderr
    assert holds("commits")
    done = subprocess.run([*eosink, "--yes"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and "Start the query again" in done.stdout, done.stdout + done.stderr
    assert not holds("commits") and holds("offsets")
    return dry.stdout + dry.stderr + done.stdout + done.stderr


DATASOURCE_KILLS = [("txid-check", "F5"), ("txid-check", "F8"), ("idempotent", "F1"), ("idempotent", "F4")]
"""Kafka's, S3's and HDFS's kills through format("eosink") (2pc is refused there), in test-SINK-full: each of
F1, F4, F5 and F8 once, each strategy twice (in doubt and replayed for txid-check). The whole strategy x
point matrix through the data source runs on PostgreSQL (test_postgres_pipeline): the data source's path
up to the connector is the same for every sink, so the other sinks repeat only what differs, their commit."""
WHOLE_ROW_KEYS = "id,account,amount"
"""The data source's idempotent keys in these tests: whole rows (it takes user keys only)."""


def kill_through_the_data_source(pipeline: Pipeline, strategy: str, point: str) -> None:
    """Run ``pipeline``'s sink_driver through ``format("eosink")``, SIGKILLed at ``point`` of batch 1 (F5: at
    the planning of batch 2), then restart it; the caller checks the sink's content."""
    pipeline.strategy, pipeline.way = strategy, "datasource"
    if strategy == "idempotent":
        pipeline.extra_args = ["--key-columns", WHOLE_ROW_KEYS]
        pipeline.whole_row_keys = True
    assert_killed(pipeline.run(f"{point}@1:kill"), point)
    assert_clean(pipeline.run())


def assert_store_crash_mid_batch_exact(p: Any, server: Any) -> None:
    """The driver of ``p`` frozen (SIGSTOP of its session) mid-write of batch 1 (F2); ``server``, the sink's
    private store, SIGKILLed and restarted meanwhile; the driver thawed.

    Pass: the thawed driver either finishes or stops with an eosink error (exit 3); restarts from the
    checkpoint (at most two) end cleanly, and ``p.assert_exact()`` holds."""
    proc = p.start("F2@1:stop")
    wait_for(lambda: "F2" in p.fired(), 240, "F2 to fire")
    wait_for(lambda: is_stopped(proc.pid), 30, "the driver to stop")
    server.restart(crash=True)
    signal_session(proc.pid, signal.SIGCONT)
    finish_with_restarts(p, proc)
    p.assert_exact()


def finish_with_restarts(
    p: Pipeline,
    proc: subprocess.Popen[str],
    env: dict[str, str] | None = None,
    *,
    on_lost: Callable[[Run], None] | None = None,
) -> None:
    """Wait for the driver ``proc`` of ``p``; while it stops with an eosink error (exit 3) restart it from the
    checkpoint (with ``env`` over its environment, as ``proc`` had), at most twice. A stop with
    PreparedWorkLostError is passed to ``on_lost`` first (a rewind, where the store may lose prepared work), and
    fails the test without it. Pass: the last run ends cleanly."""
    runs = [p.finish(proc)]
    while runs[-1].returncode != 0 and len(runs) < 3:
        assert runs[-1].returncode == 3, f"driver failed ({runs[-1].returncode}):\n{runs[-1].stderr[-4000:]}"
        if runs[-1].error_kind == "PreparedWorkLostError":
            assert on_lost is not None, f"the store lost prepared work:\n{runs[-1].stderr[-4000:]}"
            on_lost(runs[-1])
        runs.append(p.run(env=env))
    assert_clean(runs[-1])


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def assert_start_mistakes_stop_before_spark(p: Pipeline, mistakes: dict[str, tuple[dict[str, str], str]]) -> None:
    """A production sink's driver started by ``writer.start(...)`` (``--way start``), once per mistake, then fixed.

    ``mistakes``: a name, the environment that makes it (an unreachable server, a wrong secret) and the eosink
    error class expected. Then the fixed start, then the same app_id with a new checkpoint. Pass: each mistake
    is its eosink error (the driver's exit code 3 and ``EOSINK-ERROR`` line) and Spark never started the query
    (no checkpoint metadata); the fixed start lands every row once; the new checkpoint is
    CheckpointMismatchError, again before Spark started, and the sink still holds every row once.
    """
    p.way = "start"
    quick = ["--transient-timeout-s", "3"]
    for name, (env, kind) in mistakes.items():
        run = p.run(args=quick, env=env)
        assert run.returncode == 3 and run.error_kind == kind, f"{name}:\n{run.stderr[-3000:]}"
        assert not (p.checkpoint / "metadata").exists(), f"{name}: Spark started the query"
    assert_clean(p.run(args=quick))
    p.assert_exact()
    first = p.checkpoint
    p.checkpoint = p.root / "another-checkpoint"
    try:
        run = p.run(args=quick)
        assert run.error_kind == "CheckpointMismatchError", run.stderr[-3000:]
        assert not (p.checkpoint / "metadata").exists(), "Spark started the query with the new checkpoint"
    finally:
        p.checkpoint = first
    p.assert_exact()


def assert_zombie_fenced(pipeline: Pipeline, point: str, mode: str = "eosink") -> None:
    """F10: the old driver is frozen (SIGSTOP of its whole session) at ``point`` of batch 1, a new driver takes
    over and finishes, then the old one is thawed (SIGCONT).

    Pass: the new driver ends cleanly with exact content; the zombie stops with FencedError (or
    CommitAbortedError, or on Spark's own concurrent-writer check) and the content is still exact.
    """
    old = pipeline.start(f"{point}@1:stop", mode=mode)
    wait_for(lambda: point in pipeline.fired(), 240, f"{point} to fire in the old driver")
    wait_for(lambda: is_stopped(old.pid), 30, "the old driver to stop")
    assert_clean(pipeline.run(mode=mode))
    pipeline.assert_exact()
    signal_session(old.pid, signal.SIGCONT)  # the whole frozen driver: Python, JVM, workers
    zombie = pipeline.finish(old)
    assert zombie.returncode == 3, f"the zombie did not stop with an error:\n{zombie.stderr[-3000:]}"
    # Spark's own checkpoint-log fencing ("Multiple streaming jobs detected" / "... queries are concurrently using")
    spark_refused = "Multiple streaming" in zombie.stderr
    assert zombie.error_kind in ("FencedError", "CommitAbortedError") or spark_refused, zombie.stderr[-3000:]
    pipeline.assert_exact()


def run_and_kill(pipeline: Pipeline, bundles: Callable[[], Sequence[object]], batches: int, jitter_s: float) -> Run:
    """Start the driver; once its first batch is planned and ``batches`` more batches have their bundle in the
    sink (``bundles()``), wait ``jitter_s`` and SIGKILL its whole session: kills land while batches are
    written and committed, not while the JVM starts."""
    before = len(bundles())
    proc = pipeline.start()
    offsets = pipeline.checkpoint / "offsets"

    def progressed() -> bool:
        # Planned: Spark's offset file of a batch is in place. Not any entry: a driver killed while it writes
        # its first offset file leaves a temporary one behind, and Spark then refuses the checkpoint
        # (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY, docs/operations.md): that kill tests Spark, not eosink.
        planned = offsets.exists() and any(entry.name.isdigit() for entry in offsets.iterdir())
        return proc.poll() is not None or (planned and len(bundles()) >= before + batches)

    wait_for(progressed, 240, "the driver to make progress")
    t0 = time.monotonic()
    wait_for(lambda: proc.poll() is not None or time.monotonic() - t0 >= jitter_s, jitter_s + 30, "the kill moment")
    if proc.poll() is None:
        kill_session(proc.pid)
    return pipeline.finish(proc)


@pytest.fixture(scope="session")
def driver_java_opts() -> str:
    """A class-data-sharing archive of Spark's classes, built once: halves the driver JVM's start."""
    return spark_cds_options(CACHE)


@pytest.fixture
def pipeline(tmp_path: Path, driver_java_opts: str) -> Pipeline:
    return Pipeline(tmp_path, java_opts=driver_java_opts)


class AtomicityReader:
    """A concurrent reader: polls the sink while drivers run and records every partial batch it sees.

    Each poll reads, in one SQLite snapshot, the visible row count per batch and the committed
    bundles. A batch is partial when some but not all of its rows are visible, or when rows are
    visible without its bundle (data and bundle must appear in one atomic step).
    """

    def __init__(self, pipeline: Pipeline) -> None:
        import threading

        self.pipeline = pipeline
        self.polls = 0
        self.partial: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _poll(self, conn: Any) -> None:
        conn.execute("BEGIN")
        try:
            counts = dict(
                conn.execute(
                    "SELECT batch_id, count(*) FROM data WHERE app_id = ? GROUP BY batch_id", (self.pipeline.app_id,)
                ).fetchall()
            )
            bundles = {
                b for (b,) in conn.execute("SELECT batch_id FROM bundles WHERE app_id = ?", (self.pipeline.app_id,))
            }
        finally:
            conn.execute("COMMIT")
        self.polls += 1
        for batch_id, n in counts.items():
            if batch_id not in bundles or (
                n != self.pipeline.rows_per_file and n != self.pipeline.batch_rows(batch_id)
            ):  # usually one file per batch; the checkpoint says when Spark planned more
                self.partial.append(
                    f"batch {batch_id}: {n} rows visible, bundle {'present' if batch_id in bundles else 'absent'}"
                )

    def _run(self) -> None:
        import sqlite3

        conn = None
        while not self._stop.wait(0.02):
            try:
                if conn is None:
                    if not self.pipeline.sink_path.exists():
                        continue
                    conn = sqlite3.connect(self.pipeline.sink_path, timeout=30, isolation_level=None)
                self._poll(conn)
            except sqlite3.OperationalError:
                continue  # tables not created yet, or the file is busy: poll again

    def __enter__(self) -> AtomicityReader:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


class PartialBatchReader:
    """A concurrent reader of a sink's visible rows that records every partial batch it sees, and every row
    beyond the input or gone after it was seen.

    ``read`` returns the visible rows as a Counter of ``(id, account, amount)``. A row's file is
    ``id // 10000`` and a batch is usually one input file (Spark's offsets log says when a batch
    took two); a file is partial when some but not all of its rows are visible. ``problems`` holds the
    rows seen more often than the input has them (duplicated) and those seen once and missing from a later
    read (vanished).
    """

    def __init__(
        self,
        expected: Counter[tuple[Any, ...]],
        read: Callable[[], Counter[tuple[Any, ...]]],
        interval_s: float = 0.05,
    ) -> None:
        self.read = read
        self.interval_s = interval_s
        self.expected = expected
        self.per_file: Counter[int] = Counter()
        for (row_id, _, _), n in expected.items():
            self.per_file[row_id // 10_000] += n
        self.polls = 0
        self.partial: list[str] = []
        self.problems: list[str] = []
        self._last: Counter[tuple[Any, ...]] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from eosink.errors import EosinkError

        while not self._stop.wait(self.interval_s):
            try:
                rows = self.read()
            except (EosinkError, OSError):
                continue  # nothing written yet, or the store busy: poll again
            self.polls += 1
            counts: Counter[int] = Counter()
            for (row_id, _, _), n in rows.items():
                counts[row_id // 10_000] += n
            self.partial += [
                f"file {f}: {n} of {self.per_file[f]} rows" for f, n in counts.items() if n != self.per_file[f]
            ]
            for what, found in (("duplicated", rows - self.expected), ("vanished", self._last - rows)):
                if found:
                    self.problems.append(f"{what}: {dict(sorted(found.items())[:5])} ({sum(found.values())} rows)")
            self._last = rows

    def __enter__(self) -> PartialBatchReader:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def assert_random_kills_exact(p: Any, strategy: str, seed: int, read: Callable[[], Counter[tuple[Any, ...]]]) -> None:
    """Five batches, two runs SIGKILLed at seeded random moments and a last one to the end, with a concurrent
    reader (``read``). Pass: exact, at least one run was killed, and under 2pc and txid-check the reader
    never saw part of a batch."""
    import random

    p.strategy = strategy
    p.files = 5
    p.__post_init__()  # rewrite the input: five batches
    rng = random.Random(seed)
    with PartialBatchReader(p.expected(), read) as reader:
        runs = [run_and_kill(p, p.bundles, rng.randint(0, 2), rng.uniform(0, 1.5)) for _ in range(2)]
        runs.append(p.run())
    assert_clean(runs[-1])
    assert any(r.returncode == -signal.SIGKILL for r in runs), "no run was killed: the test proved nothing"
    p.assert_exact()
    assert reader.polls > 0
    if strategy != "idempotent":
        assert not reader.partial, reader.partial[:5]


def fault_point_cases(
    variants: Sequence[str], points: Sequence[str], quick: set[tuple[str, str]], *, matrix: bool = False
) -> list[Any]:
    """``(variant, point)`` for every variant (a strategy, or a sink's mode) at every fault point, and 2pc at F5;
    those in ``quick`` run in make test, the others (marked ``full``) in test-full. With ``matrix``, 2pc at F5 is
    also marked ``matrix``: local-cluster and the PySpark matrix run it (the sink's 2pc kill, where make test
    runs another)."""
    cases = [(v, p) for v in variants for p in points] + [("2pc", "F5")]

    def marks(v: str, p: str) -> tuple[Any, ...]:
        if (v, p) in quick:
            return ()
        return (pytest.mark.full, pytest.mark.matrix) if matrix and (v, p) == ("2pc", "F5") else (pytest.mark.full,)

    return [pytest.param(v, p, marks=marks(v, p), id=f"{v}-{p}") for v, p in cases]


def rows_of_files(p: Pipeline, files: set[int]) -> Counter[tuple[Any, ...]]:
    """The expected rows of the input files numbered ``files`` (a row's id is its file times 10,000 plus its line)."""
    return Counter({row: n for row, n in p.expected().items() if row[0] // 10_000 in files})


@pytest.fixture
def private_minio(tmp_path: Path) -> Iterator[Any]:
    """A MinIO of the test's own (a MinioServer, started), which the test may crash and restart."""
    from eosink.services.minio import MinioServer

    server = MinioServer(tmp_path / "minio")
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def minio() -> Any:
    """The MinIO service's endpoint (an S3Endpoint); a missing server fails the test (never a skip)."""
    from eosink.errors import ServiceError
    from eosink.services import get_service

    try:
        return get_service("minio").endpoint()
    except ServiceError as exc:
        pytest.fail(str(exc), pytrace=False)
