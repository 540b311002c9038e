"""``eosink demo``: payments through Spark into PostgreSQL, crashed and restarted, eosink beside a plain writer.

* :mod:`eosink.demo.pipeline`: the demo's Spark driver (``python -m eosink.demo pipeline``);
* :mod:`eosink.demo.scenario`: the seeded schedule of crashes and lost COMMIT replies;
* :mod:`eosink.demo.view`: the live progress view and the final table (rich);
* :mod:`eosink.demo.run`: :func:`demo_main`, which starts an embedded PostgreSQL, runs the
  schedule with restarts from the checkpoint, and checks every payment and every balance;
* :mod:`eosink.demo.session`: :func:`job_session`, the SparkSession every test, demo and chaos
  driver uses.

The kill-and-restart tests' driver, :func:`job_main` (``python -m eosink.demo job``), and the
session's names are importable from here too.
"""

from __future__ import annotations

from collections.abc import Sequence

from eosink.demo._testjob import job_main
from eosink.demo.run import main as _run_demo
from eosink.demo.session import JAVA_OPTS, SCHEMA, job_session

__all__ = ["JAVA_OPTS", "SCHEMA", "demo_main", "job_main", "job_session"]


def demo_main(argv: Sequence[str] | None = None) -> int:
    """``eosink demo [--strategy S] [--seed N] [--batches N]``; 0 when eosink's table is exact."""
    return _run_demo(argv)
