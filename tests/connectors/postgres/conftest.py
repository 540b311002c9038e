"""Tests of the PostgreSQL connector need the PostgreSQL service (``make services-up``)."""

from eosink.services.fixtures import *  # noqa: F403
