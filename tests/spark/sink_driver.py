"""A Spark streaming driver writing into a production sink through eosink (the sinks' kill-and-restart tests).

The same job as ``eosink.demo.job_main`` (JSON files, one per micro-batch, ``availableNow``,
``spark.driver.maxResultSize=1m``, fault points from ``EOSINK_FAULTS``), with a real sink instead
of the reference sink:

* ``--sink postgres``: :class:`~eosink.connectors.postgres.PostgresSink` into table ``--target``,
  control schema ``--namespace``; the URL from ``EOSINK_TEST_PG_URL``;
* ``--sink kafka``: :class:`~eosink.connectors.kafka.KafkaSink` into topic ``--target`` (JSON
  values), progress topic and transactional-id prefix ``--namespace``; the brokers from
  ``EOSINK_TEST_KAFKA_BOOTSTRAP``;
* ``--sink s3``: :class:`~eosink.connectors.s3.S3Sink` writing Parquet objects under prefix
  ``--target`` of bucket ``EOSINK_TEST_S3_BUCKET``; the store from ``EOSINK_S3_ENDPOINT`` and its keys.
  An ``s3a://`` checkpoint location loads Spark's ``s3`` jars and points S3A at the same store.
* ``--sink hdfs``: :class:`~eosink.connectors.hdfs.HdfsSink` writing Parquet files into directory
  ``--target`` of the file system ``EOSINK_HDFS_URL``. An ``hdfs://`` checkpoint location needs
  nothing more: Spark's own Hadoop client reads it, eosink reads it through hdfs-native.
* ``--sink delta``: :class:`~eosink.connectors.delta.DeltaSink` into the Delta table
  ``s3://$EOSINK_TEST_S3_BUCKET/<target>`` (the store from ``EOSINK_S3_*``), created from the stream's schema;
  a ``--target`` that is an ``hdfs://`` URI names the table itself.
* ``--sink postgres+kafka`` (any ``+``-joined list): a fan-out (:mod:`eosink.fanout`) into each of them, each
  configured as above with the same ``--target`` and ``--namespace``, committed in the order given; its
  sinks are named after their kind (app_ids ``<app-id>.postgres``, ``<app-id>.kafka``).

A negative control swaps a sink class for a deliberately broken subclass of it from this folder:
``EOSINK_TEST_SINK_CLASS=pg_mutants:XidTrustingPostgresSink`` (PostgreSQL) or
``kafka_mutants:LeftoverKeepingKafkaSink`` (Kafka). Each pickles as its parent, so executors never import it.

Connection settings never come from argv (a URL may hold a password). Two queries:

* ``rows``: every input row appended (or, idempotent, upserted by a generated or given key);
* ``balance`` (PostgreSQL): a running balance per account (``groupBy(account).sum(amount)``,
  update mode), upserted by ``account``.

``--way datasource`` writes through ``format("eosink")`` with the same sink and strategy instead; ``--way start``
through ``foreachBatch`` started by ``writer.start(...)``, which checks the sink and the checkpoint before Spark
starts the query.

Exit codes: 0 done, 3 an eosink error (``EOSINK-ERROR <kind>: ...`` on stderr).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from eosink.demo import SCHEMA, job_session

_S = TypeVar("_S")

EXIT_EOSINK_ERROR = 3


def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="sink_driver", description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--sink", default="postgres", help="postgres, kafka, s3, hdfs or delta, or several joined by +")
    ap.add_argument("--input", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--target", required=True, help="the table, topic, prefix or directory")
    ap.add_argument(
        "--namespace", required=True, help="the control schema, or the progress topic and txn-id prefix (not S3's)"
    )
    ap.add_argument("--app-id", required=True)
    ap.add_argument("--strategy", default="2pc")
    ap.add_argument("--key-columns", default="", help="comma-separated user keys for the idempotent strategy")
    ap.add_argument("--query", choices=["rows", "balance"], default="rows")
    ap.add_argument("--master", default="local[2,4]")
    ap.add_argument("--participants", type=int, default=3)
    ap.add_argument("--stats-out")
    ap.add_argument("--txn-timeout-ms", type=int, default=900_000, help="KafkaConfig.transaction_timeout_ms")
    ap.add_argument(
        "--way",
        choices=["foreach_batch", "start", "datasource"],
        default="foreach_batch",
        help="start: foreach_batch through writer.start(...) (its checks before Spark starts); or format('eosink')",
    )
    ap.add_argument("--transient-timeout-s", type=float, help="CommitPolicy.transient_timeout_s (eosink's default)")
    ap.add_argument(
        "--until-signal",
        action="store_true",
        help="foreach_batch: a 500 ms trigger, waited for by query.run() until SIGINT / SIGTERM stops it cleanly",
    )
    ap.add_argument(
        "--ride-out", action="store_true", help="Spark's own S3A and HDFS clients retry an unreachable store for ~2 min"
    )
    return ap.parse_args(argv)


RIDE_OUT = {
    # S3A (the checkpoint on s3a://): connection failures retried with a proportional sleep, 1 s, 2 s, ...
    "fs.s3a.retry.limit": "15",
    "fs.s3a.retry.interval": "1s",
    "fs.s3a.attempts.maximum": "3",
    # HDFS (the checkpoint on hdfs://): a refused NameNode connection retried every second for 2 minutes, and a
    # call to a NameNode without HA that failed (it went away mid-call) retried too: every 2 s, 60 times
    "ipc.client.connect.max.retries": "120",
    "ipc.client.connect.retry.interval": "1000",
    "dfs.client.retry.policy.enabled": "true",
    "dfs.client.retry.policy.spec": "2000,60",
}
"""What a user sets so that Spark's own checkpoint clients ride out a store restarting (docs/operations.md)."""


def _datasource_options(args: argparse.Namespace, sinks: dict[str, Any]) -> dict[str, str]:
    """The format("eosink") options of the same sink (or fan-out, ``sink=postgres,kafka``) and strategy
    (connection secrets named by variable)."""
    from eosink.datasource import options_from_config

    secrets = {
        "postgres": {"conninfo": "EOSINK_TEST_PG_URL"},
        "s3": {"secret_access_key": "EOSINK_S3_SECRET_KEY"},
        "delta": {"secret_access_key": "EOSINK_S3_SECRET_KEY"},
    }
    options = {"sink": ",".join(sinks), "app_id": args.app_id, "strategy": args.strategy}
    if args.key_columns:
        options.update(strategy="idempotent", key_columns=args.key_columns)
    for kind, sink in sinks.items():
        options.update(options_from_config(kind, sink.config, from_env=secrets.get(kind)))
    return options


KINDS = ("postgres", "kafka", "s3", "hdfs", "delta")


def _sinks(args: argparse.Namespace) -> dict[str, Any]:
    kinds = args.sink.split("+")
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise SystemExit(f"sink_driver: unknown sink {unknown} (one of {KINDS}, or several joined by +)")
    return {kind: _sink(args, kind) for kind in kinds}


def _sink(args: argparse.Namespace, kind: str) -> Any:
    if kind == "delta":
        from eosink.connectors.delta import DeltaConfig, DeltaSink

        if args.target.startswith("hdfs://"):
            return DeltaSink(DeltaConfig(args.target))
        return DeltaSink(DeltaConfig(f"s3://{os.environ['EOSINK_TEST_S3_BUCKET']}/{args.target}"))
    if kind == "hdfs":
        from eosink.connectors.hdfs import HdfsConfig, HdfsSink

        return HdfsSink(HdfsConfig(f"{os.environ['EOSINK_HDFS_URL'].rstrip('/')}/{args.target.lstrip('/')}"))
    if kind == "s3":
        from eosink.connectors.s3 import S3Config, S3Sink

        return S3Sink(S3Config.from_env(os.environ["EOSINK_TEST_S3_BUCKET"], args.target, part_size_bytes=5 << 20))
    if kind == "kafka":
        from eosink.connectors.kafka import KafkaConfig, KafkaSink

        bootstrap = os.environ["EOSINK_TEST_KAFKA_BOOTSTRAP"]
        return _sink_class(KafkaSink)(
            KafkaConfig(
                bootstrap,
                topic=args.target,
                value_format="json",
                progress_topic=f"{args.namespace}_progress",
                transactional_id_prefix=args.namespace,
                transaction_timeout_ms=args.txn_timeout_ms,
                # TLS and SASL settings (with the password) come through the environment, never argv
                producer_options=json.loads(os.environ.get("EOSINK_TEST_KAFKA_OPTIONS") or "{}"),
            )
        )
    from eosink.connectors.postgres import PostgresConfig, PostgresSink

    config = PostgresConfig(
        os.environ["EOSINK_TEST_PG_URL"], args.target, control_schema=args.namespace, create_table=True
    )
    if args.query == "balance":
        config = replace(config, mode="upsert", key_columns=("account",))
    return _sink_class(PostgresSink)(config)


def _sink_class(default: type[_S]) -> type[_S]:
    """``default``, or the deliberately broken subclass of it that ``EOSINK_TEST_SINK_CLASS`` names
    (``module:Class``, a module of this folder): a negative control."""
    mutant = os.environ.get("EOSINK_TEST_SINK_CLASS")
    if not mutant:
        return default
    module, name = mutant.split(":")
    found = getattr(importlib.import_module(module), name)
    if not (isinstance(found, type) and issubclass(found, default)):
        raise SystemExit(f"EOSINK_TEST_SINK_CLASS={mutant} is not a {default.__name__}")
    return found


def _scrub(sinks: dict[str, Any]) -> Any:
    """Every sink's secrets scrubbed from a text."""

    def scrub(text: str) -> str:
        for sink in sinks.values():
            text = sink.config.scrub(text)
        return str(text)

    return scrub


def main(argv: Sequence[str] | None = None) -> int:
    args = _args(argv)
    from eosink.faults import export_crash_scope

    export_crash_scope()  # a fault point that fires in an executor crashes this whole driver
    on_s3 = args.checkpoint.startswith("s3a://")
    if on_s3:
        from eosink.services.spark_jars import SparkJars, class_path_submit_args

        os.environ["PYSPARK_SUBMIT_ARGS"] = class_path_submit_args(SparkJars().spark_conf("s3")["spark.jars"])
    from pyspark.sql import functions as F

    import eosink
    from eosink._procs import error_line
    from eosink.coordinator import CommitPolicy

    spark = job_session(args.master, f"eosink-{args.sink}-test")
    if on_s3:  # the session's Hadoop settings: what the checkpoint's file manager uses
        from eosink.connectors.s3 import S3Connection
        from eosink.connectors.s3.spark import s3a_options

        for key, value in s3a_options(S3Connection.from_env()).items():
            spark.conf.set(key, value)
    if args.ride_out:
        for key, value in RIDE_OUT.items():
            spark.conf.set(key, value)
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(args.input)
    output_mode = "append"
    if args.query == "balance":
        df = df.groupBy("account").agg(F.sum("amount").alias("balance"))
        output_mode = "update"
    sinks = _sinks(args)
    sink = next(iter(sinks.values()))
    keys = [k for k in args.key_columns.split(",") if k]
    query = df.writeStream.outputMode(output_mode).option("checkpointLocation", args.checkpoint)
    writer: eosink.BatchWriter | eosink.FanOutWriter | None = None
    if args.way == "datasource":
        query = query.format("eosink").options(**_datasource_options(args, sinks))
        eosink.spark.register(spark)
    else:
        writer = eosink.foreach_batch(
            sink if len(sinks) == 1 else sinks,
            app_id=args.app_id,
            strategy=eosink.Idempotent(keys) if keys else args.strategy,
            checkpoint_location=args.checkpoint,
            participants=args.participants,
            policy=CommitPolicy(transient_timeout_s=args.transient_timeout_s) if args.transient_timeout_s else None,
        )
        query = query.foreachBatch(writer)
    try:
        if writer is None:  # named and started with a path, as most streams are: Spark passes both as options
            query = query.queryName(f"eosink-{args.app_id}")
            query.trigger(availableNow=True).start(str(Path(args.checkpoint).parent / "unused-path")).awaitTermination()
        elif args.way == "start":
            writer.start(query.trigger(availableNow=True)).run()  # checks, starts, waits, closes the writer
        elif args.until_signal and writer is not None:
            print("EOSINK-RUNNING", flush=True)
            writer.start(query.trigger(processingTime="500 milliseconds")).run()  # stops, then closes the writer
        else:
            query.trigger(availableNow=True).start().awaitTermination()
        if writer is not None:
            writer.close()
    except Exception as exc:
        print(error_line(exc, _scrub(sinks)), file=sys.stderr, flush=True)
        spark.stop()
        return EXIT_EOSINK_ERROR
    if args.stats_out and writer is not None:
        stats = writer.stats
        doc = {n: s.to_json() for n, s in stats.items()} if isinstance(stats, dict) else stats.to_json()
        Path(args.stats_out).write_text(json.dumps(doc))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
