"""A failed board task goes back to work (issue 26 §4), with real agents on the scripted
model: ``ateam tasks retry`` gives it back to the agent that failed it, ``ateam tasks
reopen`` to anyone, and whoever takes it next reads why it failed; ``ateam tasks ls``
says what an open task is blocked by.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests._wait import wait_for

from .conftest import AgentFactory, Bus, run_ateam

pytestmark = pytest.mark.integration

P = "proj"
EARLIER = "An earlier attempt failed: "


def scripted_project(root: Path, agents: tuple[str, ...], turns: list[dict[str, Any]]) -> Path:
    """Agents that take tasks from the board, each replaying ``turns`` from the first."""
    ateam_dir = root / ".ateam"
    ateam_dir.mkdir(parents=True)
    (ateam_dir / "project.yaml").write_text(f"name: {P}\n")
    (ateam_dir / "models.yaml").write_text(
        "models:\n  - id: script\n    provider: scripted\n    script: script.yaml\n"
    )
    (ateam_dir / "script.yaml").write_text(yaml.safe_dump({"turns": turns}))
    for agent in agents:
        (ateam_dir / "agents" / agent).mkdir(parents=True)
        agent_yaml = ateam_dir / "agents" / agent / "agent.yaml"
        agent_yaml.write_text("model: script\ntake_tasks: true\n")
    return root


def tasks(*args: str, redis_url: str, cwd: Path) -> Any:
    """``ateam tasks ARGS --json``: its exit code and parsed output (else its stderr)."""
    done = run_ateam("tasks", *args, "--json", "--redis", redis_url, cwd=cwd)
    return done.returncode, (json.loads(done.stdout) if done.returncode == 0 else done.stderr)


def task_of(task_id: str, redis_url: str, cwd: Path) -> dict[str, Any]:
    rc, board = tasks("ls", redis_url=redis_url, cwd=cwd)
    assert rc == 0, board
    found: dict[str, Any] = next(row for row in board if row["id"] == task_id)
    return found


def starts(bus: Bus, agent: str, task_id: str) -> list[str]:
    """The input texts of ``agent``'s runs of board task ``task_id``, in order."""
    return [
        str(body["text"])
        for _, body in bus.events(agent)
        if body.get("type") == "task.start" and body.get("source") == f"board:{task_id}"
    ]


def test_retry_gives_a_failed_task_back_to_the_running_agent_that_failed_it(
    start_agent: AgentFactory, bus: Bus, redis_url: str, tmp_path: Path
) -> None:
    # Each agent's model fails its first task (a provider error) and does its second.
    turns = [{"error": {"status": 400}}, {"text": "fixed it"}]
    root = scripted_project(tmp_path / P, ("a", "b"), turns)
    start_agent(f"{P}/a", cwd=root)
    start_agent(f"{P}/b", cwd=root)
    rc, task = tasks("add", "port", "the", "parser", redis_url=redis_url, cwd=root)
    assert rc == 0, task
    wait_for(
        lambda: task_of(task["id"], redis_url, root)["status"] == "failed",
        30,
        "an agent to take the task and fail it",
    )
    failed = task_of(task["id"], redis_url, root)
    failed_by = failed["assignee"]
    assert failed_by in (f"{P}/a", f"{P}/b") and failed["reason"]

    rc, retried = tasks("retry", task["id"][:6], redis_url=redis_url, cwd=root)  # cut short
    assert rc == 0, retried
    assert retried["status"] == "open" and retried["offered_to"] == failed_by
    assert retried["last_error"] == failed["reason"] and retried["reason"] == "retried by cli"

    # The other agent, idle too and told of the change, must leave it to failed_by, whose
    # model (at its second turn now) does it; the other's first turn would fail it again.
    wait_for(
        lambda: task_of(task["id"], redis_url, root)["status"] == "done",
        30,
        "the agent that failed the task to do it on the retry",
    )
    done = task_of(task["id"], redis_url, root)
    assert done["assignee"] == failed_by and done["result"] == "fixed it"
    first, second = starts(bus, failed_by, task["id"])
    assert EARLIER not in first and f"{EARLIER}{failed['reason']}" in second
    other = f"{P}/b" if failed_by == f"{P}/a" else f"{P}/a"
    assert starts(bus, other, task["id"]) == []

    again = run_ateam("tasks", "retry", task["id"], "--redis", redis_url, cwd=root)
    assert again.returncode == 1 and again.stderr.startswith("error [task.claimed]")
    assert "is done" in again.stderr and "only a failed task" in again.stderr


def test_reopen_gives_a_failed_task_to_anyone_and_tells_them_why_it_failed(
    start_agent: AgentFactory, bus: Bus, redis_url: str, tmp_path: Path
) -> None:
    root = scripted_project(tmp_path / P, ("a",), [{"text": "migrated"}])
    rc, first = tasks("add", "migrate", "the", "db", redis_url=redis_url, cwd=root)
    assert rc == 0, first
    rc, second = tasks("add", "ship", "--depends-on", first["id"], redis_url=redis_url, cwd=root)
    assert rc == 0, second
    # A person takes the first and gives up (no agent runs yet: nobody else claims it).
    rc, _ = tasks("claim", first["id"], "--as", f"{P}/x", redis_url=redis_url, cwd=root)
    assert rc == 0
    rc, _ = tasks(
        "fail", first["id"], "--as", f"{P}/x", "--reason", "schema locked",
        redis_url=redis_url, cwd=root,
    )  # fmt: skip
    assert rc == 0

    # The dependent says why it waits, in JSON and in the table.
    blocked = task_of(second["id"], redis_url, root)
    assert blocked["blocked_by"] == [{"id": first["id"], "failed": True}]
    table = run_ateam("tasks", "ls", "--redis", redis_url, cwd=root)
    assert table.returncode == 0, table.stderr
    [row] = [line for line in table.stdout.splitlines() if line.startswith(second["id"])]
    assert f"blocked by {first['id']} (failed)" in row

    refused = run_ateam("tasks", "reopen", second["id"], "--redis", redis_url, cwd=root)
    assert refused.returncode == 1 and refused.stderr.startswith("error [task.claimed]")
    assert "is open" in refused.stderr

    start_agent(f"{P}/a", cwd=root)  # takes tasks; a failed one is not for taking
    reopened = run_ateam("tasks", "reopen", first["id"], "--redis", redis_url, cwd=root)
    assert reopened.returncode == 0, reopened.stderr
    assert reopened.stdout.startswith(f"reopened {first['id']}: migrate the db")
    assert "(it failed: schema locked)" in reopened.stdout

    wait_for(
        lambda: task_of(first["id"], redis_url, root)["status"] == "done",
        30,
        "the agent to take the reopened task",
    )
    done = task_of(first["id"], redis_url, root)
    assert done["assignee"] == f"{P}/a" and done["last_error"] == "schema locked"
    assert done["reopened"] == 1
    [text] = starts(bus, f"{P}/a", first["id"])
    assert f"{EARLIER}schema locked" in text
    # Its dependent is free now: the agent takes it next (the script is used up by then).
    wait_for(
        lambda: task_of(second["id"], redis_url, root)["status"] == "done",
        30,
        "the dependent to be taken once its dependency is done",
    )
    assert task_of(second["id"], redis_url, root)["blocked_by"] == []
