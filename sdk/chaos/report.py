"""The chaos harness's report (``results/chaos-<sink>.json``) and its text table.

Per strategy the schedules' counts add up (the non-deterministic mode's detections join its
strategy's row); the plain baseline and each non-deterministic schedule get rows of their own;
every failed schedule comes with the command that replays it alone. In a fan-out each row also
breaks its lost and duplicated rows down by sink (``sinks``), so that a baseline that duplicates
in one sink only cannot hide behind the total.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from eosink.chaos.oracle import Workload
from eosink.chaos.results import ORDERED, ScheduleResult

__all__ = ["build_report", "format_table"]


def _by_sink(results: Sequence[ScheduleResult]) -> dict[str, dict[str, int]]:
    sinks: dict[str, dict[str, int]] = {}
    for r in results:
        for name, (lost, duplicated) in r.by_sink.items():
            counts = sinks.setdefault(name, {"lost": 0, "duplicated": 0})
            counts["lost"] += lost
            counts["duplicated"] += duplicated
    return sinks


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
        "order_breaks": sum(r.order_breaks for r in results),
        "divergent_replays_detected": sum(r.divergent_replays_detected for r in results),
        "failovers": sum(r.failovers for r in results),
        "losses_detected": sum(r.losses_detected for r in results),
        "rewinds": sum(r.rewinds for r in results),
        "failed": sum(not r.ok for r in results),
        "duration_s": round(sum(r.duration_s for r in results), 1),
        "sinks": _by_sink(results),
        "leftovers": _leftovers(results),
        **({"cluster_faults": faults} if any((faults := _cluster_faults(results)).values()) else {}),
    }


def _leftovers(results: Sequence[ScheduleResult]) -> dict[str, int]:
    """What the schedules left behind, per kind (in-doubt work; on a Kafka cluster also torn batches and hanging
    transactions, as the independent reader found them)."""
    total: dict[str, int] = {}
    for r in results:
        for key, n in r.leftovers.items():
            total[key] = total.get(key, 0) + n
    return total


CLUSTER_FAULTS = {"node_kills": "node killed", "node_pauses": "node paused", "end_txn_holds": "EndTxn held"}


def _cluster_faults(results: Sequence[ScheduleResult]) -> dict[str, int]:
    """A cluster's faults injected, per kind (all 0 on one server)."""
    injected = [x for r in results for run in r.runs for x in run.injected]
    return {key: sum(x.startswith(prefix) for x in injected) for key, prefix in CLUSTER_FAULTS.items()}


def _strategy_rows(
    eosink: Sequence[ScheduleResult],
    nondet: Sequence[ScheduleResult],
    strategies: Sequence[str],
    atomic: Callable[[str], bool],
) -> list[dict[str, Any]]:
    rows = []
    replications = sorted({r.replication for r in eosink}, key=lambda m: ("", "sync", "async").index(m))
    for replication in replications or [""]:
        for strategy in strategies:
            mine = [r for r in eosink if r.strategy == strategy and r.replication == replication]
            row = {"strategy": strategy, **_aggregate(mine)}
            row["divergent_replays_detected"] += sum(
                r.divergent_replays_detected for r in nondet if r.strategy == strategy
            )
            row["atomic"] = atomic(strategy)
            if replication:
                row["replication"] = replication
            rows.append(row)
    return rows


def _naive_row(naive: Sequence[ScheduleResult]) -> dict[str, Any]:
    agg = _aggregate(naive)
    return {
        "schedules": agg["schedules"],
        "crashes": agg["crashes"],
        "lost": agg["lost"],
        "duplicated": agg["duplicated"],
        "shows_problem": agg["lost"] + agg["duplicated"] > 0,
        "sinks": agg["sinks"],
    }


def _nondeterministic_row(r: ScheduleResult) -> dict[str, Any]:
    return {
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


def build_report(
    results: Sequence[ScheduleResult],
    *,
    sink: str,
    seed: int,
    schedules: int,
    kills: int,
    workload: Workload,
    master: str,
    strategies: Sequence[str],
    atomic: Callable[[str], bool],
    duration_s: float,
    jobs: int,
    resumed: int,
    topology: str = "single",
) -> dict[str, Any]:
    """The report of a harness run over ``results`` (in plan order); ``atomic`` says whether the sink
    declares a strategy's batches atomic (a partial read counts only there)."""
    by_mode: dict[str, list[ScheduleResult]] = {"eosink": [], "naive": [], "nondeterministic": []}
    for r in results:
        by_mode[r.mode].append(r)
    eosink = sorted(by_mode["eosink"], key=lambda r: strategies.index(r.strategy))  # grouped by strategy
    naive, nondet = by_mode["naive"], by_mode["nondeterministic"]
    return {
        "sink": sink,
        **({"topology": topology} if topology != "single" else {}),
        "seed": seed,
        "schedules_per_strategy": schedules,
        "kills_per_schedule": kills,
        "workload": workload.to_json(),
        "master": master,
        "results": _strategy_rows(eosink, nondet, strategies, atomic),
        "naive": _naive_row(naive),
        "nondeterministic": [_nondeterministic_row(r) for r in nondet],
        "failed": [
            {
                "strategy": r.strategy,
                "mode": r.mode,
                "seed": r.seed,
                "failure": r.failure,
                "replay": r.replay_command(sink, kills, topology),
            }
            for r in [*eosink, *nondet]
            if not r.ok
        ],
        "duration_s": round(duration_s, 1),
        "jobs": jobs,
        "resumed": resumed,
        "schedules": [r.to_json() for r in [*eosink, *naive, *nondet]],
    }


def format_table(report: dict[str, Any]) -> str:
    """The report as a text table."""
    cols = (
        ("strategy", 18),
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
            r["strategy"] + (f" {r['replication']}" if r.get("replication") else ""),
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
        f"{'naive':<18}{n['schedules']:>10}{'':>7}{n['crashes']:>8}{'':>10}{'':>8}{n['lost']:>5}{n['duplicated']:>6}"
    )
    for r in [*report["results"], {"strategy": "naive", **n}]:
        if r.get("sinks"):
            per_sink = ", ".join(f"{name} lost {c['lost']} dupl. {c['duplicated']}" for name, c in r["sinks"].items())
            lines.append(f"  {r['strategy']} by sink: {per_sink}")
    if "+" in str(report.get("sink", "")):  # a fan-out: its order promise, per strategy
        breaks = ", ".join(
            f"{r['strategy']} {r.get('order_breaks', 0)}" + ("" if r["strategy"] in ORDERED else " (no promise, info)")
            for r in report["results"]
        )
        lines.append(f"  polls that saw a later sink ahead of an earlier one: {breaks}")
    for r in report["results"]:
        if r.get("replication"):
            lines.append(
                f"  {r['strategy']} ({r['replication']} replication): {r['failovers']} failover(s), "
                f"{r['losses_detected']} loss(es) of acknowledged batches detected, {r['rewinds']} rewind(s)"
            )
    for nd in report["nondeterministic"]:
        what = (
            f"NonDeterministicReplayError at batch {nd['detected_batch']}"
            if nd["divergent_replays_detected"]
            else f"consistent, lost {nd['lost']}, duplicated {nd['duplicated']}"
        )
        lines.append(f"non-deterministic {nd['strategy']}: {'ok' if nd['ok'] else 'FAILED'} ({what})")
    return "\n".join(lines)
