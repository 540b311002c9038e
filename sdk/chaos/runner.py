"""The chaos harness's orchestration: per strategy, per schedule, run the job under faults and check the sink.

For each schedule (:mod:`eosink.chaos.schedule`) the runner writes the seeded input, starts the
job (:mod:`eosink.chaos.job`) in a session of its own, connected to the sink through a
:class:`~eosink.services.proxy.FaultProxy`, and injects the run's faults: fault points through
``EOSINK_FAULTS`` (one fault log per run), kills of the whole session, COMMIT replies cut by
the proxy, restarts and crashes of the sink's private server. It restarts the job from its
checkpoint after each run until the input is exhausted (bounded). A run that exits with an
error is restarted too when a fault of that run explains it (a task failure, a cut, a sink
restart); any other error fails the schedule. A :class:`~eosink.chaos.reader.Reader` polls the
sink meanwhile. At the end :func:`~eosink.chaos.oracle.verify` compares the sink with the
oracle and the target reports in-doubt work left behind.

:func:`run_chaos` runs every schedule of every strategy, the plain ``foreachBatch`` baseline
under the same kills, and the non-deterministic mode, and returns the report that
``results/chaos-<sink>.json`` holds.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eosink._procs import driver_env, kill_session
from eosink.chaos.oracle import (
    Verdict,
    Workload,
    read_attempts,
    read_input,
    spark_batches,
    verify,
    verify_naive,
    write_input,
)
from eosink.chaos.reader import Reader
from eosink.chaos.schedule import Fault, Schedule, make_schedule, naive_schedule, nondeterministic_schedule
from eosink.chaos.target import ChaosTarget, Names
from eosink.checkpoint import SparkCheckpoint
from eosink.strategies import STRATEGY_NAMES

__all__ = ["Harness", "RunRecord", "ScheduleResult", "run_chaos"]

STRATEGIES = STRATEGY_NAMES
ND_STRATEGIES = ("txid-check", "2pc")
MAX_EXTRA_RUNS = 4
POLL_S = 0.05
STAT_KEYS = ("batches_committed", "replays_skipped", "ambiguous_commits", "ambiguous_resolved_committed")
NON_TERMINAL = ("commit-cut", "sink-restart", "task-failure")


@dataclass
class RunRecord:
    """One run of the job: the faults planned and injected, how it ended, the writer's stats."""

    index: int
    planned: list[str]
    fault_spec: str
    outcome: str = ""
    returncode: int | None = None
    error_kind: str | None = None
    error: str | None = None
    injected: list[str] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0


@dataclass
class ScheduleResult:
    """One schedule's outcome; ``ok`` when the sink holds exactly what it must."""

    strategy: str
    seed: int
    mode: str
    schedule: dict[str, Any]
    runs: list[RunRecord] = field(default_factory=list)
    crashes: int = 0
    faults_injected: int = 0
    ambiguous_commits: int = 0
    replays_skipped: int = 0
    partial_reads: int = 0
    partial_views: int = 0
    reader_polls: int = 0
    partial_examples: list[str] = field(default_factory=list)
    divergent_replays_detected: int = 0
    detected_batch: int | None = None
    verdict: dict[str, Any] = field(default_factory=dict)
    leftovers: dict[str, int] = field(default_factory=dict)
    failure: str | None = None
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def lost(self) -> int:
        return int(self.verdict.get("lost", 0))

    @property
    def duplicated(self) -> int:
        return int(self.verdict.get("duplicated", 0))

    def replay_command(self, sink: str, kills: int = 3) -> str:
        """The command that runs this schedule alone (same seed, workload and number of kills)."""
        only = {"eosink": "", "naive": " --only naive", "nondeterministic": " --only nondeterministic"}[self.mode]
        strategy = "" if self.mode == "naive" else f" --strategy {self.strategy}"
        w = self.schedule["workload"]
        shape = f" --files {w['files']} --rows {w['rows']} --keys {w['keys']} --kills {kills}"
        return f"eosink chaos --sink {sink} --seed {self.seed} --schedules 1{strategy}{only}{shape}"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ScheduleResult:
        """A result as :meth:`to_json` wrote it (the journal of a resumable run)."""
        names = {f for f in cls.__dataclass_fields__ if f != "runs"}
        result = cls(**{k: v for k, v in data.items() if k in names})
        run_fields = set(RunRecord.__dataclass_fields__)
        result.runs = [RunRecord(**{k: v for k, v in r.items() if k in run_fields}) for r in data.get("runs", [])]
        return result

    def to_json(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items() if k != "runs"}
        data["runs"] = [r.__dict__ for r in self.runs]
        data["ok"] = self.ok
        data["lost"], data["duplicated"] = self.lost, self.duplicated
        return data


def _committed(checkpoint: Path) -> list[int]:
    """Batch ids in Spark's commit log."""
    return SparkCheckpoint(checkpoint).committed_batches()


def _fired(log: Path) -> list[str]:
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 3:
            out.append(f"{parts[0]}@{parts[1]}:{parts[2]}")
    return out


def _happened(fault: Fault, injected: Sequence[str]) -> bool:
    """Whether ``fault`` is among a run's injected faults (as :meth:`Harness._run_once` records them)."""
    if fault.kind == "point-kill":
        return any(x.startswith(f"{fault.point}@") and x.endswith(":kill") for x in injected)
    if fault.kind == "task-failure":
        return any(x.startswith(f"{fault.point}@") and x.endswith(":raise") for x in injected)
    prefix = {"random-kill": "random kill", "commit-cut": "cut after COMMIT", "sink-restart": "sink "}[fault.kind]
    return any(x.startswith(prefix) for x in injected)


def _error(stderr: str) -> tuple[str | None, str | None]:
    for line in stderr.splitlines():
        if line.startswith("EOSINK-ERROR "):
            kind = line.split()[1].rstrip(":")
            return kind, line[len("EOSINK-ERROR ") :][:1500]
    return None, stderr[-1500:] if stderr.strip() else None


class Harness:
    """Runs schedules against one started :class:`~eosink.chaos.target.ChaosTarget`."""

    def __init__(
        self,
        target: ChaosTarget,
        workdir: Path,
        *,
        commit_marker: bytes | None = None,
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
        tag = f"{mode}_{schedule.strategy.replace('-', '')}_{schedule.seed}"
        return Names(table=f"chaos_{tag}", control_schema=f"chaos_{tag}_ctl", app_id=f"chaos-{tag}")

    def run(self, schedule: Schedule) -> ScheduleResult:
        """Run ``schedule`` to the end of its input (or to the expected stop) and check the sink."""
        from eosink.services.proxy import FaultProxy

        mode = "naive" if schedule.naive else "nondeterministic" if schedule.nondeterministic else "eosink"
        result = ScheduleResult(schedule.strategy, schedule.seed, mode, schedule.to_json())
        started = time.monotonic()
        names = self.names(schedule)
        root = self.workdir / names.table
        shutil.rmtree(root, ignore_errors=True)
        (root / "logs").mkdir(parents=True)
        write_input(root / "input", schedule.workload)
        files = read_input(root / "input")
        checkpoint = root / "checkpoint"

        known: dict[int, int] = {}

        def expected_count(batch_id: int) -> int | None:
            """Keys the batch touches; Spark's offset log says which files the batch covers (fixed once written)."""
            if batch_id not in known:
                if not (checkpoint / "offsets" / str(batch_id)).exists():
                    return None
                planned = spark_batches(checkpoint, files)
                known[batch_id] = len({r["key"] for r in planned[batch_id]})
            return known[batch_id]

        self.target.drop(names)
        atomic = not schedule.naive and self.target.atomic(schedule.strategy)
        proxy = None if schedule.naive else FaultProxy(*self.target.address()).start()
        reader = Reader(self.target.snapshotter(names), expected_count, atomic=atomic)
        try:
            with reader:
                self._runs(schedule, names, root, proxy, result)
        finally:
            if proxy is not None:
                proxy.close()
        result.reader_polls = reader.polls
        result.partial_reads, result.partial_views = reader.partial_reads, reader.partial_views
        result.partial_examples = reader.examples
        if result.partial_reads and result.failure is None:
            result.failure = (
                f"{result.partial_reads} partial read(s) where atomicity is declared: {reader.examples[:2]}"
            )
        self._check(schedule, names, root, spark_batches(checkpoint, files), result)
        if not self.keep:
            self.target.drop(names)
        result.duration_s = round(time.monotonic() - started, 1)
        return result

    def _runs(self, schedule: Schedule, names: Names, root: Path, proxy: Any, result: ScheduleResult) -> None:
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
            if any(x.startswith(("F2@", "sink ", "cut ")) for x in rec.injected):
                # An exit the run's own fault explains (the sink was down, a task kept failing): the next
                # run gets the faults that did not happen yet, so none of the schedule's faults is lost.
                leftover = tuple(f for f in faults if not _happened(f, rec.injected))
                if any(f.terminal for f in leftover) and rearmed < MAX_EXTRA_RUNS:
                    planned.insert(i, leftover)
                    rearmed += 1
                continue
            result.failure = f"run {rec.index} failed: {rec.error_kind}: {(rec.error or '')[:600]}"
            return

    def _run_once(
        self, schedule: Schedule, names: Names, root: Path, index: int, faults: Sequence[Fault], proxy: Any
    ) -> RunRecord:
        checkpoint = root / "checkpoint"
        done = _committed(checkpoint)
        next_batch = max(done) + 1 if done else 0
        specs = []
        for f in faults:
            if f.kind in ("point-kill", "task-failure"):
                specs.append(f"{f.point}@{next_batch + f.offset}:{'kill' if f.kind == 'point-kill' else 'raise'}")
        rec = RunRecord(index, [f.describe() for f in faults], ",".join(specs))
        fault_log = root / "logs" / f"faults-{index}.log"
        stats_path = root / "logs" / f"stats-{index}.json"
        stderr_path = root / "logs" / f"run-{index}.stderr"
        env = driver_env(
            fault_log,
            self.java_opts,
            rec.fault_spec if specs else None,
            **self.target.job_env(proxy.port if proxy is not None else None),
        )
        cmd = [
            sys.executable,
            "-m",
            "eosink.chaos.job",
            *("--target", self.target.name, "--input", str(root / "input"), "--checkpoint", str(checkpoint)),
            *("--table", names.table, "--control-schema", names.control_schema, "--app-id", names.app_id),
            *("--strategy", "naive" if schedule.naive else schedule.strategy, "--master", self.master),
            *("--oracle-log", str(root / "logs" / "oracle.jsonl"), "--stats-out", str(stats_path)),
        ]
        if schedule.nondeterministic:
            cmd.append("--nondeterministic")
        started = time.monotonic()
        with open(stderr_path, "w") as err:
            proc = subprocess.Popen(
                cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=err, text=True
            )
            try:
                killed_by_us = self._monitor(proc, checkpoint, faults, proxy, fault_log, rec)
            finally:
                kill_session(proc.pid)  # a crash ends the whole driver: its JVM and Python workers too
                proc.wait()
        if proxy is not None:
            proxy.passthrough()  # disarm a cut that never happened
        rec.duration_s = round(time.monotonic() - started, 1)
        rec.returncode = proc.returncode
        fired = _fired(fault_log)
        rec.injected = [*fired, *rec.injected]
        stderr = stderr_path.read_text(errors="replace")
        if stats_path.exists():
            rec.stats = {k: v for k, v in json.loads(stats_path.read_text()).items() if k in STAT_KEYS}
        if killed_by_us == "timeout":
            rec.outcome = "timeout"
        elif proc.returncode == 0:
            rec.outcome = "done"
        elif proc.returncode == -signal.SIGKILL and (killed_by_us or any(x.endswith(":kill") for x in fired)):
            rec.outcome = "killed"
        else:
            rec.outcome = "error"
            rec.error_kind, rec.error = _error(stderr)
            rec.error_kind = rec.error_kind or f"exit {proc.returncode}"
        return rec

    def _monitor(
        self,
        proc: subprocess.Popen[str],
        checkpoint: Path,
        faults: Sequence[Fault],
        proxy: Any,
        fault_log: Path,
        rec: RunRecord,
    ) -> str | None:
        """Inject the run's runner-side faults while the job runs; returns 'random', 'timeout' or None."""
        base = len(_committed(checkpoint))
        pending = [f for f in faults if f.kind in ("commit-cut", "sink-restart")]
        random_kill = next((f for f in faults if f.kind == "random-kill"), None)
        task_failure = any(f.kind == "task-failure" for f in faults)
        armed_cut = False
        cuts_before = len(proxy.stats.requests_cut) if proxy is not None else 0
        kill_base: int | None = None
        kill_at: float | None = None
        deadline = time.monotonic() + self.run_timeout_s
        due: dict[Fault, float] = {}
        while proc.poll() is None:
            progress = len(_committed(checkpoint)) - base
            for f in list(pending):
                if progress < f.after:
                    continue
                due.setdefault(f, time.monotonic() + f.delay_s)
                if time.monotonic() < due[f]:
                    continue
                pending.remove(f)
                if f.kind == "commit-cut" and proxy is not None and self.commit_marker is not None:
                    proxy.cut_after_request(self.commit_marker)
                    armed_cut = True
                elif f.kind == "sink-restart":
                    self.target.restart(crash=f.crash)
                    rec.injected.append(f"sink {'crash' if f.crash else 'restart'}")
            if armed_cut and len(proxy.stats.requests_cut) > cuts_before:
                armed_cut = False
                rec.injected.append("cut after COMMIT")
            if random_kill is not None and kill_at is None and not pending and not armed_cut:
                # after the run's other faults: a task failure shows in the fault log (or is given up
                # two batches later: its batch may have been a skipped replay)
                kill_base = progress if kill_base is None else kill_base
                waiting = task_failure and not fault_log.exists() and progress - kill_base < random_kill.after + 2
                if progress - kill_base >= random_kill.after and not waiting:
                    kill_at = time.monotonic() + random_kill.delay_s
            if kill_at is not None and time.monotonic() >= kill_at:
                kill_session(proc.pid)
                rec.injected.append("random kill")
                return "random"
            if time.monotonic() > deadline:
                kill_session(proc.pid)
                return "timeout"
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(POLL_S)
        return None

    def _check(self, schedule: Schedule, names: Names, root: Path, batches: Any, result: ScheduleResult) -> None:
        found = self.target.read_rows(names)
        attempts = read_attempts([root / "logs" / "oracle.jsonl"])
        verdict: Verdict
        if schedule.naive:
            verdict = verify_naive(found, batches)
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
        verdict = verify(found, batches, deterministic=not schedule.nondeterministic, attempts=attempts, upto=upto)
        result.verdict = verdict.to_json()
        result.leftovers = self.target.leftovers(names)
        if result.failure is None and not verdict.ok:
            result.failure = f"the sink does not hold one execution: {verdict.details[:3]}"
        if result.failure is None and any(result.leftovers.values()):
            result.failure = f"in-doubt work left behind: {result.leftovers}"


# -- the whole harness -------------------------------------------------------------------------------


def _aggregate(results: Sequence[ScheduleResult]) -> dict[str, Any]:
    return {
        "schedules": len(results),
        "crashes": sum(r.crashes for r in results),
        "faults_injected": sum(r.faults_injected for r in results),
        "ambiguous_commits": sum(r.ambiguous_commits for r in results),
        "replays_skipped": sum(r.replays_skipped for r in results),
        "lost": sum(r.lost for r in results),
        "duplicated": sum(r.duplicated for r in results),
        "partial_reads": sum(r.partial_reads for r in results),
        "partial_views": sum(r.partial_views for r in results),
        "divergent_replays_detected": sum(r.divergent_replays_detected for r in results),
        "failed": sum(not r.ok for r in results),
        "duration_s": round(sum(r.duration_s for r in results), 1),
    }


def _journal_path(journal: Path, schedule: Schedule) -> Path:
    mode = "naive" if schedule.naive else "nondeterministic" if schedule.nondeterministic else "eosink"
    return journal / f"{mode}-{schedule.strategy}-{schedule.seed}.json"


def _same_shape(saved: dict[str, Any], schedule: Schedule) -> bool:
    return bool(saved.get("schedule") == schedule.to_json())


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
) -> dict[str, Any]:
    """Run the harness; returns the report (``results/chaos-<sink>.json``). Schedule ``k`` uses seed ``seed + k``.

    ``jobs`` schedules run at once, each worker against a private server of its own (a sink
    restart in one schedule must not be a fault in another). Every finished schedule is kept
    in ``workdir/journal``; with ``resume`` a schedule already there (same seed, workload and
    faults) is not run again, so a long run that was interrupted goes on where it stopped.
    """
    from eosink.chaos.target import get_target
    from eosink.profiles import get_profile

    base = workload or Workload()
    journal = workdir / "journal"
    journal.mkdir(parents=True, exist_ok=True)
    planned: list[Schedule] = []
    for k in range(schedules):
        s = seed + k
        if "eosink" in modes:
            planned += [make_schedule(s, strategy, replace_seed(base, s), kills=kills) for strategy in strategies]
        if "naive" in modes:
            planned.append(naive_schedule(make_schedule(s, "2pc", replace_seed(base, s), kills=kills)))
    if "nondeterministic" in modes:
        nd_kills = 4 if kills > 2 else 2
        planned += [
            nondeterministic_schedule(seed, strategy, replace_seed(base, seed), kills=nd_kills)
            for strategy in ND_STRATEGIES
            if strategy in strategies
        ]
    done: dict[int, ScheduleResult] = {}
    for i, schedule in enumerate(planned):
        path = _journal_path(journal, schedule)
        if resume and path.exists():
            saved = json.loads(path.read_text())
            if _same_shape(saved, schedule):
                done[i] = ScheduleResult.from_json(saved)
    if done:
        say(f"  resuming: {len(done)} of {len(planned)} schedule(s) already in {journal}")
    todo = [i for i in range(len(planned)) if i not in done]
    resumed = len(done)
    started = time.monotonic()
    lock = threading.Lock()

    def one(harness: Harness, schedule: Schedule) -> ScheduleResult:
        label = (
            "naive" if schedule.naive else f"{schedule.strategy}{' (non-deterministic)' * schedule.nondeterministic}"
        )
        plan = " | ".join(", ".join(r) or "to the end" for r in schedule.to_json()["runs"])
        say(f"  {label}, seed {schedule.seed}: {plan}")
        res = harness.run(schedule)
        status = "baseline done" if schedule.naive else "ok" if res.ok else f"FAILED: {res.failure}"
        with lock:
            finished = len(done) + 1
        say(
            f"  [{finished}/{len(planned)}] {label}, seed {schedule.seed}: {status} ({res.faults_injected} faults, "
            f"{res.crashes} crashes, lost {res.lost}, duplicated {res.duplicated}, {res.duration_s:.0f} s)"
        )
        if not res.ok and not schedule.naive:
            say(f"  replay: {res.replay_command(sink, kills)}")
        return res

    marker = get_profile(sink, "chaos_target").commit_request_marker

    def worker(slot: int) -> None:
        target = get_target(sink)
        target.start()
        try:
            harness = Harness(
                target,
                workdir / f"w{slot}",
                commit_marker=marker,
                master=master,
                java_opts=java_opts,
                keep=keep,
                say=say,
            )
            while True:
                with lock:
                    if not todo:
                        return
                    i = todo.pop(0)
                res = one(harness, planned[i])
                _journal_path(journal, planned[i]).write_text(json.dumps(res.to_json(), default=str) + "\n")
                with lock:
                    done[i] = res
        finally:
            target.close()

    workers = max(1, min(jobs, len(todo)))
    if todo:
        if workers == 1:
            worker(0)
        else:
            errors: list[BaseException] = []

            def guarded(slot: int) -> None:
                try:
                    worker(slot)
                except BaseException as exc:  # re-raised below, after every worker stopped
                    with lock:
                        errors.append(exc)
                        todo.clear()

            threads = [threading.Thread(target=guarded, args=(n,), name=f"chaos-{n}") for n in range(workers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                raise errors[0]
    per_strategy: dict[str, list[ScheduleResult]] = {s: [] for s in strategies}
    naive: list[ScheduleResult] = []
    nondet: list[ScheduleResult] = []
    for i in sorted(done):
        res = done[i]
        if res.mode == "naive":
            naive.append(res)
        elif res.mode == "nondeterministic":
            nondet.append(res)
        else:
            per_strategy[res.strategy].append(res)
    target = get_target(sink)
    results = []
    for strategy, rs in per_strategy.items():
        row = {"strategy": strategy, **_aggregate(rs)}
        nd = [r for r in nondet if r.strategy == strategy]
        row["divergent_replays_detected"] += sum(r.divergent_replays_detected for r in nd)
        row["atomic"] = target.atomic(strategy)
        results.append(row)
    naive_agg = _aggregate(naive)
    report: dict[str, Any] = {
        "sink": sink,
        "seed": seed,
        "schedules_per_strategy": schedules,
        "kills_per_schedule": kills,
        "workload": base.to_json(),
        "master": master,
        "results": results,
        "naive": {
            "schedules": naive_agg["schedules"],
            "crashes": naive_agg["crashes"],
            "lost": naive_agg["lost"],
            "duplicated": naive_agg["duplicated"],
            "shows_problem": naive_agg["lost"] + naive_agg["duplicated"] > 0,
        },
        "nondeterministic": [
            {
                "strategy": r.strategy,
                "seed": r.seed,
                "ok": r.ok,
                "failure": r.failure,
                "divergent_replays_detected": r.divergent_replays_detected,
                "detected_batch": r.detected_batch,
                "lost": r.lost,
                "duplicated": r.duplicated,
                "crashes": r.crashes,
            }
            for r in nondet
        ],
        "failed": [
            {
                "strategy": r.strategy,
                "mode": r.mode,
                "seed": r.seed,
                "failure": r.failure,
                "replay": r.replay_command(sink, kills),
            }
            for r in [*_flat(per_strategy.values()), *nondet]
            if not r.ok
        ],
        "duration_s": round(time.monotonic() - started, 1),
        "jobs": workers,
        "resumed": resumed,
        "schedules": [r.to_json() for r in [*_flat(per_strategy.values()), *naive, *nondet]],
    }
    return report


def _flat(groups: Iterable[list[ScheduleResult]]) -> list[ScheduleResult]:
    return [r for group in groups for r in group]


def replace_seed(workload: Workload, seed: int) -> Workload:
    """``workload`` with the schedule's seed (each schedule gets its own input)."""
    return Workload(files=workload.files, rows=workload.rows, keys=workload.keys, seed=seed)


def format_table(report: dict[str, Any]) -> str:
    """The report as a text table."""
    cols = (
        ("strategy", 12),
        ("schedules", 10),
        ("faults", 7),
        ("crashes", 8),
        ("ambiguous", 10),
        ("skipped", 8),
        ("lost", 5),
        ("dupl.", 6),
        ("partial", 8),
        ("(info)", 7),
        ("divergent", 10),
        ("failed", 7),
    )
    lines = ["".join(f"{name:>{w}}" if i else f"{name:<{w}}" for i, (name, w) in enumerate(cols))]
    for r in report["results"]:
        values = (
            r["strategy"],
            r["schedules"],
            r["faults_injected"],
            r["crashes"],
            r["ambiguous_commits"],
            r["replays_skipped"],
            r["lost"],
            r["duplicated"],
            r["partial_reads"] if r["atomic"] else "-",
            r["partial_views"],
            r["divergent_replays_detected"],
            r["failed"],
        )
        lines.append(
            "".join(f"{v:>{w}}" if i else f"{v:<{w}}" for i, (v, (_, w)) in enumerate(zip(values, cols, strict=True)))
        )
    n = report["naive"]
    lines.append(
        f"{'naive':<12}{n['schedules']:>10}{'':>7}{n['crashes']:>8}{'':>10}{'':>8}{n['lost']:>5}{n['duplicated']:>6}"
    )
    for nd in report["nondeterministic"]:
        what = (
            f"NonDeterministicReplayError at batch {nd['detected_batch']}"
            if nd["divergent_replays_detected"]
            else f"consistent, lost {nd['lost']}, duplicated {nd['duplicated']}"
        )
        lines.append(f"non-deterministic {nd['strategy']}: {'ok' if nd['ok'] else 'FAILED'} ({what})")
    return "\n".join(lines)
