"""A private Spark standalone cluster: a master and workers, each a JVM of its own, for the cluster tests.

Started from PySpark's own distribution (its ``jars/``, the classes ``org.apache.spark.deploy.master.Master`` and
``org.apache.spark.deploy.worker.Worker``, which the ``sbin/start-*.sh`` scripts of a full distribution run; pip's
PySpark ships no such scripts), on loopback: the master on 127.0.0.1, each worker on an address of its own (Spark
runs a task's speculative copy only on another host than its running attempt's). Each worker gets one core by
default, its own work directory (its executors' ``stdout`` and ``stderr``) and its own local directory (shuffle
and block files), so that the executors share nothing with the driver but the network, the input files and the
sinks. Each process runs in a session of its own and is stopped by PID: a worker's session holds its executors and
their Python workers.

Operations: SIGKILL one executor (its JVM and its Python workers: a lost executor), SIGKILL a worker's whole
session (a lost machine) and start it again, and decommission a worker (``SIGPWR``, which a worker started with
``spark.decommission.enabled`` answers by draining: the master stops giving it work and the driver moves its
tasks and blocks away). The master's JSON page (:meth:`SparkStandalone.state`) tells what it knows of each worker
and application.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eosink._procs import children, kill_pids, session_members, stat
from eosink._waiting import wait_until as poll
from eosink.errors import ServiceError
from eosink.services._jdk import java
from eosink.services._process import Attempt, Proc, free_ports, log_tail, spawn, start_on_ports, stop, wait_until

__all__ = ["EXECUTOR_CLASS", "SparkStandalone", "SparkWorker", "spark_home"]

log = logging.getLogger("eosink.services")

EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
"""The main class of an executor's JVM, as its command line names it."""
_MASTER = "Spark master"
_FIX = "look at the log named above; the machine needs Java 17+ and about 1 GB of free memory per process."
_PAGE_TIMEOUT_S = 10.0  # how long the master's JSON page may answer nothing that parses


def spark_home() -> Path:
    """PySpark's installation, which holds Spark's jars (``SPARK_HOME`` when set)."""
    if home := os.environ.get("SPARK_HOME"):
        return Path(home)
    import pyspark

    return Path(pyspark.__file__).parent


@dataclass
class SparkWorker:
    """One worker: its number, ports and directories (kept across restarts), and its process."""

    index: int
    port: int
    webui_port: int
    root: Path
    proc: Proc | None = None

    @property
    def host(self) -> str:
        """The worker's own loopback address (``127.0.0.<index + 2>``; the master has 127.0.0.1): Spark never runs a
        task's speculative copy on a host where an attempt of it runs, so workers on one address never get one."""
        return f"127.0.0.{self.index + 2}"

    @property
    def work_dir(self) -> Path:
        return self.root / "work"

    @property
    def local_dir(self) -> Path:
        return self.root / "local"

    @property
    def log_path(self) -> Path:
        return self.root / "worker.log"

    @property
    def address(self) -> str:
        """``host:port`` as the master's JSON names the worker."""
        return f"{self.host}:{self.port}"


class SparkStandalone:
    """A master and ``workers`` workers under ``root`` (see the module docstring); :meth:`start`, then :meth:`close`.

    ``cores`` and ``memory`` are what each worker offers its executors; ``decommission`` starts the workers with
    ``spark.decommission.enabled``, so that :meth:`decommission_worker` drains them."""

    def __init__(
        self,
        root: Path,
        *,
        workers: int = 2,
        cores: int = 1,
        memory: str = "2g",
        decommission: bool = True,
        start_timeout_s: float = 120.0,
    ) -> None:
        self.root = root.absolute()
        self.cores, self.memory, self.decommission = cores, memory, decommission
        self.start_timeout_s = start_timeout_s
        self.master_port, self.master_webui_port = free_ports(2)
        self.master: Proc | None = None
        ports = free_ports(2 * workers)
        self.workers = [
            SparkWorker(i, ports[2 * i], ports[2 * i + 1], self.root / f"worker-{i}") for i in range(workers)
        ]

    def __repr__(self) -> str:
        return f"SparkStandalone({self.master_url}, root={str(self.root)!r}, workers={len(self.workers)})"

    # -- addresses -----------------------------------------------------------------------------------

    @property
    def master_url(self) -> str:
        """What a driver passes as ``--master``."""
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def master_log(self) -> Path:
        return self.root / "master.log"

    def spark_conf(self) -> dict[str, str]:
        """Settings a driver of this cluster needs: one executor per worker, sized to the worker, this Python on
        the executors, and decommissioning on when the workers have it."""
        conf = {
            "spark.master": self.master_url,
            "spark.executor.cores": str(self.cores),
            "spark.executor.memory": "1g",
            "spark.cores.max": str(self.cores * len(self.workers)),
            "spark.pyspark.python": sys.executable,
        }
        if self.decommission:
            conf.update({"spark.decommission.enabled": "true", "spark.storage.decommission.enabled": "true"})
        return conf

    # -- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> SparkStandalone:
        """Start the master and every worker that is not running; wait until the master counts them alive."""
        self.root.mkdir(parents=True, exist_ok=True)
        if self.master is None or not self.master.alive():
            self._start_master()
        for worker in self.workers:
            if worker.proc is None or not worker.proc.alive():
                self.start_worker(worker.index)
        return self

    def close(self) -> None:
        """Stop every worker (with its executors), then the master."""
        for worker in self.workers:
            self._stop_worker(worker, crash=False)
        if self.master is not None:
            stop(self.master, what=_MASTER)
            self.master = None

    def __enter__(self) -> SparkStandalone:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def state(self) -> dict[str, Any]:
        """The master's JSON page: ``workers`` (each with ``host``, ``port``, ``state``, ``coresused``),
        ``activeapps``, ``completedapps``, ``aliveworkers``."""
        found: list[dict[str, Any]] = []

        def read() -> bool:
            page = self._json_page()
            if page is not None:
                found.append(page)
            return page is not None

        if not poll(read, _PAGE_TIMEOUT_S, max_interval_s=0.2):
            raise ServiceError(
                f"the Spark master's JSON page ({self._json_url}) answered nothing that parses for "
                f"{_PAGE_TIMEOUT_S:.0f} s. Last lines of its log:\n{log_tail(self.master_log)}",
                _FIX,
            )
        return found[0]

    @property
    def _json_url(self) -> str:
        return f"http://127.0.0.1:{self.master_webui_port}/json/"

    def _json_page(self) -> dict[str, Any] | None:
        """The master's JSON page, or None while its web UI answers an empty or partial body (it does so for a
        moment as it starts, and while it is busy)."""
        with urllib.request.urlopen(self._json_url, timeout=10) as reply:
            body = reply.read()
        try:
            page = json.loads(body)
        except ValueError:
            return None
        return page if isinstance(page, dict) else None

    def worker_states(self) -> dict[int, str]:
        """Each worker's state as the master last recorded it (ALIVE, DEAD, DECOMMISSIONED, ...): the newest
        registration of its address; missing while it never registered."""
        by_address: dict[str, str] = {}
        for w in sorted(self.state().get("workers", []), key=lambda w: int(w.get("lastheartbeat", 0))):
            by_address[f"{w['host']}:{w['port']}"] = str(w["state"])
        return {w.index: by_address[w.address] for w in self.workers if w.address in by_address}

    def wait_worker_state(self, index: int, wanted: str, timeout_s: float = 60.0) -> None:
        """Poll the master until worker ``index`` is in state ``wanted``."""
        if not poll(lambda: self.worker_states().get(index) == wanted, timeout_s, max_interval_s=0.2):
            raise ServiceError(
                f"Spark worker {index} is not {wanted} after {timeout_s:.0f} s (the master says "
                f"{self.worker_states().get(index, 'nothing')}). Last lines of its log:\n"
                f"{log_tail(self.workers[index].log_path)}",
                _FIX,
            )

    def executor_log_text(self) -> str:
        """Everything the executors of every worker wrote to their ``stderr`` (Spark's log: tasks started,
        killed, failed), as files in the workers' work directories."""
        files = sorted(f for w in self.workers for f in w.work_dir.glob("*/*/stderr"))
        return "\n".join(f.read_text(errors="replace") for f in files)

    # -- faults --------------------------------------------------------------------------------------

    def executors(self, index: int) -> list[int]:
        """PIDs of the executor JVMs worker ``index`` runs now."""
        worker = self.workers[index]
        if worker.proc is None:
            return []
        return [pid for pid in session_members(worker.proc.pid) if EXECUTOR_CLASS in _command_line(pid)]

    def worker_of(self, pid: int) -> int:
        """The worker whose session holds process ``pid`` (an executor, or one of its Python workers)."""
        for worker in self.workers:
            if worker.proc is not None and pid in session_members(worker.proc.pid):
                return worker.index
        raise ServiceError(f"process {pid} belongs to no worker of the cluster.", "pass an executor's or task's PID.")

    def executor_of(self, pid: int) -> int:
        """The executor JVM that process ``pid`` runs under (``pid`` itself when it is one)."""
        at: int | None = pid
        while at is not None and at > 1:
            if EXECUTOR_CLASS in _command_line(at):
                return at
            fields = stat(at)
            at = int(fields[1]) if fields else None
        raise ServiceError(f"process {pid} runs under no executor.", "pass a task's Python worker PID.")

    def kill_executor(self, index: int, pid: int | None = None) -> int:
        """SIGKILL an executor of worker ``index`` (the one running process ``pid`` when given: a task's Python
        worker), its JVM and its Python workers; the executor's PID."""
        found = self.executors(index)
        if not found:
            raise ServiceError(f"Spark worker {index} runs no executor.", "start an application on the cluster first.")
        pid = found[0] if pid is None else self.executor_of(pid)
        left = kill_pids([*_descendants(pid), pid])
        if left:
            raise ServiceError(f"an executor's processes {left} still run after SIGKILL.", f"inspect them: ps {pid}")
        return pid

    def kill_worker(self, index: int, timeout_s: float = 60.0) -> None:
        """SIGKILL worker ``index`` with everything it started (a lost machine); wait until the master no longer
        counts it alive (it sees the connection drop), so that a restart on the same address registers anew."""
        self._stop_worker(self.workers[index], crash=True)
        if not poll(lambda: self.worker_states().get(index) != "ALIVE", timeout_s, max_interval_s=0.2):
            raise ServiceError(
                f"the Spark master still counts worker {index} alive {timeout_s:.0f} s after its kill.", _FIX
            )

    def start_worker(self, index: int) -> None:
        """Start worker ``index`` (again) and wait until the master counts it alive."""
        worker = self.workers[index]
        for folder in (worker.work_dir, worker.local_dir):
            folder.mkdir(parents=True, exist_ok=True)

        def start(attempt: Attempt) -> None:
            worker.port, worker.webui_port = attempt.ports
            argv = [
                *self._java("Worker"),
                *("--host", worker.host, "--port", str(worker.port), "--webui-port", str(worker.webui_port)),
                *("--cores", str(self.cores), "--memory", self.memory, "--work-dir", str(worker.work_dir)),
                self.master_url,
            ]
            env = self.env(SPARK_LOCAL_IP=worker.host, SPARK_LOCAL_DIRS=str(worker.local_dir))
            worker.proc = spawn(argv, worker.log_path, env=env)
            what = f"Spark worker {worker.index}"
            try:
                wait_until(
                    lambda: self.worker_states().get(worker.index) == "ALIVE",
                    what=what,
                    proc=worker.proc,
                    log_path=worker.log_path,
                    timeout_s=self.start_timeout_s,
                    fix=_FIX,
                    attempt=attempt,
                )
            except BaseException:
                self._stop_worker(worker, crash=True)
                raise

        # nothing knows a worker's ports but the master, which learns them when it registers: they may move
        start_on_ports(
            start, (worker.port, worker.webui_port), log_path=worker.log_path, what="Spark worker", may_move=True
        )

    def decommission_worker(self, index: int) -> None:
        """Ask worker ``index`` to drain (``SIGPWR``): it tells the master, which stops giving it work, and the
        driver moves its tasks away; it keeps running until the master lets it go."""
        worker = self.workers[index]
        if not self.decommission:
            raise ServiceError("the cluster's workers were started without decommissioning.", "decommission=True")
        if worker.proc is None or not worker.proc.alive():
            raise ServiceError(f"Spark worker {index} is not running.", "start_worker() it first.")
        os.kill(worker.proc.pid, signal.SIGPWR)

    # -- inside --------------------------------------------------------------------------------------

    def _java(self, role: str) -> list[str]:
        home = spark_home()
        options = ["-Xmx512m", "-Dspark.worker.cleanup.enabled=false"]
        if self.decommission:
            options.append("-Dspark.decommission.enabled=true")
        classpath = os.pathsep.join([str(home / "conf"), str(home / "jars" / "*")])
        return [java("Spark"), *options, "-cp", classpath, f"org.apache.spark.deploy.{role.lower()}.{role}"]

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of the cluster's processes (and of a driver of it): loopback Spark, this Python."""
        env = dict(os.environ)
        for name in ("EOSINK_FAULTS", "PYSPARK_SUBMIT_ARGS", "SPARK_CONF_DIR"):
            env.pop(name, None)
        # A worker builds its executors' command from SPARK_HOME; outside a full distribution (no RELEASE, no
        # build directories) it must be told the Scala version, as bin/load-spark-env.sh would.
        from eosink.services.spark_jars import SparkVersions

        env.update(
            SPARK_HOME=str(spark_home()),
            SPARK_SCALA_VERSION=SparkVersions().scala,
            SPARK_LOCAL_IP="127.0.0.1",
            PYSPARK_PYTHON=sys.executable,
        )
        env.update(extra)
        return env

    def _start_master(self) -> None:
        def start(attempt: Attempt) -> None:
            self.master_port, self.master_webui_port = attempt.ports
            argv = [
                *self._java("Master"),
                *("--host", "127.0.0.1", "--port", str(self.master_port)),
                *("--webui-port", str(self.master_webui_port)),
            ]
            self.master = spawn(argv, self.master_log, env=self.env())
            try:
                wait_until(
                    lambda: self._master_alive(),
                    what=_MASTER,
                    proc=self.master,
                    log_path=self.master_log,
                    timeout_s=self.start_timeout_s,
                    fix=_FIX,
                    attempt=attempt,
                )
            except BaseException:
                stop(self.master, what=_MASTER, sig=signal.SIGKILL)
                self.master = None
                raise

        start_on_ports(
            start, (self.master_port, self.master_webui_port), log_path=self.master_log, what=_MASTER, may_move=True
        )

    def _master_alive(self) -> bool:
        try:
            page = self._json_page()
        except OSError:
            return False
        return page is not None and page.get("status") == "ALIVE"

    def _stop_worker(self, worker: SparkWorker, *, crash: bool) -> None:
        """Stop a worker's whole session (its executors and their Python workers sit in process groups of their
        own): SIGTERM first unless ``crash``, then SIGKILL whatever is left."""
        if worker.proc is None:
            return
        sid = worker.proc.pid
        if not crash:
            stop(worker.proc, what=f"Spark worker {worker.index}")
        left = kill_pids(session_members(sid))
        if left:
            raise ServiceError(f"Spark worker {worker.index}'s processes {left} still run after SIGKILL.", "ps")
        worker.proc = None
        log.info("[spark] worker %d stopped%s", worker.index, " (SIGKILL)" if crash else "")


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def _descendants(pid: int) -> list[int]:
    """Every live process below ``pid``, children first."""
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children(todo.pop()):
            found.append(child)
            todo.append(child)
    return found
