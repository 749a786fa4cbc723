"""Plan approval across a restart and with a teammate waiting for the answer (issue 26,
after review).

Real ``ateam agent`` processes on scripted models, driven with the CLI as a person would;
the helpers are those of :mod:`tests.integration.test_plan_delegate`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests._wait import wait_for
from tests.integration.conftest import AgentFactory, run_ateam
from tests.integration.test_plan_delegate import (
    PLAN_REFUSAL,
    answered,
    ateam_json,
    call,
    fs_write,
    script,
    tool_results,
    user_turns,
    write_project,
)

pytestmark = pytest.mark.integration


def board_task(redis_url: str) -> dict[str, Any]:
    tasks = ateam_json("tasks", "ls", "--project", "t", "--redis", redis_url)
    assert len(tasks) == 1, tasks
    task: dict[str, Any] = tasks[0]
    return task


def test_a_board_task_held_for_its_plan_stays_held_across_a_restart(
    start_agent: AgentFactory, tmp_path: Path, redis_url: str
) -> None:
    root = write_project(
        tmp_path / "t", {"hera": {"take_tasks": True, "tools": {"allow": ["fs.*", "plan.*"]}}}
    )
    script(
        root,
        "hera",
        [
            call(fs_write("h.txt")),
            call({"name": "plan.write", "args": {"content": "write h.txt\n"}}),
            {"text": "Plan written."},
        ],
    )
    hera = start_agent("t/hera", cwd=root)
    added = ateam_json(
        "tasks", "add", "write", "h.txt", "--require-plan", "--project", "t", "--redis", redis_url
    )
    wait_for(lambda: answered(root, "hera", "Plan written."), 30, "hera's plan")
    assert tool_results(root, "hera", "fs.write")[0].startswith(PLAN_REFUSAL)

    stopped = run_ateam("stop", "t/hera", "--redis", redis_url)
    assert stopped.returncode == 0, stopped.stderr
    hera.wait_exit()
    script(root, "hera", [call(fs_write("h.txt")), {"text": "Wrote h.txt."}])
    start_agent("t/hera", cwd=root)
    # Nothing is queued for it, on purpose: it is held for its plan, not a stray.
    task = board_task(redis_url)
    assert (task["id"], task["status"], task["assignee"]) == (added["id"], "claimed", "t/hera")

    state = ateam_json("plan", "approve", "t/hera", "--redis", redis_url)
    assert state["task"] == f"board:{added['id']}"
    wait_for(lambda: board_task(redis_url)["status"] == "done", 30, "the approved work")
    assert board_task(redis_url)["result"] == "Wrote h.txt."
    assert (root / "work" / "h.txt").exists()


def test_a_teammate_that_asked_with_reply_gets_the_work_not_the_plan(
    start_agent: AgentFactory, tmp_path: Path, redis_url: str
) -> None:
    root = write_project(
        tmp_path / "t",
        {
            "zeus": {"tools": {"allow": ["team.*"]}},
            "hera": {"require_plan": True, "tools": {"allow": ["fs.*", "plan.*"]}},
        },
    )
    ask = {"name": "team.send", "args": {"to": "hera", "text": "write r.txt", "reply": True}}
    script(root, "zeus", [call(ask), {"text": "Asked hera."}, {"text": "hera is done."}])
    script(
        root,
        "hera",
        [
            call({"name": "plan.write", "args": {"content": "write r.txt\n"}}),
            {"text": "Plan written; waiting for approval."},
            call(fs_write("r.txt")),  # the approval's input
            {"text": "Wrote r.txt."},
        ],
    )
    start_agent("t/zeus", cwd=root)
    start_agent("t/hera", cwd=root)
    sent = run_ateam("send", "t/zeus", "ask hera for r.txt", "--wait", "--redis", redis_url)
    assert sent.returncode == 0, sent.stderr
    wait_for(lambda: answered(root, "hera", "Plan written; waiting for approval."), 30, "plan")

    def replies() -> list[str]:
        turns = user_turns(root, "zeus")
        return [t["content"] for t in turns if t.get("source") == "agent:hera"]

    approved = run_ateam("plan", "approve", "t/hera", "--redis", redis_url)
    assert approved.returncode == 0, approved.stderr
    wait_for(lambda: answered(root, "zeus", "hera is done."), 30, "hera's reply to zeus")
    (reply,) = replies()
    assert reply.endswith("Wrote r.txt."), reply
    assert (root / "work" / "r.txt").exists()


def test_a_held_board_task_the_board_took_back_is_forgotten(
    start_agent: AgentFactory, tmp_path: Path, redis_url: str
) -> None:
    root = write_project(
        tmp_path / "t", {"hera": {"take_tasks": True, "tools": {"allow": ["fs.*", "plan.*"]}}}
    )
    write_plan = call({"name": "plan.write", "args": {"content": "write h.txt\n"}})
    script(root, "hera", [write_plan, {"text": "Plan written."}])
    hera = start_agent("t/hera", cwd=root)
    held = ateam_json(
        "tasks", "add", "write", "h.txt", "--require-plan", "--project", "t", "--redis", redis_url
    )
    wait_for(lambda: answered(root, "hera", "Plan written."), 30, "hera's plan")
    stopped = run_ateam("stop", "t/hera", "--redis", redis_url)
    assert stopped.returncode == 0, stopped.stderr
    hera.wait_exit()
    # While hera was down, a person gave the task up for it, and put another on the board.
    given_up = run_ateam(
        "tasks", "fail", held["id"], "--as", "t/hera", "--reason", "not now",
        "--project", "t", "--redis", redis_url,
    )  # fmt: skip
    assert given_up.returncode == 0, given_up.stderr
    script(root, "hera", [{"text": "Did the second."}])
    start_agent("t/hera", cwd=root)
    other = ateam_json("tasks", "add", "second", "--project", "t", "--redis", redis_url)

    def status_of(task_id: str) -> tuple[str, str]:
        tasks = ateam_json("tasks", "ls", "--project", "t", "--redis", redis_url)
        task = next(t for t in tasks if t["id"] == task_id)
        return task["status"], task.get("result") or ""

    wait_for(lambda: status_of(other["id"])[0] == "done", 30, "hera to take the second task")
    assert status_of(other["id"]) == ("done", "Did the second.")
    assert ateam_json("plan", "show", "t/hera", "--redis", redis_url)["task"] is None
