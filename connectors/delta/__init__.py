"""Exactly-once Delta Lake tables on S3, HDFS and local disk (delta-rs, no JVM): :class:`DeltaSink`."""

from eosink.connectors.delta.config import DeltaConfig
from eosink.connectors.delta.sink import DeltaSink

__all__ = ["DeltaConfig", "DeltaSink"]
