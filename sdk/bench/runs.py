"""What the benchmark runs and what a run measures: run specs, results, and the sink adapter protocol.

A run is named for what it measures (``eosink-2pc``, ``spark-jdbc-default``, ...). The generic
runs (the eosink strategies, the at-least-once path, the Arrow floor) exist for every sink; each
sink adapter adds its built-in Spark baselines and its server's raw ingest limit. Adding Kafka,
S3 or HDFS means writing one :class:`BenchAdapter` in the connector's folder and handing it out
through the sink's profile (:meth:`eosink.profiles.SinkProfile.bench_adapter`); nothing else in
the harness changes.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

from eosink.bench.datasets import Dataset
from eosink.strategies import STRATEGY_NAMES

__all__ = [
    "AT_LEAST_ONCE",
    "EO_STRATEGIES",
    "Baseline",
    "BatchFunction",
    "BenchAdapter",
    "BenchGoals",
    "DataSourceWrite",
    "LatencyResult",
    "Pair",
    "RssResult",
    "RunResult",
    "RunSpec",
    "SeparateQueries",
    "datasource_runs",
    "generic_runs",
    "new_namespace",
    "run_app_ids",
]

Kind = Literal["eosink", "datasource", "at-least-once", "floor", "spark", "external"]
"""eosink: a strategy through ``foreach_batch``; datasource: a strategy through ``format("eosink")``;
at-least-once: eosink's data path without its bookkeeping; floor: Spark handing the data to Python
and dropping it; spark: a Spark built-in writer in foreachBatch; external: a tool outside Spark
(run by the parent, not a Spark job)."""

EO_STRATEGIES = STRATEGY_NAMES


@dataclass(frozen=True)
class DataSourceWrite:
    """A run that writes through ``writeStream.format(format)`` with these string options, instead of
    calling a foreachBatch function (what :meth:`BenchAdapter.batch_function` returns for it): eosink's
    data source (in the run's participants), or a sink of Spark's own (``delta``, with ``path``)."""

    options: dict[str, str]
    format: str = "eosink"


@dataclass(frozen=True)
class SeparateQueries:
    """A run of several streaming queries over the same input, started together and timed until the last
    ends, each with its own checkpoint: what a user without a fan-out runs, one query per sink."""

    queries: tuple[Callable[[Any, int], None] | DataSourceWrite, ...]


BatchFunction = Callable[[Any, int], None] | DataSourceWrite | SeparateQueries
"""What ``writeStream.foreachBatch`` calls, ``(DataFrame, batch_id)``, a data source write, or several
queries (:class:`SeparateQueries`)."""


@dataclass(frozen=True)
class RunSpec:
    """One named run; ``options`` are the adapter's (e.g. ``commit_mode``)."""

    name: str
    kind: Kind
    strategy: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    primary: bool = True
    """False for variants that only inform (another commit mode): reported, not charted first."""
    variant: str | None = None
    """What sets the run apart from the plain run of its kind (``lz4``, ``4 participants``): a variant is
    compared with its own counterpart (:class:`Pair`), never chosen as a strategy's best run."""
    target_only: bool = False
    """Run only at the size the targets are judged on (variants that show one thing once)."""

    @property
    def master(self) -> str | None:
        """The Spark master this run needs (``options["master"]``), or None for the benchmark's own."""
        value = self.options.get("master")
        return None if value is None else str(value)

    @property
    def participants(self) -> int | None:
        """Participants (Spark tasks) this run needs (``options["participants"]``), or None for the benchmark's."""
        value = self.options.get("participants")
        return None if value is None else int(value)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> RunSpec:
        return cls(**body)


AT_LEAST_ONCE = "eosink-at-least-once"
"""eosink's data path without its bookkeeping: what exactly-once costs is measured against it."""


@dataclass(frozen=True)
class Baseline:
    """A run of the sink's own Spark writer (or its raw limit) the report compares everything with."""

    run: str
    """The run's name, e.g. ``spark-jdbc-default``."""
    label: str
    """Its short name in column headers and goal ids, e.g. ``jdbc-default``."""
    min_ratio: float | None = None
    """The ratio the best exactly-once run must reach over it (a goal), or None (shown only)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Pair:
    """A variant run against its counterpart at the target size (eosink with lz4 against Spark's sink with lz4)."""

    run: str
    against: str
    min_ratio: float | None = None
    """The ratio ``run`` must reach over ``against`` (a goal), or None (shown only)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class BenchGoals:
    """What one sink's benchmark is judged on: its adapter's :meth:`BenchAdapter.goals`, kept in the report."""

    baselines: tuple[Baseline, ...] = ()
    vs_at_least_once: tuple[tuple[str, float], ...] = (("2pc", 0.85), ("txid-check", 0.85), ("idempotent", 0.75))
    """Per strategy, the ratio its best run must reach over :data:`AT_LEAST_ONCE`."""
    commit_p50_ms: float | None = 10.0
    """txid-check's commit, p50, at the worst input rate (None: no goal)."""
    visible_after_commit_log_p50_ms: float | None = 100.0
    """2pc: rows visible this long after Spark's commit log, p50 (None: no goal)."""
    rss_growth: float = 0.10
    """The driver's peak RSS may grow at most this much between batch sizes."""
    baselines_at_every_size: bool = False
    """Judge the baselines' ratios at every size run (else at the target size only)."""
    pairs: tuple[Pair, ...] = ()
    """Variant runs against their counterparts (shown, and judged where a pair has a ratio)."""
    keeps_up_triggers: float | None = None
    """2pc's p50 input-to-readable latency, at the worst input rate, in trigger intervals at most (None: no goal)."""
    trigger_ms: int = 200
    """The streaming-latency runs' trigger interval."""
    rounds: tuple[int, int] = (3, 1)
    """Throughput rounds at the target size, and at every other size (``--repeat`` overrides the first)."""

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        body["baselines"] = [b.to_json() for b in self.baselines]
        body["vs_at_least_once"] = dict(self.vs_at_least_once)
        body["pairs"] = [p.to_json() for p in self.pairs]
        body["rounds"] = list(self.rounds)
        return body

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> BenchGoals:
        default = cls()
        return cls(
            baselines=tuple(Baseline(**b) for b in body.get("baselines", ())),
            vs_at_least_once=tuple(body.get("vs_at_least_once", dict(default.vs_at_least_once)).items()),
            commit_p50_ms=body.get("commit_p50_ms"),
            visible_after_commit_log_p50_ms=body.get("visible_after_commit_log_p50_ms"),
            rss_growth=float(body.get("rss_growth", default.rss_growth)),
            baselines_at_every_size=bool(body.get("baselines_at_every_size", False)),
            pairs=tuple(Pair(**p) for p in body.get("pairs", ())),
            keeps_up_triggers=body.get("keeps_up_triggers"),
            trigger_ms=int(body.get("trigger_ms", default.trigger_ms)),
            rounds=(int(body.get("rounds", default.rounds)[0]), int(body.get("rounds", default.rounds)[1])),
        )


TARGET_ROWS = 1_000_000
"""The data set size the throughput targets are judged on, when it was run."""


def target_size(sizes: Iterable[int]) -> int | None:
    """The size the throughput targets are judged on (and repeated at): 1M rows if run, else the smallest."""
    sizes = set(sizes)
    if not sizes:
        return None
    return TARGET_ROWS if TARGET_ROWS in sizes else min(sizes)


def new_namespace() -> str:
    """A fresh namespace for one run's target and bookkeeping (8 hex digits: safe in SQL names)."""
    return secrets.token_hex(4)


def run_app_ids(app_id: str, sink: str) -> tuple[str, str]:
    """The app_ids a run of sink ``sink`` may have committed under: ``app_id`` on its own, or the member
    app_id of a fan-out's sink (:func:`eosink.fanout.member_app_id`)."""
    from eosink.fanout import member_app_id

    return app_id, member_app_id(app_id, sink)


def generic_runs(modes: tuple[str, ...] = ("atomic",), moded: tuple[str, ...] = EO_STRATEGIES) -> list[RunSpec]:
    """The runs every sink has: each strategy (those in ``moded`` in each of ``modes``, the others in the
    first), at-least-once, and the Arrow floor. A variant is named ``eosink-<strategy>-<mode>``."""
    runs = []
    for strategy in EO_STRATEGIES:
        if strategy not in moded:  # the sink's default mode, reported as none
            runs.append(RunSpec(f"eosink-{strategy}", "eosink", strategy))
            continue
        for n, mode in enumerate(modes):
            suffix = "" if n == 0 else f"-{mode}"
            runs.append(RunSpec(f"eosink-{strategy}{suffix}", "eosink", strategy, {"commit_mode": mode}, n == 0))
    runs.append(RunSpec(AT_LEAST_ONCE, "at-least-once"))
    runs.append(RunSpec("spark-arrow-floor", "floor"))
    return runs


def datasource_runs() -> list[RunSpec]:
    """The runs through ``format("eosink")`` (the strategies it offers), and txid-check on Spark's row
    iterator instead of its Arrow batches: the two ways in, and the two inputs, compared in one run."""
    return [
        RunSpec("eosink-datasource-txid-check", "datasource", "txid-check"),
        RunSpec("eosink-datasource-idempotent", "datasource", "idempotent"),
        RunSpec("eosink-datasource-rows-txid-check", "datasource", "txid-check", {"arrow": False}, primary=False),
    ]


@dataclass
class RunResult:
    """One throughput run over one data set size."""

    name: str
    rows: int
    seconds: float
    bytes: int = 0
    kind: str = ""
    strategy: str | None = None
    mode: str | None = None
    verified_rows: int | None = None
    """Rows found in the target afterwards (None where nothing is written: the floor)."""
    commit_ms: list[float] = field(default_factory=list)
    driver_rss_mb: float | None = None
    error: str | None = None
    round_seconds: list[float] = field(default_factory=list)
    """Seconds of every round when the run was repeated (``seconds`` is their median)."""
    variant: str | None = None
    """The run's :attr:`RunSpec.variant`."""

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and (self.verified_rows is None or self.verified_rows == self.rows)

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        body["seconds"] = round(self.seconds, 4)
        body["rows_per_s"] = round(self.rows_per_s, 1)
        body["mb_per_s"] = round(self.mb_per_s, 2)
        body["commit_ms"] = [round(x, 2) for x in self.commit_ms]
        body["ok"] = self.ok
        return body

    @classmethod
    def from_job(cls, spec: RunSpec, dataset: Dataset, body: dict[str, Any]) -> RunResult:
        """The result of one run of ``spec`` over ``dataset`` from what its job (or the adapter) reported."""
        return cls(
            name=spec.name,
            rows=dataset.rows,
            seconds=float(body.get("seconds", 0.0)),
            bytes=dataset.bytes,
            kind=spec.kind,
            strategy=spec.strategy,
            mode=spec.options.get("commit_mode"),
            verified_rows=body.get("verified_rows"),
            commit_ms=list(body.get("commit_ms", [])),
            driver_rss_mb=None if "python_mb" not in body else round(body["python_mb"] + body["jvm_mb"], 1),
            error=body.get("error"),
            variant=spec.variant,
        )

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> RunResult:
        names = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in body.items() if k in names})


@dataclass
class LatencyResult:
    """One streaming run at a fixed input rate."""

    name: str
    rate: int
    seconds: float
    rows: int
    batches: int
    p50_ms: float | None
    p99_ms: float | None
    commit_p50_ms: float | None = None
    batch_p50_ms: float | None = None
    """Spark's addBatch duration (the foreachBatch call), p50."""
    visible_after_commit_log_p50_ms: float | None = None
    """2pc: from the rename of Spark's commit-log file into place to the first poll that sees the batch."""
    visible_after_commit_log_p99_ms: float | None = None
    mode: str | None = None
    """The sink's commit mode, where the run has one."""
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> LatencyResult:
        names = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in body.items() if k in names})


@dataclass
class RssResult:
    """Peak resident memory of the driver (Python + its JVM) for one batch size, under local-cluster."""

    name: str
    rows: int
    master: str
    python_mb: float
    jvm_mb: float
    seconds: float
    error: str | None = None

    @property
    def total_mb(self) -> float:
        return self.python_mb + self.jvm_mb

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        body["total_mb"] = round(self.total_mb, 1)
        return body

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> RssResult:
        names = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in body.items() if k in names})


class BenchAdapter(Protocol):
    """What the harness needs from one kind of sink.

    The parent process calls :meth:`start`, :meth:`runs`, :meth:`prepare`, :meth:`verify`,
    :meth:`drop` and :meth:`run_external`; the Spark job (a child process) calls
    :meth:`spark_conf`, :meth:`batch_function` and :meth:`poll_visible`. Connection secrets reach
    the child through :meth:`child_env`, never argv. An adapter may also offer ``poll_batch(ns) -> int | None``
    (the newest committed batch, cheaply): the latency poller then stamps batches from a thread of its own.
    """

    name: str
    all_modes: tuple[str, ...]
    """The sink's commit modes (its own names, the default first); ``("default",)`` when it has one."""
    modes: tuple[str, ...]
    """The modes this run measures each strategy in (set by the harness from :attr:`all_modes`)."""

    def start(self) -> dict[str, Any]:
        """Make the server available (start it if needed); a description of it for the report."""

    def stop(self) -> None:
        """Stop what :meth:`start` started (nothing if the server was already running)."""

    def child_env(self) -> dict[str, str]:
        """Environment for Spark job processes (connection details)."""

    def runs(self) -> list[RunSpec]:
        """Every throughput run of this sink, generic ones included."""

    def goals(self) -> BenchGoals:
        """What this sink's report is judged on: its baselines and its thresholds."""

    def prepare(self, ns: str, *, keyed: bool = False) -> None:
        """Create an empty target for namespace ``ns`` (``keyed``: with a unique index on ``id``)."""

    def verify(self, ns: str) -> int:
        """Rows in ``ns``'s target."""

    def drop(self, ns: str) -> None:
        """Remove ``ns``'s target and bookkeeping."""

    def run_external(self, spec: RunSpec, ns: str, dataset: Dataset) -> float:
        """Run an external (non-Spark) run; its seconds."""

    def scrub(self, text: str) -> str:
        """``text`` with any secret of the connection replaced (error messages leave the process)."""

    # -- in the Spark job ---------------------------------------------------------------------------

    def spark_conf(self) -> dict[str, str]:
        """Extra SparkSession settings (jars of the built-in baselines)."""

    def batch_function(self, spec: RunSpec, ns: str, checkpoint: str, participants: int) -> BatchFunction:
        """The foreachBatch function of a Spark run (an eosink BatchWriter for the strategies)."""

    def eosink_sink(self, spec: RunSpec, ns: str) -> Any:
        """The eosink sink an ``eosink`` run of ``spec`` writes ``ns``'s target with (what its
        :meth:`batch_function` hands ``eosink.foreach_batch``; a fan-out run takes each member's)."""

    def poll_visible(self, ns: str, after_id: int, warm_from_us: int) -> tuple[list[tuple[int, int]], int, int | None]:
        """Newly visible rows: ``([(latency_ms, count)...], highest id, highest committed batch or None)``.

        Latency is the server's statement time minus the row's ``at``; rows older than
        ``warm_from_us`` (warm-up) count under latency -1.
        """
