"""A lead hears back (issue 26 §1): a teammate's finished, failed and idle notices.

Real agent processes: the teammates replay scripts (the ``scripted`` model) and take
work from the board; the lead talks to an OpenAI-wire server, which records every
request, so what is checked is what the lead's model was actually sent. A notice is
news in the lead's next context, never a task of its own; consoles and ``ateam tail``
show it; a notice for a stopped lead waits on the bus until it starts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests._wait import wait_for
from tests.servers.openai_wire import OpenAIWireServer, WireToolCall

from .conftest import (
    KEYS,
    AgentFactory,
    Bus,
    ConsoleFactory,
    attach_and_send,
    run_ateam,
)

pytestmark = pytest.mark.integration

HEADER = "## Team notices"


@pytest.fixture
def wire() -> Iterator[OpenAIWireServer]:
    with OpenAIWireServer() as server:
        yield server


def write_team(
    root: Path,
    url: str,
    mate_turns: list[dict[str, Any]],
    *,
    mate: str = "mate",
    notify: tuple[str, ...] = ("lead",),
) -> Path:
    """Project ``n``: ``lead`` on the wire model, ``mate`` a scripted board worker."""
    ateam = root / ".ateam"
    for name in ("lead", mate):
        (ateam / "agents" / name).mkdir(parents=True)
    (ateam / "project.yaml").write_text("name: n\n")
    (ateam / "models.yaml").write_text(
        "models:\n"
        f"  - {{id: gpt, provider: openai, model: test-model, base_url: '{url}', "
        "context_window: 32000}\n"
        "  - {id: mate, provider: scripted, script: mate.yaml}\n"
    )
    (ateam / "mate.yaml").write_text(yaml.safe_dump({"turns": mate_turns}))
    lead = {"model": "gpt", "tools": {"allow": ["tasks.*"]}}
    worker: dict[str, Any] = {"model": "mate", "take_tasks": True, "tools": {"allow": []}}
    if notify:
        worker["team"] = {"notify": list(notify)}
    (ateam / "agents" / "lead" / "agent.yaml").write_text(yaml.safe_dump(lead))
    (ateam / "agents" / mate / "agent.yaml").write_text(yaml.safe_dump(worker))
    return root


def notices(bus: Bus, agent: str) -> list[dict[str, Any]]:
    return [body for _, body in bus.events(agent) if body.get("type") == "team.notice"]


def heard(bus: Bus, agent: str, kind: str, board_task: str = "") -> bool:
    """Whether ``agent`` has recorded a notice of ``kind`` (about ``board_task``)."""
    return any(
        n.get("kind") == kind and n.get("board_task") == board_task for n in notices(bus, agent)
    )


def add_task(root: Path, redis_url: str, *title: str) -> str:
    done = run_ateam("tasks", "add", *title, "--json", "--redis", redis_url, cwd=root)
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["id"])


def system_of(wire: OpenAIWireServer, index: int) -> str:
    messages = wire.chat_requests[index].body["messages"]
    return "\n".join(str(m.get("content")) for m in messages if m["role"] == "system")


def test_the_lead_hears_finished_failed_and_idle_in_its_next_context(
    start_agent: AgentFactory,
    start_console: ConsoleFactory,
    bus: Bus,
    redis_url: str,
    tmp_path: Path,
    wire: OpenAIWireServer,
) -> None:
    turns: list[dict[str, Any]] = [
        {"text": "Parsed it all."},
        {"error": {"status": 400, "message": "the lexer is on fire"}},
    ]
    root = write_team(tmp_path / "n", wire.base_url, turns)
    start_agent("n/lead", cwd=root)
    start_agent("n/mate", cwd=root)
    console = start_console()
    attach_and_send(console, "n/lead")

    parser = add_task(root, redis_url, "port", "the", "parser")
    wait_for(lambda: heard(bus, "n/lead", "idle"), 30, "the lead to hear mate went idle")
    assert heard(bus, "n/lead", "finished", parser)
    # News, not work: the lead's model was not called for it.
    assert wire.chat_requests == []
    said = f"n/mate finished board task {parser} (port the parser): Parsed it all."
    console.wait_line(lambda line: f"notice: {said}" in line)
    sent = [n for n in notices(bus, "n/mate") if n.get("board_task") == parser]
    assert [n["to"] for n in sent] == [["n/lead"]]

    console.send("what is new?")
    wait_for(lambda: len(wire.chat_requests) == 1, 15, "the lead's first request")
    system = system_of(wire, 0)
    assert HEADER in system
    assert f"- {said}" in system
    assert "- n/mate is idle: nothing queued" in system
    wait_for(lambda: not bus.client.exists(KEYS.notices("n/lead")), 10, "the notices consumed")

    lexer = add_task(root, redis_url, "fix", "the", "lexer")
    wait_for(lambda: heard(bus, "n/lead", "failed", lexer), 30, "the lead to hear of the failure")
    console.send("and now?")
    wait_for(lambda: len(wire.chat_requests) == 2, 15, "the lead's second request")
    system = system_of(wire, 1)
    assert f"n/mate failed board task {lexer} (fix the lexer): " in system
    assert "the lexer is on fire" in system
    assert "Parsed it all." not in system  # shown in the task before, then dropped

    tail = run_ateam("tail", "n/lead", "--json", "--redis", redis_url)
    assert tail.returncode == 0, tail.stderr
    rows = [json.loads(line) for line in tail.stdout.splitlines()]
    kinds = [r["data"]["kind"] for r in rows if r.get("type") == "team.notice"]
    assert "finished" in kinds and "failed" in kinds and "idle" in kinds


def test_the_agent_that_added_a_task_hears_its_end(
    start_agent: AgentFactory, bus: Bus, redis_url: str, tmp_path: Path, wire: OpenAIWireServer
) -> None:
    # solo has no notify list: only the task's creator hears, and of its end only.
    root = write_team(
        tmp_path / "n", wire.base_url, [{"text": "Docs written."}], mate="solo", notify=()
    )
    add = WireToolCall("tasks__add", {"title": "write the docs"}, id="call_add")
    wire.reply_tool_calls(add, text="Planning.")
    wire.reply_text("Planned.")
    start_agent("n/lead", cwd=root)
    start_agent("n/solo", cwd=root)

    sent = run_ateam("send", "n/lead", "plan the docs", "--redis", redis_url)
    assert sent.returncode == 0, sent.stderr
    wait_for(lambda: bool(notices(bus, "n/lead")), 30, "the lead to hear of its task")
    task = notices(bus, "n/lead")[0]
    assert task["kind"] == "finished" and task["sender"] == "n/solo"
    listed = run_ateam("tasks", "ls", "--json", "--redis", redis_url, cwd=root)
    assert listed.returncode == 0, listed.stderr
    record = {row["id"]: row for row in json.loads(listed.stdout)}[task["board_task"]]
    assert record["created_by"] == "n/lead"
    wait_for(lambda: (bus.entry("n/solo") or {}).get("state") == "idle", 15, "solo to go idle")
    assert [n["kind"] for n in notices(bus, "n/lead")] == ["finished"]  # no idle notice

    sent = run_ateam("send", "n/lead", "any news?", "--redis", redis_url)
    assert sent.returncode == 0, sent.stderr
    wait_for(lambda: len(wire.chat_requests) == 3, 15, "the lead's next request")
    system = system_of(wire, 2)
    assert (
        f"n/solo finished board task {task['board_task']} (write the docs): Docs written." in system
    )


def test_a_notice_for_a_stopped_lead_waits_until_it_starts(
    start_agent: AgentFactory, bus: Bus, redis_url: str, tmp_path: Path, wire: OpenAIWireServer
) -> None:
    root = write_team(tmp_path / "n", wire.base_url, [{"text": "Migrated."}])
    lead = start_agent("n/lead", cwd=root)
    assert lead.terminate() == 0
    start_agent("n/mate", cwd=root)

    task = add_task(root, redis_url, "migrate", "the", "db")
    wait_for(lambda: heard(bus, "n/mate", "finished", task), 30, "mate to finish")
    wait_for(lambda: heard(bus, "n/mate", "idle"), 15, "mate to go idle")
    assert bus.client.llen(KEYS.notices("n/lead")) == 2  # kept for the stopped lead

    start_agent("n/lead", cwd=root)
    wait_for(lambda: heard(bus, "n/lead", "finished", task), 15, "the lead to read its notices")
    sent = run_ateam("send", "n/lead", "good morning", "--redis", redis_url)
    assert sent.returncode == 0, sent.stderr
    wait_for(lambda: len(wire.chat_requests) == 1, 15, "the lead's request")
    system = system_of(wire, 0)
    assert f"n/mate finished board task {task} (migrate the db): Migrated." in system
    assert "n/mate is idle" in system
