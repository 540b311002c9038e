"""The quick real benchmark run needs the PostgreSQL service (``make services-up``)."""

from eosink.services.fixtures import *  # noqa: F403
