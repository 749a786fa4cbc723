"""``take_tasks: true`` (issue 12 point 2): idle agents pull work from the board.

Real agents with the echo model on a real Redis; the board is read back through the
client, as a lead's console would.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ateam.agent.runtime.process import Agent
from ateam.client import Target, Team
from ateam.config import standalone_agent
from ateam.providers import EchoProvider
from tests._wait import async_wait_for


async def start(target: Target, root: Path, name: str, *, take: bool) -> Agent:
    config = standalone_agent("proj", name, root / name)
    config = dataclasses.replace(config, spec=config.spec.model_copy(update={"take_tasks": take}))
    agent = Agent(config, target, EchoProvider())
    await agent.start()
    if take:
        await async_wait_for(agent.parts.puller.listening.is_set, 10)
    return agent


@pytest.fixture
async def crew(target: Target, tmp_path: Path) -> AsyncIterator[list[Agent]]:
    agents = [
        await start(target, tmp_path, "zeus", take=True),
        await start(target, tmp_path, "hera", take=True),
        await start(target, tmp_path, "lazy", take=False),
    ]
    yield agents
    for agent in agents:
        await agent.stop()


async def test_idle_teammates_pull_each_task_once_and_finish_it(
    crew: list[Agent], team: Team
) -> None:
    add = team.tasks.add
    first = await add("proj", title="write the parser", priority=5, created_by="proj/lead")
    second = await add("proj", title="write the lexer", priority=1, created_by="proj/lead")
    after = await add(
        "proj", title="wire them up", depends_on=[first.id, second.id], created_by="proj/lead"
    )

    async def all_done() -> bool:
        return all(t.status == "done" for t in await team.tasks.ls("proj"))

    await async_wait_for(all_done, 20, "every board task to be done")
    tasks = {t.id: t for t in await team.tasks.ls("proj")}
    assert all(t.status == "done" for t in tasks.values()), tasks
    takers = {t.assignee for t in tasks.values()}
    assert takers <= {"proj/zeus", "proj/hera"}  # never the agent without take_tasks
    # Each task ran exactly once, as input from the board, and its answer is the result.
    ran = [
        turn["source"]
        for agent in crew
        for turn in agent.parts.history.tail(100)
        if turn.get("role") == "user"
    ]
    assert sorted(ran) == sorted(f"board:{t}" for t in (first.id, second.id, after.id))
    assert tasks[first.id].result.startswith("echo: [board task")
