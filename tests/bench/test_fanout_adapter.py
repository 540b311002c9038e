"""The fan-out benchmark adapter (``eosink bench --sink postgres+kafka``) over stand-in sink adapters."""

from __future__ import annotations

import os
from typing import Any

import pytest

from eosink.bench.cli import plan_from_args
from eosink.bench.fanout import BOTH, MIN_RATIO_VS_TWO_QUERIES, TWO_QUERIES, FanOutAdapter
from eosink.bench.runner import get_adapter
from eosink.bench.runs import AT_LEAST_ONCE, EO_STRATEGIES, BenchGoals, RunSpec, SeparateQueries
from eosink.bench.session import finish_writer, query_checkpoint
from eosink.errors import ConfigurationError


class _Member:
    """A stand-in sink adapter: records what it is asked, holds ``rows`` rows after any run."""

    all_modes = ("default",)
    fanout_member = True

    def __init__(self, name: str, rows: int = 10, jars: str = "") -> None:
        self.name = name
        self.modes = self.all_modes
        self.rows = rows
        self.jars = jars
        self.calls: list[tuple[Any, ...]] = []
        self.worker_modules = (f"eosink.connectors.{name}", "shared")

    def start(self) -> dict[str, Any]:
        return {"server_version": "1.0", "settings": {"a": "1"}, "started_by_bench": self.name == "b"}

    def stop(self) -> None:
        self.calls.append(("stop",))

    def child_env(self) -> dict[str, str]:
        return {f"ENV_{self.name.upper()}": self.name}

    def runs(self) -> list[RunSpec]:
        return [
            RunSpec(f"spark-{self.name}-lz4", "spark", None, {}, False, "lz4"),
            RunSpec(f"spark-{self.name}", "spark"),
        ]

    def goals(self) -> BenchGoals:
        return BenchGoals()

    def prepare(self, ns: str, *, keyed: bool = False) -> None:
        self.calls.append(("prepare", ns, keyed))

    def verify(self, ns: str) -> int:
        return self.rows

    def drop(self, ns: str) -> None:
        self.calls.append(("drop", ns))

    def run_external(self, spec: RunSpec, ns: str, dataset: Any) -> float:
        raise AssertionError("not called")

    def scrub(self, text: str) -> str:
        return text.replace(f"secret-{self.name}", "***")

    def spark_conf(self) -> dict[str, str]:
        conf = {"spark.driver.extraClassPath": f"/cp/{self.name}", "spark.ui.enabled": "false"}
        return {"spark.jars": self.jars, **conf} if self.jars else conf

    def eosink_sink(self, spec: RunSpec, ns: str) -> Any:
        return f"sink-{self.name}-{ns}"

    def batch_function(self, spec: RunSpec, ns: str, checkpoint: str, participants: int) -> Any:
        self.calls.append(("batch_function", spec.name, spec.kind, spec.variant, checkpoint))

        def fn(df: Any, batch_id: int) -> None:
            df.written.append((self.name, spec.name, batch_id))

        return fn

    def poll_visible(self, ns: str, after_id: int, warm_from_us: int) -> Any:
        raise AssertionError("not called")


def _fanout(rows: tuple[int, int] = (10, 10)) -> tuple[FanOutAdapter, _Member, _Member]:
    a, b = _Member("a", rows[0], "/j/a.jar"), _Member("b", rows[1], "/j/b1.jar,/j/b2.jar")
    return FanOutAdapter([a, b]), a, b


def test_runs_and_goals_compare_each_strategy_with_its_two_queries() -> None:
    """Pass: a fan-out and a two-queries run per strategy, the plain foreachBatch as a shown baseline, and a
    1.5x pair for each strategy; no latency runs."""
    adapter, _, _ = _fanout()
    names = [r.name for r in adapter.runs()]
    for s in EO_STRATEGIES:
        assert f"eosink-{s}" in names and f"eosink-{s}-{TWO_QUERIES}" in names
    assert {AT_LEAST_ONCE, "spark-arrow-floor", BOTH} <= set(names)
    two = [r for r in adapter.runs() if r.variant == TWO_QUERIES]
    assert two and all(not r.primary for r in two)
    goals = adapter.goals()
    assert [(p.run, p.against, p.min_ratio) for p in goals.pairs] == [
        (f"eosink-{s}", f"eosink-{s}-{TWO_QUERIES}", MIN_RATIO_VS_TWO_QUERIES) for s in EO_STRATEGIES
    ]
    assert [b.run for b in goals.baselines] == [BOTH] and goals.baselines[0].min_ratio is None
    assert adapter.latency_runs is False
    assert adapter.name == "a+b"
    assert adapter.worker_modules == ("eosink.connectors.a", "shared", "eosink.connectors.b")


def test_parent_side_goes_to_every_member() -> None:
    """Pass: prepare and drop reach both sinks, the environments and jars merge, secrets of both are scrubbed,
    the server description names both, stop runs last sink first."""
    adapter, a, b = _fanout()
    described = adapter.start()
    assert described["server_version"] == "a 1.0, b 1.0" and described["started_by_bench"] is True
    assert described["settings"] == {"a a": "1", "b a": "1"}
    adapter.prepare("ns1", keyed=True)
    adapter.drop("ns1")
    assert a.calls == b.calls == [("prepare", "ns1", True), ("drop", "ns1")]
    assert adapter.child_env() == {"ENV_A": "a", "ENV_B": "b"}
    assert adapter.spark_conf() == {
        "spark.jars": "/j/a.jar,/j/b1.jar,/j/b2.jar",
        "spark.driver.extraClassPath": f"/cp/a{os.pathsep}/cp/b",
        "spark.ui.enabled": "false",
    }
    b.spark_conf = lambda: {"spark.ui.enabled": "true"}  # type: ignore[method-assign]
    with pytest.raises(ConfigurationError, match=r"different values of Spark setting 'spark\.ui\.enabled'"):
        adapter.spark_conf()
    assert adapter.scrub("x secret-a y secret-b") == "x *** y ***"
    order: list[str] = []
    a.stop = lambda: order.append("a")  # type: ignore[method-assign]
    b.stop = lambda: order.append("b")  # type: ignore[method-assign]
    adapter.stop()
    assert order == ["b", "a"]


def test_a_member_that_fails_to_start_or_prepare_undoes_the_others() -> None:
    """Pass: when the second sink's server fails to start, the first one's is stopped again; when its target
    cannot be made, the first one's target is dropped again; each failure comes out unchanged."""
    adapter, a, b = _fanout()

    def fail(*_: Any, **__: Any) -> Any:
        raise RuntimeError("b is down")

    b.start = fail  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="b is down"):
        adapter.start()
    assert a.calls == [("stop",)] and b.calls == []
    a.calls.clear()
    b.prepare = fail  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="b is down"):
        adapter.prepare("ns2")
    assert a.calls == [("prepare", "ns2", False), ("drop", "ns2")] and b.calls == []


def test_verify_fails_when_the_sinks_disagree() -> None:
    """Pass: equal counts are the run's rows; different counts are an error naming each sink's count."""
    assert _fanout((10, 10))[0].verify("ns") == 10
    with pytest.raises(RuntimeError, match="a 10, b 12"):
        _fanout((10, 12))[0].verify("ns")


class _Df:
    def __init__(self) -> None:
        self.written: list[tuple[str, str, int]] = []
        self.cached: list[str] = []

    def persist(self) -> None:
        self.cached.append("persist")

    def unpersist(self) -> None:
        self.cached.append("unpersist")


def test_two_queries_run_each_sink_alone_under_its_own_checkpoint() -> None:
    """Pass: a two-queries run is one plain eosink run per sink, each with the checkpoint its query gets."""
    adapter, a, b = _fanout()
    spec = next(r for r in adapter.runs() if r.name == f"eosink-2pc-{TWO_QUERIES}")
    fn = adapter.batch_function(spec, "ns", "/chk", 2)
    assert isinstance(fn, SeparateQueries) and len(fn.queries) == 2
    assert a.calls == [("batch_function", f"eosink-2pc-{TWO_QUERIES}", "eosink", None, query_checkpoint("/chk", 0))]
    assert b.calls == [("batch_function", f"eosink-2pc-{TWO_QUERIES}", "eosink", None, query_checkpoint("/chk", 1))]
    assert query_checkpoint("/chk", 0) != query_checkpoint("/chk", 1)
    assert finish_writer(fn) == []  # plain functions: nothing to flush


def test_plain_foreachbatch_caches_the_batch_and_writes_each_sink_with_its_own_writer() -> None:
    """Pass: the baseline calls each sink's first plain Spark writer (not a variant) on one cached batch, in order."""
    adapter, _, _ = _fanout()
    fn = adapter.batch_function(RunSpec(BOTH, "spark"), "ns", "/chk", 2)
    assert callable(fn)
    df = _Df()
    fn(df, 7)
    assert df.written == [("a", "spark-a", 7), ("b", "spark-b", 7)]
    assert df.cached == ["persist", "unpersist"]


def test_a_fan_out_needs_two_sinks_and_the_cli_takes_joined_names() -> None:
    """Pass: one member is refused; ``--sink postgres+kafka`` is a fan-out; unknown or repeated names are refused."""
    with pytest.raises(ConfigurationError, match="at least two sinks"):
        FanOutAdapter([_Member("a")])
    unready = _Member("c")
    unready.fanout_member = False  # type: ignore[misc]
    with pytest.raises(ConfigurationError, match="cannot check a fan-out into c"):
        FanOutAdapter([_Member("a"), unready])
    for pair in ("postgres+s3", "s3+postgres", "hdfs+kafka", "delta+postgres"):  # every sink's adapter counts
        assert [m.name for m in get_adapter(pair).members] == pair.split("+")  # type: ignore[attr-defined]
    assert plan_from_args(["--sink", "postgres+kafka", "--quick"]).sink == "postgres+kafka"
    for bad in ("postgres+nosuch", "postgres+postgres"):
        with pytest.raises(SystemExit):
            plan_from_args(["--sink", bad])
    adapter = get_adapter("postgres+kafka")
    assert isinstance(adapter, FanOutAdapter) and [m.name for m in adapter.members] == ["postgres", "kafka"]
