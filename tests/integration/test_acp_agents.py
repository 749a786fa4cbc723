"""A coding agent over ACP as an ateam agent (issue 24): every guarantee, end to end.

Each test runs a real ``ateam agent`` whose model is a ``provider: acp`` entry starting
the scriptable ACP test agent (``tests/acp_agent.py``, written with the SDK's agent
side), and checks what a user would: a console's lines, the event stream, the history
and plan files, ``ps``, and what the runtime itself received (its ``--log``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests._wait import wait_for

from .conftest import (
    AcpProject,
    AgentFactory,
    Bus,
    ConsoleFactory,
    attach_and_send,
    group_alive,
    history_turns,
    run_ateam,
    write_acp_project,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


def of_type(bus: Bus, agent: str, kind: str) -> list[dict[str, Any]]:
    return [body for _, body in bus.events(agent) if body.get("type") == kind]


def text_of(bus: Bus, agent: str, *, thinking: bool = False) -> str:
    return "".join(
        body.get("text", "")
        for body in of_type(bus, agent, "token")
        if bool(body.get("thinking")) == thinking
    )


def send(root: Path, agent: str, text: str, redis_url: str) -> str:
    done = run_ateam("send", agent, text, "--redis", redis_url, cwd=root)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def wait_task_end(
    bus: Bus, agent: str, count: int = 1, timeout: float = 30
) -> list[dict[str, Any]]:
    return wait_for(
        lambda: (ends := bus.task_end_list(agent)) and len(ends) >= count and ends,
        timeout,
        f"{count} task.end of {agent}",
    )


def runtime_pid(project: AcpProject) -> int:
    """The pid the runtime's process group has (written by the agent)."""
    pgid_file = project.root / ".ateam" / "agents" / "zeus" / "state" / "runtime.pgid"
    return int(pgid_file.read_text())


TOOLS_SCRIPT: dict[str, Any] = {
    "agent": {"name": "test-acp", "version": "1.2.3"},
    "modes": {"current": "ask", "available": ["ask", "auto", "full-access"]},
    "prompts": [
        {
            "steps": [
                {"thought": "Let me look around first"},
                {"text": "I will build it."},
                {
                    "tool": {
                        "id": "t1",
                        "title": "Run the build",
                        "kind": "execute",
                        "terminal": {"command": "echo built-by-ateam-pty; test -t 1 && echo tty"},
                    }
                },
                {
                    "plan": [
                        {"content": "Build", "status": "completed", "priority": "high"},
                        {"content": "Test", "status": "pending", "priority": "medium"},
                    ]
                },
                {
                    "usage": {
                        "used": 1500,
                        "size": 200000,
                        "cost": {"amount": 0.25, "currency": "USD"},
                    }
                },
                {"text": "The build is done."},
            ],
            "usage_total": {"input_tokens": 120, "output_tokens": 30},
        }
    ],
}


def test_a_task_runs_as_one_prompt_streamed_recorded_and_accounted(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path, own_redis: Any
) -> None:
    project = write_acp_project(
        tmp_path / "p", "p", TOOLS_SCRIPT, agent_yaml={"tools": {"approval": {"os.exec": "allow"}}}
    )
    start_agent("p/zeus", cwd=project.root)
    task_id = send(project.root, "p/zeus", "build it", own_redis.url)
    (end,) = wait_task_end(bus, "p/zeus")
    assert end["ok"] is True and end["task_id"] == task_id

    # The session got ateam's MCP server acting as this agent, its proof in the
    # environment only, never on the command line.
    (created,) = project.sent("session/new")
    (server,) = created["params"]["mcpServers"]
    assert server["name"] == "ateam"
    assert server["args"][-4:] == ["--project", "p", "--as", "zeus"]
    env = {var["name"]: var["value"] for var in server["env"]}
    assert len(env["ATEAM_AGENT_TOKEN"]) >= 32
    assert env["ATEAM_AGENT_TOKEN"] not in " ".join(server["args"])
    # One queued input = one session/prompt, carrying the input after the agent's role.
    (prompt,) = project.sent("session/prompt")
    assert prompt["text"].endswith("build it")
    # Streamed: the answer as tokens, the reasoning marked as such, not mixed in.
    assert text_of(bus, "p/zeus") == "I will build it.The build is done."
    assert text_of(bus, "p/zeus", thinking=True) == "Let me look around first"
    # The command ran through ateam's PTY (a terminal: `test -t 1` says so), streamed live.
    (start,) = of_type(bus, "p/zeus", "tool.start")
    assert start["name"] == "Run the build" and start["kind"] == "execute"
    output = "".join(body.get("text", "") for body in of_type(bus, "p/zeus", "tool.output"))
    assert "built-by-ateam-pty" in output and "tty" in output
    (tool_end,) = of_type(bus, "p/zeus", "tool.end")
    assert tool_end["ok"] is True and tool_end["call_id"] == "t1"
    # History in the native shape: the input, the call, its result, the final answer.
    turns = [t for t in history_turns(project.root) if t.get("task_id") == task_id]
    assert [t["role"] for t in turns] == ["user", "assistant", "tool", "assistant"]
    assert turns[1]["tool_calls"][0]["id"] == "t1"
    assert "built-by-ateam-pty" in turns[2]["content"]
    assert turns[3]["final"] is True and turns[3]["content"] == "The build is done."
    # The runtime's plan is the agent's plan; its cost and tokens are the agent's usage.
    plan = (project.root / ".ateam" / "agents" / "zeus" / "plan.md").read_text()
    assert "[x] Build" in plan and "[ ] Test" in plan
    usage = json.loads(
        (project.root / ".ateam" / "agents" / "zeus" / "state" / "usage.json").read_text()
    )["models"]["coder"]
    assert usage["cost"] == pytest.approx(0.25)
    assert (usage["tokens_in"], usage["tokens_out"]) == (120, 30)
    # ps shows the runtime with its mode: commands are `allow` for this agent, so it put
    # the runtime in the mode that runs them without asking.
    ps = run_ateam("ps", "--json", "--redis", own_redis.url, cwd=project.root)
    (row,) = [r for r in json.loads(ps.stdout) if r["id"] == "p/zeus"]
    assert row["model"] == "coder"
    assert row["runtime_mode"] == "full-access"
    assert row["usage"]["cost"] == pytest.approx(0.25)


EDIT_SCRIPT: dict[str, Any] = {
    "prompts": [
        {
            "steps": [
                {
                    "permission": {"id": "w1", "title": "Write notes.txt", "kind": "edit"},
                    "then": [
                        {
                            "tool": {
                                "id": "w1",
                                "title": "Write notes.txt",
                                "kind": "edit",
                                "write": {"path": "notes.txt", "content": "approved text\n"},
                            }
                        },
                        {"text": "Written."},
                    ],
                    "otherwise": [{"text": "Not written."}],
                }
            ]
        }
    ]
    * 2,
}


def test_an_edit_asks_the_owner_and_apply_writes_reject_leaves(
    start_agent: AgentFactory, start_console: ConsoleFactory, bus: Bus, tmp_path: Path
) -> None:
    project = write_acp_project(tmp_path / "e", "e", EDIT_SCRIPT)  # fs.write: ask by default
    start_agent("e/zeus", cwd=project.root)
    console = start_console()
    attach_and_send(console, "e/zeus", "write the notes")
    console.wait_line("approval needed")
    assert not (project.root / "notes.txt").exists()
    console.send("/apply")
    console.wait_line("Written.")
    assert (project.root / "notes.txt").read_text() == "approved text\n"
    # The edit is shown as a diff when the call ends.
    console.wait_line("+approved text")
    (end,) = of_type(bus, "e/zeus", "tool.end")
    assert "+approved text" in end["diff"]

    (project.root / "notes.txt").unlink()
    console.send("write them again")
    wait_for(lambda: len(of_type(bus, "e/zeus", "approval.request")) == 2, 20, "second ask")
    console.send("/reject")
    console.wait_line("Not written.")
    assert not (project.root / "notes.txt").exists()
    # What the runtime was told each time: allowed once, then rejected.
    choices = [
        line["result"]["outcome"]
        for line in project.sent()
        if line.get("reply_to") == "session/request_permission"
    ]
    assert [c.get("optionId") for c in choices] == ["allow_once", "reject_once"]


def test_a_write_outside_the_sandbox_is_refused_with_the_sandboxs_reason(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path, own_redis: Any
) -> None:
    outside = tmp_path / "outside.txt"
    script = {
        "prompts": [
            {
                "steps": [
                    {
                        "tool": {
                            "id": "w1",
                            "title": "Write outside",
                            "kind": "edit",
                            "write": {"path": str(outside), "content": "escaped\n"},
                        }
                    }
                ]
            }
        ]
    }
    project = write_acp_project(tmp_path / "s", "s", script)
    start_agent("s/zeus", cwd=project.root)
    send(project.root, "s/zeus", "try it", own_redis.url)
    wait_task_end(bus, "s/zeus")
    assert not outside.exists()
    (reply,) = [line for line in project.sent() if line.get("reply_to") == "fs/write_text_file"]
    assert "fs.denied" in json.dumps(reply["error"])


HANG_SCRIPT: dict[str, Any] = {
    "load_session": True,
    "prompts": [
        {"steps": [{"text": "Starting."}, {"hang": True}]},
        {"steps": [{"echo_prompt": True}]},
        {"steps": [{"text": "second task done"}]},
    ],
}


def test_kill_9_mid_prompt_requeues_the_input_and_loads_the_session_again(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path, own_redis: Any
) -> None:
    project = write_acp_project(tmp_path / "k", "k", HANG_SCRIPT)
    agent = start_agent("k/zeus", cwd=project.root)
    send(project.root, "k/zeus", "long job", own_redis.url)
    wait_for(lambda: "Starting." in text_of(bus, "k/zeus"), 20, "the prompt to start")
    old_group = runtime_pid(project)
    assert len(project.sent("session/new")) == 1
    sessions = project.root / ".ateam" / "agents" / "zeus" / "state" / "acp_sessions.json"
    stored = json.loads(sessions.read_text())["coder"]

    agent.kill9()
    # The runtime dies with the agent (its group is tied to it), nothing left behind.
    wait_for(lambda: not group_alive(old_group), 10, "the runtime's group to die")

    start_agent("k/zeus", cwd=project.root)
    (end,) = wait_task_end(bus, "k/zeus")
    assert end["ok"] is True
    # The same session was loaded, and the input sent again, saying it was cut off.
    (loaded,) = project.sent("session/load")
    assert loaded["params"]["sessionId"] == stored
    assert len(project.sent("session/new")) == 1  # no new session: the old one goes on
    prompts = project.sent("session/prompt")
    assert len(prompts) == 2
    assert "cut off by a restart" in prompts[1]["text"]
    assert prompts[1]["text"].endswith("long job")
    assert prompts[1]["params"]["sessionId"] == loaded["params"]["sessionId"]
    # One user turn for the input, whatever the restarts.
    users = [t for t in history_turns(project.root) if t["role"] == "user"]
    assert len(users) == 1


def test_interrupt_cancels_the_prompt_and_an_ignored_cancel_kills_the_runtime(
    start_agent: AgentFactory, start_console: ConsoleFactory, bus: Bus, tmp_path: Path
) -> None:
    script = {
        "prompts": [
            {"steps": [{"text": "Working."}, {"hang": True}]},
            {"ignore_cancel": True, "steps": [{"text": "Stubborn."}, {"hang": True}]},
            {"steps": [{"text": "Fresh start."}]},
        ]
    }
    project = write_acp_project(tmp_path / "i", "i", script)
    start_agent("i/zeus", cwd=project.root)
    console = start_console()
    attach_and_send(console, "i/zeus", "first")
    # A streamed partial line is on the bus before the plain console prints it whole.
    wait_for(lambda: "Working." in text_of(bus, "i/zeus"), 20, "the first prompt")
    console.send("/interrupt")
    console.wait_line(lambda line: "task" in line and "interrupted" in line, timeout=10)
    assert project.sent("session/cancel")
    first_group = runtime_pid(project)

    console.send("second")
    wait_for(lambda: "Stubborn." in text_of(bus, "i/zeus"), 20, "the second prompt")
    started = time.monotonic()
    console.send("/interrupt")
    wait_task_end(bus, "i/zeus", 2, timeout=15)
    waited = time.monotonic() - started
    assert waited >= 4.5, "the runtime got its 5 s to end the prompt"
    wait_for(lambda: not group_alive(first_group), 10, "the ignoring runtime to be killed")

    console.send("third")
    console.wait_line("Fresh start.")
    assert runtime_pid(project) != first_group  # started again for the next task


def test_a_runtime_that_dies_mid_prompt_is_restarted_and_the_input_sent_again(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path, own_redis: Any
) -> None:
    script = {
        "prompts": [
            {"steps": [{"text": "Partial."}, {"crash": 1}]},
            {"steps": [{"text": "Recovered."}]},
        ]
    }
    project = write_acp_project(tmp_path / "c", "c", script)
    start_agent("c/zeus", cwd=project.root)
    send(project.root, "c/zeus", "fragile", own_redis.url)
    (end,) = wait_task_end(bus, "c/zeus")
    assert end["ok"] is True, end
    warns = [w for w in of_type(bus, "c/zeus", "warn") if w.get("code") == "runtime.crashed"]
    assert warns and "exited with status 1" in warns[0]["msg"]
    assert len(project.sent("session/prompt")) == 2


def test_team_context_items_are_prepended_once_to_a_continuing_session(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path, own_redis: Any
) -> None:
    script = {"prompts": [{"steps": [{"echo_prompt": True}]} for _ in range(3)]}
    project = write_acp_project(tmp_path / "t", "t", script)
    start_agent("t/zeus", cwd=project.root)
    send(project.root, "t/zeus", "first", own_redis.url)
    wait_task_end(bus, "t/zeus")
    posted = run_ateam(
        "context", "post", "--project", "t", "--type", "decision", "--urgency", "attention",
        "--content", "We agreed on PostgreSQL 16.", "Use", "PostgreSQL", "16",
        "--redis", own_redis.url, cwd=project.root,
    )  # fmt: skip
    assert posted.returncode == 0, posted.stderr
    send(project.root, "t/zeus", "second", own_redis.url)
    wait_task_end(bus, "t/zeus", 2)
    send(project.root, "t/zeus", "third", own_redis.url)
    wait_task_end(bus, "t/zeus", 3)
    texts = [p["text"] for p in project.sent("session/prompt")]
    assert "Use PostgreSQL 16" in texts[1]
    assert "Use PostgreSQL 16" not in texts[2]
    assert texts[2].endswith("third")


def test_a_missing_runtime_shows_in_ps_at_start_and_fails_each_task_with_its_code(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path, own_redis: Any
) -> None:
    project = write_acp_project(
        tmp_path / "m", "m", {}, entry={"command": ["claude-code-acp-not-installed"]}
    )
    agent = start_agent("m/zeus", cwd=project.root)
    entry = wait_for(lambda: (e := bus.entry("m/zeus")) and e.get("alert") and e, 10, "alert")
    assert entry["alert"].startswith("runtime.missing")
    assert "install" in entry["alert"]
    send(project.root, "m/zeus", "anything", own_redis.url)
    (end,) = wait_task_end(bus, "m/zeus")
    assert end["ok"] is False and "runtime.missing" in end["error"]
    assert agent.running()  # no crash loop: the agent stays up, serving
    assert bus.serving("m/zeus", agent.pid)


def test_a_rate_limited_runtime_falls_back_to_a_native_model_and_comes_back(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path, own_redis: Any
) -> None:
    script = {
        "prompts": [
            {"steps": [{"error": {"code": -32603, "message": "rate limit exceeded (429)"}}]},
            {"steps": [{"text": "pong"}]},  # the router's probe before switching back
            {"steps": [{"echo_prompt": True}]},
        ]
    }
    backup = {"id": "backup", "provider": "scripted", "script": "fallback.yaml"}
    project = write_acp_project(
        tmp_path / "f",
        "f",
        script,
        extra_models=[backup],
        agent_yaml={
            "fallbacks": ["backup"],
            "switching": {"retries": 0, "cooldown_s": 1},
        },
    )
    (project.root / ".ateam" / "fallback.yaml").write_text(
        "turns:\n  - text: finished on the fallback\n"
    )
    start_agent("f/zeus", cwd=project.root)
    task_id = send(project.root, "f/zeus", "build the release", own_redis.url)
    (end,) = wait_task_end(bus, "f/zeus")
    assert end["ok"] is True and end["task_id"] == task_id
    assert len(of_type(bus, "f/zeus", "task.start")) == 1  # handed over, not started again
    assert "finished on the fallback" in text_of(bus, "f/zeus")
    switches = of_type(bus, "f/zeus", "model.switch")
    assert (switches[0]["from"], switches[0]["to"], switches[0]["reason"]) == (
        "coder",
        "backup",
        "rate_limited",
    )
    # Idle, the cool-down over, the runtime answering its probe again: back to it.
    wait_for(
        lambda: any(s["reason"] == "switch_back" for s in of_type(bus, "f/zeus", "model.switch")),
        30,
        "the switch back to the runtime",
    )
    send(project.root, "f/zeus", "and now?", own_redis.url)
    wait_task_end(bus, "f/zeus", 2)
    last = project.sent("session/prompt")[-1]["text"]
    assert "## Handoff" in last and last.endswith("and now?")


def test_a_native_model_that_fails_hands_the_task_to_a_runtime_with_the_handoff(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path, own_redis: Any
) -> None:
    script = {"prompts": [{"steps": [{"echo_prompt": True}]}]}
    primary = {"id": "primary", "provider": "scripted", "script": "primary.yaml"}
    project = write_acp_project(
        tmp_path / "n",
        "n",
        script,
        extra_models=[primary],
        agent_yaml={
            "model": "primary",
            "fallbacks": ["coder"],
            "switching": {"retries": 0, "cooldown_s": 600},
        },
    )
    (project.root / ".ateam" / "primary.yaml").write_text("turns:\n  - error: {status: 429}\n")
    start_agent("n/zeus", cwd=project.root)
    send(project.root, "n/zeus", "refactor the parser", own_redis.url)
    (end,) = wait_task_end(bus, "n/zeus")
    assert end["ok"] is True
    assert len(of_type(bus, "n/zeus", "task.start")) == 1
    (switch,) = of_type(bus, "n/zeus", "model.switch")
    assert (switch["from"], switch["to"]) == ("primary", "coder")
    # The runtime's first prompt: a new session, so the role and the handoff come first.
    (prompt,) = project.sent("session/prompt")
    assert "## Handoff" in prompt["text"]
    assert prompt["text"].endswith("refactor the parser")
    turns = history_turns(project.root)
    assert [t["role"] for t in turns].count("user") == 1
    assert turns[-1]["final"] is True and turns[-1]["model"] == "coder"


def test_a_runtime_that_takes_board_tasks_records_its_answer_as_the_result(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path, own_redis: Any
) -> None:
    script = {"prompts": [{"steps": [{"text": "Fixed the flaky test in ci.yml."}]}]}
    project = write_acp_project(tmp_path / "b", "b", script, agent_yaml={"take_tasks": True})
    start_agent("b/zeus", cwd=project.root)
    added = run_ateam(
        "tasks", "add", "--project", "b", "--json", "--redis", own_redis.url,
        "Fix", "the", "flaky", "test", cwd=project.root,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    task_id = json.loads(added.stdout)["id"]

    def done() -> dict[str, Any] | None:
        listed = run_ateam("tasks", "ls", "--project", "b", "--json", "--redis", own_redis.url)
        task = next(t for t in json.loads(listed.stdout) if t["id"] == task_id)
        return task if task["status"] == "done" else None

    task = wait_for(done, 30, "the board task to be done")
    assert task["assignee"] == "b/zeus"
    assert task["result"] == "Fixed the flaky test in ci.yml."
    (prompt,) = project.sent("session/prompt")
    assert "Fix the flaky test" in prompt["text"]


def test_a_runtime_agent_makes_no_summary_sessions_between_tasks(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path, own_redis: Any
) -> None:
    # Every fifth task a native agent summarises its working context with its model;
    # through a coding agent that would be a whole session of its own between two tasks.
    script = {"prompts": [{"steps": [{"text": f"answer {i}"}]} for i in range(6)]}
    project = write_acp_project(tmp_path / "q", "q", script)
    start_agent("q/zeus", cwd=project.root)
    for i in range(6):
        send(project.root, "q/zeus", f"task {i}", own_redis.url)
        wait_task_end(bus, "q/zeus", i + 1)
    assert all(end["ok"] for end in bus.task_end_list("q/zeus"))
    assert len(project.sent("initialize")) == 1  # one runtime process, no probes
    assert len(project.sent("session/prompt")) == 6
    assert not [c for c in of_type(bus, "q/zeus", "context") if c.get("action") == "summarized"]


def test_offload_of_a_runtime_agent_starts_a_new_one_on_the_runtime_with_the_handoff(
    start_agent: AgentFactory, start_console: ConsoleFactory, bus: Bus, tmp_path: Path
) -> None:
    from .test_fleet import SPAWN_TIMEOUT_S, keepers, mark, wait_after

    script = {
        "prompts": [
            {"steps": [{"text": "Refactoring."}, {"hang": True}]},
            {"steps": [{"echo_prompt": True}]},  # the new agent's first prompt
        ]
    }
    project = write_acp_project(tmp_path / "o", "o", script)
    try:
        start_agent("o/zeus", cwd=project.root)
        console = start_console()
        attach_and_send(console, "o/zeus", "refactor the parser")
        wait_for(lambda: "Refactoring." in text_of(bus, "o/zeus"), 20, "zeus at work")
        console.send("/offload")
        start = mark(console)
        wait_after(console, start, "o/zeus proposes this agent to take over its work")
        console.send("yes")
        wait_after(console, start, "spawned o/zeus-2", timeout=SPAWN_TIMEOUT_S)
        entry = bus.entry("o/zeus-2")
        assert entry is not None and entry["model"] == "coder"

        def offloaded() -> dict[str, Any] | None:
            prompts = [p for p in project.sent("session/prompt") if "offloaded by" in p["text"]]
            return prompts[0] if prompts else None

        # The new agent's runtime got a session of its own, its first prompt the handoff.
        prompt = wait_for(offloaded, 30, "o/zeus-2's runtime to get its first prompt")
        assert "refactor the parser" in prompt["text"]
        assert len(project.sent("session/new")) == 2
    finally:
        for pid in keepers(tmp_path):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
