"""Each broken sink fails the suite, and fails it in the cases built to catch its fault.

Each run also shows the mutant passes a control case that its fault does not touch
(``test_empty_batch_commits_its_bundle``), so a mutant that breaks everything would not pass
for a caught one.
"""

from __future__ import annotations

import pytest

from tests.contracts.mutants import MUST_FAIL

CONTROL = "test_empty_batch_commits_its_bundle"

MODULE = """
from eosink.contracts import contract_tests
from eosink.connectors.reference.testing import ReferenceHarness
from tests.contracts.mutants import {name}

TestMutantContract = contract_tests(ReferenceHarness(sink_class={name}), "TestMutantContract")
"""


@pytest.mark.parametrize("mutant", list(MUST_FAIL), ids=[m.__name__ for m in MUST_FAIL])
def test_mutant_fails_the_cases_built_to_catch_it(mutant: type, pytester: pytest.Pytester) -> None:
    """Pass: every case named for the mutant fails against it, and the control case passes."""
    pytester.makepyfile(test_mutant=MODULE.format(name=mutant.__name__))
    cases = MUST_FAIL[mutant]
    selection = " or ".join((*cases, CONTROL))
    result = pytester.inline_run("-p", "no:cacheprovider", "-k", selection, "-q")
    passed, _, failed = result.listoutcomes()
    failed_cases = {r.nodeid.split("::")[-1].split("[")[0] for r in failed}
    passed_cases = {r.nodeid.split("::")[-1].split("[")[0] for r in passed}
    assert set(cases) <= failed_cases, f"{mutant.__name__} was not caught by {set(cases) - failed_cases}"
    assert CONTROL in passed_cases, f"{mutant.__name__} also fails the unrelated control case"
