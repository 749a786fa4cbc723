"""Every record ateam keeps is the real one (issue 10): usage, summaries, the handoff.

Each test drives a real agent process and reads what that process wrote: its
``state/usage.json`` and ``ateam ps --json`` across a restart, its ``state/summary.jsonl``,
and its ``handoff`` events and ``state/handoff.json``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._wait import wait_for
from tests.servers.openai_wire import OpenAIWireServer

from .conftest import (
    AgentFactory,
    Bus,
    ConsoleFactory,
    attach_and_send,
    run_ateam,
    subprocess_env,
    write_scripted_project,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def wire() -> Iterator[OpenAIWireServer]:
    with OpenAIWireServer() as server:
        yield server


def ps_row(bus: Bus, agent: str) -> dict[str, Any] | None:
    result = run_ateam("ps", "--json", env=subprocess_env(ATEAM_REDIS_URL=bus.url))
    assert result.returncode == 0, result.stderr
    rows = {row["id"]: row for row in json.loads(result.stdout)}
    return rows.get(agent)


def test_usage_and_cost_come_from_the_provider_and_survive_restarts(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path, wire: OpenAIWireServer
) -> None:
    root = tmp_path / "u"
    agent_dir = root / ".ateam" / "agents" / "zeus"
    agent_dir.mkdir(parents=True)
    (root / ".ateam" / "project.yaml").write_text("name: u\n")
    (root / ".ateam" / "models.yaml").write_text(
        "models:\n"
        f"  - {{id: gpt, provider: openai, model: m, base_url: '{wire.base_url}', "
        "prices: {input_per_mtok: 2.0, output_per_mtok: 8.0}}\n"
    )
    (agent_dir / "agent.yaml").write_text("model: gpt\n")
    wire.reply_text("first answer", usage=(1000, 50))
    wire.reply_text("second answer", usage=(3000, 150))
    agent = start_agent("u/zeus", cwd=root)
    env = subprocess_env(ATEAM_REDIS_URL=bus.url)
    for text in ("one", "two"):
        assert run_ateam("send", "u/zeus", text, env=env).returncode == 0
    wait_for(lambda: len(bus.task_ends("u/zeus")) == 2, 20, "two tasks to end")

    expected = {"tokens_in": 4000, "tokens_out": 200, "calls": 2, "cost": 0.0096}
    before = wait_for(
        lambda: (row := ps_row(bus, "u/zeus")) and row["usage"]["calls"] == 2 and row, 10, "usage"
    )
    assert {k: before["usage"][k] for k in expected} == expected
    assert before["usage"]["per_model"]["gpt"] == expected
    stored = json.loads((agent_dir / "state" / "usage.json").read_text())
    assert stored["models"]["gpt"] == expected

    # A graceful restart, then a kill -9: the totals are the same each time.
    assert agent.terminate() == 0
    agent = start_agent("u/zeus", cwd=root)
    after = ps_row(bus, "u/zeus")
    assert after is not None and after["pid"] == agent.pid
    assert {k: after["usage"][k] for k in expected} == expected
    agent.kill9()
    agent = start_agent("u/zeus", cwd=root)
    again = ps_row(bus, "u/zeus")
    assert again is not None and again["pid"] == agent.pid
    assert {k: again["usage"][k] for k in expected} == expected


def summary_entries(root: Path) -> list[dict[str, Any]]:
    path = root / ".ateam" / "agents" / "zeus" / "state" / "summary.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_the_running_agent_writes_summary_jsonl_every_5_tasks_and_on_summarize(
    start_agent: AgentFactory, start_console: ConsoleFactory, bus: Bus, tmp_path: Path
) -> None:
    # Five answers, then the summary the agent asks for after the fifth task, then the
    # one /summarize asks for.
    turns: list[dict[str, Any]] = [{"text": f"done {n}"} for n in range(1, 6)]
    turns += [{"text": "Summary: five tasks done, numbered 1 to 5."}]
    turns += [{"text": "Summary: five tasks done and a sixth asked for."}]
    root = write_scripted_project(tmp_path / "s", "s", turns)
    start_agent("s/zeus", cwd=root)
    console = start_console()
    attach_and_send(console, "s/zeus", *(f"task {n}" for n in range(1, 6)))
    wait_for(lambda: summary_entries(root), 20, "the summary after 5 tasks")

    (first,) = summary_entries(root)
    assert first["summary"] == "Summary: five tasks done, numbered 1 to 5."
    assert first["model"] == "script"
    start, end = first["window"]
    assert 0 < start <= end  # the timestamps of the first and last turn it covers

    console.send("/summarize")
    wait_for(lambda: len(summary_entries(root)) == 2, 20, "the /summarize summary")
    assert summary_entries(root)[1]["summary"] == "Summary: five tasks done and a sixth asked for."


def test_handoff_events_carry_next_steps_from_the_plan_and_failures_with_causes(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path
) -> None:
    failure = {
        "name": "memory.failure",
        "args": {
            "description": "the build broke on Python 3.11",
            "root_cause": "a match statement on an old parser",
            "resolution": "pinned the parser to 2.1",
        },
    }
    plan = {
        "name": "plan.write",
        "args": {"content": "# Plan\n- [x] reproduce\n- [ ] fix the parser\n- [ ] run CI\n"},
    }
    root = write_scripted_project(
        tmp_path / "h",
        "h",
        [{"text": "Planning.", "tool_calls": [plan, failure]}, {"text": "Planned."}],
        allow=("plan.*", "memory.*"),
    )
    start_agent("h/zeus", cwd=root)
    assert (
        run_ateam("send", "h/zeus", "fix it", env=subprocess_env(ATEAM_REDIS_URL=bus.url))
    ).returncode == 0
    wait_for(lambda: bus.task_ends("h/zeus"), 20, "the task to end")

    record_file = root / ".ateam/agents/zeus/state/handoff.json"

    def settled() -> tuple[list[dict[str, Any]], dict[str, Any]] | None:
        # The record is written before its event is published: read both until the
        # newest event names the record on disk.
        handoffs = [b for _, b in bus.events("h/zeus") if b.get("type") == "handoff"]
        record = json.loads(record_file.read_text())
        if handoffs and handoffs[-1]["sequence"] == record["sequence"]:
            return handoffs, record
        return None

    handoffs, record = wait_for(settled, 20, "the newest handoff event to name the record")
    assert all(b["action"] == "refreshed" for b in handoffs)
    assert handoffs[-1]["checksum"] == record["checksum"]
    assert record["context"]["next_steps"] == ["fix the parser", "run CI"]
    assert record["context"]["failures"] == [
        {
            "description": "the build broke on Python 3.11",
            "root_cause": "a match statement on an old parser",
            "resolution": "pinned the parser to 2.1",
        }
    ]
