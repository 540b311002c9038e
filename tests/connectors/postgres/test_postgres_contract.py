"""PostgresSink passes the contract suite against the real server, network faults included."""

from __future__ import annotations

from eosink.contracts import contract_tests
from tests.connectors.postgres.harness import PostgresHarness

TestPostgresContract = contract_tests(PostgresHarness())
