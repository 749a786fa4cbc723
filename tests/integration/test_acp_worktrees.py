"""A coding agent with ``worktree: task`` works each board task in its worktree (issue 27).

A real ``ateam agent`` whose model is the scriptable ACP test agent (``tests/acp_agent.py``)
takes a board task from a real git repository: the runtime started for the task runs in
the task's worktree, its session is new there, its writes and commands land there and are
committed on ``ateam/NAME/TASK-ID``, nothing reaches the main tree, and the runtime ends
with the task, while a person's prompts stay with the agent's own session.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests._wait import wait_for

from .conftest import AgentFactory, Bus, run_ateam, write_acp_project

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

WAIT_S = 45.0


def git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout


def under_git(root: Path) -> None:
    """``root`` (holding the project) as a repository on ``main`` with one commit; the
    project's and the test runtime's files ignored."""
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", "Tester")
    git(root, "config", "user.email", "tester@example.invalid")
    (root / ".gitignore").write_text(".ateam/\nruntime/\n")
    (root / "README.md").write_text("# the project\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "first")


def ateam_json(root: Path, redis_url: str, *args: str) -> Any:
    done = run_ateam(*args, "--json", "--redis", redis_url, cwd=root)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def board_row(root: Path, redis_url: str, task_id: str) -> dict[str, Any] | None:
    (row,) = [r for r in ateam_json(root, redis_url, "tasks", "ls") if r["id"] == task_id]
    assert row["status"] != "failed", row
    return row if row["status"] == "done" else None


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state == "Z"


def script(escape: Path) -> dict[str, Any]:
    """A person's prompt, the board task (a write, a command, a write outside), a prompt."""
    task_steps: list[dict[str, Any]] = [
        {"tool": {"id": "w1", "title": "Write greeting.txt", "kind": "edit",
                  "write": {"path": "greeting.txt", "content": "hello from the task\n"}}},
        {"tool": {"id": "t1", "title": "Where am I", "kind": "execute",
                  "terminal": {"command": "pwd -P > where.txt"}}},
        {"tool": {"id": "w2", "title": "Write outside", "kind": "edit",
                  "write": {"path": str(escape), "content": "escaped\n"}}},
        {"text": "Greeting written."},
    ]  # fmt: skip
    return {
        "prompts": [
            {"steps": [{"text": "Hi."}]},
            {"steps": task_steps},
            {"steps": [{"text": "Still here."}]},
        ]
    }


def test_a_board_task_of_a_coding_agent_runs_in_its_worktree_with_a_runtime_of_its_own(
    start_agent: AgentFactory, bus: Bus, redis_url: str, tmp_path: Path
) -> None:
    root = tmp_path / "p"
    allow = {"os.exec": "allow", "fs.patch": "allow"}
    project = write_acp_project(
        root,
        "p",
        script(root / "escaped.txt"),
        agent_yaml={"worktree": "task", "take_tasks": True, "tools": {"approval": allow}},
    )
    under_git(root)
    main_tree = os.path.realpath(root)
    start_agent("p/zeus", cwd=root)

    def ended(count: int) -> list[dict[str, Any]]:
        return wait_for(
            lambda: (ends := bus.task_end_list("p/zeus")) and len(ends) >= count and ends,
            WAIT_S,
            f"{count} task.end",
        )

    def prompt_ends() -> list[dict[str, Any]]:
        return [line for line in project.sent() if line.get("event") == "prompt_end"]

    ateam_json(root, redis_url, "send", "p/zeus", "hello")
    ended(1)
    task = ateam_json(root, redis_url, "tasks", "add", "Write", "the", "greeting")
    row = wait_for(lambda: board_row(root, redis_url, task["id"]), WAIT_S, "the task done")
    tree = os.path.realpath(row["work"]["worktree"])
    branch = f"ateam/zeus/{task['id']}"
    assert row["work"]["branch"] == branch and row["result"] == "Greeting written."

    # The runtime of the task was started in the worktree, its session new there: the
    # agent's own session (in the main tree) was neither loaded nor replaced.
    opened = [os.path.realpath(line["params"]["cwd"]) for line in project.sent("session/new")]
    assert opened == [main_tree, tree]
    assert not project.sent("session/load")
    first, in_task = prompt_ends()
    assert (first["cwd"], in_task["cwd"]) == (main_tree, tree)
    assert in_task["pid"] != first["pid"] and in_task["sessionId"] != first["sessionId"]
    state = root / ".ateam" / "agents" / "zeus" / "state"
    assert json.loads((state / "acp_sessions.json").read_text()) == {"coder": first["sessionId"]}

    # Its write and its command ran in the worktree, are committed on the task's branch,
    # and the main tree has none of them; a write outside the worktree was refused.
    assert git(root, "show", f"{branch}:greeting.txt") == "hello from the task\n"
    assert git(root, "show", f"{branch}:where.txt").strip() == tree
    assert git(tree, "status", "--porcelain") == ""
    for name in ("greeting.txt", "where.txt", "escaped.txt"):
        assert not (root / name).exists(), name
    assert git(root, "status", "--porcelain") == ""

    # The task's runtime ended with the task; a person's next prompt goes on in the
    # agent's own session, in the same runtime as before.
    wait_for(lambda: gone(in_task["pid"]), WAIT_S, "the task's runtime to end")
    assert not gone(first["pid"])
    ateam_json(root, redis_url, "send", "p/zeus", "and now?")
    ended(3)
    last = prompt_ends()[-1]
    assert (last["sessionId"], last["pid"], last["cwd"]) == (
        first["sessionId"],
        first["pid"],
        main_tree,
    )
    assert len(project.sent("session/new")) == 2


def test_a_refused_task_done_goes_on_in_the_task_s_session_which_ends_with_the_task(
    start_agent: AgentFactory, redis_url: str, tmp_path: Path
) -> None:
    root = tmp_path / "g"
    write = {"path": "tested.txt", "content": "a regression test\n"}
    steps = [{"tool": {"id": "w1", "title": "Add a test", "kind": "edit", "write": write}}]
    prompts = {"prompts": [{"steps": [{"text": "Done quickly."}]}, {"steps": steps}]}
    allow = {"fs.patch": "allow"}
    project = write_acp_project(
        root,
        "g",
        prompts,
        agent_yaml={"worktree": "task", "take_tasks": True, "tools": {"approval": allow}},
    )
    # Judged where the task works: refused until its worktree has the test.
    gate = "test -f tested.txt || { echo 'add a regression test' >&2; exit 2; }"
    (root / ".ateam" / "project.yaml").write_text(
        json.dumps({"name": "g", "hooks": {"task_done": gate}})
    )
    under_git(root)
    start_agent("g/zeus", cwd=root)
    task = ateam_json(root, redis_url, "tasks", "add", "Fix", "the", "bug")
    row = wait_for(lambda: board_row(root, redis_url, task["id"]), WAIT_S, "the task done")
    tree = os.path.realpath(row["work"]["worktree"])

    # One runtime, one session, in the worktree, for both prompts of the task.
    (opened,) = project.sent("session/new")
    assert os.path.realpath(opened["params"]["cwd"]) == tree
    first, second = project.sent("session/prompt")
    assert "Fix the bug" in first["text"] and "add a regression test" in second["text"]
    ends = [line for line in project.sent() if line.get("event") == "prompt_end"]
    assert len({(end["sessionId"], end["pid"], end["cwd"]) for end in ends}) == 1
    assert git(root, "show", f"ateam/zeus/{task['id']}:tested.txt") == "a regression test\n"
    assert not (root / "tested.txt").exists()
    wait_for(lambda: gone(ends[0]["pid"]), WAIT_S, "the task's runtime to end")
