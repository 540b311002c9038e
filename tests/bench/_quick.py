"""A small real ``eosink bench`` run of a few named runs, each checked: the quick bench tests' shared step."""

from __future__ import annotations

from pathlib import Path

from eosink.bench.cli import plan_from_args, run
from eosink.bench.runs import RunResult


def run_quick(sink: str, runs: set[str], rows: int, tmp_path: Path) -> dict[str, RunResult]:
    """Run ``runs`` once over ``rows`` rows into ``sink`` (no latency, RSS or docs; results under
    ``tmp_path/results``). Pass: exactly those runs, each ok, every row checked in the target."""
    plan = plan_from_args(
        [
            *("--sink", sink, "--quick", "--rows", str(rows), "--rates", "0", "--rss-rows", "0", "--no-docs"),
            *("--only", ",".join(sorted(runs)), "--out", str(tmp_path / "results")),
            *("--cache", str(tmp_path / "cache")),
        ]
    )
    found = {r.name: r for r in run(plan).throughput[rows]}
    assert set(found) == runs
    for r in found.values():
        assert r.ok, (r.name, r.error)
        assert r.verified_rows == rows and r.seconds > 0
    return found
