#!/usr/bin/env python3
"""Run make targets as timed stages; print a table of their wall times; write it as JSON.

``make test`` and ``make test-full`` are lists of stages. This runs each one
(``make --no-print-directory STAGE``), goes on after a failure so that one run shows every
broken stage, and ends with a table of each stage's wall time, its budget and its result,
and the total. The same figures go to ``--out`` (``build/test-times.json``)::

    scripts/stages.py --title "make test" --out build/test-times.json lint unit:120 spark:300

A stage may carry its budget in seconds after a colon; a stage over its budget is marked,
but only a failed stage fails the run (budgets are judged on a quiet machine, not here).

``--background CMD`` starts a shell command beside the first stage and waits for it at the end:
``make test`` provisions the servers there (on a cold machine, MinIO's Go build) while its first,
single-process stages leave a core idle. Its output goes to a log; its row in the table is for
information only (the stage that needs what it makes does that work itself if it failed).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path


def _fmt(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m}:{s:02d}"


def _write(args: argparse.Namespace, rows: list[dict[str, object]], total: float, result: str) -> None:
    """Write the times so far: after every stage, so a run cut short still leaves its figures."""
    args.out.parent.mkdir(parents=True, exist_ok=True)
    body = {"title": args.title, "stages": rows, "total_s": round(total, 1), "budget_s": args.budget, "result": result}
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(body, indent=2) + "\n")
    tmp.replace(args.out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--title", default="stages")
    ap.add_argument("--out", type=Path, help="write the times as JSON here")
    ap.add_argument("--fail-fast", action="store_true", help="stop at the first failed stage")
    ap.add_argument("--budget", type=float, help="budget of the whole run, in seconds")
    ap.add_argument("--background", metavar="CMD", help="a shell command run beside the stages, logged to a file")
    ap.add_argument("stages", nargs="+", help="make targets, each optionally TARGET:BUDGET_SECONDS")
    args = ap.parse_args(argv)

    make = os.environ.get("MAKE", "make")
    rows: list[dict[str, object]] = []
    started = time.monotonic()
    background = _start_background(args)
    failed = False
    try:
        failed = _run_stages(args, make, rows, started)
    finally:
        if background is not None:
            rows.append(background.row())
    total = time.monotonic() - started
    if args.out is not None:
        _write(args, rows, total, "failed" if failed else "ok")
    _print_table(args, rows, total, failed)
    return 1 if failed else 0


class _Background:
    """A shell command run beside the stages; its own wall time is taken when it ends, not when waited for."""

    def __init__(self, command: str, log: Path) -> None:
        self.command, self.log = command, log
        self.t0 = time.monotonic()
        with log.open("w") as out:
            self.proc = subprocess.Popen(
                command, shell=True, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.seconds = 0.0
        self._waiter = threading.Thread(target=self._wait, daemon=True)
        self._waiter.start()

    def _wait(self) -> None:
        self.proc.wait()
        self.seconds = time.monotonic() - self.t0

    def row(self) -> dict[str, object]:
        """Wait for it (it ends long before the stages do); stop it if the run was cut short."""
        try:
            self._waiter.join()
        except BaseException:
            os.killpg(self.proc.pid, signal.SIGTERM)
            raise
        code = self.proc.returncode
        result = "ok" if code == 0 else f"failed ({code}), see {self.log}"
        name = "(background) " + " ".join(shlex.split(self.command)[-2:])
        return {"stage": name, "seconds": round(self.seconds, 1), "budget_s": None, "result": result}


def _start_background(args: argparse.Namespace) -> _Background | None:
    if not args.background:
        return None
    base = args.out.parent if args.out is not None else Path("build")
    base.mkdir(parents=True, exist_ok=True)
    log = base / f"{args.title.replace(' ', '-')}-background.log"
    print(f"{args.title}: in the background, {args.background}  (log: {log})", flush=True)
    return _Background(args.background, log)


def _run_stages(args: argparse.Namespace, make: str, rows: list[dict[str, object]], started: float) -> bool:
    failed = False
    for item in args.stages:
        name, _, budget = item.partition(":")
        if failed and args.fail_fast:
            rows.append({"stage": name, "seconds": 0.0, "budget_s": float(budget or 0) or None, "result": "not run"})
            continue
        clock = time.strftime("%H:%M:%S")
        print(f"\n=== {args.title}: stage {name} (at {clock}, {_fmt(time.monotonic() - started)} in) ===", flush=True)
        t0 = time.monotonic()
        code = subprocess.call([make, "--no-print-directory", name])
        seconds = time.monotonic() - t0
        failed = failed or code != 0
        rows.append(
            {
                "stage": name,
                "seconds": round(seconds, 1),
                "budget_s": float(budget) if budget else None,
                "result": "ok" if code == 0 else f"FAILED ({code})",
            }
        )
        if args.out is not None:
            _write(args, rows, time.monotonic() - started, "running")
    return failed


def _print_table(args: argparse.Namespace, rows: list[dict[str, object]], total: float, failed: bool) -> None:
    width = max(len(str(r["stage"])) for r in rows)
    lines = [f"{args.title}: stage times", f"{'stage'.ljust(width)}  {'time':>7}  {'budget':>7}  result"]
    for r in rows:
        budget_s = r["budget_s"]
        over = isinstance(budget_s, float) and float(r["seconds"]) > budget_s  # type: ignore[arg-type]
        budget_txt = _fmt(budget_s) if isinstance(budget_s, float) else "-"
        result = f"{r['result']}{'  (over budget)' if over else ''}"
        lines.append(f"{str(r['stage']).ljust(width)}  {_fmt(float(r['seconds'])):>7}  {budget_txt:>7}  {result}")  # type: ignore[arg-type]
    total_budget = f"  (budget {_fmt(args.budget)})" if args.budget else ""
    lines.append(f"{'total'.ljust(width)}  {_fmt(total):>7}{total_budget}  {'FAILED' if failed else 'all green'}")
    print("\n" + "\n".join(lines), flush=True)


if __name__ == "__main__":
    sys.exit(main())
