"""The real Claude Code and Codex as ateam agents (issue 24 §6), through real ``ateam`` processes.

Claude Code (``claude-code-acp`` on the pinned ``claude``) answers from
:mod:`tests.servers.anthropic_wire`, Codex (``codex-acp``) from
:mod:`tests.servers.responses_wire`; :mod:`tests.runtimes` sets each up offline with a
private ``HOME`` (``.ci/run`` installs them; a missing install fails, never skips). The
runtime is the model of a real ``ateam agent`` process, steered by a real console or by
``ateam send``, and each test checks what a user would: the console, ``tail``, the
history, the files, the board — and what the runtime sent its model.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from tests._wait import wait_for
from tests.runtimes import RuntimeSetup, claude_code_runtime, codex_runtime
from tests.servers.anthropic_wire import AnthropicWireServer, ErrorReply, WireToolUse
from tests.servers.responses_wire import ResponsesWireServer

from .conftest import (
    AgentFactory,
    Bus,
    ConsoleFactory,
    attach_and_send,
    history_turns,
    run_ateam,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SECRET = "sk-ant-api03-REALLOOKINGTESTKEY0123456789abcdefghijklmnop"
"""The Anthropic key the agent passes on to Claude Code (``env_passthrough``)."""


@pytest.fixture
def anthropic() -> Iterator[AnthropicWireServer]:
    with AnthropicWireServer() as server:
        yield server


@pytest.fixture
def responses() -> Iterator[ResponsesWireServer]:
    with ResponsesWireServer() as server:
        yield server


def entry_of(setup: RuntimeSetup, id: str, *, pass_key: bool = False) -> dict[str, Any]:
    entry = setup.models_yaml_entry(id)
    if pass_key:
        # A key never goes in models.yaml: the agent passes its own on.
        entry["env"].pop("ANTHROPIC_API_KEY")
    return entry


def write_project(
    root: Path, name: str, models: list[dict[str, Any]], spec: dict[str, Any]
) -> Path:
    ateam_dir = root / ".ateam"
    (ateam_dir / "agents" / "zeus").mkdir(parents=True)
    (ateam_dir / "project.yaml").write_text(f"name: {name}\n")
    (ateam_dir / "models.yaml").write_text(yaml.safe_dump({"models": models}))
    full = {"tools": {"allow": ["os.exec", "fs.*", "tasks.*"]}, **spec}
    (ateam_dir / "agents" / "zeus" / "agent.yaml").write_text(yaml.safe_dump(full))
    return root


def of_type(bus: Bus, agent: str, kind: str) -> list[dict[str, Any]]:
    return [body for _, body in bus.events(agent) if body.get("type") == kind]


def ends(bus: Bus, agent: str, count: int, timeout: float = 60) -> list[dict[str, Any]]:
    return wait_for(
        lambda: len(found := bus.task_end_list(agent)) >= count and found,
        timeout,
        f"{count} task.end of {agent}",
    )


def last_user_text(request: Any) -> str:
    """The text of the newest user message a request to the Messages API carries."""
    for message in reversed(request.body["messages"]):
        if message["role"] != "user":
            continue
        content = message["content"]
        if isinstance(content, str):
            return content
        texts = [part.get("text", "") for part in content if part.get("type") == "text"]
        if texts:
            return "\n".join(texts)
    return ""


def test_claude_code_answers_runs_bash_in_ateams_pty_and_asks_before_a_write(
    start_agent: AgentFactory,
    start_console: ConsoleFactory,
    bus: Bus,
    tmp_path: Path,
    own_redis: Any,
    anthropic: AnthropicWireServer,
) -> None:
    setup = claude_code_runtime(tmp_path, anthropic.base_url)
    root = write_project(
        tmp_path / "c",
        "c",
        [entry_of(setup, "claude", pass_key=True)],
        {
            "model": "claude",
            "tools": {
                "allow": ["os.exec", "fs.*"],
                "approval": {"os.exec": "allow"},  # commands run; edits stay `ask`
                "env_passthrough": ["ANTHROPIC_API_KEY"],
            },
        },
    )
    notes = root / "notes.txt"
    command = "echo ran-in-ateams-pty; test -t 1 && echo on-a-tty"
    anthropic.reply_tool_use(
        WireToolUse("mcp__acp__Bash", {"command": command, "timeout": 10000}),
        text="Listing.",
    )
    anthropic.reply_text("The command printed ran-in-ateams-pty.")
    start_agent("c/zeus", cwd=root, env={"ANTHROPIC_API_KEY": SECRET})
    console = start_console()
    attach_and_send(console, "c/zeus", "run the check")
    console.wait_line("The command printed ran-in-ateams-pty.", timeout=60)
    # The command ran through ateam's PTY (a terminal), its output streamed as events.
    output = "".join(b.get("text", "") for b in of_type(bus, "c/zeus", "tool.output"))
    assert "ran-in-ateams-pty" in output and "on-a-tty" in output
    console.wait_line("▶ $ " + command)

    # A write asks the owner, with the diff; /apply writes the file.
    write = {"file_path": str(notes), "content": "written by claude\n"}
    anthropic.reply_tool_use(WireToolUse("mcp__acp__Write", write), text="Writing.")
    anthropic.reply_text("Wrote the notes.")
    console.send("write the notes")
    console.wait_line("+written by claude", timeout=60)
    assert not notes.exists()
    console.send("/apply")
    console.wait_line("Wrote the notes.", timeout=60)
    assert notes.read_text() == "written by claude\n"

    # An Edit is asked the same way, its diff against the file; /reject leaves the file.
    edit = {"file_path": str(notes), "old_string": "written", "new_string": "edited"}
    anthropic.reply_tool_use(WireToolUse("mcp__acp__Edit", edit), text="Editing.")
    anthropic.reply_text("Left it alone.")
    console.send("edit the notes")
    console.wait_line("+edited by claude", timeout=60)
    console.wait_line("-written by claude")
    console.send("/reject")
    console.wait_line("Left it alone.", timeout=60)
    assert notes.read_text() == "written by claude\n"

    # tail shows the answers; the history has every prompt with its answer.
    tail = run_ateam("tail", "c/zeus", "--redis", own_redis.url, cwd=root)
    assert "The command printed ran-in-ateams-pty." in tail.stdout
    turns = history_turns(root)
    finals = [t["content"] for t in turns if t.get("final")]
    assert finals[0].endswith("The command printed ran-in-ateams-pty.")
    assert [t["role"] for t in turns].count("user") == 3
    assert any(t["role"] == "tool" and "ran-in-ateams-pty" in t["content"] for t in turns)

    # The key reached Claude Code (the wire server saw it) and nothing of ateam's kept it.
    assert any(r.headers.get("x-api-key") == SECRET for r in anthropic.requests)
    stored = [
        path
        for path in (root / ".ateam").rglob("*")
        if path.is_file() and SECRET.encode() in path.read_bytes()
    ]
    assert not stored, f"the key was written to {stored}"
    client = redis.Redis.from_url(own_redis.url)
    for key in client.scan_iter(count=1000):
        kind = client.type(key)
        values: list[bytes] = []
        if kind == b"string":
            values = [client.get(key) or b""]
        elif kind == b"hash":
            values = [v for kv in client.hgetall(key).items() for v in kv]
        elif kind == b"stream":
            values = [v for _, f in client.xrange(key) for kv in f.items() for v in kv]
        elif kind == b"list":
            values = client.lrange(key, 0, -1)
        assert not any(SECRET.encode() in v for v in values), f"the key is in {key!r}"
    client.close()


def test_kill_9_mid_prompt_requeues_and_claude_code_loads_the_session_again(
    start_agent: AgentFactory,
    bus: Bus,
    tmp_path: Path,
    own_redis: Any,
    anthropic: AnthropicWireServer,
) -> None:
    setup = claude_code_runtime(tmp_path, anthropic.base_url)
    root = write_project(tmp_path / "k", "k", [entry_of(setup, "claude")], {"model": "claude"})
    slow = " ".join(f"word{i}" for i in range(200))
    anthropic.reply_text(slow, chunk_delay_s=0.2)
    agent = start_agent("k/zeus", cwd=root)
    sent = run_ateam("send", "k/zeus", "remember the number 4721", "--redis", own_redis.url)
    assert sent.returncode == 0, sent.stderr
    wait_for(lambda: of_type(bus, "k/zeus", "token"), 60, "Claude Code to start answering")
    stored = json.loads((root / ".ateam/agents/zeus/state/acp_sessions.json").read_text())
    agent.kill9()

    anthropic.clear()
    anthropic.reply_text("Done: the number was 4721.")
    before = len(anthropic.requests)
    start_agent("k/zeus", cwd=root)
    (end,) = ends(bus, "k/zeus", 1)
    assert end["ok"] is True
    # The same session, loaded: Claude Code's next request carries the earlier prompt
    # as conversation, and the input again, saying it was cut off.
    after = json.loads((root / ".ateam/agents/zeus/state/acp_sessions.json").read_text())
    assert after == stored
    request = next(
        r for r in anthropic.requests[before:] if "cut off by a restart" in last_user_text(r)
    )
    history = json.dumps(request.body["messages"][:-1])
    assert "remember the number 4721" in history
    users = [t for t in history_turns(root) if t["role"] == "user"]
    assert len(users) == 1


def test_claude_code_claims_a_board_task_through_ateams_mcp_server_as_its_agent(
    start_agent: AgentFactory,
    bus: Bus,
    tmp_path: Path,
    own_redis: Any,
    anthropic: AnthropicWireServer,
) -> None:
    setup = claude_code_runtime(tmp_path, anthropic.base_url)
    root = write_project(tmp_path / "b", "b", [entry_of(setup, "claude")], {"model": "claude"})
    added = run_ateam(
        "tasks", "add", "--project", "b", "--json", "--redis", own_redis.url,
        "Fix", "the", "login", "page", cwd=root,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    task_id = json.loads(added.stdout)["id"]
    anthropic.reply_tool_use(
        WireToolUse("mcp__ateam__task_claim", {"task_id": task_id}), text="Claiming it."
    )
    anthropic.reply_text("Claimed the login task.")
    start_agent("b/zeus", cwd=root)
    sent = run_ateam("send", "b/zeus", "take the login task", "--redis", own_redis.url)
    assert sent.returncode == 0, sent.stderr
    (end,) = ends(bus, "b/zeus", 1)
    assert end["ok"] is True, end
    listed = run_ateam("tasks", "ls", "--project", "b", "--json", "--redis", own_redis.url)
    (task,) = [t for t in json.loads(listed.stdout) if t["id"] == task_id]
    # The runtime's claim is its agent's claim.
    assert task["status"] == "claimed" and task["assignee"] == "b/zeus"
    # The tool result Claude Code got back names the agent too.
    results = json.dumps([r.body["messages"] for r in anthropic.requests])
    assert "b/zeus" in results


def test_a_429_moves_the_agent_from_claude_code_to_codex_with_the_handoff_and_back(
    start_agent: AgentFactory,
    bus: Bus,
    tmp_path: Path,
    own_redis: Any,
    anthropic: AnthropicWireServer,
    responses: ResponsesWireServer,
) -> None:
    claude = claude_code_runtime(tmp_path, anthropic.base_url)
    codex = codex_runtime(tmp_path, responses.base_url, approval="never")
    root = write_project(
        tmp_path / "s",
        "s",
        [entry_of(claude, "claude"), entry_of(codex, "codex")],
        {
            "model": "claude",
            "fallbacks": ["codex"],
            "switching": {"retries": 0, "cooldown_s": 2},
        },
    )
    anthropic.enqueue(ErrorReply(429, "rate limited: slow down"))
    responses.reply_text("Finished the release notes on Codex.")
    start_agent("s/zeus", cwd=root)
    sent = run_ateam("send", "s/zeus", "write the release notes", "--redis", own_redis.url)
    assert sent.returncode == 0, sent.stderr
    (end,) = ends(bus, "s/zeus", 1, timeout=90)
    assert end["ok"] is True, end
    switch = of_type(bus, "s/zeus", "model.switch")[0]
    assert (switch["from"], switch["to"], switch["reason"]) == ("claude", "codex", "rate_limited")
    # Codex's first request carries the verified handoff and the input.
    first = json.dumps(responses.requests[0].body)
    assert "## Handoff" in first and "write the release notes" in first
    assert "Finished the release notes on Codex." in "".join(
        b.get("text", "") for b in of_type(bus, "s/zeus", "token")
    )
    # Idle, Claude Code answering again (the router's probe): back to it.
    wait_for(
        lambda: any(s["reason"] == "switch_back" for s in of_type(bus, "s/zeus", "model.switch")),
        60,
        "the switch back to Claude Code",
    )
    anthropic.clear()
    anthropic.reply_text("Back on Claude Code.")
    sent = run_ateam("send", "s/zeus", "and the changelog", "--redis", own_redis.url)
    assert sent.returncode == 0, sent.stderr
    second = ends(bus, "s/zeus", 2, timeout=90)[-1]
    assert second["ok"] is True, second
    asked = [r for r in anthropic.requests if "and the changelog" in last_user_text(r)]
    assert asked and "## Handoff" in last_user_text(asked[0])
