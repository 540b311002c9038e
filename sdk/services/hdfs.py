"""HDFS for the tests: one NameNode and two DataNodes in a single JVM (Hadoop's MiniDFSCluster).

What runs: ``MiniHdfs.java`` (next to this module), a small launcher compiled at provisioning
time against ``org.apache.hadoop:hadoop-minicluster`` 3.5.0 from Maven Central — the
Hadoop version of the client in the installed pyspark. The YARN and MapReduce parts of the
minicluster are excluded (131 jars, 78 MB, instead of 195, 114 MB); ``hadoop-hdfs-client``, which
``hadoop-hdfs`` only declares as *provided*, is added. Needs a JDK 17 or newer (``java`` and
``javac``; ``$JAVA_HOME`` is honoured) and Maven.

Ports: every listener is bound to 127.0.0.1 on a port the kernel picks, and the launcher reports
the NameNode's RPC and HTTP ports on its ``READY`` line. The endpoint is

* ``EOSINK_HDFS_URL``    ``hdfs://127.0.0.1:<rpc port>`` — what ``hdfs_native`` and Spark use;
* ``EOSINK_WEBHDFS_URL`` ``http://127.0.0.1:<http port>/webhdfs/v1`` — WebHDFS (REST) on the NameNode.

Data: fresh under ``run/hdfs/data`` at every start, replication 2 with
``dfs.namenode.file.close.num-committed-allowed=1`` (a file closes at once instead of racing the
DataNodes' block reports; with a single DataNode, every other close waited half a second), permission checks on: the
login that runs the cluster is HDFS's superuser, so a client of the same login (the default) may
write anywhere, and another user name (``HADOOP_USER_NAME``) needs permissions; ``/tmp`` is
world-writable. The JVM runs with ``-Xmx768m``, the serial GC and the C1 JIT only,
and with a class-data-sharing archive made at provisioning by one training start: together they
roughly halve the start time, at some cost in peak throughput that tests do not notice.

A private cluster that the chaos harness and the demo restart and crash on purpose is
:class:`HdfsServer`: the same launcher on a directory of its own, restarted with ``keep`` (no
format) on the same NameNode ports and data.

Your own cluster: set ``EOSINK_HDFS_URL=hdfs://namenode:8020`` (``viewfs://`` works too).
``EOSINK_WEBHDFS_URL`` is optional; unset, it is derived from the NameNode's host and Hadoop 3's
default HTTP port: ``http://namenode:9870/webhdfs/v1`` (set it for HA name services and viewfs,
whose "host" is no NameNode; ``hdfs_native`` reads their layout from ``$HADOOP_CONF_DIR``).
The check writes, renames, reads and deletes a file under ``/tmp/eosink-check-*`` as
``$HADOOP_USER_NAME`` (or your login name).
"""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from hdfs_native import Client, WriteOptions

from eosink._waiting import wait_until as poll
from eosink.errors import ServiceError
from eosink.services import _jdk as _jdk_tools
from eosink.services._maven import Artifact, fetch_jars
from eosink.services._process import (
    Attempt,
    Proc,
    ServerProcess,
    free_ports,
    log_after,
    log_size,
    log_tail,
    spawn,
    start_on_ports,
    stop,
    wait_until,
)
from eosink.services.base import Endpoint, Service
from eosink.stores.hdfs import create_file

__all__ = [
    "HADOOP_VERSION",
    "HdfsEndpoint",
    "HdfsServer",
    "HdfsService",
    "compile_launcher",
    "send_command",
    "spawn_with_commands",
]

log = logging.getLogger("eosink.services")

#: The Hadoop of the installed pyspark's client (``hadoop-client-api-3.5.0.jar``).
HADOOP_VERSION = "3.5.0"

#: Parts of the minicluster a NameNode and a DataNode never load (YARN, MapReduce and their tests).
_NOT_HDFS = tuple(
    f"org.apache.hadoop:{name}"
    for name in (
        "hadoop-yarn-server-tests",
        "hadoop-yarn-api",
        "hadoop-yarn-server-web-proxy",
        "hadoop-mapreduce-client-app",
        "hadoop-mapreduce-client-core",
        "hadoop-mapreduce-client-hs",
        "hadoop-mapreduce-client-jobclient",
    )
)
_ARTIFACTS = (
    Artifact("org.apache.hadoop", "hadoop-minicluster", HADOOP_VERSION, exclusions=_NOT_HDFS),
    # hadoop-hdfs declares its client classes (HdfsConfiguration, DistributedFileSystem) as provided.
    Artifact("org.apache.hadoop", "hadoop-hdfs-client", HADOOP_VERSION),
)

_JVM_OPTS = ("-Xmx768m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.net.preferIPv4Stack=true")
_MAIN = "MiniHdfs"
#: The training start writes its archive (about 75 MB) while it exits: on a loaded machine that outlasts
#: the usual 30 s between SIGTERM and SIGKILL, and a SIGKILL leaves no archive.
_TRAINING_STOP_S = 120.0
#: The private cluster's NameNode declares a silent DataNode dead after 12 s, not 10.5 min (see MiniHdfs.java).
_QUICK_DATANODE_EXPIRY = "-Dminihdfs.quickDataNodeExpiry=true"
#: HDFS's default ``num-committed-allowed`` (0) on a private cluster: see HdfsServer.close_before_report.
_CLOSE_AFTER_REPORT = "-Dminihdfs.numCommittedAllowed=0"
_READY = re.compile(r"^READY rpc=127\.0\.0\.1:(\d+) http=127\.0\.0\.1:(\d+)$", re.MULTILINE)
#: Hadoop 3's default NameNode HTTP port, for deriving the WebHDFS URL of your own cluster.
_DEFAULT_NN_HTTP_PORT = 9870
_WEBHDFS_PATH = "/webhdfs/v1"
#: hdfs_native retries an unreachable NameNode 15 times with backoff (minutes); a check fails in seconds.
_CHECK_CLIENT_CONF = {"dfs.client.failover.max.attempts": "2"}


@dataclass(frozen=True)
class HdfsEndpoint(Endpoint):
    """A NameNode: its RPC URL (for ``hdfs_native`` and Spark) and its WebHDFS base URL."""

    url: str
    webhdfs_url: str

    def env(self) -> dict[str, str]:
        return {"EOSINK_HDFS_URL": self.url, "EOSINK_WEBHDFS_URL": self.webhdfs_url}


class HdfsService(Service[HdfsEndpoint]):
    """A MiniDFSCluster (1 NameNode, 2 DataNodes) on 127.0.0.1, or your own cluster."""

    name = "hdfs"
    endpoint_type = HdfsEndpoint
    override_vars = ("EOSINK_HDFS_URL", "EOSINK_WEBHDFS_URL")

    # -- your own cluster ------------------------------------------------------------------

    def external(self) -> HdfsEndpoint | None:
        """``EOSINK_HDFS_URL`` (required) and ``EOSINK_WEBHDFS_URL`` (derived when unset)."""
        url = os.environ.get("EOSINK_HDFS_URL", "").strip().rstrip("/")
        webhdfs = os.environ.get("EOSINK_WEBHDFS_URL", "").strip().rstrip("/")
        if not url:
            if webhdfs:
                raise ServiceError(
                    "EOSINK_WEBHDFS_URL is set but EOSINK_HDFS_URL is not; the connectors talk to HDFS over RPC.",
                    "also set EOSINK_HDFS_URL=hdfs://<namenode>:8020, or unset EOSINK_WEBHDFS_URL.",
                )
            return None
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("hdfs", "viewfs") or not parts.hostname:
            raise ServiceError(
                f"EOSINK_HDFS_URL={url!r} is not an HDFS URL.", "set it like hdfs://<namenode>:8020 (or viewfs://...)."
            )
        if not webhdfs:
            host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
            webhdfs = f"http://{host}:{_DEFAULT_NN_HTTP_PORT}{_WEBHDFS_PATH}"
        else:
            web = urllib.parse.urlsplit(webhdfs)
            if web.scheme not in ("http", "https") or not web.hostname:
                raise ServiceError(
                    f"EOSINK_WEBHDFS_URL={webhdfs!r} is not an HTTP URL.",
                    f"set it like http://<namenode>:{_DEFAULT_NN_HTTP_PORT}{_WEBHDFS_PATH}, or unset it.",
                )
            if web.path in ("", "/"):
                webhdfs += _WEBHDFS_PATH
        return HdfsEndpoint(url=url, webhdfs_url=webhdfs)

    # -- provisioning ----------------------------------------------------------------------

    @property
    def _jar(self) -> Path:
        return self.home / "minihdfs.jar"

    def provision(self) -> None:
        """Fetch the Hadoop jars, compile the launcher, and make its class-data-sharing archive (all cached)."""
        jars = fetch_jars(_ARTIFACTS, self.home / "jars", what=f"HDFS (Hadoop {HADOOP_VERSION} minicluster)")
        java, javac = _jdk()
        build_key = self._compile(javac, jars)
        self._train_cds(java, build_key)

    def _compile(self, javac: str, jars: list[Path]) -> str:
        """Compile MiniHdfs.java into ``classes/`` and pack it as ``minihdfs.jar``; a key of what was built."""
        return compile_launcher(self.home, javac, jars, "MiniHdfs.java", self._jar, self.home / "classes")

    def _cds_archive(self, java: str, build_key: str) -> Path:
        """Where the archive for this build and this JVM lives (a JVM update makes a new one)."""
        real = Path(java).resolve()
        key = hashlib.sha256(f"{build_key}|{real}|{real.stat().st_mtime_ns}".encode()).hexdigest()[:16]
        return self.home / "cds" / f"minihdfs-{key}.jsa"

    def _train_cds(self, java: str, build_key: str) -> None:
        """Start the cluster once with ``-XX:ArchiveClassesAtExit`` so later starts map its classes.

        A failed start raises (the real start would fail alike); an archive the JVM did not write
        only costs speed, so it is logged and not tried again for this build.
        """
        archive = self._cds_archive(java, build_key)
        failed = archive.with_suffix(".failed")
        if archive.exists() or failed.exists():
            return
        cds = archive.parent
        work, train_log = cds / "train", cds / "train.log"
        if cds.exists():  # earlier builds' archives, an interrupted training; a failed one's log stays
            for stale in cds.iterdir():
                if stale.is_dir():
                    shutil.rmtree(stale)
                elif stale != train_log:
                    stale.unlink()
        cds.mkdir(exist_ok=True)
        (work / "tmp").mkdir(parents=True)
        partial = archive.with_suffix(".partial")
        log.info("[hdfs] one training start to make a class-data-sharing archive (once per build)")
        started = time.monotonic()
        # -Xlog:cds=off: the dump at exit warns once per old-format class in Hadoop's jars, hundreds of
        # lines that would push a failed start's own error out of the log's tail (the error message).
        argv = self._argv(java, work, [f"-XX:ArchiveClassesAtExit={partial}", "-Xlog:cds=off"])
        since = log_size(train_log)  # the log is kept and appended to: an earlier training's READY is not this one's
        proc = spawn(argv, train_log)
        try:
            self._wait_ready(proc, train_log, since)
        finally:
            stop(proc, what="HDFS (training start)", timeout_s=_TRAINING_STOP_S)
        shutil.rmtree(work, ignore_errors=True)
        if partial.exists():
            os.replace(partial, archive)
            log.info("[hdfs] archive made in %.1f s: %s", time.monotonic() - started, archive)
        else:
            failed.write_text(log_tail(train_log) + "\n")
            log.warning("[hdfs] the JVM wrote no class-data-sharing archive (starts stay slower); see %s", train_log)

    # -- running ---------------------------------------------------------------------------

    def _argv(
        self, java: str, data: Path, extra: list[str], ports: tuple[int, int] = (0, 0), *, keep: bool = False
    ) -> list[str]:
        """The launcher's command line on ``data``; ports of 0 let the kernel pick (READY reports them);
        ``keep`` starts on the data an earlier run left instead of formatting it."""
        return [
            java,
            *_JVM_OPTS,
            f"-Djava.io.tmpdir={data / 'tmp'}",  # Jetty unpacks its web apps here
            *extra,
            "-cp",
            f"{self._jar}{os.pathsep}{self.home / 'jars' / '*'}",
            _MAIN,
            str(data),
            str(ports[0]),  # NameNode RPC port
            str(ports[1]),  # NameNode HTTP port
            *(["keep"] if keep else []),
        ]

    def _cds_options(self, java: str) -> list[str]:
        """The JVM option that maps the class-data-sharing archive, if provisioning made one."""
        archive = self._cds_archive(java, (self.home / "minihdfs.jar.sha256").read_text().strip())
        return [f"-XX:SharedArchiveFile={archive}"] if archive.exists() else []

    def _wait_ready(
        self,
        proc: Proc,
        log_path: Path,
        since: int = 0,
        timeout_s: float | None = None,
        *,
        attempt: Attempt | None = None,
    ) -> tuple[int, int]:
        """Wait for the launcher's READY line (written after byte ``since`` of the log: a retried or restarted
        server appends to it); the NameNode's (RPC, HTTP) ports. With ``attempt``, a port taken meanwhile fails it
        with :class:`~eosink.services._process.PortClash`, never with the advice about the JDK and memory."""
        ports: list[tuple[int, int]] = []

        def ready() -> bool:
            found = _READY.search(log_after(log_path, since))
            if found:
                ports.append((int(found[1]), int(found[2])))
            return bool(found)

        wait_until(
            ready,
            what="HDFS (MiniDFSCluster)",
            proc=proc,
            log_path=log_path,
            timeout_s=self.start_timeout_s if timeout_s is None else timeout_s,
            fix=f"read {log_path}; a JDK 17+ and about 1 GB of free memory are needed.",
            attempt=attempt,
        )
        return ports[0]

    def launch(self) -> tuple[Proc, HdfsEndpoint]:
        """Start MiniHdfs on fresh data; return once the NameNode is active and the DataNodes registered.

        Every port is 0 here (the kernel picks each as it is bound), so none can be taken between picking and
        binding; the start still goes through :func:`~eosink.services._process.start_on_ports`, as every server's
        does, so that a clash on any port would be named as one."""
        java, _ = _jdk()
        extra = self._cds_options(java)
        log.info("[hdfs] starting MiniDFSCluster (Hadoop %s)%s", HADOOP_VERSION, " with CDS" if extra else "")

        def start(attempt: Attempt) -> tuple[Proc, tuple[int, int]]:
            (self.data / "tmp").mkdir(parents=True, exist_ok=True)  # a failed try's JVM removes it as it exits
            proc = spawn(self._argv(java, self.data, extra), self.log_path)
            try:
                return proc, self._wait_ready(proc, self.log_path, attempt.since, attempt=attempt)
            except BaseException:
                stop(proc, what="HDFS")
                raise

        proc, (rpc, http) = start_on_ports(start, (), log_path=self.log_path, what="HDFS", may_move=True)
        endpoint = HdfsEndpoint(url=f"hdfs://127.0.0.1:{rpc}", webhdfs_url=f"http://127.0.0.1:{http}{_WEBHDFS_PATH}")
        log.info("[hdfs] NameNode at %s, WebHDFS at %s", endpoint.url, endpoint.webhdfs_url)
        return proc, endpoint

    # -- checking --------------------------------------------------------------------------

    def check(self, endpoint: HdfsEndpoint) -> str:
        """Write, rename and read back a file with ``hdfs_native``; stat it over WebHDFS; delete it."""
        started = time.monotonic()
        user = os.environ.get("HADOOP_USER_NAME") or getpass.getuser()
        folder = f"/tmp/eosink-check-{uuid.uuid4().hex}"
        part, final = f"{folder}/part.tmp", f"{folder}/data.bin"
        payload = os.urandom(256 * 1024)
        step = "connect"
        client: Client | None = None
        created = cleaned = False
        try:
            client = Client(endpoint.url, _CHECK_CLIENT_CONF)
            step = f"create {part}"
            writer = create_file(client, part, WriteOptions(create_parent=True))
            created = True
            step = f"write {part}"
            writer.write(payload)
            step = f"close {part}"
            writer.close()
            step = f"rename {part} to {final}"
            client.rename(part, final)
            step = f"read {final}"
            reader = client.read(final)
            try:
                back = reader.readall()
            finally:
                reader.close()
            if back != payload:
                raise ServiceError(
                    f"HDFS at {endpoint.url} returned different bytes for {final} ({len(back)} of {len(payload)}).",
                    self._fix(),
                )
            step = f"WebHDFS GETFILESTATUS {final}"
            length = _webhdfs_length(endpoint.webhdfs_url, final, user)
            if length != len(payload):
                raise ServiceError(
                    f"WebHDFS at {endpoint.webhdfs_url} reports {length} bytes for {final}, not {len(payload)}.",
                    self._fix(),
                )
            step = f"delete {folder}"
            client.delete(folder, recursive=True)
            cleaned = True
        except ServiceError:
            raise
        except Exception as exc:
            where = endpoint.webhdfs_url if step.startswith("WebHDFS") else endpoint.url
            raise ServiceError(
                f"HDFS check failed at step '{step}' against {where}: {type(exc).__name__}: {exc}", self._fix()
            ) from exc
        finally:
            if client is not None and created and not cleaned:
                with contextlib.suppress(Exception):  # best effort: the failed step's error is the one to report
                    client.delete(folder, recursive=True)
        ms = (time.monotonic() - started) * 1000
        return (
            f"hdfs {endpoint.url}: wrote, renamed, read back {len(payload) // 1024} KiB (hdfs_native) "
            f"and stat'ed it over WebHDFS {endpoint.webhdfs_url} as {user!r} in {ms:.0f} ms"
        )

    def _fix(self) -> str:
        if self.external() is not None:
            return (
                "check that EOSINK_HDFS_URL / EOSINK_WEBHDFS_URL point at a running NameNode that lets "
                "$HADOOP_USER_NAME write under /tmp, or unset them to use the local cluster."
            )
        return f"read {self.log_path}; restart with `eosink services down hdfs` then `eosink services up hdfs`."


def compile_launcher(home: Path, javac: str, jars: list[Path], source_name: str, jar: Path, classes: Path) -> str:
    """Compile ``source_name`` (next to this module) against the Hadoop jars in ``home/jars`` into ``classes`` and
    pack it as ``jar`` (class-data sharing takes only jars on the class path); a key of what was built. Nothing is
    done when ``jar``'s stamp already holds that key."""
    source = Path(__file__).with_name(source_name)
    digest = hashlib.sha256(source.read_bytes())
    digest.update("\n".join(p.name for p in jars).encode())
    key = digest.hexdigest()
    stamp = jar.with_name(jar.name + ".sha256")
    if jar.exists() and stamp.exists() and stamp.read_text().strip() == key:
        return key
    if classes.exists():
        shutil.rmtree(classes)
    classes.mkdir()
    log.info("[hdfs] compiling %s", source.name)
    cmd = [javac, "-nowarn", "-cp", str(home / "jars" / "*"), "-d", str(classes), str(source)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-25:])
        raise ServiceError(
            f"javac could not compile {source} against Hadoop {HADOOP_VERSION}:\n{tail}",
            "use a JDK 17 or newer (set JAVA_HOME to it); if the jars are damaged, delete "
            f"{home} and run `make services-up` again.",
        )
    tmp = jar.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w") as packed:
        for cls in sorted(classes.rglob("*.class")):
            packed.write(cls, cls.relative_to(classes).as_posix())
    os.replace(tmp, jar)
    stamp.write_text(key + "\n")
    return key


class HdfsServer(ServerProcess):
    """A private MiniDFSCluster on ``root``: the chaos harness and the demo restart and crash it on purpose
    (the shared service is never restarted).

    It keeps its NameNode's RPC and HTTP ports and its data across restarts, so a fault proxy in front
    of the RPC port keeps working: a restart starts the launcher on the same directories without
    formatting them; the NameNode replays its edit log (also after SIGKILL) and the READY line comes
    once the DataNodes have reported their blocks and the NameNode has left safe mode. The DataNodes
    get new ports at each start (clients learn them from the NameNode). Stopped by its own PID's
    process group; nothing in it is secret.

    One DataNode can be stopped and started again while the rest runs on (:meth:`stop_datanode`,
    :meth:`start_datanode`): the launcher reads those commands from a pipe on its standard input,
    which only this object holds, and answers each with a line in its log. Its NameNode declares a
    silent DataNode dead after 12 s instead of HDFS's 10.5 min, so tests see the whole of a DataNode's
    death in seconds.
    """

    what = "private HDFS"

    def __init__(self, root: Path, start_timeout_s: float = 120.0, *, close_before_report: bool = True) -> None:
        self.root = root
        self.start_timeout_s = start_timeout_s
        self.close_before_report = close_before_report
        """``dfs.namenode.file.close.num-committed-allowed`` 1 (as the shared cluster) or, when false, HDFS's
        default 0: a ``close`` waits for the DataNodes' report, so no reader ever sees a just-closed file short."""
        self.proc: Proc | None = None
        self._use_ports(free_ports(2))
        self._formatted = False
        self._commands: BinaryIO | None = None
        """The write end of the launcher's standard input, while it runs."""
        self._command_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"HdfsServer({self.endpoint.url}, root={str(self.root)!r})"

    @property
    def log_path(self) -> Path:
        return self.root / "hdfs.log"

    def _use_ports(self, ports: Sequence[int]) -> None:
        """Take ``ports`` as the NameNode's (RPC, HTTP) ports: picked free when made, and moved by a first start
        that finds one taken; kept from then on."""
        self.port, self.http_port = ports
        """The NameNode's RPC port (what clients and a fault proxy connect to) and its HTTP port (WebHDFS)."""
        self.endpoint = HdfsEndpoint(
            url=f"hdfs://127.0.0.1:{self.port}", webhdfs_url=f"http://127.0.0.1:{self.http_port}{_WEBHDFS_PATH}"
        )

    def start(self) -> HdfsEndpoint:
        """Start the cluster (provisioning first if needed: jars, launcher, archive) and wait until it is up:
        on fresh data the first time, on the data it left at every later start.

        The first start moves to fresh ports if one of its own was taken meanwhile; a later one keeps them
        and fails with a :class:`~eosink.services._process.PortClash` naming the port and who took it."""
        service = HdfsService()
        service.provisioned()  # the chaos harness's workers start their servers at once
        java, _ = _jdk()
        data = self.root / "data"
        extra = [*service._cds_options(java), _QUICK_DATANODE_EXPIRY]
        if not self.close_before_report:
            extra.append(_CLOSE_AFTER_REPORT)

        def start(attempt: Attempt) -> tuple[int, int]:
            (data / "tmp").mkdir(parents=True, exist_ok=True)  # a failed try's JVM removes it as it exits
            self._use_ports(attempt.ports)
            argv = service._argv(java, data, extra, (self.port, self.http_port), keep=self._formatted)
            return self._launch(service, argv, attempt)

        ports = start_on_ports(
            start, (self.port, self.http_port), log_path=self.log_path, what=self.what, may_move=not self._formatted
        )
        self._formatted = True
        if ports != (self.port, self.http_port):  # the launcher binds the ports it is given, or fails
            raise ServiceError(
                f"A private HDFS came up on ports {ports}, not {(self.port, self.http_port)}.",
                f"read {self.log_path}; MiniHdfs binds the NameNode ports it is given.",
            )
        return self.endpoint

    def _launch(self, service: HdfsService, argv: list[str], attempt: Attempt) -> tuple[int, int]:
        """Start the launcher with a new command pipe on its standard input and wait for its READY line (the
        ports it reports); stop it (SIGKILL) if it does not get there."""
        commands, self._commands = self._commands, None
        proc, self._commands = spawn_with_commands(argv, self.log_path, replacing=commands)
        self.proc = proc
        try:
            return service._wait_ready(proc, self.log_path, attempt.since, self.start_timeout_s, attempt=attempt)
        except BaseException:
            self.stop(crash=True)
            raise

    def stop(self, *, crash: bool = False) -> None:
        """Stop the whole cluster (``crash``: SIGKILL) and close its command pipe."""
        super().stop(crash=crash)
        commands, self._commands = self._commands, None
        if commands is not None:
            commands.close()

    def stop_datanode(self, index: int, timeout_s: float = 60.0) -> None:
        """Stop DataNode ``index`` (0 or 1, its place at the first start) at once, as a crash would, while the
        NameNode and the other DataNode run on: writers lose their connections to it mid-block, and the
        NameNode learns of it only from the missing heartbeats (this cluster declares it dead after 12 s, then
        stops placing blocks on it within 5 s). For tests of what a DataNode's death does to writers."""
        self._command(f"stop-datanode {index}", f"DATANODE {index} STOPPED", timeout_s)

    def start_datanode(self, index: int, timeout_s: float = 120.0) -> None:
        """Start DataNode ``index`` again on its data (new ports); return once the NameNode has it registered and
        has its block report, so that it holds replicas and takes new blocks again."""
        self._command(f"start-datanode {index}", f"DATANODE {index} STARTED", timeout_s)

    def namenode_stats(self) -> dict[str, Any]:
        """The NameNode's own counts (its JMX beans ``FSNamesystem`` and ``FSNamesystemState``, merged), e.g.
        ``NumLiveDataNodes``, ``NumDeadDataNodes``, ``CapacityTotal``, ``UnderReplicatedBlocks``. The NameNode
        refreshes them every few seconds (all zero just after a start). A stopped DataNode counts as dead once its
        heartbeats are overdue; its capacity leaves ``CapacityTotal`` when the NameNode stops placing blocks on it."""
        url = f"http://127.0.0.1:{self.http_port}/jmx?qry=Hadoop:service=NameNode,name=FSNamesystem*"
        with urllib.request.urlopen(url, timeout=10) as reply:
            beans = json.load(reply)["beans"]
        return {key: value for bean in beans for key, value in bean.items()}

    def _command(self, command: str, done: str, timeout_s: float) -> None:
        """Send ``command`` to the launcher; wait (bounded) for its answer ``done`` in the log."""
        with self._command_lock:
            send_command(repr(self), self.proc, self._commands, self.log_path, command, re.escape(done), timeout_s)


def spawn_with_commands(argv: list[str], log_path: Path, *, replacing: BinaryIO | None) -> tuple[Proc, BinaryIO]:
    """Start ``argv`` with a new command pipe as its standard input: the process and the pipe's write end, which
    only the caller holds. Closes ``replacing`` (an earlier start's pipe) first."""
    if replacing is not None:
        replacing.close()
    read_end, write_end = os.pipe()  # neither end is inherited by other children of this process
    commands = os.fdopen(write_end, "wb", buffering=0)
    try:
        return spawn(argv, log_path, stdin=read_end), commands
    except BaseException:
        commands.close()
        raise
    finally:
        os.close(read_end)


def send_command(
    who: str, proc: Proc | None, commands: BinaryIO | None, log_path: Path, command: str, done: str, timeout_s: float
) -> re.Match[str]:
    """Send ``command`` to a launcher (``proc``, reading the pipe ``commands``) and wait, bounded, for the line
    that answers it in ``log_path``: ``done`` (a regular expression; its match is returned), or the launcher's
    ``CONTROL-ERROR`` (a :class:`ServiceError` with its reason). ``who`` names the launcher in errors."""
    fix = f"read {log_path}."
    if proc is None or commands is None or not proc.alive():
        raise ServiceError(f"{who} is not running: cannot {command}.", "start it first.")
    since = log_path.stat().st_size
    try:
        commands.write(f"{command}\n".encode())
    except OSError as exc:
        raise ServiceError(f"{who} did not take the command {command!r}: {exc}.", fix) from None
    answer = re.compile(rf"^(?:{done}|CONTROL-ERROR {re.escape(command)}: (?P<error>.*))$", re.MULTILINE)
    found: list[re.Match[str]] = []

    def answered() -> bool:
        match = answer.search(log_after(log_path, since))
        if match is not None:
            found.append(match)
        return match is not None or not proc.alive()

    poll(answered, timeout_s, interval_s=0.05, max_interval_s=0.5)
    if not found:
        state = "is not running any more" if not proc.alive() else f"did not answer within {timeout_s:.0f} s"
        raise ServiceError(f"{who} {state} after {command!r}. Last lines of {log_path}:\n{log_tail(log_path)}", fix)
    if found[0]["error"] is not None:
        raise ServiceError(f"{who} could not {command}: {found[0]['error']}", fix)
    return found[0]


def _jdk() -> tuple[str, str]:
    """``java`` and ``javac`` of one JDK."""
    java = _jdk_tools.java("HDFS")
    return java, _jdk_tools.javac(java, "HDFS")


def _webhdfs_length(base: str, path: str, user: str) -> int:
    """The length WebHDFS reports for ``path`` (GETFILESTATUS on the NameNode; no DataNode redirect)."""
    query = urllib.parse.urlencode({"op": "GETFILESTATUS", "user.name": user})
    url = f"{base}{urllib.parse.quote(path)}?{query}"
    try:
        with urllib.request.urlopen(url, timeout=15) as reply:
            status = json.load(reply)["FileStatus"]
    except urllib.error.HTTPError as exc:
        body = exc.read(500).decode(errors="replace")
        raise OSError(f"HTTP {exc.code}: {body}") from exc
    if status.get("type") != "FILE":
        raise OSError(f"expected a FILE, got {status!r}")
    length: int = status["length"]
    return length
