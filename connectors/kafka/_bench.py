"""The benchmark's Kafka adapter: the harness's broker, eosink's KafkaSink, and Spark's own Kafka sink.

Every run writes the data set's rows as JSON records (``to_json(struct(*))`` for Spark's sink,
``value_format="json"`` for eosink) into a topic of its own with one partition per participant.
Baselines: Spark's built-in Kafka sink in foreachBatch (``spark-kafka-sink``; at-least-once:
SPARK-28908 was never merged), with the ``spark-sql-kafka`` jars from
:class:`~eosink.services.spark_jars.SparkJars`; and Kafka's own Java producer benchmark
(``raw-producer``: ``kafka-producer-perf-test``, the ``kafka-tools`` jars from Maven Central) sending
as many records, each a line of the data set's CSV, with ``acks=all``: the broker's ingest limit
for one producer.

``eosink-at-least-once`` is eosink's data path with the exactly-once bookkeeping taken out: the
same ``mapInArrow`` participants, the same Arrow-to-record conversion
(:func:`eosink.connectors.kafka._records.to_records`) and the same bulk encoding into record
batches (:class:`eosink.connectors.kafka._bulk.BulkSender`), sent by a plain idempotent producer
with no transaction, marker, epoch, bundle or commit step.

Variants at 1M rows: eosink's 2pc and Spark's sink with lz4 (``kafka.compression`` against
``kafka.compression.type``), and both with 4 tasks under ``local[4]`` (how each scales, on however
many cores the machine has).

Latency is the local clock at the poll minus the row's ``at`` (broker and job share the machine).

``--topology cluster``: the same runs on a private three-node cluster
(:class:`~eosink.services.kafka_cluster.KafkaCluster`: replication factor 3, ``min.insync.replicas=2``), every
writer with ``acks=all`` (eosink's always; Spark's sink set to it), reached past the cluster's fault proxies.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pyarrow as pa

from eosink.bench.runs import Baseline, BatchFunction, BenchGoals, Pair, RunSpec, generic_runs, run_app_ids
from eosink.errors import ConfigurationError

__all__ = ["KafkaAdapter"]

BOOTSTRAP_ENV = "EOSINK_BENCH_KAFKA_BOOTSTRAP"
PARTITIONS = 2
REPLICAS = {"single": 1, "cluster": 3}
"""The data topics' replication factor per topology."""
VERIFY_S = 1800.0
"""How long reading one partition back may take when checking a run."""
SCALED = {"participants": 4, "master": "local[4]"}
"""The scaling variants: 4 participants (eosink) or 4 tasks (Spark's sink)."""


def _topic(ns: str) -> str:
    return f"eosink_bench_{ns}"


def _progress(ns: str) -> str:
    return f"eosink_bench_{ns}_progress"


def app_id(ns: str) -> str:
    """The app_id of namespace ``ns``'s eosink writer."""
    return f"bench-{ns}"


class _DirectProduce:
    """``mapInArrow`` function of eosink-at-least-once: the partition's rows as records, no transaction."""

    def __init__(self, config: Any) -> None:
        self.config = config

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from eosink.connectors.kafka._bulk import BulkSender
        from eosink.connectors.kafka._producer import open_producer
        from eosink.connectors.kafka._records import to_records

        producer = open_producer(**self.config.producer_kwargs())  # as the sink's participants open theirs
        errors: list[BaseException] = []
        sender = BulkSender(producer, errors.append)
        rows = 0
        try:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                records = to_records(
                    batch,
                    value_format=self.config.value_format,
                    default_topic=self.config.topic,
                    upsert_keys=(),
                    limit=self.config.record_limit,
                    where="at-least-once",
                )
                sender.send(records)
                rows += len(records)
            producer.flush()
            if errors:
                raise errors[0]
            sender.check("at-least-once")
        finally:
            producer.close(timeout=10)
        yield pa.RecordBatch.from_pydict({"rows": [rows]})


class KafkaAdapter:
    """:class:`~eosink.bench.runs.BenchAdapter` for Kafka."""

    name = "kafka"
    worker_modules = ("eosink.connectors.kafka", "kafka")

    fanout_member = True
    """Its target can be checked when written as a fan-out's sink (its rows are counted whatever the app_id)."""

    all_modes: tuple[str, ...] = ("default",)

    def __init__(self, modes: tuple[str, ...] = ("default",), *, topology: str = "single") -> None:
        self.modes = modes
        self.topology = topology
        """``single``: the service harness's broker; ``cluster``: a private three-node cluster
        (:class:`~eosink.services.kafka_cluster.KafkaCluster`), replication factor 3, ``min.insync.replicas=2``."""
        self._cluster: Any = None
        self._started = False
        self._bootstrap: str | None = os.environ.get(BOOTSTRAP_ENV)
        self._admin: Any = None
        self._offsets: dict[str, dict[int, int]] = {}
        self._views: dict[str, Any] = {}
        self._stamped: dict[str, int] = {}  # ns -> the newest batch a poll has returned
        self._keyed: dict[str, bool] = {}

    # -- parent side ------------------------------------------------------------------------------

    def start(self) -> dict[str, Any]:
        from eosink.services._maven import fetch_jars
        from eosink.services.kafka import KAFKA_VERSION
        from eosink.services.spark_jars import SparkJars

        jars = SparkJars()
        fetch_jars(jars.artifacts("kafka"), jars.directory("kafka"), what="Spark's Kafka sink")
        if self.topology == "cluster":
            return self._start_cluster()
        from eosink.services import get_service

        service = get_service("kafka")
        if service.external() is None and service.pid() is None:
            service.up()
            self._started = True
        self._bootstrap = str(service.endpoint().bootstrap_servers)
        return {
            "server_version": KAFKA_VERSION if service.external() is None else "external",
            "settings": {"partitions per topic": PARTITIONS, "replication factor": 1},
            "started_by_bench": self._started,
        }

    def _start_cluster(self) -> dict[str, Any]:
        """A private three-node cluster under the cache, reached past its fault proxies (nothing is failed)."""
        from eosink.services._layout import cache_root
        from eosink.services.kafka import KAFKA_VERSION
        from eosink.services.kafka_cluster import KafkaCluster

        root = cache_root() / "bench" / "kafka-cluster"
        shutil.rmtree(root, ignore_errors=True)
        self._cluster = KafkaCluster(root).start()
        self._bootstrap = self._cluster.direct_bootstrap
        return {
            "server_version": KAFKA_VERSION,
            "settings": {
                "nodes": 3,
                "partitions per topic": PARTITIONS,
                "replication factor": REPLICAS["cluster"],
                "min.insync.replicas": 2,
                "acks": "all",
            },
            "started_by_bench": True,
        }

    def stop(self) -> None:
        self.close()
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None
        if self._started:
            from eosink.services import get_service

            get_service("kafka").down()
            self._started = False

    def child_env(self) -> dict[str, str]:
        return {BOOTSTRAP_ENV: self._require_bootstrap()}

    def goals(self) -> BenchGoals:
        """Spark's Kafka sink at every size (best exactly-once >= 1.0x), the Java producer's limit (shown only),
        the lz4 and 4-task variants against Spark's, and 2pc keeping up with a 1 s trigger at 50,000 rows/s."""
        return BenchGoals(
            baselines=(Baseline("spark-kafka-sink", "spark-kafka", 1.0), Baseline("raw-producer", "raw-producer")),
            vs_at_least_once=(("2pc", 0.9), ("txid-check", 0.85), ("idempotent", 0.85)),
            baselines_at_every_size=True,
            pairs=(
                Pair("eosink-2pc-lz4", "spark-kafka-sink-lz4", 1.0),
                Pair("eosink-2pc-4p", "spark-kafka-sink-4p"),
                Pair("eosink-2pc-4p", "eosink-2pc"),
                Pair("spark-kafka-sink-4p", "spark-kafka-sink"),
            ),
            keeps_up_triggers=2.0,
            trigger_ms=1000,
            rounds=(5, 3),
        )

    def runs(self) -> list[RunSpec]:
        lz4 = {"compression": "lz4"}
        return [
            *generic_runs(self.modes, ()),
            RunSpec("spark-kafka-sink", "spark"),
            RunSpec("raw-producer", "external"),
            RunSpec("eosink-2pc-lz4", "eosink", "2pc", lz4, False, "lz4", target_only=True),
            RunSpec("spark-kafka-sink-lz4", "spark", None, lz4, False, "lz4", target_only=True),
            RunSpec("eosink-2pc-4p", "eosink", "2pc", SCALED, False, "4 participants", target_only=True),
            RunSpec("spark-kafka-sink-4p", "spark", None, SCALED, False, "4 tasks", target_only=True),
        ]

    def prepare(self, ns: str, *, keyed: bool = False) -> None:
        self.admin().create_topics(
            {_topic(ns): {"num_partitions": PARTITIONS, "replication_factor": REPLICAS[self.topology]}},
            wait_for_metadata=True,
        )
        self._keyed[ns] = keyed

    def verify(self, ns: str) -> int:
        """Committed records of ``ns``'s topic: keyed records once per key (a replay rewrites the same keys),
        read and decoded; unkeyed ones counted from the record batches' headers, which a replay or a lost
        batch changes as surely, in a fraction of the time."""
        from eosink.connectors.kafka._wire import await_markers, count_committed
        from eosink.connectors.kafka.testing import by_key, read_topic

        for p in range(PARTITIONS):  # the last commit's markers land just after it returned
            await_markers(self.admin(), _topic(ns), p)
        if self._keyed.get(ns, True):  # decoded in Python: some 100 s for 5M records on a busy machine
            return len(by_key(read_topic(self.admin(), _topic(ns), PARTITIONS, max_wait_s=VERIFY_S)))
        return sum(count_committed(self.admin(), _topic(ns), p) for p in range(PARTITIONS))

    def drop(self, ns: str) -> None:
        from eosink.connectors.kafka.admin import KafkaAdmin

        for app in run_app_ids(app_id(ns), self.name):
            with contextlib.suppress(Exception):
                KafkaAdmin(self.config(ns)).drop_app(app)
        for topic in (_topic(ns), _progress(ns)):
            with contextlib.suppress(Exception):
                self.admin().delete_topics([topic])
        self._offsets.pop(ns, None)
        self._views.pop(ns, None)
        self._stamped.pop(ns, None)
        self._keyed.pop(ns, None)

    def run_external(self, spec: RunSpec, ns: str, dataset: Any) -> float:
        """``raw-producer``: Kafka's ProducerPerformance tool, one producer, every record acknowledged by all."""
        if spec.name != "raw-producer":
            raise ConfigurationError(f"No external run {spec.name!r} for Kafka.", "Use raw-producer.")
        from eosink.services import _jdk
        from eosink.services.kafka import KafkaService

        tools = KafkaService().tools()
        # The tool reads every line of the payload file into memory first: some 300 bytes of heap per line.
        heap_mb = 512 + dataset.rows * 400 // 1_000_000
        argv = [_jdk.java("Kafka's producer benchmark"), f"-Xmx{heap_mb}m", "-cp", f"{tools}{os.sep}*"]
        argv += ["org.apache.kafka.tools.ProducerPerformance", "--topic", _topic(ns)]
        argv += ["--num-records", str(dataset.rows), "--throughput", "-1", "--payload-file", str(dataset.csv)]
        argv += ["--producer-props", f"bootstrap.servers={self._require_bootstrap()}", "acks=all", "linger.ms=5"]
        started = time.monotonic()
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=3600)
        seconds = time.monotonic() - started
        if done.returncode != 0:
            output = (done.stdout + done.stderr).strip().splitlines()
            causes = [line for line in output if "Exception" in line or "Error" in line] or output[-1:] or [""]
            cause = causes[0]
            raise RuntimeError(f"kafka-producer-perf-test failed (exit {done.returncode}): {cause.strip()[:300]}")
        return seconds

    # -- in the Spark job ---------------------------------------------------------------------------

    def spark_conf(self) -> dict[str, str]:
        from eosink.services.spark_jars import SparkJars

        return SparkJars().spark_conf("kafka")

    def config(self, ns: str, compression: Any = "none") -> Any:
        from eosink.connectors.kafka import KafkaConfig

        return KafkaConfig(
            self._require_bootstrap(),
            topic=_topic(ns),
            value_format="json",
            progress_topic=_progress(ns),
            transactional_id_prefix=f"bench-{ns}",
            compression=compression,
        )

    def eosink_sink(self, spec: RunSpec, ns: str) -> Any:
        from eosink.connectors.kafka import KafkaSink

        return KafkaSink(self.config(ns, str(spec.options.get("compression", "none"))))

    def batch_function(self, spec: RunSpec, ns: str, checkpoint: str, participants: int) -> BatchFunction:
        from eosink.bench.session import arrow_task_function, eosink_function

        codec = str(spec.options.get("compression", "none"))
        if spec.kind == "eosink":
            return eosink_function(self.eosink_sink(spec, ns), spec.strategy, app_id(ns), checkpoint, participants)
        if spec.kind == "at-least-once":
            direct = _DirectProduce(self.config(ns, codec))
            return arrow_task_function(lambda batch_id: direct, participants)
        if spec.kind == "spark":
            bootstrap, topic = self._require_bootstrap(), _topic(ns)

            def spark_kafka_sink(df: Any, batch_id: int) -> None:
                out = df.selectExpr("to_json(struct(*)) AS value").write.format("kafka")
                out = out.option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
                out.option("kafka.compression.type", codec).option("kafka.acks", "all").save()

            return spark_kafka_sink
        if spec.kind == "floor":
            from eosink.bench.runner import floor_function

            return floor_function(participants)
        raise ConfigurationError(f"Run {spec.name!r} ({spec.kind}) is not a Spark run.", "Kafka has no external runs.")

    def poll_batch(self, ns: str) -> int | None:
        """The newest batch whose bundle is committed (one read of the progress topic's tail), or None."""
        from eosink.connectors.kafka._progress import ProgressView

        admin = self.admin()
        if _progress(ns) not in set(admin.list_topics()):
            return None
        view = self._views.setdefault(ns, ProgressView(_progress(ns)))
        view.refresh(admin)
        last = view.last(app_id(ns))
        return None if last is None else last.batch.batch_id

    def poll_visible(self, ns: str, after_id: int, warm_from_us: int) -> tuple[list[tuple[int, int]], int, int | None]:
        """Records committed since the last poll, read up to the first open transaction of each partition.

        The newest bundle is read first, and a poll that finds a new one returns at once: the harness
        stamps a batch visible when a poll returns it, and reading the records (decoded here, in Python)
        must not delay that stamp. The records are read by the next poll (their latencies are then late
        by up to one poll interval, never early)."""
        from kafka.errors import UnknownTopicOrPartitionError

        from eosink.connectors.kafka import _wire

        admin = self.admin()
        batch = self.poll_batch(ns)
        if batch is not None and batch > self._stamped.get(ns, -1):
            self._stamped[ns] = batch
            return [], after_id, batch
        offsets = self._offsets.setdefault(ns, dict.fromkeys(range(PARTITIONS), 0))
        now_us = time.time() * 1e6
        buckets: dict[int, int] = {}
        hi = after_id
        for p in range(PARTITIONS):
            try:
                part = _wire.read_log(admin, _topic(ns), p, offsets[p])
            except UnknownTopicOrPartitionError:
                return [], after_id, None
            for r in part.committed:
                row = json.loads(r.value or b"{}")
                rid = int(row.get("id", -1))
                if rid <= after_id:
                    continue
                at_us = datetime.fromisoformat(str(row["at"])).timestamp() * 1e6
                latency = -1 if at_us < warm_from_us else int((now_us - at_us) / 1000)
                buckets[latency] = buckets.get(latency, 0) + 1
                hi = max(hi, rid)
            first_open = min((rs[0].offset for rs in part.open.values() if rs), default=None)
            offsets[p] = part.high_watermark if first_open is None else first_open
        return sorted(buckets.items()), hi, batch

    def scrub(self, text: str) -> str:
        return text  # the harness's broker has no credentials

    def close(self) -> None:
        if self._admin is not None:
            with contextlib.suppress(Exception):
                self._admin.close()
            self._admin = None

    # -- helpers --------------------------------------------------------------------------------------

    def admin(self) -> Any:
        if self._admin is None:
            from kafka import KafkaAdminClient

            self._admin = KafkaAdminClient(bootstrap_servers=self._require_bootstrap(), client_id="eosink-bench")
        return self._admin

    def _require_bootstrap(self) -> str:
        if not self._bootstrap:
            raise ConfigurationError("The benchmark has no Kafka broker yet.", "Call start() first.")
        return self._bootstrap
