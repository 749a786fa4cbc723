"""The task loop in-process (SPEC §5.4): failures, slow owners, interrupts and re-runs.

A real :class:`~ateam.agent.runtime.process.Agent` on the test's redis-server, a ``scripted``
model and the built-in tools plus one that misbehaves on purpose.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
import yaml

from ateam.agent.native.tools import BUILTIN_TOOLS
from ateam.agent.runtime.process import Agent, AgentState
from ateam.bus.codec import unpack
from ateam.bus.connection import RedisTarget
from ateam.config import standalone_agent
from ateam.providers import ScriptedProvider
from ateam.tools import ToolRegistry, tool
from ateam.tools.approvals import Decision
from ateam.wire.turns import Turn
from tests._wait import async_wait_for


@tool("test.boom")
def boom(reason: str) -> str:
    """A tool with a bug.

    Args:
        reason: what to blow up with.
    """
    raise KeyError(reason)


@pytest.fixture
async def make_agent(target: RedisTarget, tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    started: list[Agent] = []

    async def make(turns: list[dict[str, Any]], delay_ms: float = 0, **spec: Any) -> Agent:
        script = tmp_path / f"script-{len(started)}.yaml"
        script.write_text(yaml.safe_dump({"turns": turns, "token_delay_ms": delay_ms}))
        config = standalone_agent("proj", f"a{len(started)}", tmp_path)
        spec.setdefault("tools_allow", ("fs.*", "test.*", "os.exec"))
        config = dataclasses.replace(config, **spec)
        registry = ToolRegistry([*BUILTIN_TOOLS, boom])
        agent = Agent(config, target, ScriptedProvider(script), tools=registry)
        await agent.start()
        started.append(agent)
        return agent

    yield make
    for agent in started:
        if agent.state is not AgentState.SHUTDOWN:
            await agent.stop()


async def events(client: aioredis.Redis, agent: Agent) -> list[dict[str, Any]]:
    return [unpack(f[b"d"]) for _, f in await client.xrange(agent.parts.keys.events(agent.id))]


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"text": "Calling.", "tool_calls": [{"name": name, "args": args}]}


async def test_a_tool_that_raises_fails_its_call_not_the_task_or_the_agent(
    make_agent: Callable[..., Any], client: aioredis.Redis
) -> None:
    agent = await make_agent([call("test.boom", reason="oops"), {"text": "recovered"}])
    agent.parts.worker.enqueue("break it", source="test")
    agent.parts.worker.enqueue("then this", source="test")
    await async_wait_for(lambda: not len(agent.parts.queue) and agent.parts.history.count() >= 6)
    await async_wait_for(lambda: agent.state is AgentState.IDLE)

    seen = await events(client, agent)
    (end,) = [e for e in seen if e["type"] == "tool.end"]
    assert (end["ok"], end["code"]) == (False, "internal")
    ends = [e for e in seen if e["type"] == "task.end"]
    assert [e["ok"] for e in ends] == [True, True]
    tool_turn = next(t for t in agent.parts.history.tail(10) if t["role"] == "tool")
    assert "error [internal]" in tool_turn["content"] and "KeyError" in tool_turn["content"]
    assert agent.exit_code == 0 and agent._worker is not None and not agent._worker.done()


async def test_an_owner_may_take_longer_than_the_fs_timeout_over_a_diff(
    make_agent: Callable[..., Any], client: aioredis.Redis, tmp_path: Path
) -> None:
    target = tmp_path / "slow.txt"
    target.write_text("old\n")
    base = hashlib.sha256(b"old\n").hexdigest()
    agent = await make_agent(
        [call("fs.patch", path="slow.txt", content="new\n", base_sha256=base), {"text": "ok"}]
    )
    agent.parts.worker.enqueue("patch it", source="test")
    await async_wait_for(lambda: agent.parts.approvals.pending())
    assert agent.state is AgentState.WAITING
    await asyncio.sleep(3.5)  # longer than fs.*'s 3 s: the wait for the owner is not fs work
    agent.parts.approvals.answer(None, Decision.APPROVE, content=None, by="console:test")
    await async_wait_for(lambda: agent.state is AgentState.IDLE)
    assert target.read_text() == "new\n"
    (end,) = [e for e in await events(client, agent) if e["type"] == "tool.end"]
    assert end["ok"] is True


async def test_an_interrupt_also_rejects_an_approval_asked_for_just_after_it(
    make_agent: Callable[..., Any], client: aioredis.Redis, tmp_path: Path
) -> None:
    (tmp_path / "late.txt").write_text("a\n")
    base = hashlib.sha256(b"a\n").hexdigest()
    agent = await make_agent([call("fs.patch", path="late.txt", content="b\n", base_sha256=base)])
    started = asyncio.Event()
    real = agent.parts.sandbox.propose_patch

    def slow_propose(*args: Any, **kwargs: Any) -> Any:
        # The interrupt lands while the proposal is being computed, before the ask.
        started.set()
        time.sleep(0.3)
        return real(*args, **kwargs)

    agent.parts.sandbox.propose_patch = slow_propose  # type: ignore[method-assign]
    agent.parts.worker.enqueue("patch", source="test")
    await async_wait_for(started.is_set)
    agent.parts.worker.interrupt()
    await async_wait_for(lambda: agent.state is AgentState.IDLE, timeout=5)
    seen = await events(client, agent)
    (task_end,) = [e for e in seen if e["type"] == "task.end"]
    assert task_end["error"] == "interrupted"
    assert not [e for e in seen if e["type"] == "diff.proposed"]
    assert (tmp_path / "late.txt").read_text() == "a\n"


async def test_a_released_task_runs_again_without_repeating_its_question(
    make_agent: Callable[..., Any], client: aioredis.Redis
) -> None:
    agent = await make_agent([{"text": "first attempt"}, {"text": "second attempt"}])
    item = agent.parts.queue.append("the question", source="test", trace_id="t1")
    taken = agent.parts.queue.take()
    assert taken is not None
    agent.parts.history.append(
        Turn(role="user", content="the question", task_id=item.id, trace_id="t1")
    )
    agent.parts.queue.release(item.id)
    agent.parts.worker.wakeup()
    await async_wait_for(
        lambda: agent.parts.history.count() >= 2 and agent.state is AgentState.IDLE
    )
    turns = agent.parts.history.tail(10)
    assert [t["role"] for t in turns] == ["user", "assistant"]
    (end,) = [e for e in await events(client, agent) if e["type"] == "task.end"]
    assert end["ok"] is True and end["task_id"] == item.id


async def test_shutdown_during_a_silent_model_releases_the_item(
    make_agent: Callable[..., Any], tmp_path: Path
) -> None:
    agent = await make_agent([{"text": "never finished"}])
    gate = asyncio.Event()
    real_stream = agent.parts.router.provider().stream

    async def stalled(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        await gate.wait()  # a model that sends nothing for a long time
        async for chunk in real_stream(*args, **kwargs):
            yield chunk

    agent.parts.runner.provider.stream = stalled  # type: ignore[method-assign]
    item = agent.parts.worker.enqueue("slow one", source="test").item
    await async_wait_for(lambda: agent.state is AgentState.BUSY)
    agent.request_shutdown()
    await asyncio.wait_for(agent.stop(), 15)
    reopened = type(agent.parts.queue)(agent.config.state_dir)
    report = reopened.open()
    # Put back at the head by the shutdown itself, not found half-done like after a crash.
    assert report.requeued == [] and report.dead == []
    assert [i.id for i in reopened.pending()] == [item.id]
    reopened.close()


async def test_decisions_and_constraints_recorded_by_the_model_reach_every_later_turn(
    make_agent: Callable[..., Any], client: aioredis.Redis
) -> None:
    decide = {
        "name": "memory.decide",
        "args": {"decision": "Use SQLite for the cache", "rationale": "no server to run"},
    }
    constrain = {"name": "memory.constrain", "args": {"text": "Never edit api/v1"}}
    agent = await make_agent(
        [{"text": "Noting.", "tool_calls": [decide, constrain]}, {"text": "noted"}],
        tools_allow=("memory.*",),
    )
    agent.parts.worker.enqueue("remember this", source="test")
    await async_wait_for(lambda: agent.parts.history.count() >= 5)
    await async_wait_for(lambda: agent.state is AgentState.IDLE)
    ends = [e for e in await events(client, agent) if e["type"] == "tool.end"]
    assert [e["ok"] for e in ends] == [True, True]
    system = agent.parts.runner.build_context().messages[0].content
    assert "## Working context" in system
    assert "Use SQLite for the cache" in system and "Never edit api/v1" in system
    # And they are on disk, for the next process and the next model.
    assert agent.parts.workctx.decisions()[0]["task"] == agent.parts.history.tail(5)[0]["task_id"]


async def test_a_key_the_model_streams_in_pieces_with_pauses_is_masked_in_every_token(
    make_agent: Callable[..., Any], client: aioredis.Redis
) -> None:
    # A real model streams parts of words. A pause of over a second (the framer's word
    # hold) lets "AK" go out on its own; the rest of the key must not follow it raw.
    pieces = ["The key is AK", "IAIOSFODNN7EXA", "MPLE and that is all."]
    agent = await make_agent([{"chunks": pieces}], delay_ms=1200)
    agent.parts.worker.enqueue("show me the key", source="test")
    await async_wait_for(lambda: agent.parts.history.count() >= 2, timeout=30)

    seen = await events(client, agent)
    streamed = "".join(e["text"] for e in seen if e["type"] == "token")
    assert "IOSFODNN7EXA" not in streamed, streamed
    assert streamed.startswith("The key is AK") and streamed.endswith("and that is all.")
    assert "IOSFODNN7EXA" not in str(agent.parts.history.tail(5))
