"""What a throughput run writes before its clock starts: a few rows by default, the whole data set with
``--warm-up data`` (the JVM's compiled steady state), and where that report goes."""

from __future__ import annotations

from typing import Any
from unittest.mock import MagicMock

import pytest

from eosink.bench import session
from eosink.bench.cli import plan_from_args
from eosink.bench.file_sinks import file_sink_goals
from eosink.bench.job import Job
from eosink.bench.runs import RunSpec


def _job(kind: str, *, warm_on_data: bool) -> Job:
    return Job("throughput", "hdfs", RunSpec("x", kind), "ns", "/tmp/x", data="/data", warm_on_data=warm_on_data)


@pytest.mark.parametrize(
    ("kind", "warm_on_data", "expected"),
    [
        ("eosink", False, [None]),
        ("floor", False, []),
        ("eosink", True, ["/data"]),
        ("floor", True, ["/data"]),
        ("spark", True, ["/data"]),
    ],
)
def test_a_run_warms_up_on_a_few_rows_or_on_the_whole_data_set(
    monkeypatch: pytest.MonkeyPatch, kind: str, warm_on_data: bool, expected: list[str | None]
) -> None:
    """Pass: by default the writing runs write a few rows first (no data set) and the floor writes none; warmed on
    data, every Spark run (the floor too) writes the data set itself first."""
    written: list[str | None] = []

    def warm_write(spark: Any, adapter: Any, job: Job, data: str | None = None) -> None:
        written.append(data)

    monkeypatch.setattr(session, "_warm_write", warm_write)
    session.warm_up(MagicMock(), MagicMock(worker_modules=()), _job(kind, warm_on_data=warm_on_data), "/data")
    assert written == expected


def test_warmed_on_data_the_report_has_a_name_of_its_own() -> None:
    """Pass: ``--warm-up data`` reports to ``bench-<sink>[-<topology>]-warm``; the default keeps the plain name."""
    assert plan_from_args(["--sink", "hdfs"]).label == "hdfs"
    assert plan_from_args(["--sink", "hdfs", "--warm-up", "data"]).label == "hdfs-warm"
    assert plan_from_args(["--sink", "s3", "--topology", "cluster", "--warm-up", "data"]).label == "s3-cluster-warm"


def test_file_sinks_are_judged_at_every_size_on_medians_of_three_rounds() -> None:
    """Pass: Spark's file sink is a baseline at 1M and 5M rows alike, each the median of three rounds."""
    goals = file_sink_goals("raw-write")
    assert goals.baselines_at_every_size
    assert goals.rounds == (3, 3)
