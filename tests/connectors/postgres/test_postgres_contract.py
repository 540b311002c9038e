"""PostgresSink passes the contract suite against the real server, network faults included, in both commit modes."""

from __future__ import annotations

from eosink.contracts import contract_tests
from tests.connectors.postgres.harness import PostgresHarness

TestPostgresContract = contract_tests(PostgresHarness())
TestPostgresPerParticipantContract = contract_tests(
    PostgresHarness(commit_mode="per-participant"), name="TestPostgresPerParticipantContract"
)
