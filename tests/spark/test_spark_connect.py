"""eosink under Spark Connect, where foreachBatch runs in a server-side Python process."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from eosink._driver import DriverRun

from .conftest import DRIVER_TIMEOUT_S, Pipeline

pytestmark = [pytest.mark.spark, pytest.mark.full]

JOB = Path(__file__).with_name("connect_job.py")


@pytest.mark.parametrize("strategy", ["2pc", "txid-check", "idempotent", "datasource:txid-check"])
def test_exactly_once_through_spark_connect(pipeline: Pipeline, strategy: str) -> None:
    """The pickled BatchWriter runs in Spark Connect's foreachBatch worker (no py4j, no _jvm); or
    (``datasource:``) the client registers format("eosink") and the server runs it.

    Pass: every input row lands once, one bundle per batch, nothing in doubt; for 2PC the last
    batch too, committed when the server-side worker ends.
    """
    pipeline.app_id = "connect-app"
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    cmd = [sys.executable, str(JOB), str(pipeline.input), str(pipeline.checkpoint), str(pipeline.sink_path), strategy]
    log = pipeline.root / "connect.stderr"
    with DriverRun(cmd, env, log, timeout_s=DRIVER_TIMEOUT_S) as driver:
        driver.watch()
    assert driver.outcome().status == "done", log.read_text(errors="replace")[-4000:]
    pipeline.assert_exact()
