"""The benchmark's report: ratios and targets computed within one run, then JSON, markdown and a PNG chart.

Everything here is a pure function of the results (no Spark, no server), so it is unit-tested.
Targets are *reported*, never asserted: a missed target is a row saying "missed".
"""

from __future__ import annotations

import json
import os
import platform
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eosink.bench.runs import AT_LEAST_ONCE, BenchGoals, LatencyResult, Pair, RssResult, RunResult, target_size

__all__ = [
    "BenchTarget",
    "Report",
    "compute_targets",
    "machine",
    "pair_rows",
    "ratios",
    "render_chart",
    "render_markdown",
    "update_docs",
]

DOCS_START = "<!-- bench:{sink}:start -->"
DOCS_END = "<!-- bench:{sink}:end -->"


@dataclass
class BenchTarget:
    """One goal of the sink's benchmark (:class:`~eosink.bench.runs.BenchGoals`), with what this run measured."""

    id: str
    text: str
    value: float | None
    threshold: float
    met: bool | None
    """None: not measured in this run (a run was skipped or failed)."""
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Report:
    """All results of one benchmark run."""

    sink: str
    created: str
    machine: dict[str, Any]
    config: dict[str, Any]
    throughput: dict[int, list[RunResult]]
    latency: list[LatencyResult]
    rss: list[RssResult]
    goals: BenchGoals = field(default_factory=BenchGoals)

    def target_size(self) -> int | None:
        """The data set size the throughput targets are judged on: 1M rows if run, else the smallest."""
        return target_size(self.throughput)

    def to_json(self) -> dict[str, Any]:
        return {
            "sink": self.sink,
            "created": self.created,
            "machine": self.machine,
            "config": self.config,
            "runs": [r.to_json() | {"dataset_rows": size} for size, rs in self.throughput.items() for r in rs],
            "ratios": {str(size): ratios(rs, self.goals) for size, rs in self.throughput.items()},
            "latency": [r.to_json() for r in self.latency],
            "rss": [r.to_json() for r in self.rss],
            "goals": self.goals.to_json(),
            "targets": [t.to_json() for t in compute_targets(self)],
        }

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Report:
        throughput: dict[int, list[RunResult]] = {}
        for run in body["runs"]:
            throughput.setdefault(int(run["dataset_rows"]), []).append(RunResult.from_json(run))
        return cls(
            body["sink"],
            body["created"],
            body["machine"],
            body["config"],
            throughput,
            [LatencyResult.from_json(r) for r in body.get("latency", [])],
            [RssResult.from_json(r) for r in body.get("rss", [])],
            BenchGoals.from_json(body["goals"]) if "goals" in body else BenchGoals(),
        )


def machine() -> dict[str, Any]:
    """A description of this machine: CPU model and count, memory, OS, Python, Java."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gb = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gb = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return {
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "memory_gb": mem_gb,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "load_1m_at_start": None if load is None else round(load, 2),
    }


def _ok(results: list[RunResult]) -> dict[str, RunResult]:
    return {r.name: r for r in results if r.ok}


def _references(goals: BenchGoals) -> list[str]:
    """The runs every other run is compared with: the sink's baselines, then eosink at-least-once."""
    return [b.run for b in goals.baselines] + [AT_LEAST_ONCE]


def ratios(results: list[RunResult], goals: BenchGoals) -> dict[str, dict[str, float]]:
    """Per run, its rows/s over each reference run's (the sink's baselines, at-least-once) of the same size."""
    ok = _ok(results)
    out: dict[str, dict[str, float]] = {}
    for run in ok.values():
        entry = {}
        for ref in _references(goals):
            base = ok.get(ref)
            if base is not None and base.rows_per_s > 0 and ref != run.name:
                entry[ref] = round(run.rows_per_s / base.rows_per_s, 3)
        out[run.name] = entry
    return out


def best_by_strategy(results: list[RunResult]) -> dict[str, RunResult]:
    """The fastest successful run (over commit modes) of each exactly-once strategy; variants (another codec,
    more participants) are compared with their counterparts instead."""
    best: dict[str, RunResult] = {}
    for run in results:
        if run.ok and run.kind == "eosink" and run.strategy is not None and run.variant is None:
            current = best.get(run.strategy)
            if current is None or run.rows_per_s > current.rows_per_s:
                best[run.strategy] = run
    return best


def ways_in(results: list[RunResult]) -> list[tuple[RunResult, RunResult | None]]:
    """Each ``format("eosink")`` run beside the ``foreach_batch`` run of its strategy in the same commit mode.

    A data source run writes in the sink's default mode, as does the strategy's run without a mode
    suffix (``eosink-<strategy>``, see :func:`~eosink.bench.runs.generic_runs`); comparing it with a
    faster mode would charge the way in with the mode's difference.
    """
    eosink = {r.name: r for r in results if r.kind == "eosink" and r.ok}
    return [(r, eosink.get(f"eosink-{r.strategy}")) for r in results if r.kind == "datasource" and r.ok]


def _ratio_target(tid: str, text: str, run: RunResult | None, base: RunResult | None, threshold: float) -> BenchTarget:
    if run is None or base is None or base.rows_per_s <= 0:
        return BenchTarget(tid, text, None, threshold, None, "not measured")
    value = round(run.rows_per_s / base.rows_per_s, 3)
    detail = f"{run.name} ({run.mode or '-'}) {run.rows_per_s:,.0f} rows/s vs {base.name} {base.rows_per_s:,.0f}"
    return BenchTarget(tid, text, value, threshold, value >= threshold, detail)


def _batch_overhead(report: Report, txid: LatencyResult) -> str:
    """txid-check's foreachBatch p50 against at-least-once's at the same rate: what it adds per batch, end to end."""
    same_rate = (r for r in report.latency if r.name == AT_LEAST_ONCE and r.rate == txid.rate and r.error is None)
    base = next(same_rate, None)
    if base is None or txid.batch_p50_ms is None or base.batch_p50_ms is None:
        return ""
    return f"; foreachBatch p50 {txid.batch_p50_ms:.0f} ms vs {base.batch_p50_ms:.0f} ms at-least-once"


def _latency_target(
    report: Report, strategy: str, field: str, tid: str, text: str, threshold: float, rate: int | None = None
) -> BenchTarget:
    """A latency target of ``strategy``: each commit mode judged at its worst input rate (or at ``rate``), the
    best mode reported (named), the batch-atomic mode in the detail when it is not the best."""
    worst: dict[str | None, LatencyResult] = {}
    for lat in report.latency:
        value = getattr(lat, field)
        if rate is not None and lat.rate != rate:
            continue
        if lat.error is None and value is not None and lat.name.startswith(f"eosink-{strategy}"):
            current = worst.get(lat.mode)
            if current is None or value > getattr(current, field):
                worst[lat.mode] = lat
    if not worst:
        return BenchTarget(tid, text, None, threshold, None, "not measured")
    best = min(worst.values(), key=lambda lat: float(getattr(lat, field)))
    value = float(getattr(best, field))
    detail = f"{best.mode or '-'} mode, at {best.rate:,} rows/s"
    if field == "commit_p50_ms":
        detail += _batch_overhead(report, best)
    atomic = worst.get("atomic")
    if atomic is not None and atomic is not best:
        detail += f"; batch-atomic mode: {float(getattr(atomic, field)):.1f} ms at {atomic.rate:,} rows/s"
    return BenchTarget(tid, text, value, threshold, value <= threshold, detail)


def _baseline_targets(report: Report) -> list[BenchTarget]:
    """The best exactly-once run against each baseline with a ratio: at the target size, or at every size."""
    goals, target = report.goals, report.target_size()
    sizes = list(report.throughput) if goals.baselines_at_every_size else ([] if target is None else [target])
    targets = []
    for size in sizes:
        results = report.throughput.get(size, [])
        champion = max(best_by_strategy(results).values(), key=lambda r: r.rows_per_s, default=None)
        for b in goals.baselines:
            if b.min_ratio is not None:
                text = f"best exactly-once >= {b.min_ratio:g}x {b.run} ({size:,} rows)"
                tid = f"eo-vs-{b.label}" if size == target else f"eo-vs-{b.label}-{_rows_label(size)}"
                targets.append(_ratio_target(tid, text, champion, _ok(results).get(b.run), b.min_ratio))
    return targets


def pair_rows(report: Report) -> list[tuple[Pair, RunResult | None, RunResult | None]]:
    """Each of the goals' pairs with its two runs at the target size (None where a run failed or did not run)."""
    size = report.target_size()
    ok = _ok(report.throughput.get(size, []) if size is not None else [])
    return [(p, ok.get(p.run), ok.get(p.against)) for p in report.goals.pairs]


def _pair_targets(report: Report) -> list[BenchTarget]:
    size = report.target_size()
    at = f" ({size:,} rows)" if size else ""
    return [
        _ratio_target(f"{p.run}-vs-{p.against}", f"{p.run} >= {p.min_ratio:g}x {p.against}{at}", run, base, p.min_ratio)
        for p, run, base in pair_rows(report)
        if p.min_ratio is not None
    ]


def compute_targets(report: Report) -> list[BenchTarget]:
    """The issue's targets, judged on this report's own numbers."""
    size = report.target_size()
    results = report.throughput.get(size, []) if size is not None else []
    ok = _ok(results)
    best = best_by_strategy(results)
    at = f" ({size:,} rows)" if size else ""
    goals = report.goals
    targets = _baseline_targets(report)
    for strategy, threshold in goals.vs_at_least_once:
        target = _ratio_target(
            f"{strategy}-vs-at-least-once",
            f"eosink-{strategy} >= {threshold}x {AT_LEAST_ONCE}{at}",
            best.get(strategy),
            ok.get(AT_LEAST_ONCE),
            threshold,
        )
        atomic = next((r for r in results if r.ok and r.strategy == strategy and r.mode == "atomic"), None)
        fastest = best.get(strategy)
        base = ok.get(AT_LEAST_ONCE)
        if atomic is not None and fastest is not None and atomic is not fastest and base is not None:
            target.detail += f"; batch-atomic mode: {atomic.rows_per_s / base.rows_per_s:.3f}x"
        targets.append(target)
    targets += _pair_targets(report)
    if goals.commit_p50_ms is not None:
        ms = goals.commit_p50_ms
        text = f"txid-check adds <= {ms:g} ms p50 per batch (its commit, p50, worst input rate)"
        targets.append(_latency_target(report, "txid-check", "commit_p50_ms", "txid-check-commit-p50", text, ms))
    if goals.visible_after_commit_log_p50_ms is not None:
        ms = goals.visible_after_commit_log_p50_ms
        text = f"2PC rows visible <= {ms:g} ms p50 after Spark's commit log (worst input rate)"
        field_name, tid = "visible_after_commit_log_p50_ms", "2pc-visible-after-commit-log"
        targets.append(_latency_target(report, "2pc", field_name, tid, text, ms))
    if goals.keeps_up_triggers is not None:
        trigger = int(report.config.get("trigger_ms") or goals.trigger_ms)
        limit_ms = goals.keeps_up_triggers * trigger
        top = max((lat.rate for lat in report.latency), default=0)
        text = (
            f"2PC keeps up: p50 input-to-readable <= {goals.keeps_up_triggers:g}x the trigger interval "
            f"({trigger:,} ms) at the highest input rate ({top:,} rows/s)"
        )
        targets.append(_latency_target(report, "2pc", "p50_ms", "2pc-keeps-up", text, limit_ms, top))
    limit = goals.rss_growth
    text = f"driver peak RSS within {limit:.0%} between batch sizes"
    rss = [r for r in report.rss if r.error is None]
    if len(rss) >= 2:
        small, large = min(rss, key=lambda r: r.rows), max(rss, key=lambda r: r.rows)
        growth = round((large.total_mb - small.total_mb) / small.total_mb, 3)
        detail = f"{small.rows:,} rows: {small.total_mb:.0f} MB, {large.rows:,} rows: {large.total_mb:.0f} MB"
        text += " (growth from the smaller to the larger batch)"
        targets.append(BenchTarget("driver-rss-flat", text, growth, limit, growth <= limit, detail))
    else:
        targets.append(BenchTarget("driver-rss-flat", text, None, limit, None, "not measured"))
    return targets


def _cell(text: str, limit: int = 120) -> str:
    """``text`` fit for one Markdown table cell: one line, no column separators, at most ``limit`` characters."""
    flat = " ".join(text.split()).replace("|", "/")
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _rows_label(rows: int) -> str:
    if rows % 1_000_000 == 0:
        return f"{rows // 1_000_000}M"
    if rows % 1000 == 0:
        return f"{rows // 1000}k"
    return str(rows)


def _rounds_note(results: list[RunResult]) -> list[str]:
    rounds = max((len(r.round_seconds) for r in results), default=0)
    if rounds < 2:
        return []
    return [
        f"Each run {rounds} times, interleaved, each round starting one run later; the median run counts "
        "(fastest-slowest seconds in brackets).",
        "",
    ]


def render_markdown(report: Report, chart: str | None = None, level: int = 1) -> str:
    """The report as markdown; ``level`` is the heading level of its title."""
    h = "#" * level
    m = report.machine
    c = report.config
    lines = [
        f"{h} eosink benchmark: {report.sink}",
        "",
        f"Measured {report.created} on {m.get('cpu')} ({m.get('cpus')} CPUs, {m.get('memory_gb')} GB RAM, "
        f"{m.get('os')}, Python {m.get('python')}, load {m.get('load_1m_at_start')} at start); "
        f"Spark `{c.get('master')}`, {c.get('participants')} participants, seed {c.get('seed')}"
        + (", **quick mode** (small sizes: indicative only)" if c.get("quick") else "")
        + ".",
        "",
    ]
    if report.config.get("server"):
        s = report.config["server"]
        settings = ", ".join(f"{k}={v}" for k, v in sorted(s.get("settings", {}).items()))
        lines += [f"Server: {report.sink} {s.get('server_version')} ({settings}).", ""]
    if chart:
        lines += [f"![rows per second per run]({chart})", ""]
    for size, results in report.throughput.items():
        rel = ratios(results, report.goals)
        refs = [(b.run, b.label) for b in report.goals.baselines] + [(AT_LEAST_ONCE, "at-least-once")]
        lines += [
            f"{h}# Throughput, {_rows_label(size)} rows",
            "",
            *_rounds_note(results),
            "| run | mode | seconds | rows/s | MB/s | "
            + " | ".join(f"x {label}" for _, label in refs)
            + " | rows checked |",
            "|---|---|---:|---:|---:|" + "---:|" * len(refs) + "---|",
        ]
        for r in sorted(results, key=lambda r: -r.rows_per_s if r.ok else 0):
            if not r.ok:
                lines.append(
                    f"| {r.name} | {r.mode or '-'} | failed | | |"
                    + " |" * len(refs)
                    + f" {_cell(r.error or 'row count differs')} |"
                )
                continue
            x = rel.get(r.name, {})
            checked = "-" if r.verified_rows is None else ("yes" if r.verified_rows == r.rows else "NO")
            spread = f" ({min(r.round_seconds):.2f}-{max(r.round_seconds):.2f})" if len(r.round_seconds) > 1 else ""
            lines.append(
                f"| {r.name} | {r.mode or '-'} | {r.seconds:.2f}{spread} | {r.rows_per_s:,.0f} | {r.mb_per_s:.1f} | "
                + " | ".join(_fmt(x.get(run), 2) for run, _ in refs)
                + f" | {checked} |"
            )
        lines.append("")
        pairs = ways_in(results)
        if pairs:
            lines += [
                f'Two ways in, {_rows_label(size)} rows: `format("eosink")` against `foreach_batch` with the '
                "same strategy in the same commit mode (the sink's default).",
                "",
                "| run | rows/s | foreach_batch run | rows/s | x foreach_batch |",
                "|---|---:|---|---:|---:|",
            ]
            for ds, fb in pairs:
                ratio = ds.rows_per_s / fb.rows_per_s if fb is not None and fb.rows_per_s > 0 else None
                lines.append(
                    f"| {ds.name} | {ds.rows_per_s:,.0f} | {fb.name if fb else '-'} | "
                    f"{f'{fb.rows_per_s:,.0f}' if fb else '-'} | {_fmt(ratio, 2)} |"
                )
            lines.append("")
    variants = [(p, a, b) for p, a, b in pair_rows(report) if a is not None or b is not None]
    if variants:
        lines += [
            f"{h}# Variants, {_rows_label(report.target_size() or 0)} rows",
            "",
            "Each variant against its counterpart, in the same rounds as the runs above.",
            "",
            "| run | variant | rows/s | against | rows/s | ratio |",
            "|---|---|---:|---|---:|---:|",
        ]
        measured = {r.name for r in report.throughput.get(report.target_size() or 0, [])}

        def rate(name: str, result: RunResult | None) -> str:  # a run left out by --only did not fail
            if result is not None:
                return f"{result.rows_per_s:,.0f}"
            return "failed" if name in measured else "not run"

        for p, run, base in variants:
            ratio = None if run is None or base is None or not base.rows_per_s else run.rows_per_s / base.rows_per_s
            lines.append(
                f"| {p.run} | {(run.variant or '-') if run is not None else '-'} | {rate(p.run, run)} | "
                f"{p.against} | {rate(p.against, base)} | {_fmt(ratio, 2)} |"
            )
        lines.append("")
    if report.latency:
        lines += [
            f"{h}# Streaming latency",
            "",
            f"Spark's `rate` source, a trigger every {int(c.get('trigger_ms') or report.goals.trigger_ms):,} ms, "
            f"{c.get('latency_seconds', '-')} s measured per run; p50/p99 from a row's generation to the first poll "
            "that reads it committed.",
            "",
            "| run | mode | input rows/s | batches | p50 ms | p99 ms | commit p50 ms | foreachBatch p50 ms | "
            "visible after commit log p50 / p99 ms |",
            "|---|---|---:|---:|---:|---:|---:|---:|---|",
        ]
        for lat in report.latency:
            if lat.error:
                lines.append(f"| {lat.name} | {lat.mode or '-'} | {lat.rate:,} | failed | | | | | {_cell(lat.error)} |")
                continue
            after = (
                "-"
                if lat.visible_after_commit_log_p50_ms is None
                else f"{lat.visible_after_commit_log_p50_ms:.0f} / {_fmt(lat.visible_after_commit_log_p99_ms, 0)}"
            )
            lines.append(
                f"| {lat.name} | {lat.mode or '-'} | {lat.rate:,} | {lat.batches} | {_fmt(lat.p50_ms, 0)} | "
                f"{_fmt(lat.p99_ms, 0)} | "
                f"{_fmt(lat.commit_p50_ms, 1)} | {_fmt(lat.batch_p50_ms, 0)} | {after} |"
            )
        lines.append("")
    if report.rss:
        lines += [
            f"{h}# Driver peak RSS",
            "",
            "| run | master | rows in the batch | Python MB | JVM MB | total MB | seconds |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        for rss in report.rss:
            if rss.error:
                lines.append(f"| {rss.name} | {rss.master} | {rss.rows:,} | failed: {_cell(rss.error)} | | | |")
                continue
            lines.append(
                f"| {rss.name} | `{rss.master}` | {rss.rows:,} | {rss.python_mb:.0f} | {rss.jvm_mb:.0f} | "
                f"{rss.total_mb:.0f} | {rss.seconds:.1f} |"
            )
        lines.append("")
    lines += [f"{h}# Targets", "", "| target | measured | threshold | result | detail |", "|---|---:|---:|---|---|"]
    for t in compute_targets(report):
        verdict = "not measured" if t.met is None else ("met" if t.met else "**missed**")
        lines.append(f"| {t.text} | {_fmt(t.value, 3)} | {t.threshold:g} | {verdict} | {t.detail} |")
    lines.append("")
    return "\n".join(lines)


def render_chart(report: Report, path: Path) -> None:
    """A PNG: rows/s per run for each size, and latency p50/p99 per run and rate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = len(report.throughput) + (1 if report.latency else 0)
    fig, axes = plt.subplots(panels or 1, 1, figsize=(9, 3.2 * max(panels, 1) + 0.5), squeeze=False)
    for ax, (size, results) in zip(axes[:, 0], report.throughput.items(), strict=False):
        ok = sorted((r for r in results if r.ok), key=lambda r: r.rows_per_s)
        colors = [
            "#1f77b4" if r.kind == "eosink" else "#2ca02c" if r.kind == "at-least-once" else "#7f7f7f" for r in ok
        ]
        ax.barh([r.name for r in ok], [r.rows_per_s for r in ok], color=colors)
        for y, r in enumerate(ok):
            ax.text(r.rows_per_s, y, f" {r.rows_per_s:,.0f}", va="center", fontsize=8)
        ax.set_title(f"{report.sink}: rows/s, {_rows_label(size)} rows, {report.config.get('master')}")
        ax.set_xscale("log")  # raw COPY is an order of magnitude beyond Spark's writers
        ax.set_xlabel("rows per second, log scale (higher is better)")
        ax.margins(x=0.2)
    if report.latency:
        ax = axes[-1, 0]
        lat = [r for r in report.latency if r.error is None and r.p50_ms is not None]
        labels = [f"{r.name} @{_rows_label(r.rate)}/s" for r in lat]
        ax.barh(labels, [r.p99_ms or 0 for r in lat], color="#ffbb78", label="p99")
        ax.barh(labels, [r.p50_ms or 0 for r in lat], color="#ff7f0e", label="p50")
        ax.set_title("input-to-visible latency (lower is better)")
        ax.set_xlabel("milliseconds")
        ax.legend(loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_results(report: Report, out: Path) -> dict[str, Path]:
    """``bench-<sink>.json``, ``.md`` and ``.png`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {ext: out / f"bench-{report.sink}.{ext}" for ext in ("json", "md", "png")}
    paths["json"].write_text(json.dumps(report.to_json(), indent=1) + "\n")
    render_chart(report, paths["png"])
    paths["md"].write_text(render_markdown(report, chart=paths["png"].name))
    return paths


def update_docs(report: Report, doc: Path, image: Path, png: Path) -> None:
    """Replace the generated section of ``doc`` (between its markers) and copy the chart to ``image``. A sink's
    first run adds its section at the end of the doc's ``## Results``, which must then be its last section."""
    start, end = DOCS_START.format(sink=report.sink), DOCS_END.format(sink=report.sink)
    text = doc.read_text()
    if start not in text and end not in text and "\n## Results\n" in text:
        text = text.rstrip("\n") + f"\n\n{start}\n{end}\n"
    if start not in text or end not in text:
        raise ValueError(f"{doc} has no {start} ... {end} section, and no '## Results' section to add it to")
    image.parent.mkdir(parents=True, exist_ok=True)
    image.write_bytes(png.read_bytes())
    rel = os.path.relpath(image, doc.parent)
    body = render_markdown(report, chart=rel, level=3)
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
    doc.write_text(pattern.sub(lambda _: f"{start}\n{body}\n{end}", text))
