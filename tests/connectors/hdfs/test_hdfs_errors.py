"""hdfs-native's errors as eosink's: what a lost DataNode raises, or a write it stalls, is retryable."""

from __future__ import annotations

import threading
import time

import pytest

from eosink.connectors.hdfs import HdfsConfig
from eosink.connectors.hdfs._errors import translate, translated
from eosink.connectors.hdfs._files import _Buffered
from eosink.errors import ConfigurationError, EosinkError, TransientError
from eosink.stores.hdfs import bounded

CONFIG = HdfsConfig("hdfs://127.0.0.1:1/t")


@pytest.mark.parametrize(
    "text",
    [
        'DataTransferError("All nodes failed for write")',  # every DataNode of a block's pipeline lost
        'DataTransferError("Failed to replay packets during recovery")',
        'DataTransferError("Datanode connection closed while waiting for ack")',
    ],
)
def test_a_failure_talking_to_datanodes_is_transient(text: str) -> None:
    assert type(translate(CONFIG, RuntimeError(text), "write")) is TransientError


def test_another_runtime_error_stays_an_eosink_error() -> None:
    assert type(translate(CONFIG, RuntimeError('InternalError("boom")'), "write")) is EosinkError


class _StalledWriter:
    """An hdfs-native writer whose ``hsync`` waits for a DataNode pipeline that never answers."""

    def __init__(self) -> None:
        self.written = b""
        self.release = threading.Event()
        self.closed = False

    def write(self, data: bytes) -> int:
        self.written += data
        return len(data)

    def hsync(self) -> None:
        self.release.wait(30)

    def close(self) -> None:
        self.closed = True


def test_a_stalled_hsync_ends_in_a_transient_error_within_write_timeout_s() -> None:
    config = HdfsConfig("hdfs://127.0.0.1:1/t", write_timeout_s=0.2)
    raw = _StalledWriter()
    out = _Buffered(raw, config.write_timeout_s)  # type: ignore[arg-type]
    out.write(b"rows")
    started = time.monotonic()
    with pytest.raises(TransientError) as caught, translated(config, "pre_commit"):
        out.sync_and_close()
    assert time.monotonic() - started < 5
    assert "write_timeout_s" in str(caught.value) and "hsync and close" in str(caught.value)
    assert raw.written == b"rows" and not raw.closed and not out.closed  # abandoned, never closed under the call
    raw.release.set()


def test_bounded_returns_the_value_and_raises_the_error_of_its_call() -> None:
    assert bounded(lambda: 7, 5, "a call") == 7
    with pytest.raises(FileExistsError):
        bounded(lambda: (_ for _ in ()).throw(FileExistsError("taken")), 5, "a call")


@pytest.mark.parametrize("bad", [0, -1.0, 86_401, "60"])
def test_write_timeout_s_must_be_a_positive_time(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="write_timeout_s"):
        HdfsConfig("hdfs://127.0.0.1:1/t", write_timeout_s=bad)  # type: ignore[arg-type]


KEYTAB = "/etc/security/keytabs/writer-7f3a.keytab"
TOKEN = "tok-9d1c55e0b2"  # a delegation-token-like client setting


def _secret_config() -> HdfsConfig:
    return HdfsConfig(
        "hdfs://127.0.0.1:1/t",
        kerberos_principal="writer@EXAMPLE.ORG",
        kerberos_keytab=KEYTAB,
        client_config={"dfs.client.delegation.token": TOKEN, "dfs.replication": "2"},
    )


def test_secret_settings_never_show_in_repr_or_str() -> None:
    config = _secret_config()
    for shown in (repr(config), str(config)):
        assert KEYTAB not in shown and TOKEN not in shown, shown
        assert "'dfs.replication': '2'" in shown and "kerberos=on" in shown


def test_an_error_text_that_quotes_a_secret_is_scrubbed_along_its_chain() -> None:
    config = _secret_config()
    cause = RuntimeError(f"GSSAPI failed reading {KEYTAB}")
    with pytest.raises(EosinkError) as caught, translated(config, "commit"):
        try:
            raise cause
        except RuntimeError as inner:
            raise ConnectionError(f"connection reset while sending token {TOKEN}") from inner
    seen: list[str] = []
    exc: BaseException | None = caught.value
    while exc is not None:
        seen.append(str(exc))
        exc = exc.__cause__ or exc.__context__
    assert type(caught.value) is TransientError
    assert "***" in str(caught.value)
    assert not any(KEYTAB in text or TOKEN in text for text in seen), seen
    assert KEYTAB not in str(cause), "the chained hdfs-native error keeps the keytab path"
