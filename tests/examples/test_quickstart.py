"""docs/quickstart.md, run as printed: its program, its stop, its bounded run, its crash and its status command.

The code blocks are taken from the page itself, so the page cannot drift from what works. Only what must differ
per test run is replaced: the input and checkpoint folders (``/data/...``), the table and the app_id (the server
is shared); each replacement must find its text, so a changed page fails here rather than running something else.
The rows are read back with the test's own connection, not eosink's. Both tests are ``make test-full``'s
(``make examples-full``); ``make test`` runs the examples and the quickstart's first mistakes
(tests/spark/test_postgres_pipeline.py).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from eosink._procs import kill_session
from eosink._waiting import wait_until
from tests.examples.test_examples import _java_options, table_rows

pytestmark = [pytest.mark.spark, pytest.mark.full, pytest.mark.timeout(900)]

PAGE = Path(__file__).resolve().parents[2] / "docs" / "quickstart.md"
ROWS_PER_FILE = 40


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", PAGE.read_text(), flags=re.S)


def _replaced(text: str, swaps: dict[str, str]) -> str:
    for old, new in swaps.items():
        assert old in text, f"docs/quickstart.md no longer has {old!r}: update this test with the page"
        text = text.replace(old, new)
    return text


class Quickstart:
    """The page's program, pointed at this test's folders, table and app_id."""

    def __init__(self, tmp: Path, url: str) -> None:
        self.tmp, self.url = tmp, url
        self.inbox = tmp / "inbox"
        self.inbox.mkdir()
        self.table = f"qs_{uuid.uuid4().hex[:8]}"
        self.app_id = f"payments-to-ledger-{uuid.uuid4().hex[:8]}"
        program, bounded = (b for b in _blocks("python") if "writer.start" in b)
        self.swaps = {
            '"/data/inbox"': repr(str(self.inbox)),
            '"/data/checkpoints/payments"': repr(str(tmp / "checkpoint")),
            'table="payments"': f"table={self.table!r}",
            'app_id="payments-to-ledger"': f"app_id={self.app_id!r}",
        }
        self.program = _replaced(program, self.swaps)
        lines = self.program.rstrip().splitlines()
        assert lines[-2].startswith("query = writer.start(") and lines[-1].startswith("query.run()"), (
            "the page's program no longer ends with writer.start and query.run(): update this test with the page"
        )
        # The page's section 4: the same program, run bounded (its two lines instead of those two).
        self.bounded_program = "\n".join(lines[:-2]) + "\n" + bounded
        self.sent: list[tuple[Any, ...]] = []

    def add_file(self) -> None:
        first = len(self.sent)
        rows = [
            {"id": i, "account": f"acct-{i % 7}", "amount": float(i % 100) + 0.25}
            for i in range(first, first + ROWS_PER_FILE)
        ]
        tmp = self.inbox / f".part-{first}.tmp"
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        tmp.rename(self.inbox / f"part-{first:06d}.json")  # whole files only: Spark lists the folder any time
        self.sent += [(r["id"], r["account"], r["amount"]) for r in rows]

    def start(self, program: str, faults: str | None = None) -> subprocess.Popen[str]:
        script = self.tmp / f"quickstart-{uuid.uuid4().hex[:6]}.py"
        script.write_text(program)
        env = dict(
            os.environ,
            EOSINK_POSTGRES_URL=self.url,
            SPARK_LOCAL_IP="127.0.0.1",
            PYSPARK_PYTHON=sys.executable,
            JAVA_TOOL_OPTIONS=_java_options(),
            EOSINK_FAULT_SESSION="own",
        )
        env.pop("EOSINK_FAULTS", None)
        if faults:
            env["EOSINK_FAULTS"] = faults
        return subprocess.Popen(
            [sys.executable, str(script)],
            env=env,
            cwd=self.tmp,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def rows(self) -> list[tuple[Any, ...]]:
        import psycopg

        try:
            return sorted(table_rows(self.url, self.table, "id, account, amount"))
        except psycopg.errors.UndefinedTable:
            return []

    def wait_for_all_rows(self, proc: subprocess.Popen[str], timeout_s: float = 300) -> None:
        def landed() -> bool:
            if proc.poll() is not None:
                out, err = proc.communicate()
                pytest.fail(f"the quickstart program ended early ({proc.returncode}):\n{out[-2000:]}\n{err[-4000:]}")
            return len(self.rows()) >= len(self.sent)

        assert wait_until(landed, timeout_s, max_interval_s=0.5), (
            f"{len(self.rows())} of {len(self.sent)} rows after {timeout_s:.0f} s"
        )

    @staticmethod
    def finish(proc: subprocess.Popen[str], timeout_s: float = 300) -> tuple[int, str, str]:
        try:
            out, err = proc.communicate(timeout=timeout_s)
        finally:
            kill_session(proc.pid)
            proc.wait()
        return proc.returncode, out, err


def _ctrl_c(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    proc.send_signal(signal.SIGINT)
    return Quickstart.finish(proc)


def _status(qs: Quickstart) -> str:
    (command,) = (b for b in _blocks("bash") if "eosink status" in b)
    argv = _replaced(command.strip(), {"--table payments": f"--table {qs.table}"}).split()
    assert argv[0] == "eosink"
    eosink = Path(sys.executable).with_name("eosink")
    done = subprocess.run(
        [str(eosink), *argv[1:]],
        env=dict(os.environ, EOSINK_POSTGRES_URL=qs.url),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_quickstart_runs_stops_and_reports_as_printed(tmp_path: Path, postgres_endpoint: Any) -> None:
    """Pass: the program as printed writes 2 files' payments once and ends cleanly on Ctrl-C (exit 0, no
    traceback); the page's bounded run writes a third file and ends by itself; the page's status command names
    the app_id; every payment is in the table once."""
    qs = Quickstart(tmp_path, postgres_endpoint.url)
    qs.add_file()
    qs.add_file()
    proc = qs.start(qs.program)
    qs.wait_for_all_rows(proc)
    code, _, err = _ctrl_c(proc)
    assert code == 0, f"Ctrl-C did not end the program cleanly:\n{err[-4000:]}"
    assert "Traceback" not in err, err[-4000:]
    assert qs.rows() == sorted(qs.sent)

    qs.add_file()
    code, _, err = Quickstart.finish(qs.start(qs.bounded_program))
    assert code == 0, f"the bounded run failed:\n{err[-4000:]}"
    assert qs.rows() == sorted(qs.sent)

    assert qs.app_id in _status(qs)


def test_the_quickstart_killed_mid_commit_and_started_again_writes_each_payment_once(
    tmp_path: Path, postgres_endpoint: Any
) -> None:
    """Section 5: kill -9 after Spark recorded batch 0 and before the sink committed it, then the program again.
    Pass: the restarted program lands every payment once and ends cleanly on Ctrl-C."""
    qs = Quickstart(tmp_path, postgres_endpoint.url)
    qs.add_file()
    qs.add_file()
    crashed = qs.start(qs.program, faults="F5@0:kill")
    code, _, err = Quickstart.finish(crashed)
    assert code == -signal.SIGKILL, f"the fault did not fire:\n{err[-3000:]}"
    assert qs.rows() == []
    qs.add_file()
    again = qs.start(qs.program)
    qs.wait_for_all_rows(again)
    code, _, err = _ctrl_c(again)
    assert code == 0, err[-4000:]
    rows = qs.rows()
    assert len(rows) == len(set(rows)) == len(qs.sent)
    assert rows == sorted(qs.sent)
