"""The chaos harness's orchestration: per strategy, per schedule, run the job under faults and check the sink.

For each schedule (:mod:`eosink.chaos.schedule`) a :class:`ScheduleRunner` writes the seeded
input, starts the job (:mod:`eosink.chaos.job`) as a :class:`~eosink._driver.DriverRun`,
connected to the sink through a :class:`~eosink.services.proxy.FaultProxy`, and injects the
run's faults: fault points through ``EOSINK_FAULTS`` (one fault log per run), kills of the
whole session, COMMIT replies cut by the proxy, restarts and crashes of the sink's private
server. It restarts the job from its checkpoint after each run until the input is exhausted
(bounded). A run that exits with an error is restarted too when a fault of that run explains
it (a task failure, a cut, a sink restart); any other error fails the schedule. A
:class:`~eosink.chaos.reader.Reader` polls the sink meanwhile. At the end
:func:`~eosink.chaos.oracle.verify` compares the sink with the oracle and the target reports
in-doubt work left behind.

:func:`run_chaos` plans every schedule of every strategy, the plain ``foreachBatch`` baseline
under the same kills, and the non-deterministic mode; runs those not already in the
:class:`~eosink.chaos.journal.Journal` with a pool of workers; and returns the report
(:mod:`eosink.chaos.report`) that ``results/chaos-<sink>.json`` holds.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from eosink._driver import DriverRun
from eosink._procs import driver_env
from eosink.chaos.journal import Journal
from eosink.chaos.oracle import (
    Row,
    Verdict,
    Workload,
    combined,
    read_attempts,
    read_input,
    spark_batches,
    verify,
    verify_naive,
    write_input,
)
from eosink.chaos.reader import Reader
from eosink.chaos.report import build_report, format_table
from eosink.chaos.results import ORDERED, RunRecord, ScheduleResult
from eosink.chaos.schedule import (
    ClusterFaults,
    Fault,
    Schedule,
    make_schedule,
    naive_schedule,
    nondeterministic_schedule,
)
from eosink.chaos.target import ChaosTarget, Names, commit_marker, get_target
from eosink.checkpoint import SparkCheckpoint
from eosink.services.proxy import FaultProxy, RequestMatch
from eosink.strategies import STRATEGY_NAMES

# RunRecord, ScheduleResult and format_table lived here; they stay importable from here.
__all__ = ["RunRecord", "ScheduleResult", "ScheduleRunner", "format_table", "plan_schedules", "run_chaos"]

STRATEGIES = STRATEGY_NAMES
ND_STRATEGIES = ("txid-check", "2pc")
MAX_EXTRA_RUNS = 4
POLL_S = 0.05
STAT_KEYS = ("batches_committed", "replays_skipped", "ambiguous_commits", "ambiguous_resolved_committed")


def _committed(checkpoint: Path) -> list[int]:
    """Batch ids in Spark's commit log."""
    return SparkCheckpoint(checkpoint).committed_batches()


def _happened(fault: Fault, injected: Sequence[str]) -> bool:
    """Whether ``fault`` is among a run's injected faults (as :meth:`ScheduleRunner._run_once` records them)."""
    if fault.kind == "point-kill":
        return any(x.startswith(f"{fault.point}@") and x.endswith(":kill") for x in injected)
    if fault.kind == "task-failure":
        return any(x.startswith(f"{fault.point}@") and x.endswith(":raise") for x in injected)
    prefix = {
        "random-kill": "random kill",
        "commit-cut": "cut after COMMIT",
        "sink-restart": "sink ",
        "failover": "failover",
        "link-cut": "link cut",
        "node-kill": "node killed",
        "node-pause": "node paused",
        "request-hold": "EndTxn held",
    }[fault.kind]
    return any(x.startswith(prefix) for x in injected)


EXPLAINED = ("F2@", "sink ", "cut ", "failover", "link cut", "node ", "EndTxn held")
"""Injected faults that explain a run's error exit (the sink was down or failed over, a node of its cluster
failed, a task kept failing):
the next run goes on, with the faults that did not happen yet."""


# -- one schedule ----------------------------------------------------------------------------------

RUNNER_FAULTS = ("commit-cut", "sink-restart", "failover", "link-cut", "node-kill", "node-pause", "request-hold")
"""The faults the runner injects itself as the job commits batches (the others are the job's fault points)."""


class _RunnerFaults:
    """The runner's own faults of one run, injected as the job commits batches: COMMIT replies cut by the
    proxy, restarts and crashes of the sink's server, and a kill at a random moment.

    Called every poll while the job runs; True when the random kill is due (the caller kills the
    driver). What happened goes into ``rec.injected``.
    """

    def __init__(
        self,
        target: ChaosTarget,
        commit_marker: RequestMatch | None,
        checkpoint: Path,
        faults: Sequence[Fault],
        proxy: FaultProxy | None,
        fault_log: Path,
        rec: RunRecord,
    ) -> None:
        self.target, self.commit_marker, self.checkpoint = target, commit_marker, checkpoint
        self.proxy, self.fault_log, self.rec = proxy, fault_log, rec
        self.base = len(_committed(checkpoint))
        self.pending = [f for f in faults if f.kind in RUNNER_FAULTS]
        self.random_kill = next((f for f in faults if f.kind == "random-kill"), None)
        self.task_failure = any(f.kind == "task-failure" for f in faults)
        self.armed_cut = False
        self.cuts_before = len(proxy.stats.requests_cut) if proxy is not None else 0
        self.due: dict[Fault, float] = {}
        self.kill_base: int | None = None
        self.kill_at: float | None = None

    def __call__(self) -> bool:
        progress = len(_committed(self.checkpoint)) - self.base
        self._inject_due(progress)
        if self.armed_cut and self.proxy is not None and len(self.proxy.stats.requests_cut) > self.cuts_before:
            self.armed_cut = False
            self.rec.injected.append("cut after COMMIT")
        self._schedule_random_kill(progress)
        if self.kill_at is not None and time.monotonic() >= self.kill_at:
            self.rec.injected.append("random kill")
            return True
        return False

    def _inject_due(self, progress: int) -> None:
        """Arm a cut or restart the sink once the run has committed a fault's batches and its delay passed."""
        for f in list(self.pending):
            if progress < f.after:
                continue
            self.due.setdefault(f, time.monotonic() + f.delay_s)
            if time.monotonic() < self.due[f]:
                continue
            self.pending.remove(f)
            if f.kind == "commit-cut" and self.proxy is not None and self.commit_marker is not None:
                self.proxy.cut_after_request(self.commit_marker)
                self.armed_cut = True
            elif f.kind == "sink-restart":
                self.target.restart(crash=f.crash)
                self.rec.injected.append(f"sink {'crash' if f.crash else 'restart'}")
            elif f.kind == "link-cut":
                self.rec.injected.append(f"link cut: {self.target.cut_link()}")
            elif f.kind == "failover":
                self.rec.injected.append(f"failover: {self.target.fail_over()}")
            elif f.kind == "node-kill":
                self.rec.injected.append(f"node killed: {self.target.kill_node(f.role)}")
            elif f.kind == "node-pause":
                self.rec.injected.append(f"node paused: {self.target.pause_node(f.role)}")
            elif f.kind == "request-hold":
                self.rec.injected.append(f"EndTxn held: {self.target.hold_end_txn()}")

    def _schedule_random_kill(self, progress: int) -> None:
        """Set the random kill's moment, after the run's other faults: a task failure shows in the fault log
        (or is given up two batches later: its batch may have been a skipped replay)."""
        kill = self.random_kill
        if kill is None or self.kill_at is not None or self.pending or self.armed_cut:
            return
        self.kill_base = progress if self.kill_base is None else self.kill_base
        waiting = self.task_failure and not self.fault_log.exists() and progress - self.kill_base < kill.after + 2
        if progress - self.kill_base >= kill.after and not waiting:
            self.kill_at = time.monotonic() + kill.delay_s


class ScheduleRunner:
    """Runs schedules, one at a time, against one started :class:`~eosink.chaos.target.ChaosTarget`."""

    def __init__(
        self,
        target: ChaosTarget,
        workdir: Path,
        *,
        commit_marker: RequestMatch | None = None,
        master: str = "local[2,4]",
        java_opts: str = "",
        run_timeout_s: float = 600.0,
        keep: bool = False,
        say: Callable[[str], None] = print,
    ) -> None:
        self.target = target
        self.commit_marker = commit_marker
        """Bytes of the request that commits a batch (the profile's): the fault proxy cuts its reply."""
        self.workdir = workdir
        self.master = master
        self.java_opts = java_opts
        self.run_timeout_s = run_timeout_s
        self.keep = keep
        self.say = say

    def names(self, schedule: Schedule) -> Names:
        mode = "naive" if schedule.naive else "nd" if schedule.nondeterministic else "eo"
        tag = f"{mode}{schedule.replication}_{schedule.strategy.replace('-', '')}_{schedule.seed}"
        return Names(table=f"chaos_{tag}", control_schema=f"chaos_{tag}_ctl", app_id=f"chaos-{tag}")

    def run(self, schedule: Schedule) -> ScheduleResult:
        """Run ``schedule`` to the end of its input (or to the expected stop) and check the sink."""
        result = ScheduleResult(schedule.strategy, schedule.seed, schedule.mode, schedule.to_json())
        result.replication = schedule.replication
        started = time.monotonic()
        names = self.names(schedule)
        root = self.workdir / names.table
        shutil.rmtree(root, ignore_errors=True)
        (root / "logs").mkdir(parents=True)
        write_input(root / "input", schedule.workload)
        files = read_input(root / "input")
        checkpoint = root / "checkpoint"

        known: dict[int, tuple[bytes, int]] = {}

        def expected_count(batch_id: int) -> int | None:
            """Keys the batch touches; Spark's offset log says which files the batch covers. Fixed while its
            ``offsets/N`` stays the same: a rewind moves the entries after the rewound batch aside, and Spark
            plans those batches anew, over other files (recounted when the entry's text changes)."""
            try:
                entry = (checkpoint / "offsets" / str(batch_id)).read_bytes()
            except FileNotFoundError:
                return None
            cached = known.get(batch_id)
            if cached is None or cached[0] != entry:
                planned = spark_batches(checkpoint, files)
                known[batch_id] = (entry, len({r["key"] for r in planned[batch_id]}))
            return known[batch_id][1]

        self.target.drop(names)
        if schedule.replication:
            self.target.set_replication(schedule.replication)
        atomic = not schedule.naive and self.target.atomic(schedule.strategy)
        proxy: Any = None
        if not schedule.naive:
            proxy = (
                self.target.fault_proxy()
                or FaultProxy(*self.target.address(), listen_port=self.target.proxy_port()).start()
            )
        reader = Reader(self.target.snapshotter(names), expected_count, atomic=atomic)
        try:
            with reader:
                self._runs(schedule, names, root, proxy, result)
        finally:
            if proxy is not None:
                proxy.close()
        result.reader_polls = reader.polls
        result.reader_polls_by = dict(reader.by_reader)
        result.partial_reads, result.partial_views = reader.partial_reads, reader.partial_views
        result.partial_examples = reader.examples
        result.order_breaks = reader.order_breaks
        if result.partial_reads and result.failure is None:
            result.failure = (
                f"{result.partial_reads} partial read(s) where atomicity is declared: {reader.examples[:2]}"
            )
        ordered = not schedule.naive and schedule.strategy in ORDERED
        if ordered and result.order_breaks and result.failure is None:
            result.failure = f"{result.order_breaks} read(s) broke the fan-out's order: {reader.examples[:2]}"
        self._check(schedule, names, root, spark_batches(checkpoint, files), result)
        if not self.keep:
            self.target.drop(names)
        result.duration_s = round(time.monotonic() - started, 1)
        return result

    def _runs(
        self, schedule: Schedule, names: Names, root: Path, proxy: FaultProxy | None, result: ScheduleResult
    ) -> None:
        planned = list(schedule.runs)
        i = rearmed = 0
        while True:
            faults = planned[i] if i < len(planned) else ()
            if i >= len(planned) + MAX_EXTRA_RUNS:
                result.failure = f"the input was not exhausted after {i} runs"
                return
            rec = self._run_once(schedule, names, root, i, faults, proxy)
            result.runs.append(rec)
            self.say(
                f"    run {i}: {rec.outcome}{' (' + rec.error_kind + ')' if rec.error_kind else ''} "
                f"in {rec.duration_s:.0f} s; injected: {', '.join(rec.injected) or '-'}"
            )
            result.faults_injected += len(rec.injected)
            result.failovers += sum(x.startswith("failover") for x in rec.injected)
            for key, attr in (("ambiguous_commits", "ambiguous_commits"), ("replays_skipped", "replays_skipped")):
                setattr(result, attr, getattr(result, attr) + int(rec.stats.get(key, 0)))
            i += 1
            if rec.outcome == "done":
                return
            if rec.outcome == "killed":
                result.crashes += 1
                continue
            if rec.outcome == "timeout":
                result.failure = f"run {rec.index} did not finish in {self.run_timeout_s:.0f} s"
                return
            expect_stop = schedule.nondeterministic and schedule.strategy == "txid-check"
            if expect_stop and rec.error_kind == "NonDeterministicReplayError":
                result.divergent_replays_detected += 1
                m = re.search(r"Batch (\d+)", rec.error or "")
                result.detected_batch = int(m.group(1)) if m else None
                return
            rewound = False
            if self._expects_loss(schedule, result, rec.error_kind):
                # An asynchronous standby promoted without batches the primary had acknowledged, or a store node
                # killed as it applied a request that then lost prepared work: eosink stopped instead of going on
                # silently. The operator's way back: a rewind.
                result.losses_detected += 1
                self.say(f"    batches lost to a fault, detected: {(rec.error or '')[:200]}; rewinding")
                refused = self._rewind(names, root)
                if refused is not None:
                    result.failure = f"run {rec.index}: eosink recover --rewind failed: {refused}"
                    return
                result.rewinds += 1
                rewound = True
            if rewound or any(x.startswith(EXPLAINED) for x in rec.injected):
                # An exit the run's own fault explains (the sink was down or failed over, a task kept failing, a
                # loss detected and rewound): the next run gets the faults that did not happen yet, so none of the
                # schedule's faults is lost.
                leftover = tuple(f for f in faults if not _happened(f, rec.injected))
                if any(f.terminal for f in leftover) and rearmed < MAX_EXTRA_RUNS:
                    planned.insert(i, leftover)
                    rearmed += 1
                continue
            result.failure = f"run {rec.index} failed: {rec.error_kind}: {(rec.error or '')[:600]}"
            return

    def _expects_loss(self, schedule: Schedule, result: ScheduleResult, error_kind: str | None) -> bool:
        """Whether the run's error is a lost batch the schedule's faults may cause: CommittedWorkLostError after a
        failover to an asynchronous standby; PreparedWorkLostError after a node kill, on a store whose nodes can
        lose prepared work (:attr:`~eosink.chaos.schedule.ClusterFaults.loses_prepared`)."""
        injected = [x for r in result.runs for x in r.injected]
        if error_kind == "CommittedWorkLostError":
            return schedule.replication == "async" and any(x.startswith("failover") for x in injected)
        if error_kind == "PreparedWorkLostError":
            faults = self.target.cluster_faults
            return faults is not None and faults.loses_prepared and any(x.startswith("node killed") for x in injected)
        return False

    def _rewind(self, names: Names, root: Path) -> str | None:
        """``eosink recover --rewind --yes`` as an operator runs it, against the sink's current primary; None when
        it rewound, else what it said."""
        env = {**os.environ, **self.target.job_env(None)}
        cmd = [
            sys.executable,
            "-m",
            "eosink.cli",
            "recover",
            *self.target.recover_args(names),
            *("--app-id", names.app_id, "--checkpoint", str(root / "checkpoint"), "--rewind", "--yes"),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
        if done.returncode != 0:
            return f"exit {done.returncode}: {self.target.scrub(done.stdout + done.stderr)[-1500:]}"
        return None

    def _run_once(
        self,
        schedule: Schedule,
        names: Names,
        root: Path,
        index: int,
        faults: Sequence[Fault],
        proxy: FaultProxy | None,
    ) -> RunRecord:
        checkpoint = root / "checkpoint"
        done = _committed(checkpoint)
        next_batch = max(done) + 1 if done else 0
        specs = [
            f"{f.point}@{next_batch + f.offset}:{'kill' if f.kind == 'point-kill' else 'raise'}"
            for f in faults
            if f.kind in ("point-kill", "task-failure")
        ]
        rec = RunRecord(index, [f.describe() for f in faults], ",".join(specs))
        logs = root / "logs"
        fault_log, stats_path = logs / f"faults-{index}.log", logs / f"stats-{index}.json"
        job_env = self.target.job_env(proxy.port if proxy is not None else None)
        env = driver_env(fault_log, self.java_opts, rec.fault_spec or None, **job_env)
        cmd = self._command(schedule, names, root, stats_path)
        started = time.monotonic()
        with DriverRun(cmd, env, logs / f"run-{index}.stderr", timeout_s=self.run_timeout_s) as run:
            run.watch(_RunnerFaults(self.target, self.commit_marker, checkpoint, faults, proxy, fault_log, rec), POLL_S)
        if proxy is not None:
            proxy.passthrough()  # disarm a cut that never happened
        self.target.heal()  # a link cut whose failover never came is restored
        outcome = run.outcome()
        rec.duration_s = round(time.monotonic() - started, 1)
        rec.returncode = outcome.returncode
        rec.injected = [*map(str, run.faults_fired()), *rec.injected]
        if stats_path.exists():
            rec.stats = {k: v for k, v in json.loads(stats_path.read_text()).items() if k in STAT_KEYS}
        rec.outcome = outcome.status
        if outcome.status == "error":
            rec.error_kind = outcome.error_kind or f"exit {outcome.returncode}"
            rec.error = outcome.error
        return rec

    def _command(self, schedule: Schedule, names: Names, root: Path, stats_path: Path) -> list[str]:
        """The job's command line (secrets go in its environment, never here)."""
        cmd = [
            sys.executable,
            "-m",
            "eosink.chaos.job",
            *("--target", self.target.name, "--input", str(root / "input"), "--checkpoint", str(root / "checkpoint")),
            *("--table", names.table, "--control-schema", names.control_schema, "--app-id", names.app_id),
            *("--strategy", "naive" if schedule.naive else schedule.strategy, "--master", self.master),
            *("--oracle-log", str(root / "logs" / "oracle.jsonl"), "--stats-out", str(stats_path)),
        ]
        if schedule.nondeterministic:
            cmd.append("--nondeterministic")
        return cmd

    def _found(self, names: Names) -> dict[str, list[Row]]:
        """What each sink holds (one sink: under the target's name; a fan-out: each of its sinks)."""
        by_sink = getattr(self.target, "rows_by_sink", None)
        if by_sink is not None:
            found: dict[str, list[Row]] = by_sink(names)
            return found
        return {self.target.name: self.target.read_rows(names)}

    def _check(self, schedule: Schedule, names: Names, root: Path, batches: Any, result: ScheduleResult) -> None:
        found = self._found(names)
        attempts = read_attempts([root / "logs" / "oracle.jsonl"])
        verdict: Verdict
        if schedule.naive:
            verdict = combined({name: verify_naive(rows, batches) for name, rows in found.items()})
            result.verdict = verdict.to_json()
            return
        upto = None
        if schedule.nondeterministic and schedule.strategy == "txid-check":
            if result.failure is None and not result.divergent_replays_detected:
                result.failure = "the non-deterministic replay was not detected (no NonDeterministicReplayError)"
            upto = result.detected_batch
            killed_at = [
                int(x.split("@")[1].split(":")[0]) for r in result.runs for x in r.injected if x.startswith("F8@")
            ]
            if result.failure is None and killed_at[-1:] != [result.detected_batch]:
                result.failure = (
                    f"NonDeterministicReplayError named batch {result.detected_batch}, "
                    f"the replayed batch was {killed_at[-1:]}"
                )
        verdict = combined(
            {
                name: verify(rows, batches, deterministic=not schedule.nondeterministic, attempts=attempts, upto=upto)
                for name, rows in found.items()
            }
        )
        result.verdict = verdict.to_json()
        result.leftovers = self.target.leftovers(names)
        if result.failure is None and not verdict.ok:
            result.failure = f"the sink does not hold one execution: {verdict.details[:3]}"
        if result.failure is None and any(result.leftovers.values()):
            result.failure = f"in-doubt work left behind: {result.leftovers}"


# -- every schedule ---------------------------------------------------------------------------------


def replace_seed(workload: Workload, seed: int) -> Workload:
    """``workload`` with the schedule's seed (each schedule gets its own input)."""
    return Workload(files=workload.files, rows=workload.rows, keys=workload.keys, seed=seed)


def plan_schedules(
    seed: int,
    schedules: int,
    strategies: Sequence[str],
    modes: Sequence[str],
    workload: Workload,
    kills: int,
    replications: Sequence[str] = ("",),
    *,
    cluster: ClusterFaults | None = None,
) -> list[Schedule]:
    """Every schedule of a harness run, in order: per seed ``seed + k``, one per strategy (and per replication
    mode of a replicated server) and the baseline's; then the non-deterministic mode's, one per strategy it
    applies to. ``cluster``: the sink's faults are a cluster's (those it names: nodes killed and paused, a request
    held)."""
    planned: list[Schedule] = []
    for k in range(schedules):
        s = seed + k
        if "eosink" in modes:
            planned += [
                make_schedule(
                    s, strategy, replace_seed(workload, s), kills=kills, replication=replication, cluster=cluster
                )
                for replication in replications
                for strategy in strategies
            ]
        if "naive" in modes:
            planned.append(naive_schedule(make_schedule(s, "2pc", replace_seed(workload, s), kills=kills)))
    if "nondeterministic" in modes:
        nd_kills = 4 if kills > 2 else 2
        planned += [
            nondeterministic_schedule(seed, strategy, replace_seed(workload, seed), kills=nd_kills)
            for strategy in ND_STRATEGIES
            if strategy in strategies
        ]
    return planned


def _wait_all(ended: list[threading.Event]) -> None:
    """Wait until every worker has set its event.

    Not ``Thread.join``: on CPython up to 3.12 a join that a signal interrupts marks the thread it waited
    for as stopped though it still runs, and a second join then returns at once; the command would exit
    under a running schedule (its result lost, its server left running, the interpreter's exit aborted by
    a thread inside native code).

    Each wait wakes every half second: a signal that lands just before the main thread blocks is otherwise
    handled only once the wait ends, and Ctrl-C would seem ignored until a schedule finished.
    """
    for event in ended:
        while not event.wait(0.5):
            pass


class _Pool:
    """Runs the planned schedules not done yet with a pool of workers, each a :class:`ScheduleRunner` against
    a private server of its own (a sink restart in one schedule must not be a fault in another).

    Each finished schedule goes into the journal and into ``done``; the first error of a worker stops
    the others after their current schedule and is raised again.
    """

    def __init__(
        self,
        sink: str,
        planned: list[Schedule],
        done: dict[int, ScheduleResult],
        journal: Journal,
        make_runner: Callable[[ChaosTarget, int], ScheduleRunner],
        *,
        kills: int,
        say: Callable[[str], None],
        topology: str = "single",
    ) -> None:
        self.sink, self.planned, self.done, self.journal = sink, planned, done, journal
        self.make_runner, self.kills, self.say, self.topology = make_runner, kills, say, topology
        self.todo = [i for i in range(len(planned)) if i not in done]
        self.lock = threading.Lock()
        self.errors: list[BaseException] = []

    def run(self, jobs: int) -> int:
        """Run every schedule still to do with up to ``jobs`` workers; returns how many there were."""
        workers = max(1, min(jobs, len(self.todo)))
        if not self.todo:
            return workers
        if workers == 1:
            self._worker(0)
            return workers
        ended = [threading.Event() for _ in range(workers)]
        threads = [
            threading.Thread(target=self._guarded, args=(n, ended[n]), name=f"chaos-{n}") for n in range(workers)
        ]
        try:
            for t in threads:
                t.start()
            _wait_all(ended)
        except BaseException:  # Ctrl-C or SIGTERM in the main thread: start no new schedule, stop cleanly
            with self.lock:
                self.todo.clear()
            self.say(
                "  interrupted: the running schedules finish, then their servers stop (a second signal ends at "
                "once); --resume goes on from the journal"
            )
            _wait_all([e for t, e in zip(threads, ended, strict=True) if t.ident is not None])
            raise
        for t in threads:
            t.join()
        if self.errors:
            raise self.errors[0]
        return workers

    def _guarded(self, slot: int, ended: threading.Event) -> None:
        try:
            self._worker(slot)
        except BaseException as exc:  # re-raised by run(), after every worker stopped
            with self.lock:
                self.errors.append(exc)
                self.todo.clear()
        finally:
            ended.set()

    def _worker(self, slot: int) -> None:
        target = get_target(self.sink, topology=self.topology)
        target.start()
        try:
            runner = self.make_runner(target, slot)
            while (i := self._next()) is not None:
                res = self._run_one(runner, self.planned[i])
                self.journal.save(self.planned[i], res)
                with self.lock:
                    self.done[i] = res
        finally:
            target.close()

    def _next(self) -> int | None:
        with self.lock:
            return self.todo.pop(0) if self.todo else None

    def _run_one(self, runner: ScheduleRunner, schedule: Schedule) -> ScheduleResult:
        """Run ``schedule``, saying what it plans and how it ended."""
        label = (
            "naive" if schedule.naive else f"{schedule.strategy}{' (non-deterministic)' * schedule.nondeterministic}"
        ) + (f" ({schedule.replication} replication)" if schedule.replication else "")
        plan = " | ".join(", ".join(r) or "to the end" for r in schedule.to_json()["runs"])
        self.say(f"  {label}, seed {schedule.seed}: {plan}")
        res = runner.run(schedule)
        status = "baseline done" if schedule.naive else "ok" if res.ok else f"FAILED: {res.failure}"
        with self.lock:
            finished = len(self.done) + 1
        self.say(
            f"  [{finished}/{len(self.planned)}] {label}, seed {schedule.seed}: {status} "
            f"({res.faults_injected} faults, {res.crashes} crashes, lost {res.lost}, duplicated {res.duplicated}, "
            f"{res.duration_s:.0f} s)"
        )
        if not res.ok and not schedule.naive:
            self.say(f"  replay: {res.replay_command(self.sink, self.kills, self.topology)}")
        return res


def run_chaos(
    sink: str,
    *,
    seed: int,
    schedules: int,
    strategies: Sequence[str] = STRATEGIES,
    modes: Sequence[str] = ("eosink", "naive", "nondeterministic"),
    workload: Workload | None = None,
    workdir: Path,
    master: str = "local[2,4]",
    java_opts: str = "",
    keep: bool = False,
    kills: int = 3,
    jobs: int = 1,
    resume: bool = False,
    say: Callable[[str], None] = print,
    topology: str = "single",
    replications: Sequence[str] = ("sync", "async"),
) -> dict[str, Any]:
    """Run the harness; returns the report (``results/chaos-<sink>.json``). Schedule ``k`` uses seed ``seed + k``.

    ``jobs`` schedules run at once, each worker against a private server of its own. Every finished
    schedule is kept in ``workdir/journal``; with ``resume`` a schedule already there (same seed,
    workload and faults) is not run again, so a long run that was interrupted goes on where it stopped.
    ``topology="replicated"``: the sink on a primary with a synchronous and an asynchronous standby, each
    schedule under each of ``replications`` (failovers and link cuts among its faults). ``topology="cluster"`` or
    ``"ha"``: the sink on several nodes (Kafka's three, MinIO's four, HDFS's two NameNodes), the faults its target
    names (:attr:`~eosink.chaos.target.ChaosTarget.cluster_faults`) among the schedule's.
    """
    base = workload or Workload()
    modes_of = tuple(replications) if topology == "replicated" else ("",)
    # a target written before cluster faults existed has none
    cluster: ClusterFaults | None = getattr(get_target(sink, topology=topology), "cluster_faults", None)
    planned = plan_schedules(seed, schedules, strategies, modes, base, kills, modes_of, cluster=cluster)
    journal = Journal(workdir / "journal")
    done = journal.finished(planned) if resume else {}
    if done:
        say(f"  resuming: {len(done)} of {len(planned)} schedule(s) already in {journal.root}")
    resumed = len(done)
    started = time.monotonic()
    marker = commit_marker(sink)

    def make_runner(target: ChaosTarget, slot: int) -> ScheduleRunner:
        return ScheduleRunner(
            target, workdir / f"w{slot}", commit_marker=marker, master=master, java_opts=java_opts, keep=keep, say=say
        )

    workers = _Pool(sink, planned, done, journal, make_runner, kills=kills, say=say, topology=topology).run(jobs)
    return build_report(
        [done[i] for i in sorted(done)],
        sink=sink,
        seed=seed,
        schedules=schedules,
        kills=kills,
        workload=base,
        master=master,
        strategies=strategies,
        atomic=get_target(sink, topology=topology).atomic,
        duration_s=time.monotonic() - started,
        jobs=workers,
        resumed=resumed,
        topology=topology,
    )
