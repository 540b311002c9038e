"""S3 connector: :class:`S3Sink`, exactly-once Parquet or JSON-lines objects in S3 and S3-compatible stores.

Needs ``pip install 'eosink[s3]'`` (boto3). Batches are committed by a create-only commit marker
written after the batch's multipart uploads are completed; readers that follow the markers
(:func:`committed_files`, :func:`read_committed`) see whole batches only. Old markers are folded
into one segment object per ``segment_batches`` batches, so what the sink keeps stays bounded. See
:mod:`eosink.connectors.s3.sink` for how each operation of the sink contract maps onto S3.
"""

from eosink.connectors.s3.config import S3Config, S3Connection
from eosink.connectors.s3.read import (
    CommittedObject,
    committed_files,
    committed_marker,
    committed_markers,
    read_committed,
)
from eosink.connectors.s3.sink import S3Sink

__all__ = [
    "CommittedObject",
    "S3Config",
    "S3Connection",
    "S3Sink",
    "committed_files",
    "committed_marker",
    "committed_markers",
    "read_committed",
]
