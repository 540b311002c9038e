"""What the file sinks share (S3, HDFS, Delta): the stores they write to, as each of them reaches them.

A file sink keeps only its commit protocol in its own folder; reaching the store is here, once:

* :mod:`eosink.stores.s3`: :class:`~eosink.stores.s3.S3Connection` (endpoint, credentials, timeouts)
  and its cached boto3 clients (a retrying one for data, a single-attempt one for commits), and the
  ``fs.s3a.*`` settings of the same connection for Spark;
* :mod:`eosink.stores.s3_errors`: botocore's errors as eosink's (one translator for every S3 user);
* :mod:`eosink.stores.s3_upload`: a write-only file whose bytes become one object by multipart
  upload, left incomplete (durable, invisible) or completed, and the record a committable carries;
* :mod:`eosink.stores.hdfs`: ``hdfs://`` targets (name services, ``fs.defaultFS``), one
  ``hdfs_native`` client per process, and :class:`~eosink.stores.hdfs.Fs`, the guarded file
  operations (checked renames, create-only files, bounded waits on stalled DataNodes);
* :mod:`eosink.stores.hdfs_errors`: which of hdfs-native's failures a retry can cure, and a full quota;
* :mod:`eosink.stores.encoding`: rows into bytes: Parquet row groups streamed into any write-only
  file, JSON lines, and the checks that refuse a row before its batch is written;
* :mod:`eosink.stores.partitions`: rows grouped by their partition values (in Arrow) and Hive-style
  folder names, escaped as Spark escapes them;
* :mod:`eosink.stores.naming`: names unique to an app_id and an attempt, safe in any path;
* :mod:`eosink.stores.parquet`: Parquet read back from bytes in memory.
"""

from eosink.stores.hdfs import HdfsConnection
from eosink.stores.s3 import S3Connection

__all__ = ["HdfsConnection", "S3Connection"]
