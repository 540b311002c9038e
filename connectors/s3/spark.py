"""Hadoop S3A settings for Spark from an :class:`~eosink.connectors.s3.S3Connection`
(:func:`eosink.stores.s3.s3a_options`, kept here for the S3 sink's users).

Spark reaches S3 through Hadoop's ``s3a://`` filesystem (``hadoop-aws``): for a checkpoint location
on S3, or for Spark's own Parquet writer beside eosink. :func:`s3a_options` says the same endpoint,
addressing, region and credentials that the connection says, so both talk to one store the same
way. The returned dict holds the secret key: pass it to Spark, never print or log it.
"""

from __future__ import annotations

from eosink.stores.s3 import s3a_options

__all__ = ["s3a_options"]
