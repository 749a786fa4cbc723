"""A real agent against an OpenAI-wire server: prompts, context rebuild and the tool loop.

The server records every request the agent's SDK sends, so these tests check what the
model actually sees: the system prompt after ``#`` lines and file edits, the context
rebuilt after a restart, and tool results fed back.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._wait import wait_for
from tests.servers.openai_wire import OpenAIWireServer, WireToolCall

from .conftest import (
    AgentFactory,
    Bus,
    ConsoleFactory,
    attach_and_send,
)

pytestmark = pytest.mark.integration

PROTECTED = (
    "<!-- ateam-protect:start:safety -->\nNever push to main.\n<!-- ateam-protect:end:safety -->\n"
)


@pytest.fixture
def wire() -> Iterator[OpenAIWireServer]:
    with OpenAIWireServer() as server:
        yield server


def write_openai_project(
    root: Path, name: str, url: str, *, overlay: str = "", extra_model: str = ""
) -> Path:
    agent_dir = root / ".ateam" / "agents" / "zeus"
    agent_dir.mkdir(parents=True)
    (root / ".ateam" / "project.yaml").write_text(f"name: {name}\n")
    (root / ".ateam" / "models.yaml").write_text(
        "models:\n"
        f"  - {{id: gpt, provider: openai, model: test-model, base_url: '{url}', "
        f"context_window: 32000{extra_model}}}\n"
    )
    (agent_dir / "agent.yaml").write_text("model: gpt\ntools: {allow: ['os.exec']}\n")
    (agent_dir / "system_base.md").write_text("You are zeus, the build agent.\n")
    (agent_dir / "system_overlay.md").write_text(overlay)
    return root


def system_of(request: Any) -> str:
    messages = request.body["messages"]
    assert messages[0]["role"] == "system"
    return str(messages[0]["content"])


def events_of(bus: Bus, agent: str, kind: str) -> list[dict[str, Any]]:
    return [body for _, body in bus.events(agent) if body.get("type") == kind]


def test_hash_lines_and_overlay_edits_reach_the_next_system_prompt(
    start_agent: AgentFactory,
    start_console: ConsoleFactory,
    bus: Bus,
    tmp_path: Path,
    wire: OpenAIWireServer,
) -> None:
    root = write_openai_project(tmp_path / "p", "p", wire.base_url, overlay=PROTECTED)
    overlay = root / ".ateam/agents/zeus/system_overlay.md"
    start_agent("p/zeus", cwd=root)
    console = start_console()
    attach_and_send(console, "p/zeus", "first")
    wait_for(lambda: len(wire.chat_requests) == 1, 15, "the first request")
    first = system_of(wire.chat_requests[0])
    assert "You are zeus" in first and "Never push to main." in first and "os.exec" in first

    console.send("# Always run the tests before answering.")
    console.wait_line("overlay updated")
    assert "Always run the tests before answering." in overlay.read_text()
    console.send("second")
    wait_for(lambda: len(wire.chat_requests) == 2, 15, "the second request")
    assert "Always run the tests before answering." in system_of(wire.chat_requests[1])

    # An edit on disk is picked up by the 1 s poll.
    overlay.write_text(overlay.read_text() + "Prefer small commits.\n")
    wait_for(
        lambda: any(e.get("action") == "reloaded" for e in events_of(bus, "p/zeus", "prompt")),
        10,
        "the agent to notice the overlay edit",
    )
    console.send("third")
    wait_for(lambda: len(wire.chat_requests) == 3, 15, "the third request")
    assert "Prefer small commits." in system_of(wire.chat_requests[2])

    # An on-disk edit that breaks the protected block is refused; the model never sees it.
    overlay.write_text(overlay.read_text().replace("Never push to main.", "Push anywhere."))
    wait_for(
        lambda: any(
            e.get("code") == "prompt.protected_violation" for e in events_of(bus, "p/zeus", "warn")
        ),
        10,
        "the refusal of the broken edit",
    )
    console.send("fourth")
    wait_for(lambda: len(wire.chat_requests) == 4, 15, "the fourth request")
    fourth = system_of(wire.chat_requests[3])
    assert "Never push to main." in fourth and "Push anywhere." not in fourth


def test_sys_edit_that_breaks_a_protected_block_is_refused(
    start_agent: AgentFactory,
    start_console: ConsoleFactory,
    tmp_path: Path,
    wire: OpenAIWireServer,
) -> None:
    from .conftest import subprocess_env

    root = write_openai_project(
        tmp_path / "e", "e", wire.base_url, overlay=PROTECTED + "Be brief.\n"
    )
    overlay = root / ".ateam/agents/zeus/system_overlay.md"
    start_agent("e/zeus", cwd=root)
    console = start_console(env=subprocess_env(EDITOR="sed -i s/Never/Always/"))
    attach_and_send(console, "e/zeus")
    console.send("/sys show")
    console.wait_line("protected: safety")
    console.wait_line("─── base:")
    console.send("/sys edit")
    console.wait_line("prompt.protected_violation")
    # A script (stdin not a TTY) stops at its first failing command, with its code.
    assert console.wait_exit() != 0
    assert "Never push to main." in overlay.read_text()

    console2 = start_console(env=subprocess_env(EDITOR="sed -i s/brief/thorough/"))
    attach_and_send(console2, "e/zeus")
    console2.send("/sys edit")
    console2.wait_line("overlay saved")
    assert "Be thorough." in overlay.read_text() and "Never push to main." in overlay.read_text()


def test_after_a_restart_the_model_sees_prompt_summaries_and_recent_turns(
    start_agent: AgentFactory,
    start_console: ConsoleFactory,
    bus: Bus,
    tmp_path: Path,
    wire: OpenAIWireServer,
) -> None:
    root = write_openai_project(tmp_path / "r", "r", wire.base_url, overlay="Overlay rule.\n")
    agent = start_agent("r/zeus", cwd=root)
    console = start_console()
    wire.reply_text("Noted: 42.")
    attach_and_send(console, "r/zeus", "remember the number 42")
    console.wait_line("[A:r/zeus] Noted: 42.")
    # The summary is the agent's own: asked of the model, written by the agent.
    wire.reply_text("Earlier: the user asked to remember 42.")
    console.send("/summarize")
    state = root / ".ateam/agents/zeus/state"
    wait_for(lambda: (state / "summary.jsonl").exists(), 15, "the agent to log the summary")
    assert agent.terminate() == 0
    (logged,) = [json.loads(line) for line in (state / "summary.jsonl").read_text().splitlines()]
    assert logged["summary"] == "Earlier: the user asked to remember 42."

    start_agent("r/zeus", cwd=root)
    console.send("/ctx")
    line = console.wait_line("next context:")
    assert "1 summaries" in line and "2 turns" in line
    console.send("what number?")
    wait_for(lambda: len(wire.chat_requests) == 3, 15, "the request after the restart")
    messages = wire.chat_requests[2].body["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    system = messages[0]["content"]
    assert "You are zeus" in system and "Overlay rule." in system
    assert system.count("Earlier: the user asked to remember 42.") == 1  # once, not twice
    assert messages[1]["content"] == "remember the number 42"
    assert messages[2]["content"] == "Noted: 42."
    assert messages[3]["content"] == "what number?"


def test_the_tool_loop_through_the_openai_sdk(
    start_agent: AgentFactory,
    start_console: ConsoleFactory,
    bus: Bus,
    tmp_path: Path,
    wire: OpenAIWireServer,
) -> None:
    root = write_openai_project(tmp_path / "t", "t", wire.base_url)
    start_agent("t/zeus", cwd=root)
    wire.reply_tool_calls(
        WireToolCall("os__exec", {"cmd": "echo from-the-tool"}, id="call_a"), text="Running."
    )
    wire.reply_text("The tool said from-the-tool.", usage=(900, 12))
    console = start_console()
    attach_and_send(console, "t/zeus", "run it")
    console.wait_line("[A:t/zeus] The tool said from-the-tool.", timeout=15)

    second = wire.chat_requests[1].body
    assert second["tools"][0]["function"]["name"] == "os__exec"
    assistant, result = second["messages"][-2:]
    assert assistant["tool_calls"][0]["function"]["name"] == "os__exec"
    assert (result["role"], result["tool_call_id"]) == ("tool", "call_a")
    assert "from-the-tool" in result["content"]
    (end,) = events_of(bus, "t/zeus", "task.end")
    assert end["ok"] is True and end["tokens_in"] >= 900


def test_a_missing_api_key_fails_the_first_task_not_the_start(
    start_agent: AgentFactory,
    start_console: ConsoleFactory,
    bus: Bus,
    tmp_path: Path,
    wire: OpenAIWireServer,
) -> None:
    root = write_openai_project(
        tmp_path / "k", "k", wire.base_url, extra_model=", api_key_env: ATEAM_TEST_NO_SUCH_KEY"
    )
    agent = start_agent("k/zeus", cwd=root)  # starts and serves without the key
    console = start_console()
    attach_and_send(console, "k/zeus", "hello")
    line = console.wait_line("failed:", timeout=15)
    assert "provider.auth" in line and "ATEAM_TEST_NO_SUCH_KEY" in line
    assert agent.running()
    assert wire.chat_requests == []


def test_a_team_context_item_reaches_the_agents_model_in_its_next_turn(
    start_agent: AgentFactory,
    start_console: ConsoleFactory,
    tmp_path: Path,
    wire: OpenAIWireServer,
) -> None:
    root = write_openai_project(tmp_path / "c", "c", wire.base_url)
    # hera subscribes to frontend news only: the DB item is not hers.
    hera = root / ".ateam" / "agents" / "hera"
    hera.mkdir()
    (hera / "agent.yaml").write_text("model: gpt\ncontext: {tags: [frontend]}\n")
    (hera / "system_base.md").write_text("You are hera, the frontend agent.\n")
    start_agent("c/zeus", cwd=root)
    start_agent("c/hera", cwd=root)
    for _ in range(4):
        wire.reply_text("Done.")
    console = start_console()
    attach_and_send(console, "c/zeus", "first task")
    wait_for(lambda: len(wire.chat_requests) == 1, 15, "zeus's first request")
    assert "Team context" not in system_of(wire.chat_requests[0])

    # Posted between two tasks (SPEC §9): pushed to zeus, fed to its next turn only.
    console.send("/context post --urgency attention --tags db the staging DB moved to db2")
    console.send("/context post --urgency background just a note nobody must act on")
    console.wait_line(lambda _: sum("posted " in line for line in console.lines) == 2)
    console.send("second task")
    wait_for(lambda: len(wire.chat_requests) == 2, 15, "zeus's second request")
    system = system_of(wire.chat_requests[1])
    assert "You are zeus" in system
    assert "Team context" in system
    assert "[attention/status] the staging DB moved to db2" in system
    assert "#db" in system
    assert "just a note" not in system  # below the default minimum urgency
    console.wait_line(lambda line: "fed c-" in line and "the staging DB moved" in line)

    # hera is not subscribed to it; and zeus is not fed the same item twice.
    console.send("/attach c/hera")
    console.wait_line(lambda line: "attached to c/hera" in line)
    console.send("a frontend task")
    wait_for(lambda: len(wire.chat_requests) == 3, 15, "hera's request")
    assert "You are hera" in system_of(wire.chat_requests[2])
    assert "staging DB" not in system_of(wire.chat_requests[2])
    console.send("/attach c/zeus")
    console.wait_line(lambda _: console.output().count("attached to c/zeus") >= 2)
    console.send("third task")
    wait_for(lambda: len(wire.chat_requests) == 4, 15, "zeus's third request")
    assert "You are zeus" in system_of(wire.chat_requests[3])
    assert "staging DB" not in system_of(wire.chat_requests[3])
