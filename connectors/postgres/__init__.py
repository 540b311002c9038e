"""PostgreSQL connector: :class:`PostgresSink`, exactly-once writes into one table, every strategy.

Needs ``pip install 'eosink[postgres]'`` (psycopg 3, SQLAlchemy). See :mod:`eosink.connectors.postgres.sink`
for how each operation of the sink contract maps onto PostgreSQL.
"""

from eosink.connectors.postgres._cleanup import CleanupReport
from eosink.connectors.postgres.config import PostgresConfig
from eosink.connectors.postgres.metrics import MetricsSnapshot, PostgresMetrics
from eosink.connectors.postgres.sink import PostgresSink

__all__ = ["CleanupReport", "MetricsSnapshot", "PostgresConfig", "PostgresMetrics", "PostgresSink"]
