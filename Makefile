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
SOURCES := $(shell find sdk connectors contracts -name '*.py' 2>/dev/null) pyproject.toml constraints.txt
STAMP := $(VENV)/.eosink-installed
EOSINK := $(VENV)/bin/eosink
# Runs a test command between `services up` + `services check` and `services down`, whatever its result.
WITH_SERVICES = $(EOSINK) services up && $(EOSINK) services check && $(1); rc=$$?; $(EOSINK) services down; exit $$rc
COMMA := ,
# The same for PostgreSQL alone.
WITH_POSTGRES = $(EOSINK) services up postgres && $(EOSINK) services check postgres && $(1); rc=$$?; \
	$(EOSINK) services down postgres; exit $$rc

.PHONY: help venv java tools lint unit package docs contracts postgres15 test-postgres spark services services-up services-check services-down \
	services-status test test-full demo bench clean chaos chaos-quick examples example-files example-kafka

help:
	@echo "make demo [ARGS=...]   the exactly-once demo: Spark into an embedded PostgreSQL, crashed, eosink vs plain"
	@echo "make test       lint, unit tests, packaging, docs, Spark kill-and-restart tests (what CI runs)"
	@echo "make test-full  every fault point x strategy, PostgreSQL 15, local-cluster runs, a longer chaos run"
	@echo "make lint       ruff + mypy --strict"
	@echo "make unit       protocol-level unit tests (no Spark)"
	@echo "make package    build wheel + sdist, install into a clean venv, import, type-check"
	@echo "make docs       mkdocs build --strict into build/site"
	@echo "make spark      the quick real-Spark kill-and-restart tests (reference sink and PostgreSQL)"
	@echo "make test-postgres  the PostgreSQL connector's tests and its Spark pipelines against the harness's server"
	@echo "make services-up | services-check | services-down   the real servers (PostgreSQL, Kafka, HDFS, MinIO)"
	@echo "make services   the harness's own tests and the connectors' tests against real servers (starts and stops them)"
	@echo "make contracts  the contract suite on the reference sink, its mutants, the rendered connector template"
	@echo "make examples   every example against real PostgreSQL and Kafka (also: make example-files, make example-kafka)"
	@echo "make chaos SINK=postgres SCHEDULES=N [SEED=S] [JOBS=J]   the end-to-end chaos harness -> results/chaos-SINK.json"
	@echo "make chaos-quick   the chaos harness's quick mode (1 schedule per strategy; part of make test)"
	@echo "make bench SINK=postgres [ROWS=N] [QUICK=1]   eosink vs Spark's built-in writers -> results/bench-<sink>.*"

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
	$(PYTEST) tests/unit tests/bench tests/chaos -q -m "not spark"

package: venv
	$(PY) tests/packaging/check_dist.py

docs: venv
	$(VENV)/bin/mkdocs build --strict -q -d build/site

spark: venv java
	@$(call WITH_POSTGRES,$(PYTEST) tests/spark -q -m "not full" --durations=10)

test-postgres: venv java
	@$(call WITH_POSTGRES,$(PYTEST) tests/connectors/postgres tests/spark/test_postgres_pipeline.py -q --durations=10)

contracts: venv
	$(PYTEST) tests/contracts -q --durations=5
	$(PY) tests/template/check_template.py

# The PostgreSQL connector against Debian's PostgreSQL 15 (compatibility; part of test-full).
PG15_BINDIR ?= /usr/lib/postgresql/15/bin
postgres15: venv
	@test -x $(PG15_BINDIR)/postgres || { echo "PostgreSQL 15 not found in $(PG15_BINDIR): apt-get install postgresql-15, or set PG15_BINDIR" >&2; exit 1; }
	@export EOSINK_CACHE=$(CURDIR)/.cache/pg15 EOSINK_POSTGRES_BINDIR=$(PG15_BINDIR); \
	$(EOSINK) services up postgres && $(PYTEST) tests/connectors/postgres -q; rc=$$?; $(EOSINK) services down postgres; exit $$rc

services-up: venv tools
	$(EOSINK) services up

services-check: venv
	$(EOSINK) services check

services-down: venv
	$(EOSINK) services down

services-status: venv
	$(EOSINK) services status

services: venv tools
	@$(call WITH_SERVICES,$(PYTEST) tests/services tests/connectors tests/examples -q --durations=5)

test: lint unit package docs contracts services spark chaos-quick
	@echo "make test: all green"

# The long chaos run here starts afresh each time and leaves results/ (the committed acceptance run) alone.
FULL_CHAOS_SCHEDULES ?= 3
FULL_CHAOS_DIR := $(CURDIR)/.cache/chaos-full
test-full: venv tools lint unit package docs contracts postgres15
	@$(call WITH_SERVICES,$(PYTEST) tests/services tests/connectors tests/examples -q --durations=5)
	@$(call WITH_POSTGRES,$(PYTEST) tests/spark -q --durations=20)
	@$(call WITH_POSTGRES,EOSINK_TEST_MASTER="local-cluster[2$(COMMA)1$(COMMA)1024]" $(PYTEST) tests/spark -q -m "not full" --durations=10)
	@rm -rf $(FULL_CHAOS_DIR)
	$(EOSINK) chaos --sink postgres --schedules $(FULL_CHAOS_SCHEDULES) --jobs 2 --workdir $(FULL_CHAOS_DIR) \
		--out $(FULL_CHAOS_DIR).json

# The end-to-end chaos harness (docs/chaos.md). It starts a private server of its own.
SINK ?= postgres
SCHEDULES ?= 20
SEED ?= 1
JOBS ?= 1
CHAOS_DIR ?= $(CURDIR)/.cache/chaos-$(SINK)-$(SEED)-$(SCHEDULES)
# Finished schedules are journaled in CHAOS_DIR: an interrupted `make chaos` goes on where it stopped.
chaos: venv java
	$(EOSINK) chaos --sink $(SINK) --schedules $(SCHEDULES) --seed $(SEED) --jobs $(JOBS) --workdir $(CHAOS_DIR) --resume

chaos-quick: venv java tools
	$(PYTEST) tests/chaos/test_chaos_quick.py -q --durations=10

# The examples (examples/*.py) against the harness's PostgreSQL and Kafka; part of `make test`.
WITH_PG_KAFKA = $(EOSINK) services up postgres kafka && $(EOSINK) services check postgres kafka && $(1); rc=$$?; \
	$(EOSINK) services down postgres kafka; exit $$rc
examples: venv java tools
	@$(call WITH_PG_KAFKA,$(PYTEST) tests/examples -q --durations=5)

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

# make demo [ARGS="--strategy txid-check --seed 3 --batches 12"]
demo: $(DEMO_STAMP) java
	$(EOSINK) demo $(ARGS)

# Throughput, streaming latency and driver RSS on the same generated data; starts what it needs.
bench: venv java
	$(VENV)/bin/eosink bench --sink $(SINK) $(if $(ROWS),--rows $(ROWS)) $(if $(QUICK),--quick) $(BENCH_ARGS)

clean:
	rm -rf build dist .mypy_cache .ruff_cache
