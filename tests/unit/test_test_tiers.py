"""The test tiers leave no test behind: a test the unit stage deselects is run by another make target."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UNIT_DIRS = ("tests/unit", "tests/bench", "tests/chaos")  # make unit runs them with -m "not spark"


def test_every_spark_test_among_the_unit_directories_is_named_by_another_target() -> None:
    """Pass: each file under the unit stage's directories that marks tests ``spark`` is named in a
    Makefile recipe line other than the unit stage's (a quick bench run once ran in no tier at all)."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    elsewhere = "\n".join(line for line in lines if '-m "not spark"' not in line)
    marked = [
        path.relative_to(ROOT).as_posix()
        for d in UNIT_DIRS
        for path in sorted((ROOT / d).rglob("test_*.py"))
        if re.search(r"mark\.spark\b", path.read_text())
    ]
    assert marked, "expected Spark tests beside the unit tests (the bench's and chaos's quick runs)"
    orphans = [p for p in marked if p not in elsewhere]
    assert not orphans, f"no make target runs the Spark tests of {orphans}"
