"""Find the JDK the Java servers (Kafka, HDFS) run on: ``$JAVA_HOME``'s, else the one on PATH."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from eosink.errors import ServiceError

__all__ = ["java", "javac"]

_INSTALL = "install a JDK 17+ (Debian: apt-get install openjdk-17-jdk-headless) or set JAVA_HOME, then run again."


def java(what: str) -> str:
    """The ``java`` executable; ``what`` names the service for the error."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if found is None or not os.access(found, os.X_OK):
        raise ServiceError(f"{what} needs Java 17 or newer, and no 'java' was found (JAVA_HOME or PATH).", _INSTALL)
    return found


def javac(java_path: str, what: str) -> str:
    """The ``javac`` of the same JDK as ``java_path`` (else the one on PATH)."""
    sibling = Path(java_path).resolve().with_name("javac")
    found = str(sibling) if sibling.exists() else shutil.which("javac")
    if found is None:
        raise ServiceError(
            f"{what} compiles a small launcher, and there is no 'javac' next to {java_path} or on PATH "
            "(a JRE, not a JDK?).",
            _INSTALL,
        )
    return found
