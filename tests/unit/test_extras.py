"""A connector whose client library is not installed is a ConfigurationError naming the pip extra to install:
when its sink is made (on the driver), and when an executor lacks it (its participant's error)."""

from __future__ import annotations

import json
import sys
from typing import Any

import pyarrow as pa
import pytest

from eosink.contract import BatchRef
from eosink.errors import ConfigurationError
from eosink.participant import WritePlan
from eosink.spark import _Participant

SINKS = [
    ("eosink.connectors.delta", "DeltaSink", "/tmp/eosink-extras/table", "deltalake", "delta"),
    ("eosink.connectors.hdfs", "HdfsSink", "hdfs://127.0.0.1:9/data/events", "hdfs_native", "hdfs"),
    ("eosink.connectors.kafka", "KafkaSink", "127.0.0.1:9", "kafka", "kafka"),
    ("eosink.connectors.s3", "S3Sink", "bucket", "boto3", "s3"),
]


@pytest.mark.parametrize(("module", "cls", "target", "missing", "extra"), SINKS, ids=[s[4] for s in SINKS])
def test_a_sink_without_its_client_library_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, module: str, cls: str, target: str, missing: str, extra: str
) -> None:
    """Pass: with ``missing`` hidden, making the sink is a ConfigurationError naming the package and
    ``pip install 'eosink[<extra>]'``; with it present, the same sink is made."""
    sink_cls = getattr(__import__(module, fromlist=[cls]), cls)
    kwargs: dict[str, Any] = {"topic": "events"} if extra == "kafka" else {}
    sink_cls(target, **kwargs)
    monkeypatch.setitem(sys.modules, missing, None)  # what an interpreter without the package finds
    with pytest.raises(ConfigurationError) as info:
        sink_cls(target, **kwargs)
    assert missing in info.value.problem and sys.executable in info.value.problem
    assert info.value.fix is not None and f"pip install 'eosink[{extra}]'" in info.value.fix


class _MissingOnExecutor:
    """A sink whose module imports its client library lazily, on an executor that lacks it."""

    def begin(self, task: Any) -> None:
        raise ModuleNotFoundError("No module named 'deltalake'", name="deltalake")


def test_an_executor_without_the_library_stops_the_task_with_the_extra_named() -> None:
    """Pass: the participant reports a ConfigurationError (not a task failure Spark would retry) whose fix
    names eosink[delta]; a module that is none of the connectors' stays a ModuleNotFoundError."""
    plan = WritePlan(_MissingOnExecutor(), BatchRef("app", 3), 1, None, True, False, 0)  # type: ignore[arg-type]
    out = list(_Participant([plan])(iter([pa.record_batch({"id": [1, 2]})])))
    body = json.loads(out[0].column(0)[0].as_py())
    assert body["kind"] == "error" and body["type"] == "ConfigurationError"
    assert "deltalake" in body["problem"] and "pip install 'eosink[delta]'" in body["fix"]

    class _Other(_MissingOnExecutor):
        def begin(self, task: Any) -> None:
            raise ModuleNotFoundError("No module named 'left_pad'", name="left_pad")

    other = WritePlan(_Other(), BatchRef("app", 3), 1, None, True, False, 0)  # type: ignore[arg-type]
    with pytest.raises(ModuleNotFoundError, match="left_pad"):
        list(_Participant([other])(iter([pa.record_batch({"id": [1, 2]})])))
