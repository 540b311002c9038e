"""The chaos harness's Delta target on a four-node MinIO (``eosink chaos --sink delta --topology cluster``).

The Delta target (:mod:`eosink.connectors.delta._chaos`: deltalake, DuckDB and, under ``make chaos``, Spark with
delta-spark reading the table in turn) with its table on the cluster, through the balancer
(:class:`~eosink.chaos.minio.MinioClusterSide`): a node is SIGKILLed at a moment of the run and the runner's fault
proxy cuts the reply of the PUT that creates the log's next entry.
"""

from __future__ import annotations

from eosink.chaos.minio import MinioClusterSide
from eosink.connectors.delta._chaos import DeltaChaosTarget

__all__ = ["DeltaClusterChaosTarget"]


class DeltaClusterChaosTarget(MinioClusterSide, DeltaChaosTarget):
    """Delta on a private four-node MinIO (see the module docstring)."""
