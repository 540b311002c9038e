"""Each broken sink fails the suite, and fails it in the cases built to catch its fault.

Each mutant also has to pass a control case that its fault does not touch
(``test_empty_batch_commits_its_bundle``), so a mutant that breaks everything would not pass
for a caught one. The suite runs once over every mutant (one pytest process, a class per
mutant, only the cases that matter); each mutant's verdict is its own test here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

import pytest

from tests.contracts.mutants import MUST_FAIL

CONTROL = "test_empty_batch_commits_its_bundle"
ROOT = Path(__file__).resolve().parents[2]

HEADER = """
from eosink.contracts import contract_tests
from eosink.connectors.reference.testing import ReferenceHarness
from tests.contracts import mutants
"""
CLASS = 'Test{name} = contract_tests(ReferenceHarness(sink_class=mutants.{name}), "Test{name}")\n'

Outcomes = dict[str, dict[str, set[str]]]  # mutant -> outcome -> case names


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Outcomes:
    """Run the selected cases against every mutant in one pytest process; outcomes per mutant."""
    folder = tmp_path_factory.mktemp("mutants")
    module = folder / "test_all_mutants.py"
    module.write_text(HEADER + "".join(CLASS.format(name=m.__name__) for m in MUST_FAIL))
    ids = [f"{module.name}::Test{m.__name__}::{case}" for m, cases in MUST_FAIL.items() for case in (*cases, CONTROL)]
    report = folder / "report.xml"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            f"--junitxml={report}",
            "--rootdir",
            folder,
            *ids,
        ],
        cwd=folder,
        env={**_env(), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert report.exists(), f"the mutant run left no report:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    found: Outcomes = defaultdict(lambda: defaultdict(set))
    for case in ET.parse(report).getroot().iter("testcase"):
        mutant = case.get("classname", "").rsplit(".", 1)[-1].removeprefix("Test")
        name = case.get("name", "").split("[")[0]
        failed = case.find("failure") is not None or case.find("error") is not None
        outcome = "failed" if failed else "skipped" if case.find("skipped") is not None else "passed"
        found[mutant][outcome].add(name)
    return found


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}


@pytest.mark.parametrize("mutant", list(MUST_FAIL), ids=[m.__name__ for m in MUST_FAIL])
def test_mutant_fails_the_cases_built_to_catch_it(mutant: type, outcomes: Outcomes) -> None:
    """Pass: every case named for the mutant fails against it, and the control case passes."""
    seen = outcomes[mutant.__name__]
    missed = set(MUST_FAIL[mutant]) - seen["failed"]
    assert not missed, f"{mutant.__name__} was not caught by {missed} (outcomes: {dict(seen)})"
    assert CONTROL in seen["passed"] - seen["failed"], f"{mutant.__name__} also fails the unrelated control case"
