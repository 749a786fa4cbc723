"""``ateam start``, ``restart``, ``stop``, ``up`` and ``down`` as a docker or systemctl user
types them, inside a project, against real agents, a real supervisor and a real Redis."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ateam._proc import pid_is_running
from tests._wait import wait_for

from .conftest import START_TIMEOUT_S, AgentFactory, Bus, run_ateam, write_project

pytestmark = pytest.mark.integration


@pytest.fixture
def project(tmp_path: Path, redis_url: str) -> Iterator[Path]:
    """Project ``life`` with agents zeus and hera; brought down at the end, whatever happened."""
    root = write_project(tmp_path / "life", "life", agents=("zeus", "hera"), delay_ms=0)
    yield root
    run_ateam("down", "--redis", redis_url, cwd=root, timeout=60)


def ateam(root: Path, redis_url: str, *args: str) -> Any:
    """``ateam ARGS… --redis URL`` run inside the project."""
    return run_ateam(*args, "--redis", redis_url, cwd=root, timeout=60)


def rows(done: Any) -> dict[str, dict[str, Any]]:
    """A verb's ``--json`` output (one row per agent) by agent id."""
    assert done.returncode == 0, done.stdout + done.stderr
    found = json.loads(done.stdout)
    assert all(set(row) == {"id", "status", "pid", "log", "error"} for row in found), found
    return {row["id"]: row for row in found}


def serving_pid(bus: Bus, agent: str) -> int:
    entry = wait_for(lambda: bus.entry(agent), START_TIMEOUT_S, f"{agent} to register")
    return int(entry["pid"])


def test_start_stop_up_restart_and_down_one_agent_at_a_time(
    project: Path, redis_url: str, bus: Bus, isolated_home: Path
) -> None:
    # No supervisor runs: start brings up one of its own, for zeus alone.
    start = ateam(project, redis_url, "start", "zeus")

    assert start.returncode == 0, start.stdout + start.stderr
    [line] = start.stdout.splitlines()
    assert line.startswith("life/zeus: started (pid ")
    assert "zeus/state/agent.log" in line
    assert bus.entry("life/hera") is None
    supervisor = json.loads((isolated_home / "run" / "life.json").read_text())["supervisor"]

    # Under the running supervisor, by a unique prefix, as JSON.
    hera = rows(ateam(project, redis_url, "start", "he", "--json"))["life/hera"]

    assert hera["status"] == "started" and hera["error"] is None
    assert hera["pid"] == serving_pid(bus, "life/hera")
    assert json.loads((isolated_home / "run" / "life.json").read_text())["supervisor"] == supervisor

    # Starting what runs is no error: it is left alone (like systemctl start).
    again = rows(ateam(project, redis_url, "start", "zeus", "--json"))["life/zeus"]
    assert again["status"] == "running" and again["pid"] == serving_pid(bus, "life/zeus")

    # A deliberate stop, and an agent configured since: up brings both up, fails nothing.
    stopped = rows(ateam(project, redis_url, "stop", "zeus", "--json"))["life/zeus"]
    assert stopped["status"] == "stopped"
    ares = project / ".ateam" / "agents" / "ares"
    ares.mkdir()
    (ares / "agent.yaml").write_text("model: slowecho\n")

    up = rows(ateam(project, redis_url, "up", "--json"))

    assert {agent: row["status"] for agent, row in up.items()} == {
        "life/zeus": "started",
        "life/hera": "running",
        "life/ares": "started",
    }
    assert up["life/hera"]["pid"] == hera["pid"]
    assert up["life/ares"]["pid"] == serving_pid(bus, "life/ares")

    # restart: a new process, under the same supervisor.
    restart = ateam(project, redis_url, "restart", "hera")

    assert restart.returncode == 0, restart.stdout + restart.stderr
    assert restart.stdout.startswith("life/hera: started (pid ")
    new_pid = wait_for(lambda: (e := bus.entry("life/hera")) and e["pid"] != hera["pid"] and e)
    assert not pid_is_running(hera["pid"])
    assert f"pid {new_pid['pid']}" in restart.stdout
    hera_log = (project / ".ateam" / "agents" / "hera" / "state" / "agent.log").read_text()
    assert "starting it again as asked" in hera_log or "exited with 0" in hera_log
    # And as JSON, by prefix: one row, a third process.
    bounced = rows(ateam(project, redis_url, "restart", "her", "--json"))["life/hera"]
    assert bounced["status"] == "started"
    assert bounced["pid"] not in (hera["pid"], new_pid["pid"])
    assert bounced["pid"] == serving_pid(bus, "life/hera")

    # down: everything up and start brought up, with the supervisor.
    down = rows(ateam(project, redis_url, "down", "--json"))

    assert {row["status"] for row in down.values()} == {"stopped"}
    assert set(down) == {"life/zeus", "life/hera", "life/ares"}
    assert not pid_is_running(supervisor)
    assert not (isolated_home / "run" / "life.json").exists()
    assert bus.entry("life/zeus") is None


def test_up_starts_again_an_agent_whose_configuration_was_fixed(
    project: Path, redis_url: str, bus: Bus
) -> None:
    # hera's queue is damaged beyond repair: a final exit, up fails naming it.
    state = project / ".ateam" / "agents" / "hera" / "state"
    state.mkdir(parents=True)
    queue = state / "queue.jsonl"
    queue.write_bytes(b'{"op":"add"' + b"x" * (1024 * 1024 + 10))

    first = ateam(project, redis_url, "up", "--detach")

    assert first.returncode == 1, first.stdout + first.stderr
    assert "life/zeus: started" in first.stdout
    assert "life/hera: FAILED, exited with 20" in first.stdout
    assert "error [spawn.failed]" in first.stderr and "life/hera" in first.stderr

    # Moved aside, as the line says: the next up starts hera and leaves zeus alone.
    queue.rename(state / "queue.jsonl.aside")
    second = rows(ateam(project, redis_url, "up", "--json"))

    assert second["life/hera"]["status"] == "started"
    assert second["life/zeus"]["status"] == "running"
    assert serving_pid(bus, "life/hera") == second["life/hera"]["pid"]


def test_up_leaves_alone_an_agent_that_runs_elsewhere(
    project: Path, redis_url: str, start_agent: AgentFactory
) -> None:
    elsewhere = start_agent("life/hera")  # a terminal's `ateam agent`, not the supervisor's

    up = rows(ateam(project, redis_url, "up", "--json"))

    assert up["life/hera"] == {
        "id": "life/hera",
        "status": "running",
        "pid": elsewhere.pid,
        "log": str(project / ".ateam" / "agents" / "hera" / "state" / "agent.log"),
        "error": None,
    }
    assert up["life/zeus"]["status"] == "started"
    # down stops what up started, and says which agent it could not stop.
    down = rows(ateam(project, redis_url, "down", "--json"))
    assert down["life/zeus"]["status"] == "stopped"
    assert down["life/hera"]["status"] == "running"
    assert "`ateam stop life/hera`" in down["life/hera"]["error"]
    assert elsewhere.running()


def test_the_verbs_name_what_is_wrong_in_one_line(
    tmp_path: Path, project: Path, redis_url: str
) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    for args, code, words in [
        (("up", "--detach"), 4, "`ateam init`"),
        (("start", "zeus"), 4, "`ateam init`"),
        (("down",), 4, "`ateam init`"),
    ]:
        done = run_ateam(*args, "--redis", redis_url, cwd=bare)
        assert done.returncode == code, done.stdout + done.stderr
        [line] = done.stderr.splitlines()
        assert line.startswith("error [bad_request]: no ateam project in ") and words in line

    unknown = ateam(project, redis_url, "start", "apollo")
    assert unknown.returncode == 4
    assert unknown.stderr.strip() == (
        f"error [bad_request]: 'apollo' is not an agent of life (configured in {project}"
        "/.ateam/agents/: hera, zeus) — see `ateam start --help`"
    )
    (project / ".ateam" / "agents" / "hermes").mkdir()
    (project / ".ateam" / "agents" / "hermes" / "agent.yaml").write_text("model: slowecho\n")
    ambiguous = ateam(project, redis_url, "start", "he")
    assert ambiguous.returncode == 4
    assert ambiguous.stderr.strip() == (
        "error [name.ambiguous]: 'he' could be any of the agents of life: life/hera, life/hermes; "
        "type more of the name"
    )
