"""One embedded server per home, found by every client, stopped by none (SPEC §2.1).

A team is started from one environment; then the verbs, ``ateam mcp`` under the MCP SDK's
stdio client with its default environment, the MCP Inspector and ``env -i`` variants run
against the same home, as an MCP client, cron or ``su`` would run them. None of them may
stop or replace the team's server. A second host sharing the home (simulated with a UTS
namespace of its own: another host name, the same files) never starts a second server.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from socket import gethostname

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import Implementation

from ateam._proc import pid_is_running
from tests._wait import wait_for

from .conftest import write_project

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
INSPECTOR = REPO / ".ci" / "npm" / "node_modules" / ".bin" / "mcp-inspector"
BIN = Path(sys.executable).parent
"""The virtualenv's bin: where `ateam` is on PATH, as for a user who installed it."""
PATH = f"{BIN}:/usr/local/bin:/usr/bin:/bin"
ROUNDS = 3


def _bare(home: Path, **extra: str) -> dict[str, str]:
    """What `env -i HOME=… PATH=…` leaves: no XDG_RUNTIME_DIR, no ATEAM_* at all."""
    return {"HOME": str(home), "PATH": PATH, **extra}


def _run(
    args: list[str], env: dict[str, str], cwd: Path, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def _server_pid(env: dict[str, str], cwd: Path) -> int:
    status = _run(["ateam", "server", "status"], env, cwd)
    assert status.returncode == 0, status.stdout + status.stderr
    fields = dict(line.split(": ", 1) for line in status.stdout.splitlines())
    return int(fields["pid"])


@dataclass
class Home:
    """A HOME of its own (no ATEAM_HOME: the home is ``$HOME/.ateam``) and two runtime dirs."""

    path: Path
    runtime: str
    """Where the team's environment puts its socket."""
    other_runtime: str
    """Another environment's runtime directory (or another host's)."""


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Home]:
    """The home; afterwards its supervisors and its server are stopped, whoever runs them."""
    path = tmp_path / "home"
    path.mkdir()
    runtimes = [tempfile.mkdtemp(prefix="at", dir="/tmp") for _ in range(2)]
    yield Home(path, *runtimes)
    for pid_file in (path / ".ateam" / "run").glob("*.json"):
        for pid in json.loads(pid_file.read_text()).values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGTERM)
                wait_for(lambda p=int(pid): not pid_is_running(p), 20, "supervisor to exit")
    _run(["ateam", "server", "stop"], _bare(path, ATEAM_RUNTIME_DIR=runtimes[0]), tmp_path)
    for runtime in runtimes:
        shutil.rmtree(runtime, ignore_errors=True)


async def test_every_client_environment_finds_the_teams_server_and_stops_none(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert INSPECTOR.exists(), "the MCP Inspector is not installed; .ci/run installs it"
    project = write_project(tmp_path / "proj", "proj", agents=("zeus", "hera"), delay_ms=1)
    team_runtime, other_runtime = home.runtime, home.other_runtime
    team_env = _bare(home.path, ATEAM_RUNTIME_DIR=team_runtime, PYTHONUNBUFFERED="1")
    up = _run(["ateam", "up", str(project), "--detach"], team_env, project, timeout=120)
    assert up.returncode == 0, up.stdout + up.stderr
    server_pid = _server_pid(team_env, project)
    record = json.loads((home.path / ".ateam" / "redis" / "server.json").read_text())
    assert record["pid"] == server_pid
    assert record["socket"].startswith(team_runtime + "/")
    assert record["host"] == gethostname()
    agents = {
        row["id"]: row["pid"]
        for row in json.loads(_run(["ateam", "ps", "--json"], team_env, project).stdout)
    }
    assert set(agents) == {"proj/zeus", "proj/hera"}

    # The MCP SDK's default environment: HOME, PATH, SHELL, TERM, USER, LOGNAME of ours.
    monkeypatch.setenv("HOME", str(home.path))
    monkeypatch.setenv("PATH", PATH)
    for name in ("ATEAM_HOME", "ATEAM_RUNTIME_DIR", "XDG_RUNTIME_DIR"):
        monkeypatch.delenv(name, raising=False)
    bare = _bare(home.path)
    elsewhere = _bare(home.path, XDG_RUNTIME_DIR=other_runtime)
    inspector_env = _bare(home.path)  # the Inspector, started as `env -i`, starts ateam mcp itself
    sent: list[str] = []
    for round_no in range(ROUNDS):
        for env in (bare, elsewhere):
            ps = _run(["ateam", "ps", "--json"], env, project)
            assert ps.returncode == 0, ps.stderr
            assert {row["id"] for row in json.loads(ps.stdout)} == set(agents)
        text = f"round {round_no} from env -i"
        send = _run(["ateam", "send", "zeus", text], bare, project)
        assert send.returncode == 0, send.stdout + send.stderr
        sent.append(text)

        params = StdioServerParameters(command="ateam", args=["mcp", "--project", "proj"])
        with (tmp_path / "mcp.stderr").open("a") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(
                    read, write, client_info=Implementation(name="codex", version="1")
                ) as session,
            ):
                await session.initialize()
                listed = await session.call_tool("agents_list", {})
                ids = {a["id"] for a in listed.structured_content["agents"]}  # type: ignore[index]
                assert ids == set(agents)
                text = f"round {round_no} over mcp"
                reply = await session.call_tool("agent_send", {"agent": "proj/zeus", "text": text})
                assert not reply.is_error, reply.content
                sent.append(text)

        listed_by_inspector = _run(
            [str(INSPECTOR), "--cli", "ateam", "mcp", "--project", "proj",
             "--method", "tools/call", "--tool-name", "agents_list"],
            inspector_env, project,
        )  # fmt: skip
        assert listed_by_inspector.returncode == 0, listed_by_inspector.stderr
        found = json.loads(listed_by_inspector.stdout)["structuredContent"]["agents"]
        assert {a["id"] for a in found} == set(agents)

        assert _server_pid(bare, project) == server_pid

    history = project / ".ateam" / "agents" / "zeus" / "state" / "history.jsonl"
    wait_for(
        lambda: all(text in history.read_text() for text in sent), 60, "every text to be answered"
    )
    assert _server_pid(elsewhere, project) == server_pid
    log = (home.path / ".ateam" / "redis" / "redis.log").read_text()
    assert not re.search(r"shutdown|SIGTERM", log, re.IGNORECASE), log[-2000:]
    for name, _pid in agents.items():
        agent_log = project / ".ateam" / "agents" / name.split("/")[1] / "state" / "agent.log"
        text = agent_log.read_text()
        assert "heartbeat failed" not in text and "heartbeat refused" not in text, text[-2000:]
    final = {
        row["id"]: row["pid"]
        for row in json.loads(_run(["ateam", "ps", "--json"], bare, project).stdout)
    }
    assert final == agents, "an agent was restarted"
    assert "Traceback" not in (tmp_path / "mcp.stderr").read_text()


def _on_another_host(
    args: list[str], env: dict[str, str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    """Run ``ateam ARGS`` as a second host sharing this home: its own host name, same files."""
    script = 'hostname other-host && exec "$@"'
    return _run(["unshare", "--uts", "sh", "-c", script, "sh", "ateam", *args], env, cwd)


def test_a_second_host_sharing_the_home_never_starts_a_second_server(
    home: Home, tmp_path: Path
) -> None:
    other = home.other_runtime
    here = _bare(home.path, ATEAM_RUNTIME_DIR=home.runtime)
    started = _run(["ateam", "server", "start"], here, tmp_path)
    assert started.returncode == 0, started.stderr
    server_pid = _server_pid(here, tmp_path)
    there = _bare(home.path, ATEAM_RUNTIME_DIR=other)

    for verb in (["ps"], ["server", "start"], ["server", "stop"]):
        done = _on_another_host(verb, there, tmp_path)
        assert done.returncode == 2, (verb, done.stdout, done.stderr)
        [line] = done.stderr.splitlines()
        assert line.startswith("error [redis.unavailable]: ")
        assert f"runs on host {gethostname()} (pid {server_pid}" in line
        assert "ATEAM_REDIS_URL" in line and "Traceback" not in done.stderr

    status = _on_another_host(["server", "status"], there, tmp_path)
    assert status.returncode == 1
    assert status.stdout.startswith(f"embedded redis runs on another host: {gethostname()}\n")
    assert f"pid: {server_pid}\n" in status.stdout
    assert "started_by: ateam server" in status.stdout

    # Nothing was started on the other host's socket, and the server here never moved.
    assert not any(Path(other).iterdir())
    assert _server_pid(here, tmp_path) == server_pid
