"""PostgresSink passes the contract suite against the real server, network faults included, in both commit modes.

``make test`` runs the suite in the default commit mode (atomic); the per-participant mode's own
tests are in ``test_postgres_sink.py``, and its whole suite runs in ``make test-full``.
"""

from __future__ import annotations

import pytest

from eosink.connectors.postgres.testing import PostgresHarness
from eosink.contracts import contract_tests
from eosink.contracts.fanout import fanout_contract_tests

TestPostgresContract = contract_tests(PostgresHarness())
TestPostgresFanOut = fanout_contract_tests(PostgresHarness())
TestPostgresPerParticipantContract = pytest.mark.full(
    contract_tests(PostgresHarness(commit_mode="per-participant"), name="TestPostgresPerParticipantContract")
)
