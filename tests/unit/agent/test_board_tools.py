"""The task board from inside an agent (issue 12): the ``tasks.*`` tools and the upkeep
that reopens lost claims.

A real :class:`~ateam.agent.runtime.process.Agent` on the test's redis-server, driven by the
``scripted`` model; the board is read back through :class:`TaskBoard` as any client would.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
import yaml

from ateam.agent.runtime.build import build_parts
from ateam.agent.runtime.process import Agent, AgentState
from ateam.bus.board import TaskBoard
from ateam.bus.codec import unpack
from ateam.bus.connection import RedisTarget, make_client
from ateam.bus.keys import Keys
from ateam.config import standalone_agent
from ateam.providers import ScriptedProvider
from ateam.wire.board import TaskStatus
from tests._wait import async_wait_for

P = "proj"
MakeAgent = Callable[..., Any]


@pytest.fixture
def board(client: aioredis.Redis, target: RedisTarget) -> TaskBoard:
    return TaskBoard(client, Keys(target.namespace))


@pytest.fixture
async def make_agent(target: RedisTarget, tmp_path: Path) -> AsyncIterator[MakeAgent]:
    started: list[Agent] = []

    async def make(
        turns: list[dict[str, Any]], *, allow: tuple[str, ...] = ("tasks.*",), **swaps: Any
    ) -> Agent:
        script = tmp_path / f"script-{len(started)}.yaml"
        script.write_text(yaml.safe_dump({"turns": turns}))
        config = standalone_agent(P, f"a{len(started)}", tmp_path)
        config = dataclasses.replace(config, tools_allow=allow)
        provider = ScriptedProvider(script)
        agent = Agent(
            config, target, provider, parts=build_parts(config, target, provider, **swaps)
        )
        await agent.start()
        started.append(agent)
        return agent

    yield make
    for agent in started:
        if agent.state is not AgentState.SHUTDOWN:
            await agent.stop()


async def run_task(agent: Agent, client: aioredis.Redis) -> list[dict[str, Any]]:
    """Queue one task, wait for it to end; the ``tool.end`` events of it, in order."""
    agent.parts.worker.enqueue("work the board", source="test")
    await async_wait_for(lambda: not len(agent.parts.queue) and agent.state is AgentState.IDLE)
    events = [unpack(f[b"d"]) for _, f in await client.xrange(agent.parts.keys.events(agent.id))]
    assert [e["ok"] for e in events if e["type"] == "task.end"] == [True]
    return [e for e in events if e["type"] == "tool.end"]


def calls(*tool_calls: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One model turn making ``tool_calls``, then one that answers."""
    made = [{"name": name, "args": args} for name, args in tool_calls]
    return [{"text": "Working the board.", "tool_calls": made}, {"text": "done"}]


async def test_an_agent_lists_claims_adds_and_finishes_tasks(
    make_agent: MakeAgent, board: TaskBoard, client: aioredis.Redis
) -> None:
    first = await board.add(P, title="port the parser", priority=1, created_by="cli")
    blocked = await board.add(P, title="ship it", depends_on=[first.id], created_by="cli")
    agent = await make_agent(
        calls(
            ("tasks.list", {"status": "open"}),
            ("tasks.claim", {"id": first.id}),
            ("tasks.claim", {"id": blocked.id}),
            ("tasks.add", {"title": "write docs", "priority": 2, "depends_on": [first.id]}),
            ("tasks.done", {"id": first.id, "result": "merged in abc123"}),
            ("tasks.claim", {"id": "t-0000000000"}),
        )
    )

    ends = await run_task(agent, client)

    assert [(e["name"], e["ok"], e.get("code")) for e in ends] == [
        ("tasks.list", True, None),
        ("tasks.claim", True, None),
        ("tasks.claim", False, "task.blocked"),
        ("tasks.add", True, None),
        ("tasks.done", True, None),
        ("tasks.claim", False, "task.not_found"),
    ]
    done = await board.get(P, first.id)
    assert done is not None and done.status is TaskStatus.DONE
    assert done.assignee == agent.id and done.result == "merged in abc123"
    added = [t for t in await board.list(P) if t.title == "write docs"]
    assert len(added) == 1 and added[0].created_by == agent.id
    assert added[0].priority == 2 and added[0].depends_on == (first.id,)
    assert (await board.get(P, blocked.id)) == blocked  # untouched by the refused claim
    # What the model read: the open tasks, as records, highest priority first.
    tool_turns = [t for t in agent.parts.history.tail(20) if t["role"] == "tool"]
    listed = tool_turns[0]["content"]
    assert listed.index(first.id) < listed.index(blocked.id) and '"status": "open"' in listed
    assert "task.blocked" in tool_turns[2]["content"] and first.id in tool_turns[2]["content"]


async def test_only_the_holder_finishes_and_fail_records_the_reason(
    make_agent: MakeAgent, board: TaskBoard, client: aioredis.Redis
) -> None:
    theirs = await board.add(P, title="theirs", created_by="cli")
    await board.claim(P, theirs.id, agent="proj/other")
    mine = await board.add(P, title="mine", created_by="cli")
    agent = await make_agent(
        calls(
            ("tasks.claim", {"id": theirs.id}),
            ("tasks.done", {"id": theirs.id, "result": "stolen"}),
            ("tasks.claim", {"id": mine.id}),
            ("tasks.fail", {"id": mine.id, "reason": "the API is gone"}),
            ("tasks.list", {"status": "claimed"}),
        )
    )

    ends = await run_task(agent, client)

    assert [(e["ok"], e.get("code")) for e in ends] == [
        (False, "task.claimed"),
        (False, "task.claimed"),
        (True, None),
        (True, None),
        (True, None),
    ]
    held = await board.get(P, theirs.id)
    assert held is not None and held.assignee == "proj/other" and held.result == ""
    failed = await board.get(P, mine.id)
    assert failed is not None and failed.status is TaskStatus.FAILED
    assert failed.assignee == agent.id and failed.reason == "the API is gone"
    listed = [t for t in agent.parts.history.tail(20) if t["role"] == "tool"][-1]["content"]
    assert theirs.id in listed and mine.id not in listed


async def test_tasks_tools_are_denied_unless_allowed(
    make_agent: MakeAgent, board: TaskBoard, client: aioredis.Redis
) -> None:
    agent = await make_agent(calls(("tasks.add", {"title": "sneaky"})), allow=("fs.*",))

    ends = await run_task(agent, client)

    assert [(e["ok"], e.get("code")) for e in ends] == [(False, "tool.denied")]
    assert await board.list(P) == []
    assert not any(t.name.startswith("tasks.") for t in agent.parts.policy.available())


async def test_malformed_arguments_are_refused_and_change_nothing(
    make_agent: MakeAgent, board: TaskBoard, client: aioredis.Redis
) -> None:
    agent = await make_agent(
        calls(
            ("tasks.add", {"title": "   "}),
            ("tasks.add", {"title": "x", "priority": "high"}),
            ("tasks.add", {"title": "x", "depends_on": ["t-ffffffffff"]}),
            ("tasks.fail", {"id": "t-0000000000"}),
            ("tasks.list", {"status": "finished"}),
        )
    )

    ends = await run_task(agent, client)

    assert [e["ok"] for e in ends] == [False] * 5
    assert {e.get("code") for e in ends} == {"bad_request"}
    assert await board.list(P) == []


async def test_the_upkeep_reopens_lost_claims_but_never_its_own(
    make_agent: MakeAgent, client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    board = TaskBoard(client, keys, lost_after_s=0.0)
    agent = await make_agent([], board=board)
    ghost = await board.add(P, title="held by a dead agent", created_by="cli")
    await board.claim(P, ghost.id, agent="proj/dead")
    own = await board.add(P, title="held by the agent itself", created_by="cli")
    await board.claim(P, own.id, agent=agent.id)

    async def reopened() -> bool:
        task = await board.get(P, ghost.id)
        return task is not None and task.status is TaskStatus.OPEN

    await async_wait_for(reopened, 10.0, "the agent's upkeep to reopen the lost claim")
    back = await board.get(P, ghost.id)
    assert back is not None and back.reason == "assignee proj/dead lost (heartbeat)"
    # Its own claim survives even with its heartbeat gone for a moment.
    await client.delete(keys.alive(agent.id))
    await agent.parts.upkeep.reconcile_board()
    agent.parts.upkeep._reconciled_at = -1e9  # past the once-an-interval limit
    await agent.parts.upkeep.reconcile_board()
    kept = await board.get(P, own.id)
    assert kept is not None and kept.status is TaskStatus.CLAIMED and kept.assignee == agent.id


async def test_a_bus_error_while_reconciling_never_fails_the_agent(
    make_agent: MakeAgent, target: RedisTarget
) -> None:
    dead = RedisTarget("redis://127.0.0.1:1", "test", namespace=target.namespace)
    unreachable = make_client(dead)
    try:
        agent = await make_agent([], board=TaskBoard(unreachable, Keys(target.namespace)))
        agent.parts.upkeep._reconciled_at = -1e9
        await agent.parts.upkeep.reconcile_board()  # logged, not raised
        assert agent.state is AgentState.IDLE and agent.exit_code == 0
    finally:
        await unreachable.aclose()
