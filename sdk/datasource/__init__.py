"""eosink as a Spark data source: ``df.writeStream.format("eosink")``, beside :func:`eosink.foreach_batch`.

Usage::

    import eosink.datasource
    eosink.datasource.register(spark)

    (df.writeStream.format("eosink")
       .option("sink", "postgres")
       .option("app_id", "payments-ledger")
       .option("strategy", "txid-check")
       .option("postgres.conninfo_env", "PG_URL")      # a secret, from the environment
       .option("postgres.table", "public.ledger")
       .option("checkpointLocation", "/chk/payments")
       .start())

The same coordinator, strategies, fencing, recovery and errors as ``foreach_batch``
(:mod:`eosink.datasource._writers` explains how a batch travels through Spark's workers).
Options: :mod:`eosink.datasource._options`. Needs PySpark 4.0 or newer (Python data sources);
2pc is refused here, see docs/datasource.md. ``df.write.format("eosink")`` writes a job as one
batch (option ``batch_id``). Several sinks, ``.option("sink", "postgres,kafka")``, make a fan-out
(:mod:`eosink.fanout`): one pass per batch, exactly once in each, committed in that order.
"""

from __future__ import annotations

from typing import Any

from eosink.datasource._options import CONNECTORS, ParsedOptions, batch_number, options_from_config, parse_options
from eosink.errors import ConfigurationError

__all__ = [
    "CONNECTORS",
    "NAME",
    "EosinkDataSource",
    "ParsedOptions",
    "batch_number",
    "options_from_config",
    "parse_options",
    "register",
]

NAME = "eosink"
"""The format name: ``format("eosink")``."""

try:
    from pyspark.sql.datasource import DataSource as _DataSourceBase

    _AVAILABLE = True
except ImportError:  # pragma: no cover - PySpark 3.5 has no Python data sources
    _DataSourceBase = object  # type: ignore[misc,assignment]
    _AVAILABLE = False


class EosinkDataSource(_DataSourceBase):
    """The ``eosink`` data source (write only); options are parsed, and refused, before anything is written."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        self._options = {str(k): str(v) for k, v in dict(options).items()}

    def __repr__(self) -> str:  # never the options: they may hold secrets
        return f"EosinkDataSource(sink={self._options.get('sink')!r}, app_id={self._options.get('app_id')!r})"

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:
        from eosink.datasource._writers import RowStreamWriter, StreamWriter

        if overwrite:
            raise ConfigurationError(
                "format('eosink') appends: the complete output mode would rewrite the sink every batch.",
                "Use outputMode('append') or 'update'.",
            )
        parsed = parse_options(self._options, streaming=True)
        return (StreamWriter if parsed.arrow else RowStreamWriter)(parsed, schema)

    def writer(self, schema: Any, overwrite: bool) -> Any:
        from eosink.datasource._writers import JobWriter, RowJobWriter

        if overwrite:
            raise ConfigurationError(
                "format('eosink') appends: mode('overwrite') would replace what earlier batches wrote.",
                "Use mode('append'): a rerun of the same (app_id, batch_id) is recognised and skipped.",
            )
        parsed = parse_options(self._options, streaming=False)
        return (JobWriter if parsed.arrow else RowJobWriter)(parsed, schema)


def register(spark: Any) -> None:
    """Register ``format("eosink")`` with ``spark`` (a SparkSession, classic or Spark Connect)."""
    registration = getattr(spark, "dataSource", None)
    if registration is None or not _AVAILABLE:
        import pyspark

        raise ConfigurationError(
            f"PySpark {pyspark.__version__} has no Python data sources, which format('eosink') needs.",
            "Use PySpark 4.0 or newer, or eosink.foreach_batch, which works from PySpark 3.5.",
        )
    registration.register(EosinkDataSource)
