"""What the chaos harness records: each run of the job (:class:`RunRecord`) and each schedule (:class:`ScheduleResult`).

A schedule's result is also its entry in the journal of a resumable run, so it goes to JSON and
comes back from it unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["RunRecord", "ScheduleResult"]


ORDERED = ("2pc", "txid-check")
"""The strategies under which a fan-out promises its order between sinks (docs/fanout.md)."""


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
    reader_polls_by: dict[str, int] = field(default_factory=dict)
    """Polls per reading engine, where the target reads with several (Delta: deltalake, DuckDB, Spark)."""
    partial_examples: list[str] = field(default_factory=list)
    order_breaks: int = 0
    """A fan-out's polls in which a later sink showed a batch an earlier one had not committed
    (:mod:`eosink.chaos.fanout`)."""
    divergent_replays_detected: int = 0
    detected_batch: int | None = None
    replication: str = ""
    """On a replicated server: ``sync`` or ``async``; else empty."""
    failovers: int = 0
    losses_detected: int = 0
    """Runs that stopped with CommittedWorkLostError (an asynchronous failover dropped acknowledged batches) or
    PreparedWorkLostError (a node killed as it applied a request lost prepared work)."""
    rewinds: int = 0
    """``eosink recover --rewind`` runs that followed, each landing the lost batches again."""
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

    @property
    def by_sink(self) -> dict[str, tuple[int, int]]:
        """Each sink's (lost, duplicated) in a fan-out; empty for one sink."""
        sinks: dict[str, dict[str, Any]] = self.verdict.get("sinks") or {}
        return {name: (int(v.get("lost", 0)), int(v.get("duplicated", 0))) for name, v in sinks.items()}

    def replay_command(self, sink: str, kills: int = 3, topology: str = "single") -> str:
        """The command that runs this schedule alone (same seed, workload, number of kills and topology)."""
        only = {"eosink": "", "naive": " --only naive", "nondeterministic": " --only nondeterministic"}[self.mode]
        if self.replication:
            only += f" --topology replicated --replication {self.replication}"
        elif topology != "single":
            only += f" --topology {topology}"
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
