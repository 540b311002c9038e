"""``eosink bench --sink postgres [--rows N] [--quick]``: every run on the same data, one report.

Order: start the server (if it is not running) and fetch the baselines' jars; generate the data
sets (cached); the throughput runs per size; the streaming-latency runs per input rate; the
driver-RSS runs under ``local-cluster``; then ``results/bench-<sink>.{json,md,png}`` and, unless
told otherwise, the generated section of ``docs/benchmarks.md``. Each run prints a progress line
with the elapsed time. A failed run is reported as failed; the others go on.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from eosink.bench.datasets import DEFAULT_SEED, Dataset, ensure_dataset
from eosink.bench.job import Job
from eosink.bench.report import Report, machine, update_docs, write_results
from eosink.bench.runner import get_adapter, run_job
from eosink.bench.runs import (
    BenchAdapter,
    LatencyResult,
    RssResult,
    RunResult,
    RunSpec,
    new_namespace,
    target_size,
)

__all__ = ["BenchPlan", "main", "plan_from_args", "round_order"]

RSS_MASTER = "local-cluster[2,1,1024]"
LATENCY_KINDS = ("eosink", "at-least-once")
"""Streaming-latency runs: every eosink run (each strategy in each commit mode) and the at-least-once path."""
JOB_TIMEOUT_S = 3600.0


@dataclass
class BenchPlan:
    """What one ``eosink bench`` invocation runs."""

    sink: str
    sizes: list[int]
    quick: bool
    master: str
    participants: int
    seed: int
    only: list[str]
    rates: list[int]
    latency_s: float
    warmup_s: float
    rss_sizes: list[int]
    all_modes: bool
    """Run each strategy in every commit mode the sink has (else in its default mode only)."""
    repeat: int | None
    """Rounds of throughput runs at the size the targets are judged on (None: the sink's default)."""
    repeat_other: int | None
    """Rounds at every other size (None: the sink's default)."""
    trigger_ms: int | None
    """The streaming-latency runs' trigger interval (None: the sink's default)."""
    out: Path
    docs: Path | None
    cache: Path
    warm_on_data: bool = False
    """Warm each throughput run up on the whole data set, not a few rows (``--warm-up data``)."""
    topology: str = "single"
    """The servers' shape: ``single`` (one of each), or another the sink's adapter offers (``topologies``)."""

    @property
    def label(self) -> str:
        """The report's name: the sink, or ``<sink>-<topology>``, then ``-warm`` when runs warm up on the data set
        (``results/bench-<label>.*``)."""
        label = self.sink if self.topology == "single" else f"{self.sink}-{self.topology}"
        return f"{label}-warm" if self.warm_on_data else label


def _ints(text: str) -> list[int]:
    return [int(float(x)) for x in text.replace("_", "").split(",") if x.strip()]


def _parser() -> argparse.ArgumentParser:
    from eosink.profiles import profile_names, sink_argument

    ap = argparse.ArgumentParser(
        prog="eosink bench",
        description="eosink's strategies against the same path without exactly-once, Spark's built-in writers "
        "and the server's bulk load, on the same generated data; writes results/bench-<sink>.json/.md/.png.",
    )
    sinks = profile_names("bench_adapter")
    ap.add_argument(
        "--sink",
        default="postgres",
        type=sink_argument("bench_adapter"),
        help=f"the sink to benchmark: {', '.join(sinks)} (default: postgres); several joined by '+', e.g. "
        "postgres+kafka: one query writing each batch into all of them, against a query per sink",
    )
    ap.add_argument("--rows", help="comma-separated data set sizes (default 1000000,5000000; quick 50000)")
    ap.add_argument("--quick", action="store_true", help="small sizes and short streaming runs (minutes, indicative)")
    ap.add_argument("--master", default="local[2]", help="Spark master of the throughput and latency runs")
    ap.add_argument("--participants", type=int, default=2, help="eosink participants (and partitions) per batch")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--only", default="", help="comma-separated run names (driver-rss: the RSS runs); default: all")
    ap.add_argument("--rates", help="streaming input rates in rows/s (default 5000,50000; quick 5000); 0 skips")
    ap.add_argument("--latency-seconds", type=float, help="measured seconds per latency run (default 30; quick 8)")
    ap.add_argument(
        "--repeat",
        type=int,
        help="rounds of throughput runs at the target size (1M rows, else the smallest), interleaved, each round "
        "starting one run later; each run's median counts (default: the sink's, 3 for most; quick 1)",
    )
    ap.add_argument(
        "--repeat-other", type=int, help="rounds at every other size (default: the sink's, 1 for most; quick 1)"
    )
    ap.add_argument(
        "--warm-up",
        choices=("rows", "data"),
        default="rows",
        help="what each throughput run writes its own way before its clock starts: a few rows (default: workers "
        "started, classes loaded) or the whole data set (also the JVM's compiled steady state of a long-running "
        "stream; each run takes about twice as long)",
    )
    ap.add_argument("--trigger-ms", type=int, help="trigger interval of the streaming runs (default: the sink's)")
    ap.add_argument("--rss-rows", help="batch sizes of the driver-RSS runs (default 1000000,5000000); 0 skips")
    ap.add_argument(
        "--topology",
        default="single",
        help="single (one server) or cluster (Kafka: three nodes, replication factor 3, min.insync.replicas=2); "
        "the report is then bench-<sink>-<topology>",
    )
    ap.add_argument("--out", default="results", help="where bench-<sink>.json/.md/.png go")
    ap.add_argument("--docs", help="the docs page whose generated section is replaced (default docs/benchmarks.md)")
    ap.add_argument("--no-docs", action="store_true", help="leave the docs alone (the default in quick mode)")
    ap.add_argument("--cache", help="where data sets and run directories go (default $EOSINK_CACHE/bench)")
    return ap


def plan_from_args(argv: Sequence[str]) -> BenchPlan:
    """Parse ``eosink bench`` arguments into a plan (defaults depend on ``--quick``)."""
    args = _parser().parse_args(list(argv))
    quick = bool(args.quick)
    sizes = _ints(args.rows) if args.rows else ([50_000] if quick else [1_000_000, 5_000_000])
    rates = _ints(args.rates) if args.rates else ([5_000] if quick else [5_000, 50_000])
    rss = _ints(args.rss_rows) if args.rss_rows else ([50_000, 250_000] if quick else [1_000_000, 5_000_000])
    if args.cache:
        cache = Path(args.cache)
    else:
        from eosink.services._layout import cache_root

        cache = cache_root() / "bench"
    docs: Path | None = None
    if not args.no_docs and (args.docs or not quick):
        docs = Path(args.docs or "docs/benchmarks.md")
    return BenchPlan(
        sink=args.sink,
        sizes=[s for s in sizes if s > 0],
        quick=quick,
        master=args.master,
        participants=args.participants,
        seed=args.seed,
        only=[x.strip() for x in args.only.split(",") if x.strip()],
        rates=[r for r in rates if r > 0],
        latency_s=args.latency_seconds if args.latency_seconds is not None else (8.0 if quick else 30.0),
        warmup_s=3.0 if quick else 5.0,
        rss_sizes=[s for s in rss if s > 0],
        all_modes=not quick,
        repeat=max(1, args.repeat) if args.repeat is not None else (1 if quick else None),
        repeat_other=max(1, args.repeat_other) if args.repeat_other is not None else (1 if quick else None),
        trigger_ms=args.trigger_ms,
        out=Path(args.out),
        docs=docs,
        cache=cache,
        topology=args.topology,
        warm_on_data=args.warm_up == "data",
    )


def round_order(specs: list[RunSpec], n: int) -> list[RunSpec]:
    """The runs of throughput round ``n`` (from 0): the list rotated left by ``n``."""
    if not specs:
        return []
    k = n % len(specs)
    return specs[k:] + specs[:k]


class _Bench:
    def __init__(self, plan: BenchPlan, adapter: BenchAdapter) -> None:
        self.plan = plan
        self.adapter = adapter
        self.started = time.monotonic()
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
        self.work = plan.cache / "runs" / stamp
        self.rounds_run = 0
        """Throughput rounds started so far, of every size: where the next round's order starts."""
        goals = adapter.goals()
        self.trigger_ms = plan.trigger_ms or goals.trigger_ms
        self.repeat = plan.repeat or goals.rounds[0]
        self.repeat_other = plan.repeat_other or goals.rounds[1]

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:7.1f}s] {text}", flush=True)

    def wanted(self, name: str) -> bool:
        return not self.plan.only or name in self.plan.only

    def _job(self, kind: str, spec: RunSpec, ns: str, **kw: Any) -> Job:
        root = self.work / f"{kind}-{spec.name}-{ns}"
        participants = spec.participants or self.plan.participants
        return Job(kind, self.plan.sink, spec, ns, str(root), participants=participants, **kw)

    def _run(self, job: Job) -> dict[str, Any]:
        body = run_job(job, self.adapter.child_env(), JOB_TIMEOUT_S)
        if body.get("error") is None:
            shutil.rmtree(job.root, ignore_errors=True)
        else:
            self.say(f"  failed; the driver's log stays in {job.root}")
        return body

    def throughput(self, spec: RunSpec, dataset: Dataset, master: str, kind: str = "throughput") -> dict[str, Any]:
        ns = new_namespace()
        self.adapter.prepare(ns, keyed=spec.strategy == "idempotent")
        try:
            if spec.kind == "external":
                try:
                    body: dict[str, Any] = {"seconds": self.adapter.run_external(spec, ns, dataset)}
                except Exception as exc:
                    body = {"error": f"{type(exc).__name__}: {exc}"[:1500]}
            else:
                master = spec.master or master
                job = self._job(
                    kind,
                    spec,
                    ns,
                    master=master,
                    data=str(dataset.parquet),
                    rows=dataset.rows,
                    warm_on_data=self.plan.warm_on_data,
                )
                body = self._run(job)
            if body.get("error") is None and spec.kind != "floor":
                try:
                    body["verified_rows"] = self.adapter.verify(ns)
                except Exception as exc:  # the run fails, the benchmark goes on
                    body["error"] = f"checking the target failed: {type(exc).__name__}: {exc}"[:1500]
        finally:
            self.adapter.drop(ns)
        return body

    def run_throughput(self, dataset: Dataset, rounds: int = 1, at_target: bool = True) -> list[RunResult]:
        """Every throughput run over ``dataset``, ``rounds`` times, interleaved (a slow minute of the machine hits
        every contender alike); each run's median counts, and any failed round fails the run. Runs that show one
        thing once (:attr:`RunSpec.target_only`) run only ``at_target``.

        Each round starts one run later in the list than the round before (:func:`round_order`), so no run is
        always the first of a round, or always follows the same one: what one run leaves behind on the store
        or the machine falls on each in turn."""
        specs = [s for s in self.adapter.runs() if self.wanted(s.name) and (at_target or not s.target_only)]
        bodies: dict[str, list[dict[str, Any]]] = {spec.name: [] for spec in specs}
        for n in range(rounds):
            if rounds > 1:
                self.say(f"throughput {dataset.rows:>9,} round {n + 1} of {rounds}")
            order = round_order(specs, self.rounds_run)
            self.rounds_run += 1
            for spec in order:
                body = self.throughput(spec, dataset, self.plan.master)
                bodies[spec.name].append(body)
                self._report_round(spec, dataset, body)
        return [self._result(spec, dataset, bodies[spec.name]) for spec in specs]

    def _result(self, spec: RunSpec, dataset: Dataset, bodies: list[dict[str, Any]]) -> RunResult:
        rounds = [RunResult.from_job(spec, dataset, body) for body in bodies]
        failed = next((r for r in rounds if not r.ok), None)
        if failed is not None:
            return failed
        ordered = sorted(rounds, key=lambda r: r.seconds)
        result = ordered[(len(ordered) - 1) // 2]  # the median run (the lower one of an even count)
        result.round_seconds = [round(r.seconds, 4) for r in rounds]
        return result

    def _report_round(self, spec: RunSpec, dataset: Dataset, body: dict[str, Any]) -> None:
        result, size = RunResult.from_job(spec, dataset, body), dataset.rows
        if result.ok:
            self.say(
                f"throughput {size:>9,} {spec.name:<34} {result.seconds:8.2f} s {result.rows_per_s:>12,.0f} rows/s "
                f"{result.mb_per_s:7.1f} MB/s"
            )
        else:
            problem = result.error or f"{result.verified_rows} rows in the target, expected {size}"
            self.say(f"throughput {size:>9,} {spec.name:<34} FAILED: {problem[:300]}")

    def run_latency(self) -> list[LatencyResult]:
        if not getattr(self.adapter, "latency_runs", True):
            return []
        specs = {s.name: s for s in self.adapter.runs() if s.kind in LATENCY_KINDS and s.variant is None}
        results = []
        for rate in self.plan.rates:
            for name in specs:
                if not self.wanted(name):
                    continue
                mode = specs[name].options.get("commit_mode")
                ns = new_namespace()
                self.adapter.prepare(ns, keyed=True)
                try:
                    job = self._job(
                        "latency",
                        specs[name],
                        ns,
                        master=self.plan.master,
                        rate=rate,
                        duration_s=self.plan.latency_s,
                        warmup_s=self.plan.warmup_s,
                        trigger_ms=self.trigger_ms,
                    )
                    body = self._run(job)
                finally:
                    self.adapter.drop(ns)
                if body.get("error"):
                    result = LatencyResult(
                        name, rate, self.plan.latency_s, 0, 0, None, None, mode=mode, error=body["error"]
                    )
                    self.say(f"latency {rate:>7,}/s {name:<34} FAILED: {body['error'][:300]}")
                else:
                    result = LatencyResult(name=name, rate=rate, mode=mode, **{k: body[k] for k in _LATENCY_KEYS})
                    self.say(
                        f"latency {rate:>7,}/s {name:<34} p50 {_ms(result.p50_ms)} p99 {_ms(result.p99_ms)} "
                        f"commit p50 {_ms(result.commit_p50_ms)} after commit log p50 "
                        f"{_ms(result.visible_after_commit_log_p50_ms)} ({result.batches} batches)"
                    )
                results.append(result)
        return results

    def run_rss(self) -> list[RssResult]:
        specs = {s.name: s for s in self.adapter.runs()}
        spec = specs.get("eosink-2pc")
        if spec is None or not self.wanted("driver-rss"):
            return []
        results = []
        for rows in self.plan.rss_sizes:
            dataset = self.dataset(rows)
            body = self.throughput(spec, dataset, RSS_MASTER, kind="rss")
            error = body.get("error")
            if error is None and body.get("verified_rows") != rows:
                error = f"{body.get('verified_rows')} rows in the target, expected {rows}"
            result = RssResult(
                spec.name,
                rows,
                RSS_MASTER,
                round(float(body.get("python_mb", 0.0)), 1),
                round(float(body.get("jvm_mb", 0.0)), 1),
                round(float(body.get("seconds", 0.0)), 2),
                error,
            )
            results.append(result)
            if error is None:
                self.say(
                    f"driver RSS {rows:>9,} rows ({RSS_MASTER}): Python {result.python_mb:.0f} MB + JVM "
                    f"{result.jvm_mb:.0f} MB = {result.total_mb:.0f} MB"
                )
            else:
                self.say(f"driver RSS {rows:>9,} rows FAILED: {error[:300]}")
        return results

    def dataset(self, rows: int) -> Dataset:
        started = time.monotonic()
        dataset = ensure_dataset(self.plan.cache / "data", rows, self.plan.seed)
        if time.monotonic() - started > 1:
            self.say(f"generated {rows:,} rows ({dataset.mb:.0f} MB as CSV) in {dataset.root}")
        return dataset


_LATENCY_KEYS = (
    "seconds",
    "rows",
    "batches",
    "p50_ms",
    "p99_ms",
    "commit_p50_ms",
    "batch_p50_ms",
    "visible_after_commit_log_p50_ms",
    "visible_after_commit_log_p99_ms",
)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"


def run(plan: BenchPlan) -> Report:
    """Run ``plan``; the report (also written under ``plan.out``)."""
    adapter = get_adapter(plan.sink, plan.topology)
    adapter.modes = adapter.all_modes if plan.all_modes else adapter.all_modes[:1]
    bench = _Bench(plan, adapter)
    host = machine()
    bench.say(f"eosink bench --sink {plan.sink} ({plan.topology}): starting the servers and fetching jars")
    server = adapter.start()
    try:
        throughput = {}
        target = target_size(plan.sizes)
        for size in plan.sizes:
            rounds = bench.repeat if size == target else bench.repeat_other
            throughput[size] = bench.run_throughput(bench.dataset(size), rounds, at_target=size == target)
        latency = bench.run_latency()
        rss = bench.run_rss()
    finally:
        adapter.stop()
    report = Report(
        sink=plan.label,
        created=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        machine=host,
        config={
            "master": plan.master,
            "participants": plan.participants,
            "seed": plan.seed,
            "quick": plan.quick,
            "modes": list(adapter.modes),
            "repeat": bench.repeat,
            "repeat_other": bench.repeat_other,
            "latency_seconds": plan.latency_s,
            "trigger_ms": bench.trigger_ms,
            "warm_up": "data set" if plan.warm_on_data else "a few rows",
            "server": server,
        },
        throughput=throughput,
        latency=latency,
        rss=rss,
        goals=adapter.goals(),
    )
    paths = write_results(report, plan.out)
    bench.say(f"wrote {', '.join(str(p) for p in paths.values())}")
    if plan.docs is not None:
        update_docs(report, plan.docs, plan.docs.parent / "img" / f"bench-{plan.label}.png", paths["png"])
        bench.say(f"updated {plan.docs}")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``eosink bench``; 0 when every run succeeded, 1 otherwise."""
    plan = plan_from_args(sys.argv[1:] if argv is None else argv)
    report = run(plan)
    failed = [r.name for rs in report.throughput.values() for r in rs if not r.ok]
    failed += [r.name for r in report.latency if r.error] + [r.name for r in report.rss if r.error]
    if failed:
        print(f"eosink bench: failed runs: {', '.join(failed)}", file=sys.stderr)
        return 1
    print((plan.out / f"bench-{plan.label}.md").read_text())
    return 0
