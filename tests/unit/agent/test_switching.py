"""Switching inside a real agent, in-process (SPEC §7, §8): handoff validity and summaries.

Scripted models stand in for providers; the agent runs on the test's redis-server.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
import yaml

from ateam.agent.context.handoff import check, compute_checksum
from ateam.agent.runtime.process import Agent, AgentState
from ateam.bus.codec import unpack
from ateam.bus.connection import RedisTarget
from ateam.config import load_project
from ateam.errors import StorageError
from ateam.providers import build_provider
from ateam.wire.turns import Turn
from tests._wait import async_wait_for


def project(tmp_path: Path, p_turns: list[Any], f_turns: list[Any]) -> Path:
    root = tmp_path / "proj"
    agent = root / ".ateam" / "agents" / "zeus"
    agent.mkdir(parents=True)
    (root / ".ateam" / "p.yaml").write_text(yaml.safe_dump({"turns": p_turns}))
    (root / ".ateam" / "f.yaml").write_text(yaml.safe_dump({"turns": f_turns}))
    (root / ".ateam" / "models.yaml").write_text(
        "models:\n"
        "  - {id: p, provider: scripted, script: p.yaml, context_window: 8000}\n"
        "  - {id: f, provider: scripted, script: f.yaml, context_window: 64000}\n"
    )
    (agent / "agent.yaml").write_text(
        "model: p\nfallbacks: [f]\nswitching: {retries: 0, cooldown_s: 60}\n"
    )
    return root


@pytest.fixture
async def running(target: RedisTarget) -> AsyncIterator[Callable[[Path], Any]]:
    agents: list[Agent] = []

    async def start(root: Path) -> Agent:
        config = load_project(root=root).agents["zeus"]
        agent = Agent(config, target, build_provider(config.model_entry()))
        await agent.start()
        agents.append(agent)
        return agent

    yield start
    for agent in agents:
        await agent.stop()


async def events(client: aioredis.Redis, agent: Agent, kind: str) -> list[dict[str, Any]]:
    raw = await client.xrange(agent.parts.keys.events(agent.id))
    return [body for body in (unpack(f[b"d"]) for _, f in raw) if body["type"] == kind]


async def idle_after(agent: Agent, tasks: int) -> None:
    await async_wait_for(
        lambda: (
            agent.parts.queue.current is None
            and not len(agent.parts.queue)
            and agent.state is AgentState.IDLE
        ),
        15,
        "the agent to be idle with an empty queue",
    )
    assert agent.parts.history.count() >= tasks


@pytest.mark.parametrize("spoil", ["bad_checksum", "expired"])
async def test_a_spoilt_handoff_is_never_used_and_the_switch_says_so(
    running: Callable[[Path], Any], client: aioredis.Redis, tmp_path: Path, spoil: str
) -> None:
    agent: Agent = await running(project(tmp_path, [{"error": {"status": 429}}], [{"text": "ok"}]))
    record = agent.parts.handoff.update({"task": {"description": "real work"}}, author="p")
    if spoil == "bad_checksum":
        record["task"]["description"] = "tampered"  # the checksum no longer matches
    else:  # a correct checksum, but long past its expiry
        record["handoff_expires"] = "2000-01-01T00:05:00.000Z"
        record["checksum"] = compute_checksum(record)
    agent.parts.handoff.path.write_text(json.dumps(record))
    assert check(agent.parts.handoff.read()).reason == spoil

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise StorageError("disk full")

    agent.parts.handoff.update = refuse  # type: ignore[method-assign]  # the refresh fails too
    agent.parts.worker.enqueue("go", source="test")
    await idle_after(agent, 2)

    (switch,) = await events(client, agent, "model.switch")
    assert (switch["from"], switch["to"], switch["reason"]) == ("p", "f", "incomplete_handoff")
    warn = [e for e in await events(client, agent, "warn") if e.get("code") == "handoff.incomplete"]
    assert spoil in warn[0]["msg"]


async def test_a_summary_too_long_twice_keeps_the_raw_turns(
    running: Callable[[Path], Any], client: aioredis.Redis, tmp_path: Path
) -> None:
    huge = " ".join(["word"] * 3000)  # ~3 750 tokens: over the 2 000-token limit
    p_turns = [
        {"text": "first answer"},
        {"error": {"type": "context_length"}},
        {"text": huge},  # the summary...
        {"text": huge},  # ...and its stricter retry, both too long
    ]
    agent: Agent = await running(project(tmp_path, p_turns, [{"text": "answered on f"}]))
    agent.parts.worker.enqueue("first question", source="test")
    await idle_after(agent, 2)
    agent.parts.worker.enqueue("second question", source="test")
    await idle_after(agent, 4)

    (failed,) = [e for e in await events(client, agent, "context") if e["action"] != "summarized"]
    assert failed["action"] == "summary_failed" and failed["attempts"] == 2
    assert agent.parts.runner.compacted_until == 0.0  # nothing left the context
    assert agent.parts.workctx.summary() == ""
    contents = [t["content"] for t in agent.parts.history.tail(10)]
    assert contents == ["first question", "first answer", "second question", "answered on f"]
    (switch,) = await events(client, agent, "model.switch")
    assert switch["reason"] == "context_length"
    # The larger model was sent the raw turns, not a summary of them.
    context = agent.parts.runner.build_context().messages
    assert any(m.content == "first question" for m in context)


async def test_when_every_model_fails_the_task_fails_without_bouncing(
    running: Callable[[Path], Any], client: aioredis.Redis, tmp_path: Path
) -> None:
    root = project(tmp_path, [{"error": {"status": 429}}] * 50, [{"error": {"status": 503}}] * 50)
    config = root / ".ateam/agents/zeus/agent.yaml"
    config.write_text(config.read_text().replace("cooldown_s: 60", "cooldown_s: 0"))
    agent: Agent = await running(root)
    agent.parts.worker.enqueue("go", source="test")
    await idle_after(agent, 1)
    (end,) = await events(client, agent, "task.end")
    assert end["ok"] is False and "provider.overloaded" in end["error"]
    assert len(await events(client, agent, "model.switch")) == 1  # p → f, and no way back


async def test_a_fallback_that_cannot_be_built_is_skipped_not_fatal(
    running: Callable[[Path], Any], client: aioredis.Redis, tmp_path: Path
) -> None:
    root = project(tmp_path, [{"error": {"status": 429}}, {"text": "later"}], [])
    models = root / ".ateam/models.yaml"
    # `messages` is a reserved setting: the openai provider refuses to be built with it.
    models.write_text(
        models.read_text().replace(
            "{id: f, provider: scripted, script: f.yaml, context_window: 64000}",
            "{id: f, provider: openai, context_window: 64000, settings: {messages: 1}}",
        )
    )
    agent: Agent = await running(root)
    agent.parts.worker.enqueue("go", source="test")
    agent.parts.worker.enqueue("again", source="test")
    await idle_after(agent, 3)
    first, second = await events(client, agent, "task.end")
    assert first["ok"] is False and "provider.rate_limited" in first["error"]
    assert second["ok"] is True  # the agent and its worker carried on
    assert await events(client, agent, "model.switch") == []
    (f_row,) = [r for r in agent.parts.router.models_view() if r["id"] == "f"]
    assert not f_row["healthy"] and "messages" in f_row["last_error"]


async def test_the_injected_context_stays_in_budget_on_a_long_history(
    running: Callable[[Path], Any], tmp_path: Path
) -> None:
    from ateam.agent.context import rebuild as ctxbuild
    from ateam.constants import HANDOFF_BLOCK_TOKENS
    from ateam.providers.base import estimate_tokens

    agent: Agent = await running(project(tmp_path, [], []))
    for i in range(1500):  # a long synthetic history, big enough to overflow any window
        agent.parts.history.append(Turn(role="user", content=f"question {i} " + "q" * 400))
        agent.parts.history.append(Turn(role="assistant", content=f"answer {i} " + "a" * 600))
    agent.parts.workctx.dir.mkdir(parents=True, exist_ok=True)
    (agent.parts.workctx.dir / "summary.json").write_text(
        json.dumps({"summary": "s " * 20000, "updated": 1, "tasks_covered": 1, "model": "p"})
    )
    for i in range(30):
        agent.parts.workctx.add_decision(f"decision {i} " + "d" * 900, rationale="r" * 500)
        agent.parts.workctx.add_failure(f"failure {i} " + "f" * 900)
        agent.parts.workctx.add_constraint(f"constraint {i}")
    agent.parts.handoff.update({"context": {"recent_actions": ["x" * 5000] * 10}}, author="p")
    agent.parts.runner.expect_handoff()

    built = agent.parts.runner.build_context("next")
    window = agent.parts.router.provider().context_window
    reserve = min(int(window * ctxbuild.REPLY_RESERVE_SHARE), ctxbuild.MAX_REPLY_RESERVE)
    assert built.tokens <= window - reserve
    assert estimate_tokens(agent.parts.workctx.render()) <= agent.parts.workctx.budget.total
    assert estimate_tokens(agent.parts.keeper.handoff_context()) <= HANDOFF_BLOCK_TOKENS
    assert built.turns_dropped > 0  # the newest turns made it in, not the oldest
    assert built.messages[-2].content.startswith("answer 1499")
