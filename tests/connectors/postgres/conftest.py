"""Tests of the PostgreSQL connector need the PostgreSQL service (``make services-up``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from psycopg import sql

from eosink.connectors.postgres.testing import PostgresHarness
from eosink.services.fixtures import *  # noqa: F403

HARNESS = PostgresHarness()


@pytest.fixture
def names() -> Iterator[dict[str, str]]:
    """A fresh table name and control schema name of the test's own; both dropped afterwards."""
    tag = uuid.uuid4().hex[:10]
    made = {"table": f"pgt_{tag}", "ctl": f"pgt_{tag}_ctl"}
    yield made
    HARNESS.drop(made["ctl"], [sql.Identifier(made["table"])])
