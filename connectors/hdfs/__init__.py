"""HDFS connector: :class:`HdfsSink`, exactly-once Parquet or JSON-lines files, a whole batch per directory rename.

Needs ``pip install 'eosink[hdfs]'`` (hdfs-native, a client in Rust: no JVM in the Python process).
See :mod:`eosink.connectors.hdfs.sink` for how each operation of the sink contract maps onto HDFS.
"""

from eosink.connectors.hdfs._read import committed_batches, read_committed
from eosink.connectors.hdfs.config import HdfsConfig
from eosink.connectors.hdfs.sink import HdfsSink

__all__ = ["HdfsConfig", "HdfsSink", "committed_batches", "read_committed"]
