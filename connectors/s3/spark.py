"""Hadoop S3A settings for Spark from an :class:`~eosink.connectors.s3.S3Connection`.

Spark reaches S3 through Hadoop's ``s3a://`` filesystem (``hadoop-aws``): for a checkpoint location
on S3, or for Spark's own Parquet writer beside eosink. :func:`s3a_options` says the same endpoint,
addressing, region and credentials that the connection says, so both talk to one store the same
way. The returned dict holds the secret key: pass it to Spark, never print or log it.
"""

from __future__ import annotations

from eosink.connectors.s3.config import S3Connection

__all__ = ["s3a_options"]


def s3a_options(connection: S3Connection, *, builder: bool = False) -> dict[str, str]:
    """The ``fs.s3a.*`` settings of ``connection``: for ``spark.conf.set`` on a running session (what its
    DataFrame reads and writes use), or with ``builder=True`` prefixed ``spark.hadoop.`` for
    ``SparkSession.builder.config`` (what every Hadoop filesystem of the application uses, checkpoints too).

    Without explicit credentials S3A's own provider chain applies (environment, ``AWS_PROFILE``, instance role).
    """
    out: dict[str, str] = {"fs.s3a.attempts.maximum": str(connection.max_attempts)}
    if connection.endpoint_url is not None:
        out["fs.s3a.endpoint"] = connection.endpoint_url
        out["fs.s3a.connection.ssl.enabled"] = str(connection.endpoint_url.startswith("https://")).lower()
    out["fs.s3a.path.style.access"] = str(connection.uses_path_style).lower()
    if connection.region is not None:
        out["fs.s3a.endpoint.region"] = connection.region
    if connection.access_key_id is not None and connection.secret_access_key is not None:
        out["fs.s3a.access.key"] = connection.access_key_id
        out["fs.s3a.secret.key"] = connection.secret_access_key
        provider = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        if connection.session_token is not None:
            out["fs.s3a.session.token"] = connection.session_token
            provider = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
        out["fs.s3a.aws.credentials.provider"] = provider
    # Plain milliseconds: Hadoop 3.3 (Spark 3.5) reads these as integers, 3.4 as durations in ms.
    out["fs.s3a.connection.establish.timeout"] = str(int(connection.connect_timeout_s * 1000))
    out["fs.s3a.connection.timeout"] = str(int(connection.read_timeout_s * 1000))
    return {f"spark.hadoop.{k}" if builder else k: v for k, v in out.items()}
