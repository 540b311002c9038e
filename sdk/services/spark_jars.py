"""Spark's extra jars from Maven Central, at the versions of the installed PySpark.

For examples and benchmark baselines that use Spark's own connectors:

* ``kafka``: ``spark-sql-kafka-0-10`` (Spark's Kafka source and sink);
* ``jdbc``: the PostgreSQL JDBC driver (Spark's JDBC writer);
* ``s3``: ``hadoop-aws`` (the ``s3a://`` filesystem) with its AWS SDK bundle;
* ``delta``: ``delta-spark`` (Delta Lake's reader and its streaming sink), at the release built for the
  installed Spark (:data:`DELTA_SPARK_VERSIONS`).

The Spark, Scala and Hadoop versions are read off the installed ``pyspark`` (its ``jars/``), so
the extra jars always match it. Dependencies that Spark already ships are left out, so
``spark.jars`` never puts a second version of a class on the classpath::

    from eosink.services.spark_jars import SparkJars
    conf = SparkJars().spark_conf("jdbc")          # {"spark.jars": "/.../postgresql-42.7.8.jar"}

The harness's own drivers put them on the class path instead (:func:`class_path_submit_args`):
``spark.jars`` copies every jar into each application's temporary directory, 659 MB for the
``s3`` group's AWS SDK bundle, and a SIGKILLed driver leaves that copy behind.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import shlex
import time
import zipfile
from collections.abc import Mapping
from pathlib import Path

from eosink.errors import ServiceError
from eosink.services._layout import provision_dir
from eosink.services._maven import Artifact, fetch_jars

__all__ = [
    "DELTA_SPARK_CONF",
    "DELTA_SPARK_VERSIONS",
    "GROUPS",
    "KAFKA_TOKEN_PROVIDER_VERSION",
    "POSTGRES_JDBC_VERSION",
    "SparkJars",
    "SparkVersions",
    "class_path_submit_args",
]

log = logging.getLogger("eosink.services")

POSTGRES_JDBC_VERSION = "42.7.8"
#: spark-sql-kafka depends on spark-token-provider-kafka (Kafka delegation tokens) at the same
#: version, but Maven Central, as reached from here, holds that artifact only up to 4.0.0 (for
#: Scala 2.13). 4.0.0 is used in its place; tests/services prove Spark's Kafka sink and source
#: work with it.
KAFKA_TOKEN_PROVIDER_VERSION = "4.0.0"
#: Spark minor version -> the delta-spark release built against it (its POM's ``spark-sql`` version).
DELTA_SPARK_VERSIONS: dict[str, str] = {"3.5": "3.3.2", "4.0": "4.0.1", "4.1": "4.3.1", "4.2": "4.4.0"}
#: The static settings a session using the ``delta`` group needs (Delta's SQL extension and catalog).
DELTA_SPARK_CONF: dict[str, str] = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}

#: Group name -> a class each group must provide (the health check looks for it).
GROUPS: dict[str, str] = {
    "kafka": "org/apache/spark/sql/kafka010/KafkaSourceProvider.class",
    "jdbc": "org/postgresql/Driver.class",
    "s3": "org/apache/hadoop/fs/s3a/S3AFileSystem.class",
    "delta": "io/delta/tables/DeltaTable.class",
}

_VERSIONED = re.compile(r"^(?P<name>.+?)-(?P<version>\d[^-]*(?:-[A-Za-z0-9.]+)*)\.jar$")


class SparkVersions:
    """Spark, Scala and Hadoop versions of the installed PySpark, and its jars directory."""

    def __init__(self) -> None:
        spec = importlib.util.find_spec("pyspark")
        if spec is None or not spec.submodule_search_locations:
            raise ServiceError("PySpark is not installed.", "pip install 'eosink[spark]'.")
        self.jars_dir = Path(next(iter(spec.submodule_search_locations))) / "jars"
        names = {p.name for p in self.jars_dir.glob("*.jar")}
        self.spark = _version_of(names, "spark-core_", self.jars_dir)
        self.scala = _suffix_of(names, "spark-core_")
        self.hadoop = _version_of(names, "hadoop-client-api", self.jars_dir)
        self.shipped = {m.group("name") for n in names if (m := _VERSIONED.match(n))}

    def __repr__(self) -> str:
        return f"SparkVersions(spark={self.spark}, scala={self.scala}, hadoop={self.hadoop})"


def _version_of(names: set[str], prefix: str, where: Path) -> str:
    for name in names:
        if name.startswith(prefix) and (m := _VERSIONED.match(name)):
            return m.group("version")
    raise ServiceError(f"No {prefix}*.jar in {where}: is this a complete PySpark installation?", "reinstall pyspark.")


def _suffix_of(names: set[str], prefix: str) -> str:
    for name in names:
        if name.startswith(prefix) and (m := _VERSIONED.match(name)):
            return m.group("name")[len(prefix) :]
    raise ServiceError(f"No {prefix}*.jar in PySpark's jars.", "reinstall pyspark.")


class SparkJars:
    """Fetch, check and list Spark's extra jars (not a server: nothing to start or stop)."""

    name = "spark-jars"

    def __init__(self) -> None:
        self.versions = SparkVersions()

    def artifacts(self, group: str) -> list[Artifact]:
        """The Maven artifacts of ``group`` for the installed PySpark."""
        v = self.versions
        if group == "kafka":
            token_provider = f"spark-token-provider-kafka-0-10_{v.scala}"
            return [
                Artifact(
                    "org.apache.spark",
                    f"spark-sql-kafka-0-10_{v.scala}",
                    v.spark,
                    exclusions=(f"org.apache.spark:{token_provider}",),
                ),
                Artifact("org.apache.spark", token_provider, KAFKA_TOKEN_PROVIDER_VERSION),
            ]
        if group == "jdbc":
            return [Artifact("org.postgresql", "postgresql", POSTGRES_JDBC_VERSION)]
        if group == "s3":
            return [Artifact("org.apache.hadoop", "hadoop-aws", v.hadoop)]
        if group == "delta":
            minor = ".".join(v.spark.split(".")[:2])
            release = DELTA_SPARK_VERSIONS.get(minor)
            if release is None:
                raise ServiceError(
                    f"No delta-spark release is known for Spark {v.spark}.",
                    f"use a Spark of {', '.join(DELTA_SPARK_VERSIONS)}, or add the release built for it.",
                )
            return [Artifact("io.delta", f"delta-spark_{v.scala}", release)]
        raise ServiceError(f"There is no group of Spark jars called {group!r}.", f"use one of: {', '.join(GROUPS)}.")

    def directory(self, group: str) -> Path:
        """Where ``group``'s jars are kept (per Spark version)."""
        return provision_dir(self.name) / f"spark-{self.versions.spark}" / group

    def provision(self) -> None:
        """Fetch every group (cached; checksums enforced by Maven)."""
        for group in GROUPS:
            self.fetch(group)

    def fetch(self, group: str) -> None:
        """Fetch ``group``'s jars (cached; a no-op once fetched)."""
        fetch_jars(self.artifacts(group), self.directory(group), what=f"Spark's {group} jars for {self.versions}")

    def jars(self, *groups: str) -> list[Path]:
        """The jars to add to Spark for ``groups`` (default: all), without what Spark already ships; a group not
        fetched yet is fetched first (from Maven Central, once, into the cache)."""
        selected = []
        for group in groups or tuple(GROUPS):
            directory = self.directory(group)
            if not (directory / ".complete").exists():
                self.fetch(group)
            for jar in sorted(directory.glob("*.jar")):
                m = _VERSIONED.match(jar.name)
                if m is None or m.group("name") not in self.versions.shipped:
                    selected.append(jar)
        return selected

    def spark_conf(self, *groups: str) -> dict[str, str]:
        """``{"spark.jars": ...}`` for a SparkSession builder."""
        return {"spark.jars": ",".join(str(p) for p in self.jars(*groups))}

    def check(self) -> str:
        """Every group's jars are present, open as archives and provide the group's entry class."""
        started = time.monotonic()
        counts = []
        for group, entry in GROUPS.items():
            jars = self.jars(group)
            main = self.artifacts(group)[0].artifact
            found = False
            for jar in sorted(jars, key=lambda p: not p.name.startswith(main)):
                if not zipfile.is_zipfile(jar):
                    raise ServiceError(
                        f"{jar} is not a valid jar.", f"delete {self.directory(group)} and run `make services-up`."
                    )
                if not found:
                    with zipfile.ZipFile(jar) as archive:
                        found = entry in set(archive.namelist())
            if not found:
                raise ServiceError(
                    f"Spark's {group} jars lack {entry}.", f"delete {self.directory(group)} and run `make services-up`."
                )
            counts.append(f"{group} {len(jars)}")
        v = self.versions
        return (
            f"spark jars for spark {v.spark} / scala {v.scala} / hadoop {v.hadoop}: "
            f"{', '.join(counts)} jars, entry classes present ({time.monotonic() - started:.1f} s)"
        )


def class_path_submit_args(jars: str, conf: Mapping[str, str] | None = None) -> str:
    """``PYSPARK_SUBMIT_ARGS`` putting ``jars`` (comma-separated, as in ``spark.jars``) on the driver's and the
    local executors' class path, where nothing is copied per application (see the module docstring), with
    ``conf`` as further ``--conf`` settings (static ones a connector needs, e.g. a session extension)."""
    cp = jars.replace(",", os.pathsep)
    extra = "".join(f" --conf {shlex.quote(f'{k}={v}')}" for k, v in (conf or {}).items())
    return f"--driver-class-path {cp} --conf spark.executor.extraClassPath={cp}{extra} pyspark-shell"
