#!/usr/bin/env python3
"""Run shell commands at the same time; show each one's output whole, in the order given; fail if any failed.

``make test-SINK`` runs a sink's connector tests (mostly waiting on the server's round trips) beside
its Spark kill tests and chaos schedule (mostly CPU), so that the two kinds of waiting overlap::

    scripts/together.py "pytest tests/connectors/kafka -q" "pytest tests/spark/test_kafka_pipeline.py -q"

Each command's output goes to a file while it runs (interleaved lines would be unreadable) and is
printed when it ends, with its wall time; a line every minute says which commands still run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _fmt(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m}:{s:02d}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("commands", nargs="+", help="shell commands, each one argument")
    args = ap.parse_args(argv)

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="eosink-together-") as tmp:
        logs = [Path(tmp) / f"{i}.log" for i in range(len(args.commands))]
        procs = []
        for command, log in zip(args.commands, logs, strict=True):
            print(f"together: started  {command}", flush=True)
            with open(log, "w") as out:
                procs.append(subprocess.Popen(command, shell=True, stdout=out, stderr=subprocess.STDOUT))
        ended: dict[int, float] = {}
        shown = 0
        next_note = started + 60
        while len(ended) < len(procs):
            for i, proc in enumerate(procs):
                if i not in ended and proc.poll() is not None:
                    ended[i] = time.monotonic() - started
            while shown in ended:  # in the order given, each as soon as it and those before it ended
                _show(args.commands[shown], logs[shown], procs[shown].returncode, ended[shown])
                shown += 1
            if time.monotonic() >= next_note and len(ended) < len(procs):
                running = "; ".join(_label(c) for i, c in enumerate(args.commands) if i not in ended)
                print(f"together: {_fmt(time.monotonic() - started)} in, still running: {running}", flush=True)
                next_note += 60
            time.sleep(0.2)
        while shown < len(procs):
            _show(args.commands[shown], logs[shown], procs[shown].returncode, ended[shown])
            shown += 1
    failed = [c for c, p in zip(args.commands, procs, strict=True) if p.returncode != 0]
    for command in failed:
        print(f"together: FAILED   {command}", flush=True)
    return 1 if failed else 0


def _label(command: str) -> str:
    """A command's short name in progress lines: the paths it names under tests/, else its start."""
    paths = [word for word in command.split() if word.startswith("tests/")]
    return " ".join(paths) if paths else command[:60]


def _show(command: str, log: Path, code: int, seconds: float) -> None:
    print(f"\n--- together: {command} (exit {code}, {_fmt(seconds)}) ---", flush=True)
    sys.stdout.write(log.read_text(errors="replace"))
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
