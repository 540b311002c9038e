"""The contract test suite for eosink sinks: a pytest plugin, a harness to adopt it, the cases.

A connector proves itself exactly-once by supplying a :class:`SinkHarness` — make a sink for
a fresh :class:`Namespace`, read back what is committed, optionally a fault endpoint — and
adopting the suite::

    from eosink.contracts import contract_tests
    TestMySinkContract = contract_tests(MySinkHarness())

Every case is a method of :class:`SinkContract`; its docstring says what it proves, how, and
its pass condition. ``eosink new-connector NAME`` renders a connector package that does this.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from eosink.contracts.harness import CONTRACT_SCHEMA, Failover, Namespace, SinkHarness

if TYPE_CHECKING:
    from eosink.contracts.suite import SinkContract, contract_tests

__all__ = ["CONTRACT_SCHEMA", "Failover", "Namespace", "SinkContract", "SinkHarness", "contract_tests"]


def __getattr__(name: str) -> Any:
    # The suite needs pytest (pip install 'eosink[contracts]'); the harness types do not.
    if name in ("SinkContract", "contract_tests"):
        from eosink.contracts import suite

        return getattr(suite, name)
    raise AttributeError(f"module 'eosink.contracts' has no attribute {name!r}")
