"""A connector whose client library is not installed is a ConfigurationError naming the pip extra to install:
when its sink is made (on the driver), and when an executor lacks it (its participant's error)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
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
    ("eosink.connectors.postgres", "PostgresSink", "postgresql://u@127.0.0.1:9/db", "psycopg", "postgres"),
    ("eosink.connectors.s3", "S3Sink", "bucket", "boto3", "s3"),
]
KWARGS: dict[str, dict[str, Any]] = {"kafka": {"topic": "events"}, "postgres": {"table": "public.events"}}


@pytest.mark.parametrize(("module", "cls", "target", "missing", "extra"), SINKS, ids=[s[4] for s in SINKS])
def test_a_sink_without_its_client_library_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, module: str, cls: str, target: str, missing: str, extra: str
) -> None:
    """Pass: with ``missing`` hidden, making the sink is a ConfigurationError naming the package and
    ``pip install 'eosink[<extra>]'``; with it present, the same sink is made."""
    sink_cls = getattr(__import__(module, fromlist=[cls]), cls)
    kwargs = KWARGS.get(extra, {})
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


_FRESH = """
import sys
sys.modules[{missing!r}] = None  # an interpreter without the package
from eosink.errors import ConfigurationError
from eosink.profiles import profiles
print("profiles", ",".join(sorted(profiles())))
try:
    from {module} import {cls}
    {cls}({target!r}, **{kwargs!r})
except ConfigurationError as exc:
    print("refused", exc.problem, exc.fix)
"""


@pytest.mark.parametrize(("module", "cls", "target", "missing", "extra"), SINKS, ids=[s[4] for s in SINKS])
def test_a_fresh_interpreter_without_the_library_lists_every_sink_and_names_the_extra(
    module: str, cls: str, target: str, missing: str, extra: str
) -> None:
    """Pass: in a Python where the package was never importable, every sink profile still loads (the
    tooling of the other sinks works), and importing and making the sink is a ConfigurationError naming
    the extra, not a bare ModuleNotFoundError from somewhere inside the connector."""
    code = _FRESH.format(missing=missing, module=module, cls=cls, target=target, kwargs=KWARGS.get(extra, {}))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "profiles delta,hdfs,kafka,postgres,reference,s3" in done.stdout, done.stdout
    assert "refused" in done.stdout and f"pip install 'eosink[{extra}]'" in done.stdout, done.stdout


def test_the_command_line_names_the_extra_when_a_connector_library_is_missing() -> None:
    """Pass: ``eosink status --sink postgres`` in a Python without psycopg is one error line naming
    eosink[postgres], exit 1, no traceback."""
    code = textwrap.dedent(
        """
        import sys
        sys.modules["psycopg"] = None
        from eosink.cli import main
        sys.exit(main(["status", "--sink", "postgres", "--conninfo", "postgresql://u@127.0.0.1:9/db",
                       "--table", "public.events", "--app-id", "app"]))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "psycopg" in done.stderr and "pip install 'eosink[postgres]'" in done.stderr


SPARK_FAILURE = (
    "pyspark.errors.exceptions.captured.PythonException: Traceback (most recent call last):\n"
    '  File "/opt/venv/lib/python3.11/site-packages/eosink/connectors/{pkg}/sink.py", line 50, in <module>\n'
    "ModuleNotFoundError: No module named '{module}'\n"
)


@pytest.mark.parametrize(
    ("module", "extra"), [("psycopg", "postgres"), ("hdfs_native", "hdfs"), ("deltalake.writer", "delta")]
)
def test_an_executor_that_could_not_even_load_the_sink_is_named_from_sparks_text(module: str, extra: str) -> None:
    """The import fails while the executor unpickles the sink, before eosink's code runs: only Spark's text says so."""
    from eosink._extras import missing_on_executors
    from eosink._query import error_in

    text = SPARK_FAILURE.format(pkg=extra, module=module)
    for error in (missing_on_executors(text), error_in(text)):
        assert isinstance(error, ConfigurationError)
        assert f"pip install 'eosink[{extra}]'" in str(error)
        assert "the executors' Python" in str(error)


def test_a_missing_module_of_the_users_own_stays_sparks_error() -> None:
    from eosink._extras import missing_on_executors
    from eosink._query import error_in

    text = SPARK_FAILURE.format(pkg="postgres", module="my_udfs")
    assert missing_on_executors(text) is None
    assert error_in(text) is None
