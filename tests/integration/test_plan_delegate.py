"""Plan approval and delegate mode, driven as a person and a lead agent would (issue 26).

Real ``ateam agent`` processes on scripted models. What is checked is what the model was
told (the tool results and inputs in its history), the files it wrote, the board, and
what ``ps --json`` and ``plan show --json`` say.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from ateam.bus.connection import RedisTarget
from ateam.client import Team
from ateam.redact import Redactor
from tests._wait import wait_for
from tests.integration.conftest import AgentFactory, ConsoleFactory, history_turns, run_ateam

pytestmark = pytest.mark.integration

PLAN_REFUSAL = "error [plan.required]: tool fs.write refused: this task needs an approved plan"


def fs_write(path: str, text: str = "ok\n") -> dict[str, Any]:
    return {"name": "fs.write", "args": {"path": path, "content": text}}


def call(*calls: dict[str, Any], text: str = "Working.") -> dict[str, Any]:
    return {"text": text, "tool_calls": list(calls)}


def write_project(root: Path, agents: dict[str, dict[str, Any]]) -> Path:
    """Project ``t``: one scripted model per agent (``<name>.yaml``), all in ``work/``."""
    ateam = root / ".ateam"
    models = []
    for name, spec in agents.items():
        (ateam / "agents" / name).mkdir(parents=True)
        (ateam / "agents" / name / "agent.yaml").write_text(
            yaml.safe_dump({"model": name, "cwd": "work", **spec})
        )
        models.append({"id": name, "provider": "scripted", "script": f"{name}.yaml"})
    (ateam / "project.yaml").write_text("name: t\n")
    (ateam / "models.yaml").write_text(yaml.safe_dump({"models": models}))
    (root / "work").mkdir()
    return root


def script(root: Path, name: str, turns: list[dict[str, Any]]) -> None:
    (root / ".ateam" / f"{name}.yaml").write_text(yaml.safe_dump({"turns": turns}))


def tool_results(root: Path, agent: str, tool: str) -> list[str]:
    turns = history_turns(root, agent)
    return [t["content"] for t in turns if t.get("role") == "tool" and t.get("source") == tool]


def user_turns(root: Path, agent: str) -> list[dict[str, Any]]:
    return [t for t in history_turns(root, agent) if t.get("role") == "user"]


def ateam_json(*args: str) -> Any:
    done = run_ateam(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def ps_row(redis_url: str, agent: str) -> dict[str, Any]:
    rows = ateam_json("ps", "--redis", redis_url)
    return next(row for row in rows if row["id"] == agent)


def answered(root: Path, agent: str, text: str) -> bool:
    turns = history_turns(root, agent)
    return any(t.get("role") == "assistant" and t.get("content") == text for t in turns)


async def send_in_thread(redis_url: str, agent: str, text: str, trace_id: str) -> None:
    """A follow-up in the same thread (task) as an earlier input: its trace id."""
    target = RedisTarget(redis_url, "--redis")
    async with await Team.connect(target, session="api:test", redactor=Redactor()) as team:
        params = {"text": text, "source": "api", "trace_id": trace_id}
        await team.agent(agent).call("input", params, claim=True)


def test_a_plan_is_required_rejected_approved_and_kept_across_a_restart(
    start_agent: AgentFactory, tmp_path: Path, redis_url: str
) -> None:
    root = write_project(
        tmp_path / "t", {"zeus": {"require_plan": True, "tools": {"allow": ["fs.*", "plan.*"]}}}
    )
    script(
        root,
        "zeus",
        [
            call(fs_write("a.txt")),  # refused: no plan yet
            call({"name": "plan.write", "args": {"content": "1. write a.txt\n"}}),
            {"text": "Plan written; waiting for approval."},
            # the rejection's input
            call({"name": "plan.write", "args": {"content": "1. a.txt\n2. b.txt\n"}}),
            {"text": "Plan revised."},
            # the approval's input
            call(fs_write("a.txt")),
            {"text": "Wrote a.txt."},
        ],
    )
    zeus = start_agent("t/zeus", cwd=root)
    sent = run_ateam("send", "t/zeus", "make a.txt", "--wait", "--redis", redis_url)
    assert sent.returncode == 0, sent.stderr
    assert tool_results(root, "zeus", "fs.write")[0].startswith(PLAN_REFUSAL)
    assert not (root / "work" / "a.txt").exists()
    assert ps_row(redis_url, "t/zeus")["plan"] == "awaiting approval"

    rejected = run_ateam(
        "plan", "reject", "t/zeus", "--feedback", "also write b.txt", "--redis", redis_url
    )
    assert rejected.returncode == 0, rejected.stderr
    wait_for(lambda: answered(root, "zeus", "Plan revised."), 30, "the revised plan")
    feedback = user_turns(root, "zeus")[-1]
    assert "Feedback: also write b.txt" in feedback["content"]
    assert feedback["source"] == "plan"
    assert not (root / "work" / "a.txt").exists()

    state = ateam_json("plan", "approve", "t/zeus", "--redis", redis_url)
    assert state["plan"] == "approved" and state["status"] == "approved"
    wait_for(lambda: answered(root, "zeus", "Wrote a.txt."), 30, "the approved work")
    assert (root / "work" / "a.txt").read_text() == "ok\n"
    shown = ateam_json("plan", "show", "t/zeus", "--redis", redis_url)
    assert shown["text"] == "1. a.txt\n2. b.txt\n" and shown["by"].startswith("a person")

    # Restarted, the agent keeps the approval of that task, and only of that task.
    trace = user_turns(root, "zeus")[0]["trace_id"]
    stopped = run_ateam("stop", "t/zeus", "--redis", redis_url)
    assert stopped.returncode == 0, stopped.stderr
    zeus.wait_exit()
    script(
        root,
        "zeus",
        [call(fs_write("b.txt")), {"text": "Wrote b.txt."}, call(fs_write("c.txt")), {"text": "?"}],
    )
    start_agent("t/zeus", cwd=root)
    assert ps_row(redis_url, "t/zeus")["plan"] == "approved"
    asyncio.run(send_in_thread(redis_url, "t/zeus", "now b.txt", trace))
    wait_for(lambda: answered(root, "zeus", "Wrote b.txt."), 30, "the work after the restart")
    assert (root / "work" / "b.txt").exists()
    new_task = run_ateam("send", "t/zeus", "make c.txt", "--wait", "--redis", redis_url)
    assert new_task.returncode == 0, new_task.stderr
    assert tool_results(root, "zeus", "fs.write")[-1].startswith(PLAN_REFUSAL)
    assert not (root / "work" / "c.txt").exists()
    assert ps_row(redis_url, "t/zeus")["plan"] == "awaiting approval"


def test_a_lead_in_delegate_mode_approves_a_board_tasks_plan(
    start_agent: AgentFactory, tmp_path: Path, redis_url: str
) -> None:
    lead_tools = ["os.*", "team.*", "plan.*", "tasks.*"]
    root = write_project(
        tmp_path / "t",
        {
            "zeus": {"delegate": True, "tools": {"allow": lead_tools}},
            "hera": {"take_tasks": True, "tools": {"allow": ["fs.*", "plan.*"]}},
        },
    )
    echo = {"name": "os.exec", "args": {"cmd": "echo hi"}}
    script(
        root,
        "zeus",
        [
            call(echo),  # refused: delegate mode
            call(
                {"name": "plan.approve", "args": {"agent": "hera"}},
                {"name": "team.send", "args": {"to": "hera", "text": "thanks"}},
            ),
            {"text": "Approved hera's plan."},
            call(echo),  # delegate mode is off by then
            {"text": "Ran it."},
        ],
    )
    script(
        root,
        "hera",
        [
            call(fs_write("h.txt")),
            call({"name": "plan.write", "args": {"content": "write h.txt\n"}}),
            {"text": "Plan written."},
            call(fs_write("h.txt")),  # the approval's input, as the board task again
            {"text": "Wrote h.txt."},
            {"text": "Noted."},  # zeus's message
        ],
    )
    start_agent("t/zeus", cwd=root)
    start_agent("t/hera", cwd=root)
    assert ps_row(redis_url, "t/zeus")["delegate"] is True
    assert "delegate" in run_ateam("ps", "--redis", redis_url).stdout

    added = ateam_json(
        "tasks", "add", "write", "h.txt", "--require-plan", "--project", "t", "--redis", redis_url
    )
    assert added["require_plan"] is True
    wait_for(lambda: answered(root, "hera", "Plan written."), 30, "hera's plan")
    assert tool_results(root, "hera", "fs.write")[0].startswith(PLAN_REFUSAL)
    # Not done: the plan waits, so the task stays hera's.
    task = ateam_json("tasks", "ls", "--project", "t", "--redis", redis_url)[0]
    assert (task["status"], task["assignee"]) == ("claimed", "t/hera")

    sent = run_ateam("send", "t/zeus", "review hera's plan", "--wait", "--redis", redis_url)
    assert sent.returncode == 0, sent.stderr
    refused = tool_results(root, "zeus", "os.exec")[0]
    assert refused.startswith("error [tool.denied]: tool os.exec refused: delegate mode: ")
    assert '"plan": "approved"' in tool_results(root, "zeus", "plan.approve")[0]
    assert '"to": "t/hera"' in tool_results(root, "zeus", "team.send")[0]

    wait_for(lambda: answered(root, "hera", "Noted."), 30, "hera's work and zeus's note")
    assert (root / "work" / "h.txt").exists()
    task = ateam_json("tasks", "ls", "--project", "t", "--redis", redis_url)[0]
    assert (task["status"], task["result"]) == ("done", "Wrote h.txt.")
    approval = next(t for t in user_turns(root, "hera") if "[plan approved by" in t["content"])
    assert approval["content"].startswith("[plan approved by t/zeus]")

    # Off at run time: the lead may run commands again, and ps says so.
    state = ateam_json("delegate", "t/zeus", "off", "--redis", redis_url)
    assert state["delegate"] is False
    assert ps_row(redis_url, "t/zeus")["delegate"] is False
    again = run_ateam("send", "t/zeus", "run it", "--wait", "--redis", redis_url)
    assert again.returncode == 0, again.stderr
    assert tool_results(root, "zeus", "os.exec")[-1].endswith("[exit code 0]")


def test_the_console_answers_plans_and_switches_delegate_mode(
    start_agent: AgentFactory, start_console: ConsoleFactory, tmp_path: Path, redis_url: str
) -> None:
    root = write_project(
        tmp_path / "t",
        {"zeus": {"require_plan": True, "tools": {"allow": ["fs.*", "plan.*", "os.*"]}}},
    )
    echo = {"name": "os.exec", "args": {"cmd": "echo hi"}}
    script(
        root,
        "zeus",
        [
            call(fs_write("x.txt")),
            {"text": "Waiting for approval."},
            {"text": "Revising."},  # the rejection's input
            call(echo),  # the approval's input: approved, but in delegate mode by then
            {"text": "Blocked by delegate mode."},
        ],
    )
    start_agent("t/zeus", cwd=root)
    sent = run_ateam("send", "t/zeus", "make x.txt", "--wait", "--redis", redis_url)
    assert sent.returncode == 0, sent.stderr
    console = start_console()
    console.wait_line("awaits approval (/plan approve t/zeus)")  # the banner

    console.send("/plan reject t/zeus split it in two")
    console.wait_line("plan of t/zeus sent back")
    wait_for(lambda: answered(root, "zeus", "Revising."), 30, "the feedback's turn")
    assert "Feedback: split it in two" in user_turns(root, "zeus")[-1]["content"]

    console.send("/delegate on t/zeus")
    console.wait_line("delegate mode of t/zeus on: coordination tools only")
    console.send("/plan approve t/zeus")
    console.wait_line("plan of t/zeus approved")
    wait_for(lambda: answered(root, "zeus", "Blocked by delegate mode."), 30, "the approved turn")
    assert tool_results(root, "zeus", "fs.write")[0].startswith(PLAN_REFUSAL)
    refused = tool_results(root, "zeus", "os.exec")[0]
    assert refused.startswith("error [tool.denied]: tool os.exec refused: delegate mode: ")
    console.send("/ps")
    console.wait_line(lambda line: "t/zeus" in line and "delegate, plan: approved" in line)
