"""No Redis password in a process list (SPEC §11): any local user can read every ``ps``.

``ateam up --redis redis://:PASSWORD@…`` used to hand the URL, password included, to the
supervisor and to every agent on their command lines. The URL now travels in the
environment (readable by its owner only), and a process given a password on its own
command line shows ``****`` there instead.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._wait import wait_for
from tests.servers.redis import RedisProcess

from .conftest import ateam_cmd, run_ateam, subprocess_env, write_project

pytestmark = pytest.mark.integration


def command_lines() -> dict[int, str]:
    """Every process's command line, as ``ps`` shows it to any user."""
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                raw = (entry / "cmdline").read_bytes()
                found[int(entry.name)] = raw.replace(b"\0", b" ").decode(errors="replace")
    return found


@pytest.fixture
def secured(own_redis: RedisProcess) -> Iterator[tuple[str, str]]:
    """(password, URL with the password) of a Redis that requires it."""
    password = f"pw-{uuid.uuid4().hex}"
    with own_redis.client() as client:
        client.config_set("requirepass", password)
    yield password, f"redis://:{password}@127.0.0.1:{own_redis.port}/0"


def test_no_process_of_the_team_shows_the_redis_password(
    secured: tuple[str, str], tmp_path: Path
) -> None:
    password, url = secured
    project = write_project(tmp_path / "proj", "proj", agents=("zeus", "hera"), delay_ms=1)
    console = None
    try:
        up = run_ateam("up", str(project), "--detach", "--redis", url, timeout=120)
        assert up.returncode == 0, up.stdout + up.stderr
        # The supervisor and its agents (all started by `up`) show no password.
        team = [f"{p}: {line}" for p, line in command_lines().items() if password in line]
        assert not team, team
        # A long-lived process given the URL on its own command line: the console.
        console = subprocess.Popen(
            ateam_cmd("console", "--no-ui", "--redis", url),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=subprocess_env(),
        )
        pid = console.pid
        wait_for(
            lambda: "redis://:****@127.0.0.1" in command_lines().get(pid, ""),
            20,
            "the console to mask its own command line",
        )

        rows = json.loads(run_ateam("ps", "--json", "--redis", url).stdout)
        agents = {row["id"]: row["pid"] for row in rows}
        assert set(agents) == {"proj/zeus", "proj/hera"}
        lines = command_lines()
        shown = [f"{p}: {line}" for p, line in lines.items() if password in line]
        assert not shown, shown
        for agent_pid in agents.values():
            assert "ateam agent" in lines[int(agent_pid)] or " agent " in lines[int(agent_pid)]
        # The agents still reach the secured Redis: a send is answered.
        sent = run_ateam("send", "proj/zeus", "still here", "--redis", url)
        assert sent.returncode == 0, sent.stderr
        history = project / ".ateam" / "agents" / "zeus" / "state" / "history.jsonl"
        wait_for(
            lambda: history.exists() and "echo: still here" in history.read_text(),
            20,
            "zeus to answer over the secured bus",
        )
    finally:
        if console is not None:
            console.kill()
            console.wait()
        run_ateam("up", str(project), "--down", "--redis", url, timeout=60)
