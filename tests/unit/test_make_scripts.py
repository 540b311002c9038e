"""scripts/together.py and scripts/stages.py, which make test and make test-full run their stages with."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import parse_shard

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _run(script: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPTS / script), *args], capture_output=True, text=True, timeout=60, cwd=cwd
    )


def test_together_runs_every_command_shows_each_whole_in_order_and_fails_if_one_failed(tmp_path: Path) -> None:
    """Pass: both commands run at once (the first blocks reading a pipe that only the second opens; run one
    after the other they would hang until the bound); each one's output comes whole, in the order given; the
    run fails, naming the command that failed."""
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    first = f"{sys.executable} -c \"print('first', open('{pipe}').read())\""
    second = f"{sys.executable} -c \"import sys; open('{pipe}', 'w').write('met'); print('second'); sys.exit(3)\""
    done = _run("together.py", first, second)
    assert done.returncode == 1
    out = done.stdout
    assert "first met" in out, out  # the second ran while the first waited
    assert out.index("first met") < out.index("second\n") < out.index("together: FAILED")
    assert "(exit 3," in out and out.count("together: FAILED") == 1


def test_stages_writes_its_times_after_every_stage(tmp_path: Path) -> None:
    """Pass: the JSON lists each stage with its result, the failed one marked, and the run's result."""
    (tmp_path / "Makefile").write_text("ok:\n\t@true\nbad:\n\t@false\n")
    out = tmp_path / "times.json"
    done = _run("stages.py", "--title", "t", "--out", str(out), "ok:60", "bad", cwd=tmp_path)
    assert done.returncode == 1
    body = json.loads(out.read_text())
    assert [(r["stage"], r["result"]) for r in body["stages"]] == [("ok", "ok"), ("bad", "FAILED (2)")]
    assert body["result"] == "failed" and "total" in done.stdout


def test_stages_runs_its_background_command_beside_the_stages_and_reports_it(tmp_path: Path) -> None:
    """Pass: the background command runs while the stage runs (the stage waits for a file only it makes), its
    output goes to its log, its row is in the table; a failed background command is shown but fails nothing
    (the stage that needs its work does it itself)."""
    flag = tmp_path / "flag"
    (tmp_path / "Makefile").write_text(
        f"wait:\n\t@for i in $$(seq 100); do test -e {flag} && exit 0; sleep 0.1; done; exit 1\n"
    )
    out = tmp_path / "build" / "times.json"
    done = _run(
        "stages.py", "--title", "t", "--out", str(out), "--background", f"echo made; touch {flag}", "wait", cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout
    body = json.loads(out.read_text())
    assert [(r["stage"], r["result"]) for r in body["stages"]] == [("wait", "ok"), (f"(background) touch {flag}", "ok")]
    assert (tmp_path / "build" / "t-background.log").read_text() == "made\n"
    done = _run(
        "stages.py", "--title", "t", "--out", str(out), "--background", f"touch {flag}; exit 4", "wait", cwd=tmp_path
    )
    assert done.returncode == 0 and "failed (4)" in done.stdout, done.stdout


def _collected(*args: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=SCRIPTS.parent,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_shards_deal_the_selection_between_them_once() -> None:
    """Pass: --shard=0/2 and --shard=1/2 (tests/conftest.py) each take part of what -k selected, none twice,
    none lost; a malformed shard is a usage error naming the option."""
    selection = ("tests/unit/test_make_scripts.py", "-k", "not shards")
    whole = _collected(*selection)
    first, second = _collected(*selection, "--shard=0/2"), _collected(*selection, "--shard=1/2")
    assert len(whole) >= 2 and first and second
    assert sorted(first + second) == sorted(whole) and not set(first) & set(second)
    assert parse_shard("1/3") == (1, 3)
    for bad in ("2/2", "1", "a/2", "-1/2"):
        with pytest.raises(pytest.UsageError, match="--shard"):
            parse_shard(bad)
