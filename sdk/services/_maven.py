"""Fetch pinned jars and their dependencies from Maven Central into a directory, checksums enforced.

A throw-away ``pom.xml`` lists the artifacts; ``mvn dependency:copy-dependencies`` resolves
them with strict checksum checking (``-C``: Maven Central publishes a SHA-1 for every file)
into the harness's one cache (``<cache>/m2``). A mirror setting sends every repository a POM
may declare (Spark's declares a Google mirror) to Maven Central, set by ``$EOSINK_MAVEN_REPO``
(default ``https://repo1.maven.org/maven2``). A stamp records what a directory holds, so a
warm start does not run Maven at all.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

from eosink.errors import ServiceError
from eosink.services._layout import cache_lock, cache_root

__all__ = ["Artifact", "fetch_jars"]

log = logging.getLogger("eosink.services")

DEPENDENCY_PLUGIN = "3.8.1"


@dataclass(frozen=True)
class Artifact:
    """``group:artifact:version`` with optional exclusions (``group:artifact``) of its dependencies."""

    group: str
    artifact: str
    version: str
    exclusions: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"


def _pom(artifacts: Sequence[Artifact]) -> str:
    deps = []
    for a in artifacts:
        excl = "".join(
            f"<exclusion><groupId>{escape(g)}</groupId><artifactId>{escape(n)}</artifactId></exclusion>"
            for g, n in (e.split(":", 1) for e in a.exclusions)
        )
        deps.append(
            f"<dependency><groupId>{escape(a.group)}</groupId><artifactId>{escape(a.artifact)}</artifactId>"
            f"<version>{escape(a.version)}</version>"
            + (f"<exclusions>{excl}</exclusions>" if excl else "")
            + "</dependency>"
        )
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.eosink.services</groupId><artifactId>fetch</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>{"".join(deps)}</dependencies>
  <build><plugins><plugin>
    <groupId>org.apache.maven.plugins</groupId><artifactId>maven-dependency-plugin</artifactId>
    <version>{DEPENDENCY_PLUGIN}</version>
  </plugin></plugins></build>
</project>
"""


def _settings() -> str:
    url = os.environ.get("EOSINK_MAVEN_REPO", "https://repo1.maven.org/maven2")
    return f"""<settings xmlns="http://maven.apache.org/SETTINGS/1.0.0"><mirrors><mirror>
  <id>eosink-central</id><mirrorOf>*</mirrorOf><url>{escape(url)}</url>
</mirror></mirrors></settings>
"""


def fetch_jars(artifacts: Sequence[Artifact], dest: Path, *, what: str) -> list[Path]:
    """Make ``dest`` hold exactly the jars of ``artifacts`` and their runtime dependencies."""
    with cache_lock(f"jars-{dest.relative_to(cache_root()) if dest.is_relative_to(cache_root()) else dest}"):
        return _fetch_jars(artifacts, dest, what=what)


def _fetch_jars(artifacts: Sequence[Artifact], dest: Path, *, what: str) -> list[Path]:
    pom = _pom(artifacts)
    digest = hashlib.sha256(pom.encode()).hexdigest()
    stamp = dest / ".complete"
    if stamp.exists() and stamp.read_text().strip() == digest:
        return sorted(dest.glob("*.jar"))
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ServiceError(
            f"{what} needs Apache Maven to fetch its jars from Maven Central, and 'mvn' is not on PATH.",
            "install Maven (Debian: apt-get install maven) and run `make services-up` again.",
        )
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    log.info("fetching %s from Maven Central: %s", what, ", ".join(map(str, artifacts)))
    with tempfile.TemporaryDirectory(prefix="eosink-mvn-") as tmp:
        (Path(tmp) / "pom.xml").write_text(pom)
        (Path(tmp) / "settings.xml").write_text(_settings())
        cmd = [
            mvn,
            "-B",
            "-q",
            "-C",
            "-s",
            "settings.xml",
            f"-Dmaven.repo.local={cache_root() / 'm2'}",
            "dependency:copy-dependencies",
            f"-DoutputDirectory={dest}",
            "-DincludeScope=runtime",
        ]
        done = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-25:])
        raise ServiceError(
            f"Maven could not fetch {what} ({', '.join(map(str, artifacts))}):\n{tail}",
            "check that Maven Central (repo1.maven.org) is reachable, then run `make services-up` again.",
        )
    jars = sorted(dest.glob("*.jar"))
    stamp.write_text(digest + "\n")
    log.info("fetched %d jars for %s", len(jars), what)
    return jars
