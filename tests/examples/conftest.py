"""The examples run against the harness's servers (``make examples``, and ``make test``)."""

from eosink.services.fixtures import *  # noqa: F403
