# eosink developer commands. `make test` is what CI runs; it installs everything it needs.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
export SPARK_LOCAL_IP := 127.0.0.1
export EOSINK_CACHE := $(CURDIR)/.cache
export NO_MKDOCS_2_WARNING := 1
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))
PYTEST := $(PY) -m pytest -p no:cacheprovider
SOURCES := $(shell find sdk connectors contracts -name '*.py' 2>/dev/null) pyproject.toml setup.py constraints.txt
STAMP := $(VENV)/.eosink-installed
EOSINK := $(VENV)/bin/eosink
# Runs a test command between `services up` + `services check` and `services down`, whatever its result.
WITH_SERVICES = $(EOSINK) services up && $(EOSINK) services check && $(1); rc=$$?; $(EOSINK) services down; exit $$rc
COMMA := ,
# The same for PostgreSQL alone.
WITH_POSTGRES = $(EOSINK) services up postgres && $(EOSINK) services check postgres && $(1); rc=$$?; \
	$(EOSINK) services down postgres; exit $$rc
# The same for the replicated PostgreSQL (a primary, a synchronous and an asynchronous standby, and their supervisor).
WITH_REPLICATED = $(EOSINK) services up postgres-replicated && $(EOSINK) services check postgres-replicated && $(1); \
	rc=$$?; $(EOSINK) services down postgres-replicated; exit $$rc
# The same for MinIO alone.
WITH_MINIO = $(EOSINK) services up minio && $(EOSINK) services check minio && $(1); rc=$$?; \
	$(EOSINK) services down minio; exit $$rc
# The same for HDFS alone.
WITH_HDFS = $(EOSINK) services up hdfs && $(EOSINK) services check hdfs && $(1); rc=$$?; \
	$(EOSINK) services down hdfs; exit $$rc
# The same for Kafka alone.
WITH_KAFKA = $(EOSINK) services up kafka && $(EOSINK) services check kafka && $(1); rc=$$?; \
	$(EOSINK) services down kafka; exit $$rc
# Every sink a Spark test writes into (the quick Spark tests of local-cluster and the PySpark matrix, the examples).
WITH_SPARK_SERVICES = $(EOSINK) services up postgres kafka minio hdfs && \
	$(EOSINK) services check postgres kafka minio hdfs && \
	$(1); rc=$$?; $(EOSINK) services down postgres kafka minio hdfs; exit $$rc
# The same for MinIO and HDFS (Delta tables on both).
WITH_MINIO_HDFS = $(EOSINK) services up minio hdfs && $(EOSINK) services check minio hdfs && $(1); rc=$$?; \
	$(EOSINK) services down minio hdfs; exit $$rc
# The same for PostgreSQL and Kafka.
WITH_PG_KAFKA = $(EOSINK) services up postgres kafka && $(EOSINK) services check postgres kafka && $(1); rc=$$?; \
	$(EOSINK) services down postgres kafka; exit $$rc
# The same for Kafka and MinIO.
WITH_KAFKA_MINIO = $(EOSINK) services up kafka minio && $(EOSINK) services check kafka minio && $(1); rc=$$?; \
	$(EOSINK) services down kafka minio; exit $$rc

.PHONY: help venv java tools lint unit package docs contracts postgres15 test-postgres test-postgres-replicated test-postgres-replicated-full test-kafka test-s3 test-hdfs test-delta test-fanout test-fanout-full test-secured test-secured-full spark services services-up services-check services-down \
	services-status test test-full demo demo-kafka demo-fanout demo-s3 demo-hdfs demo-delta bench clean chaos chaos-quick examples example-files example-kafka \
	example-files-to-kafka example-kafka-to-kafka example-fanout example-files-to-s3 example-kafka-to-s3 example-files-to-hdfs example-files-to-delta \
	spark-full local-cluster test-postgres-full test-kafka-full test-kafka-cluster test-hdfs-ha test-minio-cluster test-spark-cluster test-s3-full test-hdfs-full test-delta-full chaos-full examples-full services-full spark-matrix spark-on

help:
	@echo "make demo [ARGS=...]   the exactly-once demo: Spark into an embedded PostgreSQL, crashed, eosink vs plain"
	@echo "make demo-kafka        the same into a private Kafka broker, eosink vs Spark's own Kafka sink"
	@echo "make demo-s3           the same into a private MinIO (S3), eosink vs Spark's Parquet writer on s3a://"
	@echo "make demo-hdfs         the same into a private HDFS (MiniDFSCluster), eosink vs Spark's Parquet writer"
	@echo "make demo-delta        the same into Delta tables on a private MinIO, eosink vs delta-spark's writer"
	@echo "make demo-fanout       the same into PostgreSQL and Kafka at once (one query), crashed between the two"
	@echo "make test       what CI runs, in timed stages (table at the end, build/test-times.json); <= 40 min cold"
	@echo "make test-full  every fault point x strategy x sink, local-cluster, the PySpark matrix, chaos; <= 3 h"
	@echo "make lint       ruff + mypy --strict"
	@echo "make unit       protocol-level unit tests (no Spark)"
	@echo "make package    build wheel + sdist, install into a clean venv, import, type-check"
	@echo "make docs       mkdocs build --strict into build/site"
	@echo "make spark      what only real Spark shows (executor kill, task retry, zombie, divergence, typed errors), the demo"
	@echo "make test-SINK  one sink: contract suite, connector tests, a Spark kill-and-restart per strategy"
	@echo "                (SINK: $(SINKS))"
	@echo "make services-up | services-check | services-down   the real servers (PostgreSQL, Kafka, HDFS, MinIO)"
	@echo "                [SERVICES='kafka-cluster postgres-replicated ...']  the named ones only (eosink services --help)"
	@echo "                (SECURE=1: their secured variants: TLS, authentication, least-privileged writers)"
	@echo "make test-postgres-replicated   PostgreSQL on a primary and two standbys failed over mid-commit"
	@echo "make test-kafka-cluster   Kafka on three nodes: leaders and coordinators killed, paused, requests held (test-full)"
	@echo "make test-hdfs-ha         HDFS with two NameNodes (ns1): the active one killed at each step of a commit (test-full)"
	@echo "make test-minio-cluster   S3 and Delta on four MinIO nodes: a node or a reply lost at the commit's requests (test-full)"
	@echo "make test-spark-cluster   pipelines on a standalone Spark cluster: lost executors and workers, speculation (test-full)"
	@echo "make test-fanout    one query into PostgreSQL and Kafka: a Spark kill between the sinks' commits"
	@echo "make test-secured   every sink on its secured server as the least-privileged writer (grants, TLS, credentials)"
	@echo "make services   the service harness's own tests against the real servers (starts and stops them)"
	@echo "make spark-matrix   the quick Spark tests on PySpark $(MATRIX) (part of test-full)"
	@echo "make contracts  the contract suite on the reference sink, its mutants, the rendered connector template"
	@echo "make examples   every example once against real PostgreSQL, Kafka and MinIO (also: make example-files, example-kafka,"
	@echo "                example-files-to-kafka, example-kafka-to-kafka, example-files-to-s3, example-kafka-to-s3,"
	@echo "                example-files-to-hdfs, example-files-to-delta, example-fanout)"
	@echo "make chaos SINK=postgres SCHEDULES=N [SEED=S] [JOBS=J] [TOPOLOGY=replicated|cluster|ha]   the end-to-end chaos harness"
	@echo "                -> results/chaos-SINK.json (results/chaos-SINK-TOPOLOGY.json; replicated: PostgreSQL, cluster: Kafka, S3, Delta; ha: HDFS)"
	@echo "make chaos-quick   the chaos harness's quick mode (1 schedule per strategy, baseline, non-deterministic)"
	@echo "make bench SINK=postgres [ROWS=N] [QUICK=1] [TOPOLOGY=cluster|ha]   eosink vs Spark's built-in writers"
	@echo "                -> results/bench-<sink>.* (TOPOLOGY=cluster: Kafka on three nodes, S3 on four; ha: HDFS; bench-<sink>-<topology>.*)"

venv: $(STAMP)

# Strict editable install of eosink with extras $(1): a link tree under build/ that mypy and Spark's Python workers can see.
define install
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 10), "eosink needs Python >= 3.10"'
	@$(PYTHON) -c 'import shutil; free = shutil.disk_usage(".").free / 2**30; free < 10 and print(f"warning: {free:.1f} GiB \
	free here; a clean install and test run takes about 10 GiB (PySpark built from source, servers, jars)")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip uv
	$(VENV)/bin/uv pip install --python $(PY) -q -c constraints.txt -e '.[$(1)]' --config-settings editable_mode=strict
	@# PySpark ships as an sdist of about 400 MB that uv rebuilds into a new 1.4 GB cache entry whenever the
	@# index's response is stale; dropping the superseded entries keeps repeated clean installs from filling the disk.
	@$(VENV)/bin/uv cache prune -q || echo "note: uv cache prune failed; uv's cache keeps its superseded entries"
	@touch $@
endef

# Everything: `make test` and the rest.
$(STAMP): $(SOURCES)
	$(call install,dev)

# `make demo` needs only eosink[demo] (Spark, the PostgreSQL connector, embedded PostgreSQL, rich).
DEMO_STAMP := $(VENV)/.eosink-demo-installed
$(DEMO_STAMP): $(SOURCES)
	$(call install,demo)

java:
	@scripts/ensure-java.sh

tools: java
	@scripts/ensure-tools.sh

lint: venv
	$(VENV)/bin/ruff check sdk connectors contracts tests examples
	$(VENV)/bin/ruff format --check sdk connectors contracts tests examples
	$(VENV)/bin/mypy -p eosink

unit: venv
	$(PYTEST) tests/unit tests/bench tests/chaos -q -m "not spark" --durations=15

package: venv
	$(PY) tests/packaging/check_dist.py

docs: venv
	$(VENV)/bin/mkdocs build --strict -q -d build/site

# What only a real Spark shows, on the reference sink (no server), and the demo's 2pc run.
# Two drivers at a time: a driver spends much of its run starting its JVM and waiting on its own processes.
spark: venv java
	@$(TOGETHER) "$(PYTEST) tests/spark/test_kill_restart.py -q -m 'not full' --durations=10" \
		"$(PYTEST) tests/spark/test_datasource.py tests/spark/test_demo.py -q -m 'not full' --durations=10"

# -- one pattern per sink: make test-SINK runs its contract suite and connector tests and a Spark
# kill-and-restart per strategy (docs/testing.md); make test runs it for every sink. test-SINK-full adds the
# rest, and the sink's chaos schedule. The connector tests mostly wait on the server's round trips, the Spark
# tests mostly compute: $(call SINK_TESTS,sink,connector test options) runs them at the same time, in four
# processes: the contract suite (test_SINK_contract.py) in two, the other connector tests, the Spark
# kill-and-restart (a Spark process waits much of its time on its driver's JVM starting and on its own restarts).
SINKS := postgres kafka s3 hdfs delta
TOGETHER = $(PYTHON) scripts/together.py
# Command $(1) as two processes run together, one given -k '$(2)($(3))', the other -k '$(2)not ($(3))':
# a split by test name, for selections too short or uneven for --shard's every-N-th dealing.
TOGETHER_K = $(TOGETHER) "$(1) -k '$(2)($(3))'" "$(1) -k '$(2)not ($(3))'"
SINK_SPARK = "$(PYTEST) tests/spark/test_$(1)_pipeline.py -q -m 'not full' --durations=10"
# A sink's chaos schedule (five faults under 2pc, against a private server): in test-SINK-full. It took 3:20 to 4:00
# beside each make test stage's other processes, and proves again in combination what the stage's kill tests and
# contract suite prove one by one.
SINK_CHAOS = "$(PYTEST) tests/chaos/test_chaos_quick.py -q -m 'not full' -k $(1) --durations=5"
# The contract suite itself in two processes: its crash cases (the walks and the fault points) and random schedules
# in one, its other cases (those on the fault proxy among them: Kafka's is at a fixed port) in the other.
SINK_SUITE = tests/connectors/$(1)/test_$(1)_contract.py
SUITE_CRASHES := test_crash_at or test_random_schedules
SINK_TESTS = $(TOGETHER) "$(PYTEST) $(SINK_SUITE) -q -m 'not full' $(2) -k '$(SUITE_CRASHES)' --durations=10" \
	"$(PYTEST) $(SINK_SUITE) -q -m 'not full' $(2) -k 'not ($(SUITE_CRASHES))' --durations=10" \
	"$(PYTEST) tests/connectors/$(1) -q -m 'not full' $(2) --ignore=$(SINK_SUITE) --durations=10" $(call SINK_SPARK,$(1))
# The same with the connector tests in one process, for a sink whose tests use up a shared server's resource (the
# PostgreSQL tests fill its prepared-transaction slots, which the contract suite's walks need).
SINK_TESTS_ONE = $(TOGETHER) "$(PYTEST) tests/connectors/$(1) -q -m 'not full' $(2) --durations=10" $(call SINK_SPARK,$(1))
# The secured servers' Spark tests run in test-secured(-full), which starts those servers.
# A sink's pipelines (tests/spark/test_SINK_pipeline.py); those into a cluster of the sink's own (Kafka's three
# nodes) run in test-SINK-cluster.
SINK_PIPELINES = tests/spark/test_$(1)_pipeline.py
SPARK_PIPELINES = $(foreach s,$(SINKS),$(call SINK_PIPELINES,$(s))) tests/spark/test_secured_pipelines.py \
	tests/spark/test_fanout_pipeline.py tests/spark/test_postgres_replicated.py tests/spark/test_kafka_cluster_pipeline.py \
	tests/spark/test_hdfs_ha_pipeline.py tests/spark/test_minio_cluster_pipeline.py tests/spark/test_spark_cluster.py
# The quick Spark tests (tests/spark -m "not full or matrix", $(2) passed on) with Python $(1), in two pytest
# processes run together: local-cluster and the PySpark matrix. Of the sinks' pipelines only the 2pc kill
# (its checkpoint on S3 and HDFS; marked matrix where make test runs another kill): what the Spark version and the executors' layout touch is the executors'
# Arrow writes and the checkpoint, the same for every strategy, while a sink's txid-check and idempotent
# commits are driver-side Python; the reference sink's quick tests all run. The two processes are dealt by
# file (the demo and the reference sink's kills in one, the data source and the sinks' pipelines in the
# other), not by --shard: a dozen tests of unlike lengths dealt every second one left one process waiting
# on the other for 1-3 minutes.
QUICK_K := not (_pipeline and (txid or idempotent)) and not test_secured_pipelines and not test_postgres_replicated \
	and not test_spark_cluster
QUICK_SPLIT := test_demo or test_kill_restart
QUICK_SPARK = $(call TOGETHER_K,$(1) -m pytest -p no:cacheprovider tests/spark -q -m 'not full or matrix' --durations=5 $(2),\
	($(QUICK_K)) and ,$(QUICK_SPLIT))
# test-SINK-full: every test of the sink, the connector tests (and $(2)) beside the Spark pipelines, which
# are dealt to two pytest processes (--shard). $(3), if given, selects (-k) contract suite classes that send
# much the same requests as the sink's main one in another layout (JSON lines, Hive partitions beside plain
# Parquet): they run at make test's strength (8 random schedules, crash walks at every 4th step) in a
# process of their own, while the main class runs whole (60 schedules, a crash at every step).
LIGHT_CONTRACT = --eosink-contract-examples=8 --eosink-crash-stride=4
# Kafka's lighter still: every step of the suite is a broker round trip.
KAFKA_CONTRACT = --eosink-contract-examples=4 --eosink-crash-stride=8
SINK_FULL_TESTS = $(TOGETHER) "$(PYTEST) tests/connectors/$(1) $(2) -q --durations=10 $(if $(3),-k 'not ($(3))')" \
	$(if $(3),"$(PYTEST) tests/connectors/$(1) -q --durations=5 -k '$(3)' $(LIGHT_CONTRACT)") \
	$(foreach k,0 1,"$(PYTEST) $(call SINK_PIPELINES,$(1)) -q --durations=10 --shard=$(k)/2") $(call SINK_CHAOS,$(1))
# The replicated server's tests run in test-postgres-replicated(-full), which starts that server.
PG_PLAIN := --ignore=tests/connectors/postgres/test_postgres_replicated.py
# make test's Spark-cluster scenario (a standalone master and two workers: a speculative copy beats a prepared
# straggler into PostgreSQL under 2pc) runs after the PostgreSQL pipelines, in their process.
SPARK_CLUSTER_QUICK := tests/spark/test_spark_cluster.py
test-postgres: venv java
	@$(call WITH_POSTGRES,$(TOGETHER) "$(PYTEST) tests/connectors/postgres -q -m 'not full' $(PG_PLAIN) --durations=10" \
		"$(PYTEST) $(call SINK_PIPELINES,postgres) $(SPARK_CLUSTER_QUICK) -q -m 'not full' --durations=10")

# PostgreSQL on a primary with a synchronous and an asynchronous standby that fail over (docs/connectors/postgres.md):
# make test: the contract suite's failover cases and the connector's failover tests against the postgres-replicated
# service, beside the Spark queries failed over at their batch's commit (the reply lost, an asynchronous standby
# promoted; 2pc and txid-check) and the harness's own tests of the cluster (each on a private cluster of its own).
# test-postgres-replicated-full: the whole suite on the cluster, and every step of the commit x strategy x mode,
# the dropped batch and its rewind, split brain and the negative control under Spark.
REPLICATED_SUITE := -k 'failover or not TestReplicatedPostgresContract'
test-postgres-replicated: venv java
	@$(call WITH_REPLICATED,$(TOGETHER) \
		"$(PYTEST) tests/connectors/postgres/test_postgres_replicated.py tests/services/test_postgres_cluster.py -q \
			-m 'not full' $(REPLICATED_SUITE) --durations=10" \
		"$(PYTEST) tests/spark/test_postgres_replicated.py -q -m 'not full' --durations=10")

test-postgres-replicated-full: venv java
	@$(call WITH_REPLICATED,$(TOGETHER) \
		"$(PYTEST) tests/connectors/postgres/test_postgres_replicated.py tests/services/test_postgres_cluster.py -q \
			$(LIGHT_CONTRACT) --durations=10" \
		$(foreach k,0 1,"$(PYTEST) tests/spark/test_postgres_replicated.py -q --durations=10 --shard=$(k)/2"))

# The long-history tests (tests/connectors/*/test_*_history.py): 2,000 batches of synthetic history in make test,
# 100,000 in test-SINK-full.
$(foreach s,$(SINKS),test-$(s)-full): export EOSINK_HISTORY_BATCHES := 100000

test-postgres-full: venv java
	@$(call WITH_POSTGRES,$(call SINK_FULL_TESTS,postgres,tests/bench/test_quick_run.py $(PG_PLAIN)))

# Kafka: every step is a broker round trip, so make test draws 4 random schedules and crashes the
# walks at every 8th step; test-kafka-full runs the whole suite (60 schedules, every step) and every
# fault point x strategy under Spark, and the chaos schedule (against a private broker of its own).
# As one process Kafka's connector tests took 5:30 in make test, the Spark half 3:18; its contract suite alone 4:15.
test-kafka: venv java
	@$(call WITH_KAFKA,$(call SINK_TESTS,kafka,$(KAFKA_CONTRACT)))

test-kafka-full: venv java
	@$(call WITH_KAFKA,$(call SINK_FULL_TESTS,kafka,--ignore=$(KAFKA_CLUSTER_FAULTS)))

# The three-node Kafka cluster (eosink.services.kafka_cluster; each test module starts one of its own, so no shared
# server): the harness's own tests; EndTxn and Produce requests held past their timeouts, EndTxn replies lost, and
# the independent read_committed reader's negative controls; Spark pipelines through leader and coordinator
# failures. One module at a time: three brokers beside Spark fill the two cores. Part of test-full.
KAFKA_CLUSTER_FAULTS := tests/connectors/kafka/test_kafka_cluster_faults.py
KAFKA_CLUSTER_TESTS := tests/services/test_kafka_cluster.py $(KAFKA_CLUSTER_FAULTS) tests/spark/test_kafka_cluster_pipeline.py
test-kafka-cluster: venv java tools
	@$(PYTEST) $(KAFKA_CLUSTER_TESTS) -q --durations=10

# A standalone Spark cluster (a master, two one-core workers; sdk/services/spark_standalone.py): its own faults
# (tests/services/test_spark_standalone.py), and pipelines on it into each sink under 2pc and txid-check: a
# speculative copy beating a prepared straggler, an executor or a worker SIGKILLed or a worker decommissioned
# mid-write, the driver SIGKILLed and restarted with its checkpoint on HDFS. Part of test-full.
SPARK_CLUSTER_SERVICES := postgres kafka minio hdfs
test-spark-cluster: venv java tools
	@$(EOSINK) services up $(SPARK_CLUSTER_SERVICES) && $(EOSINK) services check $(SPARK_CLUSTER_SERVICES) && \
		$(PYTEST) tests/services/test_spark_standalone.py $(SPARK_CLUSTER_QUICK) -q --durations=10; rc=$$?; \
		$(EOSINK) services down $(SPARK_CLUSTER_SERVICES); exit $$rc

# S3 and Delta on a private four-node MinIO: Spark pipelines (checkpoint on s3a:// through the balancer) whose
# commit loses a node, or a reply, at CompleteMultipartUpload, the commit marker's PUT or the Delta log entry's PUT,
# under each strategy; S3 read with pyarrow, Delta with DuckDB; and the S3 sink's own cluster cases (recovery
# through a node that was down when an upload was created). Part of test-full.
test-minio-cluster: venv java tools
	@$(PYTEST) tests/connectors/s3/test_s3_cluster.py tests/spark/test_minio_cluster_pipeline.py -q --durations=10

# HDFS HA (name service ns1, two NameNodes behind fault proxies): the cluster's own failovers; the sink's commit
# whose deciding rename's reply is lost as the active NameNode dies; Spark pipelines (checkpoint on hdfs://ns1)
# with the active NameNode killed at each step of batch 1's commit. Part of test-full.
test-hdfs-ha: venv java tools
	@$(PYTEST) tests/services/test_hdfs_ha.py tests/connectors/hdfs/test_hdfs_ha.py tests/spark/test_hdfs_ha_pipeline.py -q --durations=10

# S3 (MinIO): the contract suite with Parquet objects (8 random schedules, the crash walks at every 4th
# step), one Spark kill-and-restart per strategy; test-s3-full: the whole suite with Parquet (JSON lines at
# make test's strength), every S3 pipeline and the chaos schedule (against a private MinIO).
# The four-node MinIO scenario starts a cluster of its own and waits out a dead node's object lock (up to two
# minutes): a process of its own beside the others.
S3_CLUSTER_QUICK := tests/connectors/s3/test_s3_cluster.py
test-s3: venv java tools
	@$(call WITH_MINIO,$(call SINK_TESTS,s3,$(LIGHT_CONTRACT) --ignore=$(S3_CLUSTER_QUICK)) \
		"$(PYTEST) $(S3_CLUSTER_QUICK) -q -m 'not full' --durations=5")

test-s3-full: venv java tools
	@$(call WITH_MINIO,$(call SINK_FULL_TESTS,s3,,TestS3JsonLinesContract or TestS3SegmentsContract))

# HDFS (the harness's MiniDFSCluster): the contract suite with Parquet files (8 random schedules, the crash
# walks at every 4th step, the NameNode RPC cut by the proxy), the connector's tests, one Spark
# kill-and-restart per strategy (2pc with its checkpoint on hdfs://); test-hdfs-full: the whole suite with
# Parquet (JSON lines and Parquet partitioned by a column at make test's strength), every HDFS pipeline and
# the chaos schedule (against a private MiniDFSCluster).
test-hdfs: venv java tools
	@$(call WITH_HDFS,$(call SINK_TESTS,hdfs,$(LIGHT_CONTRACT)))

test-hdfs-full: venv java tools
	@$(call WITH_HDFS,$(call SINK_FULL_TESTS,hdfs,,TestHdfsJsonLinesContract or TestHdfsPartitionedContract))

# Delta (tables on MinIO and local disk): the contract suite on both at make test-s3's strength, the connector's
# tests, one Spark kill-and-restart per strategy; test-delta-full: the whole suite on MinIO, local disk and HDFS
# (a private cluster at HDFS's default num-committed-allowed, which delta-rs needs), every Delta pipeline and the
# chaos schedule (against a private MinIO).
# make test-delta runs the contract suite on local disk (the Delta logic: every case) and, on MinIO, the cases only
# a server shows (a commit's reply cut by the proxy, an unreachable store); the whole suite on MinIO is
# test-delta-full's: it took 5 to 6:21 in make test (each step several round trips to MinIO and a read of the table).
DELTA_ON_S3 := TestDeltaS3Contract and (test_ambiguous_commit_through_the_proxy or test_unreachable_server)
test-delta: venv java tools
	@$(call WITH_MINIO,$(TOGETHER) \
		"$(PYTEST) tests/connectors/delta -q -m 'not full' $(LIGHT_CONTRACT) -k 'not Hdfs and not TestDeltaS3Contract' \
			--durations=10" \
		"$(PYTEST) tests/connectors/delta/test_delta_contract.py -q -m 'not full' -k '$(DELTA_ON_S3)' --durations=5" \
		$(call SINK_SPARK,delta))

test-delta-full: venv java tools
	@$(call WITH_MINIO,$(call SINK_FULL_TESTS,delta,tests/bench/test_quick_delta.py,TestDeltaLocalContract or TestDeltaHdfsContract))

# Fan-out (one query into PostgreSQL, then Kafka; docs/fanout.md): a Spark kill between the two sinks' commits
# per strategy (2pc, txid-check) and through format("eosink"), with a reader that polls both for the order
# promise; test-fanout-full: the kill at every fault point between the commits, into PostgreSQL then Kafka and
# into S3 then PostgreSQL, a small real benchmark run, and one chaos schedule of five faults into private servers. The protocol tests run in make unit, each connector's fan-out contract cases in its own stage.
test-fanout: venv java
	@$(call WITH_PG_KAFKA,$(PYTEST) tests/spark/test_fanout_pipeline.py -q -m 'not full' --durations=5)

test-fanout-full: venv java tools
	@$(call WITH_SPARK_SERVICES,$(TOGETHER) \
		"$(PYTEST) tests/spark/test_fanout_pipeline.py tests/bench/test_quick_fanout.py -q --durations=5" \
		$(call SINK_CHAOS,fanout))

contracts: venv
	$(PYTEST) tests/contracts -q --durations=5
	$(PY) tests/template/check_template.py

# The PostgreSQL connector against Debian's PostgreSQL 15 (compatibility; part of test-full): every test, the
# contract suites at the strength make test-s3 uses (LIGHT_CONTRACT): the SQL they send is the same at any strength.
PG15_BINDIR ?= /usr/lib/postgresql/15/bin
postgres15: venv
	@test -x $(PG15_BINDIR)/postgres || { echo "PostgreSQL 15 not found in $(PG15_BINDIR): apt-get install postgresql-15, or set PG15_BINDIR" >&2; exit 1; }
	@export EOSINK_CACHE=$(CURDIR)/.cache/pg15 EOSINK_POSTGRES_BINDIR=$(PG15_BINDIR); \
	$(EOSINK) services up postgres && $(PYTEST) tests/connectors/postgres -q $(LIGHT_CONTRACT) $(PG_PLAIN); rc=$$?; \
	$(EOSINK) services down postgres; exit $$rc

# SECURE=1: the secured variants instead (TLS, authentication, a least-privileged writer).
SECURE_FLAG = $(if $(SECURE),--secure)
services-up: venv tools
	$(EOSINK) services up $(SECURE_FLAG) $(SERVICES)

services-check: venv
	$(EOSINK) services check $(SECURE_FLAG) $(SERVICES)

services-down: venv
	$(EOSINK) services down $(SECURE_FLAG) $(SERVICES)

# Every sink on its secured server, as the least-privileged writer (tests/secured): each documented grant taken
# away in turn, the documented grants enough for every strategy, bad credentials and TLS, status and recover as
# the writer; a Spark kill-and-restart under 2pc per sink (tests/spark/test_secured_pipelines.py, the other
# strategies in test-full). The contract suite's cases that need no fault proxy, as that writer, run in
# test-secured-full (make test ran them on the plain servers in each test-SINK: the requests are the same).
# Six processes side by side, which mostly wait on handshakes and transactions, not on the cores: PostgreSQL, the
# Spark runs, Kafka, HDFS, S3, Delta on S3. The S3 and Delta tests stay one process each: a walk takes actions
# away from the MinIO user the rest of its file writes as, and each process gives that user a secret of its own.
# test-secured-full: every case at full strength (the contract suites too), every strategy's Spark kill. The S3 and Delta Spark tests run
# after the S3 and Delta walks, never beside them: a walk takes actions away from the same MinIO users.
# HDFS: the harness's NameNode always checks permissions; its tests run as the ordinary user "writer".
SECURE_SERVICES = postgres-secure kafka-secure minio-secure hdfs
SECURED_HDFS = HADOOP_USER_NAME=writer $(PYTEST) tests/secured/test_hdfs_secured.py -q --durations=5
SECURED_QUICK := -m 'not full' -k 'not Contract'
test-secured: venv java tools
	@$(EOSINK) services up $(SECURE_SERVICES) && $(EOSINK) services check $(SECURE_SERVICES) && \
	$(TOGETHER) "$(PYTEST) tests/secured/test_postgres_secured.py -q $(SECURED_QUICK) --durations=5" \
		"$(PYTEST) tests/spark/test_secured_pipelines.py -q -m 'not full' --durations=5" \
		"$(PYTEST) tests/secured/test_kafka_secured.py -q $(SECURED_QUICK) --durations=5" \
		"$(SECURED_HDFS) $(SECURED_QUICK)" \
		"$(PYTEST) tests/secured/test_s3_secured.py -q $(SECURED_QUICK) --durations=5" \
		"$(PYTEST) tests/secured/test_delta_secured.py -q $(SECURED_QUICK) --durations=5"; rc=$$?; \
	$(EOSINK) services down $(SECURE_SERVICES); exit $$rc

test-secured-full: venv java tools
	@$(EOSINK) services up $(SECURE_SERVICES) && $(EOSINK) services check $(SECURE_SERVICES) && \
	$(TOGETHER) "$(PYTEST) tests/secured/test_postgres_secured.py tests/spark/test_secured_pipelines.py -q --durations=5 \
			-k 'not test_s3_ and not test_delta_'" \
		"$(PYTEST) tests/secured/test_kafka_secured.py -q --durations=5" "$(SECURED_HDFS)" \
		"$(PYTEST) tests/secured/test_s3_secured.py tests/secured/test_delta_secured.py -q --durations=5; rc=\$$?; \
			$(PYTEST) tests/spark/test_secured_pipelines.py -q --durations=5 -k 'test_s3_ or test_delta_' \
			|| rc=1; exit \$$rc"; rc=$$?; \
	$(EOSINK) services down $(SECURE_SERVICES); exit $$rc

services-status: venv
	$(EOSINK) services status

# The replicated PostgreSQL's own tests run in test-postgres-replicated, beside that stage's other tests.
services: venv tools
	@$(call WITH_SERVICES,$(PYTEST) tests/services -q -m "not full" --ignore=tests/services/test_postgres_cluster.py \
		--durations=5)

services-full: venv tools
	@$(call WITH_SERVICES,$(PYTEST) tests/services -q --ignore=tests/services/test_postgres_cluster.py \
		--ignore=tests/services/test_kafka_cluster.py --durations=5)

# make test and make test-full are lists of stages, each a make target run and timed by scripts/stages.py,
# which ends with a table of every stage's wall time against its budget (seconds after the colon) and the
# total, also in build/test-times.json. The stages' budgets are for a quiet, warm 2-core machine; the total's, 40
# minutes, for a cold one (docs/testing.md).
STAGES = $(PYTHON) scripts/stages.py
TEST_STAGES := lint:75 unit:90 package:75 docs:30 contracts:120 services:90 spark:240 \
	$(foreach s,$(SINKS),test-$(s):240) test-postgres-replicated:240 test-fanout:240 test-secured:240 examples:180
test: venv java tools
	@$(STAGES) --title "make test" --budget 2400 --out build/test-times.json \
		--background "nice -n 19 $(EOSINK) services provision" $(TEST_STAGES)

# The long chaos run here starts afresh each time and leaves results/ (the committed acceptance run) alone.
FULL_CHAOS_SCHEDULES ?= 2
FULL_CHAOS_DIR := $(CURDIR)/.cache/chaos-full
FULL_STAGES := lint unit package docs contracts postgres15 services-full spark-full \
	$(foreach s,$(SINKS),test-$(s)-full) test-kafka-cluster test-hdfs-ha test-minio-cluster test-spark-cluster test-postgres-replicated-full test-fanout-full test-secured-full examples-full \
	local-cluster chaos-full spark-matrix
test-full: venv java tools
	@$(STAGES) --title "make test-full" --budget 10800 --out build/test-full-times.json $(FULL_STAGES)

# Every real-Spark test: every fault point x strategy on the reference sink, the demo's strategies, Spark Connect.
# Two drivers at a time, as in make spark: the tests dealt to two pytest processes (--shard).
spark-full: venv java tools
	@$(TOGETHER) $(foreach k,0 1,"$(PYTEST) tests/spark -q --durations=20 --shard=$(k)/2 \
		$(foreach f,$(SPARK_PIPELINES),--ignore=$(f))")

# The quick Spark tests again with executors in JVMs of their own (but the demo: it runs its drivers on
# local[2,4] whatever the tests' master, so it would only prove again what spark-full proved).
local-cluster: venv java tools
	@export EOSINK_TEST_MASTER="local-cluster[2$(COMMA)1$(COMMA)1024]"; \
	$(call WITH_SPARK_SERVICES,$(call QUICK_SPARK,$(PY),--deselect tests/spark/test_demo.py))

# The chaos harness's whole mode (every strategy, the plain baseline, the non-deterministic mode), 2 schedules
# each, 2 at a time, checked by chaos-quick's full tests: a superset of `make chaos-quick`, so test-full runs only this.
chaos-full: venv java tools
	EOSINK_CHAOS_SCHEDULES=$(FULL_CHAOS_SCHEDULES) EOSINK_CHAOS_JOBS=2 EOSINK_CHAOS_REPORT=$(FULL_CHAOS_DIR).json \
		$(PYTEST) tests/chaos/test_chaos_quick.py -q -m full -k "not one_schedule" --durations=10

# The quick Spark tests on each supported PySpark (Java 17), each in a virtualenv of its own under .cache/matrix:
# the newest 3.5.x, the newest 4.0.x, and "latest": what a fresh `pip install 'eosink[spark,postgres]'` resolves
# today, unpinned (PySpark 4.3; the spark extra keeps pandas < 3, which PySpark 4.x supports). The pinned 4.2 is the main virtualenv's: every Spark test ran on it
# in spark-full, test-SINK-full and local-cluster, so the matrix does not run its quick subset again
# (`make spark-on PYSPARK=4.2.0` does). A virtualenv is made once per set of extras; eosink itself is
# reinstalled from this tree at every run, so the matrix never tests an older copy. The extras are every
# connector's: each sink's 2pc kill is among the quick tests.
PINNED_PYSPARK := $(shell sed -n 's/^pyspark==//p' constraints.txt)
MATRIX ?= 3.5.9 4.0.5 latest
MATRIX_EXTRAS := spark,postgres,kafka,s3,hdfs,delta,demo,contracts,services
spark-matrix: venv java
	@echo "PySpark $(PINNED_PYSPARK) (pinned, .venv): its Spark tests ran in spark-full, test-SINK-full and local-cluster"
	@for v in $(MATRIX); do $(MAKE) --no-print-directory spark-on PYSPARK=$$v || exit 1; done

spark-on: venv java
	@test -n "$(PYSPARK)" || { echo "usage: make spark-on PYSPARK=3.5.9|latest" >&2; exit 2; }
	@mv=.cache/matrix/pyspark-$(PYSPARK); \
	if [ "$$(cat $$mv/.installed 2>/dev/null)" != "$(MATRIX_EXTRAS)" ]; then \
		rm -rf $$mv && $(PYTHON) -m venv $$mv && $$mv/bin/python -m pip install -q --upgrade pip uv && \
		if [ "$(PYSPARK)" = latest ]; then pins=""; else pins="pyspark==$(PYSPARK) pandas<3"; fi && \
		$$mv/bin/uv pip install --python $$mv/bin/python -q ".[$(MATRIX_EXTRAS)]" pytest pytest-timeout $$pins && \
		{ $(VENV)/bin/uv cache prune -q || true; } && echo "$(MATRIX_EXTRAS)" > $$mv/.installed || exit 1; \
	else \
		$$mv/bin/uv pip install --python $$mv/bin/python -q --no-deps --reinstall-package eosink . || exit 1; \
	fi; \
	$$mv/bin/python -c 'import pyspark, pandas; print("PySpark", pyspark.__version__, "pandas", pandas.__version__)'; \
	export PYSPARK_PYTHON=$(CURDIR)/$$mv/bin/python PYSPARK_DRIVER_PYTHON=$(CURDIR)/$$mv/bin/python; \
	$(call WITH_SPARK_SERVICES,$(call QUICK_SPARK,$$mv/bin/python,))

# The end-to-end chaos harness (docs/chaos.md). It starts a private server of its own.
SINK ?= postgres
SCHEDULES ?= 20
SEED ?= 1
JOBS ?= 1
TOPOLOGY ?= single
CHAOS_DIR ?= $(CURDIR)/.cache/chaos-$(SINK)-$(TOPOLOGY)-$(SEED)-$(SCHEDULES)
# Finished schedules are journaled in CHAOS_DIR: an interrupted `make chaos` goes on where it stopped.
# Delta: Spark with delta-spark polls the table too, beside deltalake and DuckDB (docs/connectors/delta.md).
chaos: venv java tools
	$(if $(filter delta,$(SINK)),EOSINK_CHAOS_SPARK_READER=1) $(EOSINK) chaos --sink $(SINK) --topology $(TOPOLOGY) \
		--schedules $(SCHEDULES) --seed $(SEED) --jobs $(JOBS) --workdir $(CHAOS_DIR) --resume

chaos-quick: venv java tools
	$(PYTEST) tests/chaos/test_chaos_quick.py -q -m full --durations=10

# The examples (examples/*.py) against the harness's PostgreSQL, Kafka and MinIO: once each in `make test`,
# through a kill and a restart in `make test-full`.
examples: venv java tools
	@$(call WITH_SPARK_SERVICES,$(call TOGETHER_K,$(PYTEST) tests/examples -q -m 'not full' --durations=5,,$(EXAMPLES_SPLIT)))

# Two drivers at a time, as in spark-full, dealt by example rather than --shard: every other test is a
# through-a-kill run, so dealing every second test would give one process all the long runs.
EXAMPLES_SPLIT := s3 or hdfs or kafka_to_kafka
examples-full: venv java tools
	@$(call WITH_SPARK_SERVICES,$(call TOGETHER_K,$(PYTEST) tests/examples -q --durations=5,,$(EXAMPLES_SPLIT)))

EXAMPLE_DIR ?= /tmp/eosink-example
# Each starts afresh (the harness's server is new on every `services up`, so is the example's directory).
example-files: venv java tools
	@rm -rf $(EXAMPLE_DIR)/files $(EXAMPLE_DIR)/files-checkpoint
	@$(call WITH_POSTGRES,eval "$$($(EOSINK) services env postgres)" && $(PY) examples/files_to_postgres.py \
		--input $(EXAMPLE_DIR)/files --checkpoint $(EXAMPLE_DIR)/files-checkpoint --generate 5)

example-kafka: venv java tools
	@rm -rf $(EXAMPLE_DIR)/kafka-checkpoint
	@$(call WITH_PG_KAFKA,eval "$$($(EOSINK) services env postgres kafka)" && \
		EOSINK_EXAMPLE_SPARK_JARS="$$($(PY) -c 'from eosink.services.spark_jars import SparkJars; print(SparkJars().spark_conf("kafka")["spark.jars"])')" \
		$(PY) examples/kafka_to_postgres.py --checkpoint $(EXAMPLE_DIR)/kafka-checkpoint --produce 1000)

example-files-to-kafka: venv java tools
	@rm -rf $(EXAMPLE_DIR)/f2k $(EXAMPLE_DIR)/f2k-checkpoint
	@$(call WITH_KAFKA,eval "$$($(EOSINK) services env kafka)" && $(PY) examples/files_to_kafka.py \
		--input $(EXAMPLE_DIR)/f2k --checkpoint $(EXAMPLE_DIR)/f2k-checkpoint --generate 5)

example-kafka-to-kafka: venv java tools
	@rm -rf $(EXAMPLE_DIR)/k2k-checkpoint
	@$(call WITH_KAFKA,eval "$$($(EOSINK) services env kafka)" && \
		EOSINK_EXAMPLE_SPARK_JARS="$$($(PY) -c 'from eosink.services.spark_jars import SparkJars; print(SparkJars().spark_conf("kafka")["spark.jars"])')" \
		$(PY) examples/kafka_to_kafka.py --checkpoint $(EXAMPLE_DIR)/k2k-checkpoint --produce 1000)

example-files-to-s3: venv java tools
	@rm -rf $(EXAMPLE_DIR)/f2s $(EXAMPLE_DIR)/f2s-checkpoint
	@$(call WITH_MINIO,eval "$$($(EOSINK) services env minio)" && $(PY) examples/files_to_s3.py \
		--input $(EXAMPLE_DIR)/f2s --checkpoint $(EXAMPLE_DIR)/f2s-checkpoint --generate 5)

example-files-to-delta: venv java tools
	@rm -rf $(EXAMPLE_DIR)/f2d $(EXAMPLE_DIR)/f2d-checkpoint
	@$(call WITH_MINIO,eval "$$($(EOSINK) services env minio)" && $(PY) examples/files_to_delta.py \
		--input $(EXAMPLE_DIR)/f2d --checkpoint $(EXAMPLE_DIR)/f2d-checkpoint --generate 5 \
		--table s3://eosink-examples/payments_delta_$$(date +%s))

example-files-to-hdfs: venv java tools
	@rm -rf $(EXAMPLE_DIR)/f2h $(EXAMPLE_DIR)/f2h-checkpoint
	@$(call WITH_HDFS,eval "$$($(EOSINK) services env hdfs)" && $(PY) examples/files_to_hdfs.py \
		--input $(EXAMPLE_DIR)/f2h --checkpoint $(EXAMPLE_DIR)/f2h-checkpoint --generate 5)

# One query into a PostgreSQL table and a Kafka topic (examples/files_to_postgres_and_kafka.py): a first run
# killed (SIGKILL of its whole session) after PostgreSQL committed batch 2 and before Kafka did, then the
# restart, which commits the rest: each payment once in each sink.
example-fanout: venv java tools
	@rm -rf $(EXAMPLE_DIR)/fanout $(EXAMPLE_DIR)/fanout-checkpoint
	@$(call WITH_PG_KAFKA,eval "$$($(EOSINK) services env postgres kafka)" && \
		{ EOSINK_FAULTS=F14@2:kill EOSINK_FAULT_SESSION=own setsid -w $(PY) examples/files_to_postgres_and_kafka.py \
			--input $(EXAMPLE_DIR)/fanout --checkpoint $(EXAMPLE_DIR)/fanout-checkpoint --generate 5 || \
			echo "killed between the two sinks' commits of batch 2 (as planned); restarting:"; } && \
		$(PY) examples/files_to_postgres_and_kafka.py --input $(EXAMPLE_DIR)/fanout \
			--checkpoint $(EXAMPLE_DIR)/fanout-checkpoint)

example-kafka-to-s3: venv java tools
	@rm -rf $(EXAMPLE_DIR)/k2s-checkpoint
	@$(call WITH_KAFKA_MINIO,eval "$$($(EOSINK) services env kafka minio)" && \
		EOSINK_EXAMPLE_SPARK_JARS="$$($(PY) -c 'from eosink.services.spark_jars import SparkJars; print(SparkJars().spark_conf("kafka")["spark.jars"])')" \
		$(PY) examples/kafka_to_s3.py --checkpoint $(EXAMPLE_DIR)/k2s-checkpoint --produce 1000)

# make demo [ARGS="--strategy txid-check --seed 3 --batches 12"]
demo: $(DEMO_STAMP) java
	$(EOSINK) demo $(ARGS)

# `make demo-kafka`: the same story into a private Kafka broker (jars from Maven Central), with Spark's
# own Kafka sink as the plain writer; needs eosink[demo,kafka].
DEMO_KAFKA_STAMP := $(VENV)/.eosink-demo-kafka-installed
$(DEMO_KAFKA_STAMP): $(SOURCES)
	$(call install,demo$(COMMA)kafka)

demo-kafka: $(DEMO_KAFKA_STAMP) java tools
	$(EOSINK) demo --sink kafka $(ARGS)

# `make demo-fanout`: the same story into the embedded PostgreSQL and a private Kafka broker at once, as one
# query (a fan-out, committed PostgreSQL first), crashed once between the two sinks' commits; the plain writer
# is one foreachBatch writing each sink in turn. Needs eosink[demo,kafka].
demo-fanout: $(DEMO_KAFKA_STAMP) java tools
	$(EOSINK) demo --sink postgres+kafka $(ARGS)

# `make demo-s3`: the same story into a private MinIO (built from its Go module on the first run; the s3a
# jars from Maven Central), with Spark's own Parquet writer on s3a:// as the plain writer; needs eosink[demo,s3].
DEMO_S3_STAMP := $(VENV)/.eosink-demo-s3-installed
$(DEMO_S3_STAMP): $(SOURCES)
	$(call install,demo$(COMMA)s3)

demo-s3: $(DEMO_S3_STAMP) java tools
	$(EOSINK) demo --sink s3 $(ARGS)

# `make demo-hdfs`: the same story into a private HDFS (a MiniDFSCluster; the Hadoop jars from Maven Central
# on the first run, needs a JDK and Maven), with Spark's own Parquet writer on hdfs:// as the plain writer;
# needs eosink[demo,hdfs].
DEMO_HDFS_STAMP := $(VENV)/.eosink-demo-hdfs-installed
$(DEMO_HDFS_STAMP): $(SOURCES)
	$(call install,demo$(COMMA)hdfs)

demo-hdfs: $(DEMO_HDFS_STAMP) java tools
	$(EOSINK) demo --sink hdfs $(ARGS)

# `make demo-delta`: the same story into Delta tables on a private MinIO (the s3a and delta-spark jars from Maven
# Central on the first run), with delta-spark's batch writer in foreachBatch as the plain writer; needs
# eosink[demo,delta].
DEMO_DELTA_STAMP := $(VENV)/.eosink-demo-delta-installed
$(DEMO_DELTA_STAMP): $(SOURCES)
	$(call install,demo$(COMMA)delta)

demo-delta: $(DEMO_DELTA_STAMP) java tools
	$(EOSINK) demo --sink delta $(ARGS)

# Throughput, streaming latency and driver RSS on the same generated data; starts what it needs.
bench: venv java tools
	$(VENV)/bin/eosink bench --sink $(SINK) $(if $(filter-out single,$(TOPOLOGY)),--topology $(TOPOLOGY)) \
		$(if $(ROWS),--rows $(ROWS)) $(if $(QUICK),--quick) $(BENCH_ARGS)

clean:
	rm -rf build dist .mypy_cache .ruff_cache
