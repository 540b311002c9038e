"""PostgreSQL connector: :class:`PostgresSink`, batch-atomic exactly-once writes into one table.

Needs ``pip install 'eosink[postgres]'`` (psycopg 3). See :mod:`eosink.connectors.postgres.sink`
for how each operation of the sink contract maps onto PostgreSQL.
"""

from eosink.connectors.postgres.config import PostgresConfig
from eosink.connectors.postgres.sink import PostgresSink

__all__ = ["PostgresConfig", "PostgresSink"]
