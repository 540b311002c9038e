"""The quick real benchmark runs need the PostgreSQL service, and MinIO for Delta (``make services-up``)."""

from eosink.services.fixtures import *  # noqa: F403
