"""The pytest plugin of the contract suite (entry point ``pytest11``: ``eosink_contracts``).

It marks every case of a :class:`~eosink.contracts.SinkContract` subclass with
``eosink_contract`` (select them with ``-m eosink_contract``) and ends the run with a summary
per sink: how many cases passed, failed and were skipped, and every skip with the
capability that caused it. ``--eosink-contract-examples=N`` sets how many random schedules
the property case draws; ``--eosink-crash-stride=N`` makes the crash walks crash at every N-th
step (a quick tier for sinks whose every step is a network round trip; 1, every step, by default).
"""

from __future__ import annotations

import sys
from collections import defaultdict

import pytest

__all__ = ["pytest_addoption", "pytest_collection_modifyitems", "pytest_configure"]


class _Summary:
    """Outcomes of contract cases, per suite class, for the end-of-run section."""

    def __init__(self) -> None:
        self.results: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if "eosink_contract" not in report.keywords:
            return
        if report.when == "call" or (report.when == "setup" and not report.passed):
            parts = report.nodeid.split("::")
            suite, case = (parts[-2] if len(parts) > 2 else parts[0]), parts[-1]
            detail = case
            if report.skipped and isinstance(report.longrepr, tuple):
                detail = f"{case}: {report.longrepr[2].removeprefix('Skipped: ')}"
            self.results[suite]["skipped" if report.skipped else report.outcome].append(detail)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.results:
            return
        terminalreporter.section("eosink contract suite")
        for suite, outcomes in sorted(self.results.items()):
            counts = ", ".join(f"{len(v)} {k}" for k, v in sorted(outcomes.items()))
            terminalreporter.write_line(f"{suite}: {counts}")
            for line in outcomes.get("skipped", []):
                terminalreporter.write_line(f"    skipped {line}")
            for line in outcomes.get("failed", []):
                terminalreporter.write_line(f"    FAILED  {line}")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("eosink", "eosink contract suite")
    group.addoption(
        "--eosink-contract-examples",
        dest="eosink_contract_examples",
        type=int,
        default=None,
        metavar="N",
        help="random schedules drawn by the contract suite's property case (default 60; the same schedules every run)",
    )
    group.addoption(
        "--eosink-crash-stride",
        dest="eosink_crash_stride",
        type=int,
        default=None,
        metavar="N",
        help="the crash walks crash at steps 1, 1+N, 1+2N, ... (default 1: every step; the full proof)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "eosink_contract: a case of eosink's sink contract suite")
    config.addinivalue_line("markers", "full: a longer case (eosink's make test leaves it to make test-full)")
    config.pluginmanager.register(_Summary(), "eosink-contract-summary")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    suite = sys.modules.get("eosink.contracts.suite")
    if suite is None:  # nothing collected imported the suite: no contract case to mark (and no import cost)
        return
    SinkContract = suite.SinkContract
    for item in items:
        cls = getattr(item, "cls", None)
        if cls is not None and issubclass(cls, SinkContract):
            item.add_marker(pytest.mark.eosink_contract)
