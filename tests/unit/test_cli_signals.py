"""SIGTERM unwinds an ``eosink`` command, so the servers it started are stopped by its own cleanup."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

PROGRAM = textwrap.dedent(
    """
    import os, signal, sys
    from eosink.cli import exit_on_sigterm

    exit_on_sigterm()
    try:
        print("started", flush=True)
        signal.pause()
    finally:
        print("cleaned up", flush=True)
    """
)


def _run_and_terminate(program: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "started"  # blocks until the handler is in place
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    return subprocess.CompletedProcess(proc.args, proc.returncode, "started\n" + out)


def test_sigterm_runs_the_commands_cleanup_and_exits_143() -> None:
    done = _run_and_terminate(PROGRAM)
    assert "cleaned up" in done.stdout
    assert done.returncode == 143


def test_without_the_handler_sigterm_skips_the_cleanup() -> None:
    """The control: Python's default for SIGTERM ends the process without running ``finally``."""
    done = _run_and_terminate(PROGRAM.replace("exit_on_sigterm()\n", ""))
    assert "cleaned up" not in done.stdout
    assert done.returncode == -signal.SIGTERM
