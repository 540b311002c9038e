"""The eosink contract suite against {{ cookiecutter.class_name }}: every scenario, adopted in one line.

Each case's docstring says what it proves; a case is skipped only when the sink's declared
capabilities rule it out, and the skip reason names the capability. The fan-out cases pair the
sink with eosink's reference sink in one query (one batch, exactly once in each, in order).
"""

from __future__ import annotations

from typing import Any

from eosink.contracts import Namespace, SinkHarness, contract_tests
from eosink.contracts.fanout import fanout_contract_tests

from {{ cookiecutter.package_name }} import (
    {{ cookiecutter.class_name }},
    {{ cookiecutter.class_name }}Config,
    read_rows,
)


class {{ cookiecutter.class_name }}Harness(SinkHarness):
    """How the suite makes the sink for a fresh namespace, and reads back what a reader sees."""

    def make_sink(self, ns: Namespace) -> {{ cookiecutter.class_name }}:
        config = {{ cookiecutter.class_name }}Config(root=ns.path / "out")
        return {{ cookiecutter.class_name }}(config)

    def read_committed(self, ns: Namespace) -> list[dict[str, Any]]:
        return read_rows(ns.path / "out")


Test{{ cookiecutter.class_name }}Contract = contract_tests({{ cookiecutter.class_name }}Harness())
Test{{ cookiecutter.class_name }}FanOut = fanout_contract_tests({{ cookiecutter.class_name }}Harness())
