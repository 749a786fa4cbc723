"""Model continuity (SPEC §7): switching on failure, switching back, pins, handoffs.

Real agents talk through the real ``openai`` SDK to two local OpenAI-wire servers — the
primary and its fallback — whose answers the tests program, and whose recorded requests
show what each model was sent.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ateam.agent.context.working import WorkingContext
from tests._wait import wait_for
from tests.servers.openai_wire import ErrorReply, OpenAIWireServer, Reply, WireToolCall

from .conftest import (
    AgentFactory,
    Bus,
    ConsoleFactory,
    attach_and_send,
    run_ateam,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def servers() -> Iterator[tuple[OpenAIWireServer, OpenAIWireServer]]:
    with OpenAIWireServer() as primary, OpenAIWireServer() as backup:
        primary.default = Reply(text="pong")
        backup.default = Reply(text="finished on the fallback")
        yield primary, backup


def write_project(
    root: Path,
    name: str,
    primary: OpenAIWireServer,
    backup: OpenAIWireServer,
    *,
    windows: tuple[int, int] = (32000, 64000),
    switching: dict[str, Any] | None = None,
) -> Path:
    agent_dir = root / ".ateam" / "agents" / "zeus"
    agent_dir.mkdir(parents=True)
    (root / ".ateam" / "project.yaml").write_text(f"name: {name}\n")
    models = {
        "models": [
            {"id": "primary", "provider": "openai", "model": "p-model",
             "base_url": primary.base_url, "context_window": windows[0]},
            {"id": "backup", "provider": "openai", "model": "b-model",
             "base_url": backup.base_url, "context_window": windows[1]},
        ]
    }  # fmt: skip
    (root / ".ateam" / "models.yaml").write_text(yaml.safe_dump(models))
    spec = {
        "model": "primary",
        "fallbacks": ["backup"],
        "switching": {"retries": 1, "retry_backoff_s": 0.05, "cooldown_s": 1, **(switching or {})},
        "tools": {"allow": ["os.exec"]},
    }
    (agent_dir / "agent.yaml").write_text(yaml.safe_dump(spec))
    return root


def state(root: Path) -> Path:
    return root / ".ateam" / "agents" / "zeus" / "state"


def events(bus: Bus, agent: str, kind: str) -> list[dict[str, Any]]:
    return [body for _, body in bus.events(agent) if body.get("type") == kind]


def system_of(request: Any) -> str:
    return str(request.body["messages"][0]["content"])


def test_a_429_mid_task_finishes_on_the_fallback_and_the_agent_switches_back_when_idle(
    start_agent: AgentFactory,
    start_console: ConsoleFactory,
    bus: Bus,
    tmp_path: Path,
    servers: tuple[OpenAIWireServer, OpenAIWireServer],
) -> None:
    primary, backup = servers
    root = write_project(tmp_path / "s", "s", primary, backup)
    WorkingContext(state(root)).set_summary(
        "Earlier: the CI job was moved to ci/build.yml.", model="primary", tasks_covered=3
    )
    # The primary runs the first step, then starts answering 429 (twice: one retry).
    primary.reply_tool_calls(WireToolCall("os__exec", {"cmd": "echo step-one"}), text="Step one.")
    primary.enqueue(ErrorReply(429, "rate limited"), ErrorReply(429, "rate limited"))
    start_agent("s/zeus", cwd=root)
    console = start_console()
    attach_and_send(console, "s/zeus", "build the release")

    console.wait_line("model switch: primary → backup (rate_limited)", timeout=20)
    used = console.wait_line("verified and given to backup")
    console.wait_line("[A:s/zeus] finished on the fallback")
    # The switch took up the handoff it had just verified: the record the file holds.
    handoff = next(h for h in events(bus, "s/zeus", "handoff") if h["action"] == "used")
    assert handoff["to"] == "backup" and handoff["ready"] is True
    assert handoff["checksum"].removeprefix("sha256:")[:12] in used
    (end,) = events(bus, "s/zeus", "task.end")
    assert end["ok"] is True

    # The fallback's first request carries the handoff and the rolling summary, and the
    # work so far (the tool call and its output).
    first = backup.chat_requests[0]
    system = system_of(first)
    assert "## Handoff" in system and "build the release" in system
    assert "echo step-one" in system
    assert "Earlier: the CI job was moved to ci/build.yml." in system
    assert any(
        "step-one" in str(m.get("content")) for m in first.body["messages"] if m["role"] == "tool"
    )
    console.send("/handoff")
    console.wait_line("handoff verifies")
    console.wait_line('"description": "build the release"')
    switch = events(bus, "s/zeus", "model.switch")[0]  # a switch back may follow at any time
    assert (switch["from"], switch["to"], switch["reason"]) == ("primary", "backup", "rate_limited")
    assert "ctx_pct" in switch["usage"]

    # Idle, the cool-down over, the primary answering again: back to the primary.
    console.wait_line("model switch: backup → primary (switch_back)", timeout=20)
    entry = wait_for(
        lambda: (e := bus.entry("s/zeus")) is not None and e["model"] == "primary" and e,
        10,
        "the registry to show the primary again",
    )
    assert entry["last_switch"]["reason"] == "switch_back"
    ps = run_ateam("ps", "--json", "--redis", bus.url)
    (row,) = [r for r in json.loads(ps.stdout) if r["id"] == "s/zeus"]
    assert row["model"] == "primary" and row["primary"] == "primary"
    assert row["last_switch"]["from"] == "backup" and row["usage"]["calls"] >= 2

    # The primary's first call after the switch back carries the handoff too.
    before = len(primary.chat_requests)
    console.send("and now?")
    console.wait_line("[A:s/zeus] pong", timeout=20)
    assert "## Handoff" in system_of(primary.chat_requests[before])
    record = json.loads((state(root) / "handoff.json").read_text())
    reasons = [(h["model"], h["reason"]) for h in record["model"]["history"]]
    assert reasons[-2:] == [("backup", "rate_limited"), ("primary", "switch_back")]
    assert record["model"]["history"][-2]["until"] is not None


def test_a_pinned_model_is_never_switched_away_from(
    start_agent: AgentFactory,
    start_console: ConsoleFactory,
    bus: Bus,
    tmp_path: Path,
    servers: tuple[OpenAIWireServer, OpenAIWireServer],
) -> None:
    primary, backup = servers
    root = write_project(tmp_path / "p", "p", primary, backup)
    start_agent("p/zeus", cwd=root)
    console = start_console()
    attach_and_send(console, "p/zeus", "/use primary")
    console.wait_line("pinned to primary")
    primary.fail_with(status=429)
    console.send("do it")
    line = console.wait_line("failed:", timeout=20)
    assert "provider.rate_limited" in line
    assert events(bus, "p/zeus", "model.switch") == []
    assert backup.chat_requests == []
    wait_for(
        lambda: (e := bus.entry("p/zeus")) is not None and e["pinned"] == "primary",
        10,
        "the registry to show the pin",
    )

    console.send("/models")
    console.wait_line("route: primary → backup; current primary, pinned primary")
    console.wait_line(lambda line: line.startswith("* primary") and "unhealthy" in line)

    console.send("/use --auto")
    console.wait_line("automatic switching on")
    console.send("again")
    console.wait_line("[A:p/zeus] finished on the fallback", timeout=20)

    # /save writes the model in use into agent.yaml, comments and all.
    agent_yaml = root / ".ateam/agents/zeus/agent.yaml"
    agent_yaml.write_text("# the build agent\n" + agent_yaml.read_text())
    console.send("/use backup")
    console.wait_line("pinned to backup")
    console.send("/save")
    console.wait_line("saved the current model to")
    saved = yaml.safe_load(agent_yaml.read_text())
    assert saved["model"] == "backup" and saved["fallbacks"] == ["backup"]
    assert agent_yaml.read_text().startswith("# the build agent\n")


def test_context_too_long_summarises_first_and_switches_only_if_that_is_not_enough(
    start_agent: AgentFactory,
    start_console: ConsoleFactory,
    bus: Bus,
    tmp_path: Path,
    servers: tuple[OpenAIWireServer, OpenAIWireServer],
) -> None:
    primary, backup = servers
    root = write_project(tmp_path / "c", "c", primary, backup, windows=(16000, 128000))
    too_long = ErrorReply(
        400, "This model's maximum context length is 16000 tokens", code="context_length_exceeded"
    )
    primary.reply_text("first answer")
    # Task 2: too long → the summary call → fits now.
    primary.enqueue(too_long, Reply(text="Summary: answered the first question."))
    primary.reply_text("second answer after summarising")
    # Task 3: too long → summary → still too long → the larger-window fallback.
    primary.enqueue(too_long, Reply(text="Summary: two questions answered."), too_long)
    start_agent("c/zeus", cwd=root)
    console = start_console()
    attach_and_send(console, "c/zeus", "first question")
    console.wait_line("[A:c/zeus] first answer", timeout=15)
    console.send("second question")
    console.wait_line("[A:c/zeus] second answer after summarising", timeout=20)
    assert events(bus, "c/zeus", "model.switch") == []
    assert backup.chat_requests == []
    assert "answered the first question" in WorkingContext(state(root)).summary()
    # The retried call no longer carries the summarised turns.
    retried = primary.chat_requests[3].body["messages"]
    assert not any(m.get("content") == "first question" for m in retried)

    console.send("third question")
    console.wait_line("model switch: primary → backup (context_length)", timeout=20)
    console.wait_line("[A:c/zeus] finished on the fallback", timeout=20)
    assert len(backup.chat_requests) == 1
    summarised = [e for e in events(bus, "c/zeus", "context") if e["action"] == "summarized"]
    assert len(summarised) == 2


def test_a_switch_without_a_valid_handoff_says_incomplete_handoff(
    start_agent: AgentFactory,
    start_console: ConsoleFactory,
    bus: Bus,
    tmp_path: Path,
    servers: tuple[OpenAIWireServer, OpenAIWireServer],
) -> None:
    primary, backup = servers
    root = write_project(tmp_path / "h", "h", primary, backup)
    start_agent("h/zeus", cwd=root)
    # The handoff cannot be written (its path is a directory): it never verifies.
    handoff = state(root) / "handoff.json"
    if handoff.exists():
        handoff.unlink()
    handoff.mkdir()
    primary.fail_with(status=429)
    console = start_console()
    attach_and_send(console, "h/zeus", "go")
    console.wait_line("model switch: primary → backup (incomplete_handoff)", timeout=20)
    console.wait_line("[A:h/zeus] finished on the fallback", timeout=20)
    (warn,) = [e for e in events(bus, "h/zeus", "warn") if e.get("code") == "handoff.incomplete"]
    assert "incomplete handoff" in warn["msg"]
    shutil.rmtree(handoff)


def test_thirty_scripted_tasks_across_two_switches_all_done_once(
    start_agent: AgentFactory, start_console: ConsoleFactory, bus: Bus, tmp_path: Path
) -> None:
    root = tmp_path / "t"
    agent_dir = root / ".ateam" / "agents" / "zeus"
    agent_dir.mkdir(parents=True)
    (root / ".ateam" / "project.yaml").write_text("name: t\n")
    # Each model answers 12 calls — 10 tasks plus the working-context summary made after
    # every 5th task — then fails once: p after task 10, f after task 20.
    # The first answer streams slowly (~1.5 s), so all thirty inputs are queued before it
    # ends and the agent is never idle in between (idle time would let it probe or
    # summarise, which uses up scripted turns).
    slow = "P answer " + " ".join(["word"] * 50)
    p_turns: list[dict[str, Any]] = [{"text": slow}] + [{"text": "P answer"}] * 11
    p_turns += [{"error": {"status": 429}}] + [{"text": "P answer"}] * 40
    f_turns: list[dict[str, Any]] = [{"text": "F answer"}] * 12 + [{"error": {"status": 529}}]
    f_turns += [{"text": "F answer"}] * 40
    (root / ".ateam" / "p.yaml").write_text(
        yaml.safe_dump({"turns": p_turns, "token_delay_ms": 30})
    )
    (root / ".ateam" / "f.yaml").write_text(yaml.safe_dump({"turns": f_turns}))
    (root / ".ateam" / "models.yaml").write_text(
        "models:\n"
        "  - {id: p, provider: scripted, script: p.yaml}\n"
        "  - {id: f, provider: scripted, script: f.yaml}\n"
    )
    spec = {
        "model": "p",
        "fallbacks": ["f"],
        # No retries, no cool-down; switch_back so low that no idle moment switches back.
        "switching": {"retries": 0, "cooldown_s": 0, "switch_back": 0.001},
    }
    (agent_dir / "agent.yaml").write_text(yaml.safe_dump(spec))
    start_agent("t/zeus", cwd=root)
    console = start_console()
    attach_and_send(console, "t/zeus", *[f"task {i}" for i in range(1, 31)])

    wait_for(lambda: len(events(bus, "t/zeus", "task.end")) >= 30, 60, "thirty tasks")
    ends = events(bus, "t/zeus", "task.end")
    starts = events(bus, "t/zeus", "task.start")
    assert len(ends) == 30 and all(e["ok"] for e in ends)
    assert len({e["task_id"] for e in starts}) == 30 == len(starts)  # none re-run
    switches = [(s["from"], s["to"], s["reason"]) for s in events(bus, "t/zeus", "model.switch")]
    assert switches == [("p", "f", "rate_limited"), ("f", "p", "overloaded")]
    order = [e["task_id"] for e in starts]
    switched_in = [order.index(s["task_id"]) + 1 for s in events(bus, "t/zeus", "model.switch")]
    assert switched_in == [11, 21]
    turns = _history(root)
    for task_id in order:  # every task: its question once, and an answer
        mine = [t for t in turns if t.get("task_id") == task_id]
        assert [t["role"] for t in mine] == ["user", "assistant"]
    by_task = {t["task_id"]: t["content"] for t in turns if t["role"] == "assistant"}
    assert [by_task[t][0] for t in order] == ["P"] * 10 + ["F"] * 10 + ["P"] * 10
    assert not (state(root) / "dead.jsonl").exists() or not (state(root) / "dead.jsonl").read_text()


def _history(root: Path) -> list[dict[str, Any]]:
    lines = (state(root) / "history.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]
