"""The HDFS service's class-data-sharing training start, when it fails: the error shows the failure.

A stand-in ``java`` plays a JVM whose cluster does not start: it prints the archive dump's
per-class warnings (unless told ``-Xlog:cds=off``, as a JVM is) and then its own error.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from eosink.errors import ServiceError
from eosink.services.hdfs import HdfsService

FAKE_JAVA = """#!/bin/sh
case " $* " in
  *" -Xlog:cds=off "*) ;;
  *) i=0; while [ $i -lt 200 ]; do echo "[warning][cds] old class not supported by CDS: x/C$i"; i=$((i+1)); done ;;
esac
echo "java.net.BindException: Address already in use (attempt $$)"
exit 1
"""


def test_a_failed_training_start_names_its_error_and_keeps_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EOSINK_CACHE", str(tmp_path / "cache"))
    java = tmp_path / "java"
    java.write_text(FAKE_JAVA)
    java.chmod(java.stat().st_mode | stat.S_IXUSR)
    service = HdfsService()
    service.home.mkdir(parents=True, exist_ok=True)

    with pytest.raises(ServiceError, match="exited while starting") as first:
        service._train_cds(str(java), "build-1")
    assert "BindException" in str(first.value)
    assert "[warning][cds]" not in str(first.value)

    with pytest.raises(ServiceError, match="BindException"):
        service._train_cds(str(java), "build-1")  # the next provisioning tries again
    log = (service.home / "cds" / "train.log").read_text()
    assert log.count("BindException") == 2, "the first failed training's log was removed by the second"
