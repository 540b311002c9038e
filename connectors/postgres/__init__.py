"""PostgreSQL connector: :class:`PostgresSink`, exactly-once writes into one table, every strategy.

Needs ``pip install 'eosink[postgres]'`` (psycopg 3, SQLAlchemy). See :mod:`eosink.connectors.postgres.sink`
for how each operation of the sink contract maps onto PostgreSQL.

The public names load on first use, so that eosink's tooling (the sink profiles every command lists) works
without the extra; using them without it is a :class:`~eosink.errors.ConfigurationError` naming the extra.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from eosink._extras import require

if TYPE_CHECKING:
    from eosink.connectors.postgres._cleanup import CleanupReport
    from eosink.connectors.postgres.config import PostgresConfig
    from eosink.connectors.postgres.metrics import MetricsSnapshot, PostgresMetrics
    from eosink.connectors.postgres.sink import PostgresSink

__all__ = ["CleanupReport", "MetricsSnapshot", "PostgresConfig", "PostgresMetrics", "PostgresSink"]

_HOME = {
    "CleanupReport": "_cleanup",
    "MetricsSnapshot": "metrics",
    "PostgresConfig": "config",
    "PostgresMetrics": "metrics",
    "PostgresSink": "sink",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    require("PostgreSQL", "postgres", "psycopg", "sqlalchemy")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
