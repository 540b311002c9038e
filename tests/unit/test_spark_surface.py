"""The Spark-facing surface without a Spark session: validation, pickling, missing pyspark."""

from __future__ import annotations

import pickle
import re
import sys
from pathlib import Path

import pytest

import eosink
from eosink.connectors.reference import ReferenceSink
from eosink.contract import Capabilities
from eosink.errors import ConfigurationError
from eosink.spark import Query


def _writer(tmp_path: Path, **kw: object) -> eosink.BatchWriter:
    args: dict[str, object] = {"app_id": "app", "strategy": "2pc", "checkpoint_location": str(tmp_path / "chk")}
    args.update(kw)
    return eosink.foreach_batch(ReferenceSink(tmp_path / "s.db"), **args)  # type: ignore[arg-type]


def test_public_names_are_exported() -> None:
    """`import eosink` exposes the contract, the strategies, foreach_batch and the error module."""
    for name in ("Sink", "foreach_batch", "TwoPhaseCommit", "TxidCheck", "Idempotent", "errors"):
        assert name in eosink.__all__ and hasattr(eosink, name)


@pytest.mark.parametrize("app_id", ["", "   ", "x" * 201, 7])
def test_bad_app_id_is_a_configuration_error(tmp_path: Path, app_id: object) -> None:
    """Pass: ConfigurationError whose message says what a good app_id looks like."""
    with pytest.raises(ConfigurationError, match="app_id"):
        _writer(tmp_path, app_id=app_id)


@pytest.mark.parametrize("participants", [0, -1, 1.5])
def test_bad_participants_is_a_configuration_error(tmp_path: Path, participants: object) -> None:
    with pytest.raises(ConfigurationError, match="participants"):
        _writer(tmp_path, participants=participants)


def test_unknown_strategy_and_missing_checkpoint_are_configuration_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="Unknown strategy"):
        _writer(tmp_path, strategy="exactly-twice")
    with pytest.raises(ConfigurationError, match="checkpoint"):
        _writer(tmp_path, checkpoint_location="")


def test_not_a_sink_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="not an eosink Sink"):
        eosink.foreach_batch(object(), app_id="a", checkpoint_location=str(tmp_path))  # type: ignore[arg-type]


def test_strategy_the_sink_cannot_serve_is_refused_up_front(tmp_path: Path) -> None:
    """A sink without upserts cannot run the idempotent strategy: refused before any query starts."""
    sink = ReferenceSink(tmp_path / "s.db")
    sink.capabilities = Capabilities(supports_keys=False)
    with pytest.raises(ConfigurationError, match="supports_keys"):
        eosink.foreach_batch(sink, app_id="a", strategy="idempotent", checkpoint_location=str(tmp_path))


def test_writer_pickles_without_its_coordinator(tmp_path: Path) -> None:
    """Spark Connect pickles the foreachBatch function: the writer must travel without threads or
    connections, and build its coordinator again where it lands."""
    writer = _writer(tmp_path)
    _ = writer.coordinator  # created locally
    clone = pickle.loads(pickle.dumps(writer))
    assert clone._engine is None
    assert clone.app_id == "app" and clone.strategy == writer.strategy
    assert clone.coordinator is not writer.coordinator


def test_missing_pyspark_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without pyspark, calling the writer says to install the spark extra."""
    monkeypatch.setitem(sys.modules, "pyspark", None)
    with pytest.raises(ConfigurationError, match=r"eosink\[spark\]"):
        _writer(tmp_path)(object(), 0)


def test_repr_shows_what_identifies_the_writer(tmp_path: Path) -> None:
    """repr names the sink, app_id, strategy and checkpoint (what an operator needs in a log)."""
    text = repr(_writer(tmp_path))
    assert "app_id='app'" in text and "TwoPhaseCommit()" in text and "chk" in text and "ReferenceSink" in text


def test_a_checkpoint_that_is_not_the_querys_own_is_refused_at_the_first_batch(tmp_path: Path) -> None:
    """Spark writes offsets/N before foreachBatch(N): a location without it is another query's (or none).

    Given ``checkpoint_location=A`` while Spark ran with ``checkpointLocation=B``, 2pc used to wait for a
    commit log Spark never wrote and failed at batch 1 with a message that sent the user in a circle.
    Pass: ConfigurationError at batch 0 naming the location and the fix, before the sink is touched
    (no epoch handed out); with offsets/0 present the same writer gets past the check.
    """
    writer = _writer(tmp_path)
    with pytest.raises(ConfigurationError) as err:
        writer(object(), 0)
    assert str(tmp_path / "chk") in err.value.problem and "offsets/0" in err.value.problem
    assert err.value.fix is not None and "writer.start" in err.value.fix
    assert writer.coordinator.epoch is None and writer.sink.fetch_last_bundle("app") is None
    (tmp_path / "chk" / "offsets").mkdir(parents=True)
    (tmp_path / "chk" / "offsets" / "0").write_text("v1\n{}\n")
    with pytest.raises(Exception) as past:  # past the check: the (fake) DataFrame itself fails
        writer(object(), 0)
    assert not isinstance(past.value, ConfigurationError)


def test_start_sets_the_checkpoint_location_and_the_writer(tmp_path: Path) -> None:
    """writer.start(df.writeStream...) states the checkpoint once: Spark's option comes from the writer."""
    calls: list[tuple[str, object]] = []

    class Stream:
        def option(self, key: str, value: object) -> Stream:
            calls.append((key, value))
            return self

        def foreachBatch(self, fn: object) -> Stream:
            calls.append(("foreachBatch", fn))
            return self

        def start(self) -> str:
            calls.append(("start", None))
            return "query"

    writer = _writer(tmp_path)
    query = writer.start(Stream())  # type: ignore[arg-type]
    assert isinstance(query, Query) and query.spark_query == "query"
    assert calls == [("checkpointLocation", str(tmp_path / "chk")), ("foreachBatch", writer), ("start", None)]
    with writer as same:
        assert same is writer


@pytest.mark.parametrize("version", ["3.4.4", "3.3.0", "2.4.8", "3.4.1.dev0"])
def test_a_pyspark_older_than_3_5_is_a_clear_error(version: str) -> None:
    """Pass: ConfigurationError naming the version found and the one needed; 3.5 and 4.x pass."""
    from eosink.spark import check_pyspark_version

    with pytest.raises(ConfigurationError, match=re.escape(f"PySpark {version} is too old")) as err:
        check_pyspark_version(version)
    assert "3.5" in str(err.value)
    for good in ("3.5.0", "3.5.9", "4.0.5", "4.2.0", "4.3.0", "4.1.0.dev1"):
        check_pyspark_version(good)


def test_an_executors_error_reaches_the_driver_with_its_details() -> None:
    """A participant's terminal error crosses mapInArrow as JSON. Pass: its class, text and the details it carries
    (a CommittedWorkLostError's lost batches, its app_id; a PermissionDeniedError's permission) come back."""
    import json

    from eosink import errors
    from eosink.spark import _details, _raise_remote

    lost = errors.CommittedWorkLostError("Gone.", "Rewind.", app_id="a", batch_id=3, batches=(3, 4), server="tl 2")
    denied = errors.PermissionDeniedError("No.", "Grant it.", permission="INSERT on t")
    for sent in (lost, denied):
        body = json.loads(
            json.dumps({"type": type(sent).__name__, "problem": sent.problem, "fix": sent.fix, **_details(sent)})
        )
        with pytest.raises(type(sent)) as got:
            _raise_remote(body)
        assert (got.value.problem, got.value.fix) == (sent.problem, sent.fix)
        assert vars(got.value) == vars(sent)
