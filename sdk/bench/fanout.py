"""The benchmark of a fan-out: one query writing each batch into several sinks (``--sink postgres+kafka``).

:class:`FanOutAdapter` is a :class:`~eosink.bench.runs.BenchAdapter` made of the sinks' own adapters, in
the fan-out's commit order. Every run writes the same data set into each sink's target; a run passes
only if every sink then holds every row once. The contenders are what a user does today to land a
stream in two places, against eosink's fan-out:

* ``eosink-<strategy>``: ``eosink.foreach_batch({name: sink, ...})``: one query, one pass over each batch;
* ``eosink-<strategy>-two-queries``: one eosink query per sink over the same input, started together
  (the source read and the batch computed once per sink);
* ``spark-foreachbatch-both``: one plain ``foreachBatch`` that caches the batch and writes each sink in
  turn with the sink's own Spark writer (at-least-once);
* ``eosink-at-least-once``: the same, with each sink's at-least-once path of eosink instead;
* ``spark-arrow-floor``: the batch handed to Python and dropped.

The goal (issue 43): each strategy's fan-out at least 1.5x its two queries. No latency runs: a
fan-out's latency is its sinks' latencies in turn, measured in each sink's own benchmark.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from eosink.bench.datasets import Dataset
from eosink.bench.runs import (
    AT_LEAST_ONCE,
    EO_STRATEGIES,
    Baseline,
    BatchFunction,
    BenchAdapter,
    BenchGoals,
    Pair,
    RunSpec,
    SeparateQueries,
)
from eosink.errors import ConfigurationError

__all__ = ["BOTH", "MIN_RATIO_VS_TWO_QUERIES", "TWO_QUERIES", "FanOutAdapter"]

TWO_QUERIES = "two-queries"
"""The suffix and variant of the one-query-per-sink runs."""
BOTH = "spark-foreachbatch-both"
"""The plain foreachBatch writing every sink with its own Spark writer."""
MIN_RATIO_VS_TWO_QUERIES = 1.5
"""Each strategy's fan-out over its two separate queries, at least (the goal of issue 43)."""


def _persisted(fns: Sequence[BatchFunction]) -> Callable[[Any, int], None]:
    """foreachBatch that caches the batch and calls each of ``fns`` on it in turn (a plain fan-out)."""
    for fn in fns:
        if not callable(fn):
            raise ConfigurationError(f"{fn!r} is not a foreachBatch function.", "Give each sink's own writer.")

    def run(df: Any, batch_id: int) -> None:
        df.persist()
        try:
            for fn in fns:
                assert callable(fn)
                fn(df, batch_id)
        finally:
            df.unpersist()

    return run


class FanOutAdapter:
    """Several sinks' benchmark adapters driven as one fan-out (see the module docstring)."""

    all_modes: tuple[str, ...] = ("default",)
    latency_runs = False
    """No streaming-latency runs (see the module docstring)."""

    def __init__(self, members: Sequence[BenchAdapter]) -> None:
        if len(members) < 2:
            raise ConfigurationError("A fan-out benchmark needs at least two sinks.", "Use --sink postgres+kafka.")
        unready = [m.name for m in members if not getattr(m, "fanout_member", False)]
        if unready:
            raise ConfigurationError(
                f"The benchmark cannot check a fan-out into {', '.join(unready)}: its adapter does not say it "
                "counts the rows a fan-out's sink commits (under <app_id>.<name>, eosink.fanout.member_app_id).",
                "Benchmark that sink on its own; or make its adapter's verify and drop take the member app_id "
                "too (eosink.bench.runs.run_app_ids) and set fanout_member = True on it.",
            )
        self.members = list(members)
        self.name = "+".join(m.name for m in self.members)
        self.modes: tuple[str, ...] = ("default",)
        modules: list[str] = []
        for m in self.members:
            modules += [x for x in getattr(m, "worker_modules", ()) if x not in modules]
        self.worker_modules = tuple(modules)

    # -- parent side ------------------------------------------------------------------------------

    def start(self) -> dict[str, Any]:
        started: dict[str, dict[str, Any]] = {}
        try:
            for m in self.members:
                m.modes = m.all_modes[:1]
                started[m.name] = m.start()
        except BaseException:  # a sink that failed to start: the ones already started stop again
            for m in reversed([m for m in self.members if m.name in started]):
                m.stop()
            raise
        return {
            "server_version": ", ".join(f"{name} {s.get('server_version')}" for name, s in started.items()),
            "settings": {f"{name} {k}": v for name, s in started.items() for k, v in s.get("settings", {}).items()},
            "started_by_bench": any(s.get("started_by_bench") for s in started.values()),
        }

    def stop(self) -> None:
        for m in reversed(self.members):
            m.stop()

    def child_env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        for m in self.members:
            env.update(m.child_env())
        return env

    def goals(self) -> BenchGoals:
        """Each strategy's fan-out against its two queries (>= 1.5x), and the plain foreachBatch (shown)."""
        return BenchGoals(
            baselines=(Baseline(BOTH, "foreachbatch-both"),),
            commit_p50_ms=None,
            visible_after_commit_log_p50_ms=None,
            pairs=tuple(
                Pair(f"eosink-{s}", f"eosink-{s}-{TWO_QUERIES}", MIN_RATIO_VS_TWO_QUERIES) for s in EO_STRATEGIES
            ),
        )

    def runs(self) -> list[RunSpec]:
        runs = []
        for strategy in EO_STRATEGIES:
            runs.append(RunSpec(f"eosink-{strategy}", "eosink", strategy))
            separate = {"queries": "separate"}
            runs.append(RunSpec(f"eosink-{strategy}-{TWO_QUERIES}", "eosink", strategy, separate, False, TWO_QUERIES))
        runs += [RunSpec(AT_LEAST_ONCE, "at-least-once"), RunSpec("spark-arrow-floor", "floor"), RunSpec(BOTH, "spark")]
        return runs

    def prepare(self, ns: str, *, keyed: bool = False) -> None:
        prepared: list[BenchAdapter] = []
        try:
            for m in self.members:
                m.prepare(ns, keyed=keyed)
                prepared.append(m)
        except BaseException:  # a target that could not be made: the ones already made are dropped again
            for m in reversed(prepared):
                m.drop(ns)
            raise

    def verify(self, ns: str) -> int:
        """The rows every sink holds; a failure when the sinks hold different counts (each named)."""
        counts = {m.name: m.verify(ns) for m in self.members}
        if len(set(counts.values())) != 1:
            held = ", ".join(f"{name} {n:,}" for name, n in counts.items())
            raise RuntimeError(f"the sinks hold different numbers of rows: {held}")
        return next(iter(counts.values()))

    def drop(self, ns: str) -> None:
        for m in self.members:
            m.drop(ns)

    def run_external(self, spec: RunSpec, ns: str, dataset: Dataset) -> float:
        raise ConfigurationError(f"No external run {spec.name!r} for a fan-out.", "Run a sink's own benchmark.")

    def scrub(self, text: str) -> str:
        for m in self.members:
            text = m.scrub(text)
        return text

    # -- in the Spark job ---------------------------------------------------------------------------

    def spark_conf(self) -> dict[str, str]:
        """Every member's settings: their jars and class paths joined; a setting two members give differently
        is refused."""
        conf: dict[str, str] = {}
        for m in self.members:
            for key, value in m.spark_conf().items():
                joined = "," if key == "spark.jars" else os.pathsep if key.endswith("extraClassPath") else None
                if key not in conf or conf[key] == value:
                    conf[key] = value
                elif joined is not None:
                    conf[key] = f"{conf[key]}{joined}{value}"
                else:
                    raise ConfigurationError(
                        f"The fan-out's sinks need different values of Spark setting {key!r}.",
                        "Benchmark each sink on its own.",
                    )
        return conf

    def eosink_sink(self, spec: RunSpec, ns: str) -> Any:
        return {m.name: m.eosink_sink(spec, ns) for m in self.members}

    def batch_function(self, spec: RunSpec, ns: str, checkpoint: str, participants: int) -> BatchFunction:
        from eosink.bench.session import eosink_function, floor_function, query_checkpoint

        if spec.kind == "eosink" and spec.variant == TWO_QUERIES:
            one = replace(spec, options={k: v for k, v in spec.options.items() if k != "queries"}, variant=None)
            queries = tuple(
                m.batch_function(one, ns, query_checkpoint(checkpoint, n), participants)
                for n, m in enumerate(self.members)
            )
            if any(isinstance(q, SeparateQueries) for q in queries):
                raise ConfigurationError("A fan-out's member runs one query per run.", "Benchmark it on its own.")
            return SeparateQueries(tuple(q for q in queries if not isinstance(q, SeparateQueries)))
        if spec.kind == "eosink":
            return eosink_function(self.eosink_sink(spec, ns), spec.strategy, _app_id(ns), checkpoint, participants)
        if spec.kind == "at-least-once":
            return _persisted([m.batch_function(spec, ns, checkpoint, participants) for m in self.members])
        if spec.kind == "spark":
            return _persisted([m.batch_function(_own_writer(m), ns, checkpoint, participants) for m in self.members])
        if spec.kind == "floor":
            return floor_function(participants)
        raise ConfigurationError(f"Run {spec.name!r} ({spec.kind}) is not a fan-out run.", "See `eosink bench --help`.")

    def poll_visible(self, ns: str, after_id: int, warm_from_us: int) -> tuple[list[tuple[int, int]], int, int | None]:
        raise ConfigurationError("A fan-out benchmark has no latency runs.", "Run each sink's own benchmark.")

    def close(self) -> None:
        for m in self.members:
            closer = getattr(m, "close", None)
            if closer is not None:
                closer()


def _app_id(ns: str) -> str:
    """The app_id of namespace ``ns``'s fan-out (each sink's is ``<app_id>.<name>``)."""
    return f"bench-{ns}"


def _own_writer(member: BenchAdapter) -> RunSpec:
    """Sink ``member``'s own Spark writer, plain: its first Spark run with no variant."""
    for spec in member.runs():
        if spec.kind == "spark" and spec.variant is None:
            return spec
    raise ConfigurationError(f"The {member.name} benchmark has no Spark writer of its own.", "Add one to its runs.")
