"""The suite itself: every case documented (in its docstring and in docs/), enough cases, one-line adoption."""

from __future__ import annotations

import inspect
import itertools
from pathlib import Path

import pytest

from eosink.connectors.reference.testing import ReferenceHarness
from eosink.contracts import SinkContract, contract_tests

DOCS = Path(__file__).resolve().parents[2] / "docs" / "contract-suite.md"


@pytest.mark.parametrize("case", SinkContract.case_names())
def test_every_case_says_what_how_and_its_pass_condition(case: str) -> None:
    """Pass: the case's docstring has a summary line and a 'Pass' condition; docs/contract-suite.md lists it."""
    doc = inspect.getdoc(getattr(SinkContract, case)) or ""
    assert doc.splitlines() and doc.splitlines()[0].strip(), f"{case} has no summary line"
    assert "Pass" in doc, f"{case}'s docstring has no pass condition"
    assert f"`{case}`" in DOCS.read_text(), f"{case} is missing from {DOCS.name}"


def test_suite_has_at_least_twenty_cases() -> None:
    """Pass: 20 or more distinct cases (before parametrisation by strategy)."""
    assert len(SinkContract.case_names()) >= 20


def test_contract_tests_builds_a_collectable_class() -> None:
    """Pass: ``contract_tests`` gives a SinkContract subclass named Test*, bound to the harness, here.

    (It must be collectable by pytest wherever a connector's tests call it.)
    """
    harness = ReferenceHarness()
    cls = contract_tests(harness)
    assert issubclass(cls, SinkContract) and cls.__name__ == "TestReferenceContract"
    assert cls.harness is harness and cls.__module__ == __name__


def test_the_fixed_schedules_have_the_shapes_they_are_named_for() -> None:
    """Pass: the schedules run on every run interleave two app_ids, keep a second attempt alive at
    commit, and take batch ids and epochs past 10 (with a stale writer there)."""
    from eosink.contracts._schedules import ALWAYS

    interleaved, _ = ALWAYS["two apps interleaved"]
    apps = [app for kind, app, _, _ in interleaved if kind in ("prepare", "commit")]
    assert any(a != b for a, b in itertools.pairwise(apps)) and apps.count(0) >= 2 and apps.count(1) >= 2
    attempts, _ = ALWAYS["a second attempt alive at commit"]
    straggler = next(i for i, op in enumerate(attempts) if op[0] == "straggle")
    assert any(op[0] == "commit" and op[1:3] == attempts[straggler][1:3] for op in attempts[straggler:])
    past_ten, warmup = ALWAYS["ids past 10"]
    batches = [batch for kind, _, batch, _ in past_ten if kind == "commit"]
    assert {9, 10, 11} <= set(batches) and batches.index(11) < len(batches) - 1, "a lower batch commits after 11"
    crashes = [i for i, op in enumerate(past_ten) if op[0] == "crash"]
    epoch_b = warmup + 1 + len(crashes)
    assert epoch_b >= 10 and any(op[0] == "zombie" for op in past_ten[crashes[-1] :]), "no stale writer past epoch 10"
