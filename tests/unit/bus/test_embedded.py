"""The embedded redis-server (SPEC §2.1): start-up, sharing, privacy, persistence, CLI."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.exceptions import AuthenticationError

from ateam.bus._server_binary import find_server_binary
from ateam.bus.connection import RedisTarget, make_client
from ateam.bus.embedded import EmbeddedPaths, EmbeddedServer, socket_name
from ateam.client import server_command
from ateam.errors import EmbeddedServerError

HAS_PROC = Path("/proc/self/cwd").exists()
needs_proc = pytest.mark.skipif(not HAS_PROC, reason="finds servers through /proc")

# Each racer imports everything and builds its server object first, says "ready",
# then blocks on stdin, so that the parent can release all of them at one instant.
RACER = """
import sys
from ateam.bus.embedded import EmbeddedServer
server = EmbeddedServer()
print("ready", flush=True)
sys.stdin.readline()
print(server.ensure(timeout=60).url, flush=True)
"""


def servers_in(data_dir: Path) -> list[int]:
    """Pids of every redis-server whose working directory is ``data_dir``.

    Redis changes into its ``dir``, so this finds the embedded servers of one home
    whatever their command line says.
    """
    if not HAS_PROC:
        return []
    wanted = data_dir.resolve()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = Path(os.readlink(entry / "cwd"))
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        is_server = b"redis-server" in cmdline or b"valkey-server" in cmdline
        if cwd == wanted and is_server and state != "Z":
            found.append(int(entry.name))
    return found


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def sync_client(target: RedisTarget) -> redis.Redis:
    return redis.Redis.from_url(target.url, password=target.password)


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short runtime dir: pytest's tmp_path can exceed the unix socket path limit."""
    path = Path(tempfile.mkdtemp(prefix="at", dir="/tmp"))
    monkeypatch.setenv("ATEAM_RUNTIME_DIR", str(path))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def server(runtime: Path, isolated_home: Path) -> Iterator[EmbeddedServer]:
    """An embedded server object whose servers are all gone after the test."""
    embedded = EmbeddedServer()
    yield embedded
    try:
        embedded.stop(timeout=10)
    except EmbeddedServerError:
        pass
    for pid in servers_in(embedded.paths.data_dir):
        os.kill(pid, signal.SIGKILL)


async def test_ensure_starts_a_server_make_client_can_use(server: EmbeddedServer) -> None:
    assert not server.is_running()

    target = server.ensure()

    assert target.url == f"unix://{server.paths.socket}"
    assert target.source == "embedded"
    assert target.password
    assert server.is_running()
    client = make_client(target)
    try:
        await client.set("greeting", "hello")
        assert await client.get("greeting") == b"hello"
    finally:
        await client.aclose()


def test_files_and_dirs_are_private_and_there_is_no_tcp(
    server: EmbeddedServer, runtime: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leak")
    target = server.ensure()
    with sync_client(target) as client:
        client.set("k", "v")
        assert client.config_get("port") == {"port": "0"}
    paths = server.paths

    assert mode(runtime) == 0o700
    assert stat.S_ISSOCK(paths.socket.stat().st_mode)
    assert mode(paths.socket) == 0o700
    assert mode(paths.data_dir) == 0o700
    names = {p.name for p in paths.data_dir.iterdir()}
    assert {"password", "start.lock", "redis.conf", "redis.log", "redis.pid"} <= names
    # Redis 6 writes one appendonly.aof; Redis 7+ and Valkey a directory of AOF parts.
    assert "appendonly.aof" in names or "appendonlydir" in names
    for path in paths.data_dir.rglob("*"):
        assert mode(path) == (0o700 if path.is_dir() else 0o600), path
    password = paths.password_file.read_text().strip()
    assert len(password) >= 43  # secrets.token_urlsafe(32)
    assert target.password == password
    pid = server.status()["pid"]
    if HAS_PROC:
        assert password.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
        assert b"sk-must-not-leak" not in Path(f"/proc/{pid}/environ").read_bytes()


def test_the_password_is_required(server: EmbeddedServer) -> None:
    target = server.ensure()

    for password in (None, "wrong"):
        with (
            redis.Redis.from_url(target.url, password=password) as client,
            pytest.raises(AuthenticationError),
        ):
            client.ping()


def test_a_second_ensure_reuses_the_running_server(server: EmbeddedServer) -> None:
    first = server.ensure()
    pid = server.status()["pid"]

    second = EmbeddedServer().ensure()

    assert second == first
    assert EmbeddedServer().status()["pid"] == pid
    if HAS_PROC:
        assert servers_in(server.paths.data_dir) == [pid]


@needs_proc
def test_processes_starting_at_once_share_one_server(server: EmbeddedServer) -> None:
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ),
        )
        for _ in range(8)
    ]
    try:
        for racer in racers:
            assert racer.stdout is not None
            assert racer.stdout.readline().strip() == "ready"
        for racer in racers:
            assert racer.stdin is not None
            racer.stdin.write("go\n")
            racer.stdin.flush()
        results = [racer.communicate(timeout=90) for racer in racers]
    finally:
        for racer in racers:
            if racer.poll() is None:
                racer.kill()
                racer.wait()

    assert [racer.returncode for racer in racers] == [0] * 8, [err for _, err in results]
    urls = {out.strip() for out, _ in results}
    assert urls == {f"unix://{server.paths.socket}"}
    pids = servers_in(server.paths.data_dir)
    assert len(pids) == 1
    assert int(server.paths.pid_file.read_text()) == pids[0]
    assert server.status()["pid"] == pids[0]


def test_data_persists_across_stop_and_ensure(server: EmbeddedServer) -> None:
    target = server.ensure()
    first_pid = server.status()["pid"]
    with sync_client(target) as client:
        client.set("durable", "yes")

    assert server.stop() is True
    assert not server.is_running()
    assert not server.paths.socket.exists()
    assert server.stop() is False

    target = server.ensure()
    assert server.status()["pid"] != first_pid
    with sync_client(target) as client:
        assert client.get("durable") == b"yes"


@pytest.mark.parametrize("pid_owner", ["dead", "unrelated"])
def test_stale_socket_and_pidfile_do_not_block_a_start(
    server: EmbeddedServer, pid_owner: str
) -> None:
    paths = server.paths
    paths.data_dir.mkdir(parents=True, mode=0o700)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(paths.socket))
    stale.close()  # leaves the socket file behind, as a crashed server does
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    if pid_owner == "dead":
        other.kill()
        other.wait()
    paths.pid_file.write_text(f"{other.pid}\n")
    try:
        assert not server.is_running()

        target = server.ensure()

        with sync_client(target) as client:
            assert client.ping()
        if pid_owner == "unrelated":
            assert other.poll() is None, "a live process named by a stale pidfile was killed"
    finally:
        other.kill()
        other.wait()


@needs_proc
def test_a_live_server_whose_socket_was_deleted_is_left_running_until_stopped(
    server: EmbeddedServer,
) -> None:
    target = server.ensure()
    connected = sync_client(target)
    connected.set("survivor", "1")
    orphan = server.status()["pid"]
    # What a clean-up of /tmp or of XDG_RUNTIME_DIR does to a running server.
    server.paths.socket.unlink()
    assert not server.is_running()

    # A client never stops a live server: its connected clients (the agents) still use it.
    with pytest.raises(EmbeddedServerError, match="answers on no socket") as caught:
        server.ensure()
    assert "ateam server stop" in str(caught.value)
    assert servers_in(server.paths.data_dir) == [orphan]
    assert connected.get("survivor") == b"1"
    connected.close()

    # Asked for by a person, it ends; the next start is the only server, on the same data.
    assert server.stop() is True
    target = server.ensure()

    pids = servers_in(server.paths.data_dir)
    assert len(pids) == 1
    assert pids[0] != orphan
    with sync_client(target) as client:
        assert client.get("survivor") == b"1"


def test_a_failed_start_reports_the_log_tail(server: EmbeddedServer) -> None:
    server.paths.data_dir.mkdir(parents=True, mode=0o700)
    (server.paths.data_dir / "appendonly.aof").write_bytes(b"this is not an AOF\r\n")
    started = time.monotonic()

    with pytest.raises(EmbeddedServerError) as caught:
        server.ensure(timeout=10)

    message = str(caught.value)
    assert "append only file" in message.lower()
    assert "\n" not in message
    # The dead server is noticed at once; the deadline is not sat out.
    assert time.monotonic() - started < 5


def test_server_command_start_status_stop(
    server: EmbeddedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert server_command("status") == 1
    assert "not running" in capsys.readouterr().out

    assert server_command("start") == 0
    out = capsys.readouterr().out
    assert out.startswith("embedded redis started at unix://")
    assert out.count("\n") == 1
    assert server.is_running()
    assert server_command("start") == 0
    assert "already running" in capsys.readouterr().out

    assert server_command("status") == 0
    lines = dict(line.split(": ", 1) for line in capsys.readouterr().out.splitlines())
    assert lines["running"] == "yes"
    assert lines["pid"] == str(server.status()["pid"])
    assert lines["socket"] == str(server.paths.socket)
    assert lines["version"].count(".") == 2
    # Which binary runs, and which server it is (Valkey reports a Redis-compatible
    # redis_version too; the one shown is its own).
    chosen = find_server_binary()
    assert lines["binary"] == chosen.path
    assert (lines["server"], lines["version"]) == (chosen.name, ".".join(map(str, chosen.version)))
    assert {"uptime_s", "clients", "used_memory_human", "data_dir"} <= lines.keys()

    assert server_command("stop") == 0
    assert capsys.readouterr().out == "embedded redis stopped\n"
    assert not server.is_running()
    assert server_command("stop") == 0
    assert capsys.readouterr().out == "embedded redis not running\n"

    assert server_command("restart") == 4
    assert "unknown server action" in capsys.readouterr().err


def test_a_too_long_runtime_dir_gives_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ATEAM_RUNTIME_DIR", str(tmp_path / ("r" * 100)))
    embedded = EmbeddedServer()

    with pytest.raises(EmbeddedServerError, match="ATEAM_RUNTIME_DIR"):
        embedded.ensure()

    assert not embedded.paths.pid_file.exists()
    assert server_command("start") == 2
    err = capsys.readouterr().err
    assert "ATEAM_RUNTIME_DIR" in err
    assert err.count("\n") == 1


def test_default_paths_follow_ateam_home_and_runtime_dir(
    runtime: Path, isolated_home: Path
) -> None:
    paths = EmbeddedPaths.default()

    assert paths.socket == runtime / socket_name(isolated_home / "redis")
    assert paths.socket.name.startswith("redis-") and paths.socket.suffix == ".sock"
    assert paths.data_dir == isolated_home / "redis"
    assert paths.password_file == isolated_home / "redis" / "password"
    assert paths.lock_file == isolated_home / "redis" / "start.lock"


def test_two_homes_of_one_user_each_get_a_server_of_their_own(
    runtime: Path, isolated_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One runtime dir (per user), two ATEAM_HOMEs: another HOME, a test's home. Both
    # used to share one socket, and the second was refused the first one's password.
    first = EmbeddedServer()
    other_home = tmp_path / "other-home"
    other_home.mkdir()
    monkeypatch.setenv("ATEAM_HOME", str(other_home))
    second = EmbeddedServer()
    try:
        targets = [first.ensure(timeout=30), second.ensure(timeout=30)]
        assert first.paths.socket != second.paths.socket
        assert first.paths.socket.parent == second.paths.socket.parent == runtime
        for target, name in zip(targets, ("first", "second"), strict=True):
            with sync_client(target) as client:
                client.set("home", name)
        for target, name in zip(targets, ("first", "second"), strict=True):
            with sync_client(target) as client:
                assert client.get("home") == name.encode()  # two servers, two datasets
    finally:
        for server in (first, second):
            with contextlib.suppress(EmbeddedServerError):
                server.stop(timeout=10)
            for pid in servers_in(server.paths.data_dir):
                os.kill(pid, signal.SIGKILL)


# -- one server per home, whatever the client's environment --------------------------------


def _elsewhere_env(monkeypatch: pytest.MonkeyPatch, runtime: str | None) -> None:
    """Another environment of the same home: another runtime dir, or none set at all."""
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    if runtime is None:
        monkeypatch.delenv("ATEAM_RUNTIME_DIR")
    else:
        monkeypatch.setenv("ATEAM_RUNTIME_DIR", runtime)


@needs_proc
@pytest.mark.parametrize("other", ["another runtime dir", "no runtime dir set"])
def test_a_client_of_another_environment_uses_the_recorded_server(
    server: EmbeddedServer, monkeypatch: pytest.MonkeyPatch, other: str
) -> None:
    target = server.ensure()
    pid = server.status()["pid"]
    with sync_client(target) as client:
        client.set("team", "here")
    elsewhere = Path(tempfile.mkdtemp(prefix="at", dir="/tmp"))
    _elsewhere_env(monkeypatch, str(elsewhere) if other == "another runtime dir" else None)
    try:
        client_of_elsewhere = EmbeddedServer()
        assert client_of_elsewhere.paths.socket != server.paths.socket

        found = client_of_elsewhere.ensure()

        assert found.url == target.url
        assert client_of_elsewhere.status()["pid"] == pid
        assert servers_in(server.paths.data_dir) == [pid]
        with sync_client(found) as client:
            assert client.get("team") == b"here"
        assert not client_of_elsewhere.paths.socket.exists()
    finally:
        shutil.rmtree(elsewhere, ignore_errors=True)


def test_the_record_says_where_the_server_is_and_who_started_it(server: EmbeddedServer) -> None:
    server.ensure()
    record_file = server.paths.record_file

    record = json.loads(record_file.read_text())

    assert mode(record_file) == 0o600
    assert record["socket"] == str(server.paths.socket)
    assert record["pid"] == server.status()["pid"]
    assert record["host"] == socket.gethostname()
    assert record["runtime_dir_from"] == "ATEAM_RUNTIME_DIR"
    assert f"(pid {os.getpid()}, user " in record["started_by"]
    assert server.paths.password_file.read_text().strip() not in record_file.read_text()
    status = server.status()
    assert status["host"] == socket.gethostname()
    assert status["started_by"] == record["started_by"]

    assert server.stop() is True
    assert not record_file.exists()


@needs_proc
def test_a_recorded_server_whose_process_is_gone_is_replaced(
    server: EmbeddedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = server.ensure()
    with sync_client(target) as client:
        client.set("durable", "yes")
        client.execute_command("CONFIG", "SET", "appendfsync", "always")
        client.set("durable", "yes")
    dead = server.status()["pid"]
    os.kill(dead, signal.SIGKILL)
    wait = time.monotonic() + 10
    while dead in servers_in(server.paths.data_dir) and time.monotonic() < wait:
        time.sleep(0.02)
    elsewhere = Path(tempfile.mkdtemp(prefix="at", dir="/tmp"))
    _elsewhere_env(monkeypatch, str(elsewhere))
    try:
        replacer = EmbeddedServer()

        target = replacer.ensure()

        # Started where this environment puts it, and recorded there for everyone else.
        assert target.url == replacer.url
        assert json.loads(replacer.paths.record_file.read_text())["socket"] == str(
            replacer.paths.socket
        )
        [pid] = servers_in(server.paths.data_dir)
        assert pid != dead
        with sync_client(target) as client:
            assert client.get("durable") == b"yes"
    finally:
        with contextlib.suppress(EmbeddedServerError):
            EmbeddedServer().stop(timeout=10)
        shutil.rmtree(elsewhere, ignore_errors=True)


@needs_proc
def test_a_server_started_before_records_existed_is_found_through_its_config(
    server: EmbeddedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = server.ensure()
    pid = server.status()["pid"]
    server.paths.record_file.unlink()  # what an ateam of an earlier version left running
    _elsewhere_env(monkeypatch, None)

    found = EmbeddedServer().ensure()

    assert found.url == target.url
    assert servers_in(server.paths.data_dir) == [pid]
