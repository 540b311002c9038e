"""The reference sink passes the contract suite, in its atomic and its non-atomic mode, and the fan-out cases
(paired with another reference sink)."""

from __future__ import annotations

from eosink.connectors.reference.testing import ReferenceHarness
from eosink.contracts import contract_tests
from eosink.contracts.fanout import fanout_contract_tests

TestReferenceContract = contract_tests(ReferenceHarness())
TestReferenceNonAtomicContract = contract_tests(ReferenceHarness(atomic=False), "TestReferenceNonAtomicContract")
TestReferenceFanOut = fanout_contract_tests(ReferenceHarness())
