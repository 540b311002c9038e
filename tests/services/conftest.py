"""Tests of the service harness against the running servers (``make services-up``)."""

from eosink.services.fixtures import *  # noqa: F403
