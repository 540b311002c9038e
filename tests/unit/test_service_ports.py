"""Every harness server's start on ports that another process may take first (no real server: a stand-in).

A server is given ports found free and binds them a moment later; another process may take one in between. A
first start then moves to fresh ports; a restart, which must keep its ports, fails naming the port and the process
that took it; any other failure is reported as before.

The stand-in (:data:`STANDIN`) plays java (MiniHdfs and Kafka), minio, postgres and initdb. It binds the ports its
command line gives it; on a taken one (or when told to pretend one was) it writes what the real server writes, and
exits, or lingers on as a JVM whose threads outlive the error. Once up, it greets whoever connects to its first
port: the servers' readiness checks are patched to look for that greeting.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import sys
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from eosink._procs import is_alive
from eosink.errors import ServiceError
from eosink.services import hdfs, kafka, minio, postgres

STANDIN = r'''
import os
import re
import signal
import socket
import sys
from pathlib import Path

ARGS = sys.argv[1:]


def server():
    """The ports the command line gives, the real server's line for a taken port, and its line once up."""
    if "MiniHdfs" in ARGS:
        at = ARGS.index("MiniHdfs")
        return (
            [int(ARGS[at + 2]), int(ARGS[at + 3])],
            "java.net.BindException: Problem binding to [localhost:{port}] java.net.BindException: "
            "Address already in use; For more details see:  http://wiki.apache.org/hadoop/BindException",
            "READY rpc=127.0.0.1:{0} http=127.0.0.1:{1}",
        )
    if "kafka.Kafka" in ARGS:
        listeners = re.search(r"^listeners=(.*)$", Path(ARGS[-1]).read_text(), re.MULTILINE)[1]
        return (
            [int(p) for p in re.findall(r":(\d+)", listeners)],
            "org.apache.kafka.common.KafkaException: Socket server failed to bind to 127.0.0.1:{port}: "
            "Address already in use.",
            "[KafkaRaftServer nodeId=1] Kafka Server started",
        )
    if ARGS[:1] == ["server"]:
        return (
            [int(ARGS[ARGS.index(flag) + 1].rsplit(":", 1)[1]) for flag in ("--address", "--console-address")],
            "FATAL Unable to start the server: Specified port is already in use",
            "API: http://127.0.0.1:{0}",
        )
    return (
        [int(ARGS[ARGS.index("-p") + 1])],
        'LOG:  could not bind IPv4 address "127.0.0.1": Address already in use\n'
        "HINT:  Is another postmaster already running on port {port}? If not, wait a few seconds and retry.\n"
        "FATAL:  could not create any TCP/IP sockets",
        "LOG:  database system is ready to accept connections",
    )


def fail(line, linger=False):
    print(line, flush=True)
    if linger:
        signal.pause()  # a JVM whose threads outlive the error, until it is stopped
    sys.exit(1)


def main():
    # PostgreSQL is stopped with SIGINT and installs its own handler whatever it inherited; so does this
    # stand-in (a test run started in the background by a shell inherits SIGINT ignored, and each stop would
    # wait out its timeout before the SIGKILL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if Path(sys.argv[0]).name == "initdb":
        Path(ARGS[ARGS.index("-D") + 1]).mkdir(parents=True, exist_ok=True)
        return
    ports, taken, up = server()
    starts = Path(os.environ["STANDIN_STARTS"])
    with starts.open("a") as out:
        out.write(" ".join(map(str, [os.getpid(), *ports])) + "\n")
    start = str(len(starts.read_text().splitlines()))
    linger = bool(os.environ.get("STANDIN_LINGER"))
    if start in os.environ.get("STANDIN_CLASH_AT", "").split(","):
        fail(taken.format(port=ports[0]), linger)
    socks = []
    also = [int(p) for p in os.environ.get("STANDIN_ALSO_BIND", "").split(",") if p]
    for port in ports + also:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            fail(taken.format(port=port), linger)
        sock.listen()
        socks.append(sock)
    if start in os.environ.get("STANDIN_FAIL_AT", "").split(","):
        fail("java.lang.OutOfMemoryError: Java heap space")
    print(up.format(*[s.getsockname()[1] for s in socks]), flush=True)
    while True:  # serve until stopped: greet whoever connects to the first port
        conn, _ = socks[0].accept()
        conn.sendall(b"standin\n")
        conn.close()


main()
'''

#: The variables that would point the services at servers of your own.
OVERRIDES = (
    "EOSINK_HDFS_URL",
    "EOSINK_WEBHDFS_URL",
    "EOSINK_KAFKA_BOOTSTRAP",
    "EOSINK_S3_ENDPOINT",
    "EOSINK_POSTGRES_URL",
)
PRIVATE = ("hdfs-server", "kafka-server", "minio-server", "postgres-server")
#: HdfsService is not here: its NameNode binds ports of 0, which the kernel picks as it binds them.
PICKED = ("kafka-service", "minio-service", "postgres-service", *PRIVATE)
#: How long a start may take here: only a start that misses a port clash in its log, and lingers, waits that long.
START_TIMEOUT_S = 20.0


def _answers(port: int | None) -> bool:
    """Whether the stand-in greets on ``port`` (what the patched readiness checks ask)."""
    if port is None:
        return False
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            return conn.recv(16) == b"standin\n"
    except OSError:
        return False


@contextlib.contextmanager
def _listening(port: int = 0) -> Iterator[int]:
    """Hold TCP ``port`` (0: a free one) on 127.0.0.1 with a listening socket, as another process would."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the stand-in's closed connections may linger
        sock.bind(("127.0.0.1", port))
        sock.listen()
        yield int(sock.getsockname()[1])


@dataclass
class Subject:
    """A server under test, started, stopped and asked for its main port alike, whichever it is."""

    server: Any
    start: Callable[[], Any]
    close: Callable[[], Any]
    port: Callable[[], int | None]


@dataclass
class Harness:
    """Makes the servers, all on the stand-in; reads what the stand-in recorded of its starts."""

    tmp: Path

    def starts(self) -> list[list[int]]:
        """Each start of the stand-in: its PID, then the ports it was given."""
        record = self.tmp / "starts"
        return [[int(w) for w in line.split()] for line in record.read_text().splitlines()] if record.exists() else []

    def make(self, kind: str) -> Subject:
        tmp = self.tmp
        if kind == "hdfs-service":
            hs = hdfs.HdfsService()
            return Subject(hs, hs.up, hs.down, lambda: urllib.parse.urlsplit(hs.endpoint().url).port)
        if kind == "hdfs-server":
            h = hdfs.HdfsServer(tmp / "hdfs", START_TIMEOUT_S)
            return Subject(h, h.start, h.close, lambda: h.port)
        if kind == "kafka-service":
            ks = kafka.KafkaService()
            return Subject(ks, ks.up, ks.down, lambda: int(ks.endpoint().bootstrap_servers.rsplit(":", 1)[1]))
        if kind == "kafka-server":
            k = kafka.KafkaServer(tmp / "kafka", START_TIMEOUT_S)
            return Subject(k, k.start, k.close, lambda: k.broker_port)
        if kind == "minio-service":
            ms = minio.MinioService()
            return Subject(ms, ms.up, ms.down, lambda: urllib.parse.urlsplit(ms.endpoint().endpoint_url).port)
        if kind == "minio-server":
            m = minio.MinioServer(tmp / "minio", START_TIMEOUT_S)
            return Subject(m, m.start, m.close, lambda: m.port)
        if kind == "postgres-service":
            ps = postgres.PostgresService()
            return Subject(ps, ps.up, ps.down, lambda: ps.endpoint().port)
        assert kind == "postgres-server", kind
        p = postgres.PostgresServer(tmp / "pg")
        return Subject(p, p.start, p.close, lambda: p.port)


@pytest.fixture
def harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Harness:
    """Every service and private server on the stand-in, its cache in ``tmp_path``; nothing provisioned."""
    standin = tmp_path / "standin"
    standin.write_text(f"#!{sys.executable} -S\n{STANDIN}")
    standin.chmod(standin.stat().st_mode | stat.S_IXUSR)
    pgbin = tmp_path / "pgbin"
    pgbin.mkdir()
    for name in ("postgres", "initdb"):
        (pgbin / name).symlink_to(standin)
    monkeypatch.setenv("EOSINK_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("STANDIN_STARTS", str(tmp_path / "starts"))
    monkeypatch.setenv("EOSINK_POSTGRES_BINDIR", str(pgbin))
    for name in OVERRIDES:
        monkeypatch.delenv(name, raising=False)
    for service in (hdfs.HdfsService, kafka.KafkaService, minio.MinioService, postgres.PostgresService):
        monkeypatch.setattr(service, "start_timeout_s", START_TIMEOUT_S)
        if service is not postgres.PostgresService:  # its provisioning only looks for the binaries
            monkeypatch.setattr(service, "provision", lambda self: None)
    monkeypatch.setattr(hdfs, "_jdk", lambda: (str(standin), str(standin)))
    monkeypatch.setattr(hdfs.HdfsService, "_cds_options", lambda self, java: [])
    monkeypatch.setattr(kafka, "java_command", lambda jars, home: [str(standin)])
    monkeypatch.setattr(kafka, "format_storage", lambda java, config, jars, extra=(): None)
    monkeypatch.setattr(kafka, "serves", lambda bootstrap, client=None: _answers(int(bootstrap.rsplit(":", 1)[1])))
    monkeypatch.setattr(minio.MinioService, "binary", property(lambda self: standin))
    monkeypatch.setattr(  # a URL, or a signed request (readiness: MinIO serves S3 requests)
        minio, "_http_ok", lambda url, ca=None: _answers(urllib.parse.urlsplit(getattr(url, "full_url", url)).port)
    )
    monkeypatch.setattr(postgres, "service_user", lambda: None)  # under root: no server user for a stand-in
    monkeypatch.setattr(postgres, "_accepts", lambda endpoint: _answers(endpoint.port))
    return Harness(tmp_path)


def _none_running(harness: Harness) -> bool:
    """Whether every stand-in started so far is gone (a failed start stops its server)."""
    return not any(is_alive(start[0]) for start in harness.starts())


@pytest.mark.parametrize("kind", PICKED)
def test_a_first_start_whose_port_was_taken_meanwhile_moves_to_fresh_ports(
    kind: str, harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first try says its first port is taken and lingers on; it is stopped, and the second try, on fresh
    ports, comes up: the server then reports those."""
    monkeypatch.setenv("STANDIN_CLASH_AT", "1")  # the first start finds its first port taken
    monkeypatch.setenv("STANDIN_LINGER", "1")  # and lingers on after saying so, as a JVM may
    subject = harness.make(kind)
    try:
        subject.start()
        first, second = harness.starts()  # one retry, no more
        assert first[1:] != second[1:], "the retry was given the same ports"
        assert subject.port() == second[1], "the server does not report the ports it moved to"
        assert _answers(subject.port())
        assert not is_alive(first[0])
    finally:
        subject.close()
    assert _none_running(harness)


@pytest.mark.parametrize("linger", [False, True], ids=["exits", "lingers"])
@pytest.mark.parametrize("kind", PRIVATE)
def test_a_restart_on_a_port_taken_meanwhile_fails_naming_the_port_and_who_took_it(
    kind: str, linger: bool, harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The restarted server says the port is taken, then exits (while the readiness check, answered by the process
    that took the port, still waits) or lingers on, as a JVM may."""
    subject = harness.make(kind)
    try:
        subject.start()
        port = subject.port()
        assert port is not None
        subject.server.stop()
        if linger:
            monkeypatch.setenv("STANDIN_LINGER", "1")
        with _listening(port), pytest.raises(ServiceError) as failed:
            subject.start()  # a restart: the server started once on these ports
        error = failed.value
        assert f"could not bind port {port} when restarted: process {os.getpid()} (" in error.problem
        assert "cannot move" in error.problem
        assert error.fix == f"stop the process on port {port} (pid {os.getpid()}), or restart the test."
        assert "JDK" not in str(error) and "memory" not in str(error)
        assert subject.port() == port, "a restart moved the server to other ports"
        assert len(harness.starts()) == 2, "a restart was retried"
        assert _none_running(harness), "the failed restart left its server running"
    finally:
        subject.close()


def test_a_port_taken_at_every_try_is_named_after_the_last_one(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HdfsService binds ports the kernel picks, so only a port fixed elsewhere (here: the stand-in is told to
    bind one more) can be taken: each try fails the same way, and the error names the port, not the JDK."""
    subject = harness.make("hdfs-service")
    with _listening() as port:
        monkeypatch.setenv("STANDIN_ALSO_BIND", str(port))
        with pytest.raises(ServiceError) as failed:
            subject.start()
    error = failed.value
    assert "in 3 tries" in error.problem
    assert f"(the last time port {port}, taken by process {os.getpid()} (" in error.problem
    assert error.fix == f"stop the process on port {port} (pid {os.getpid()}), or try again."
    assert "JDK" not in str(error) and "memory" not in str(error)
    assert len(harness.starts()) == 3
    assert _none_running(harness)
    assert subject.server.pid() is None  # nothing recorded as running


@pytest.mark.parametrize("kind", ["hdfs-server", "hdfs-service", "postgres-server"])
def test_a_failure_that_is_no_port_clash_is_reported_as_before(
    kind: str, harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first try finds a port taken; the second fails otherwise, and is reported as every such failure is."""
    monkeypatch.setenv("STANDIN_CLASH_AT", "1")
    monkeypatch.setenv("STANDIN_FAIL_AT", "2")
    subject = harness.make(kind)
    try:
        with pytest.raises(ServiceError) as failed:
            subject.start()
    finally:
        subject.close()
    error = failed.value
    assert "exited while starting" in error.problem
    assert "java.lang.OutOfMemoryError: Java heap space" in error.problem  # the log's tail
    log = subject.server.log_path
    expected = {
        "hdfs-server": f"read {log}; a JDK 17+ and about 1 GB of free memory are needed.",
        "hdfs-service": f"read {log}; a JDK 17+ and about 1 GB of free memory are needed.",
        "postgres-server": f"see the server log {log}.",
    }
    assert error.fix == expected[kind]
    assert len(harness.starts()) == 2
    assert _none_running(harness)


def test_a_training_start_waits_for_its_own_ready_line_not_an_earlier_trainings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HDFS's class-data-sharing training appends to the log an earlier training left: that one's READY line must
    not pass for this start's (it was taken at once, the JVM stopped before it was up, and no archive was made)."""
    monkeypatch.setenv("EOSINK_CACHE", str(tmp_path / "cache"))
    java = tmp_path / "java"
    java.write_text("#!/bin/sh\necho 'java.lang.OutOfMemoryError: Java heap space'\nexit 1\n")
    java.chmod(java.stat().st_mode | stat.S_IXUSR)
    service = hdfs.HdfsService()
    train_log = service.home / "cds" / "train.log"
    train_log.parent.mkdir(parents=True)
    train_log.write_text("READY rpc=127.0.0.1:40001 http=127.0.0.1:40002\nSTOPPING\nSTOPPED\n")  # an earlier build's
    with pytest.raises(ServiceError, match="exited while starting") as failed:
        service._train_cds(str(java), "build-2")
    assert "OutOfMemoryError" in str(failed.value)
