"""A board worker's notices from a real in-process agent (issue 26): going idle is told
once per stretch of work, however often the idle agent wakes; its own finish is told.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import redis.asyncio as aioredis

from ateam.agent.runtime.process import Agent
from ateam.bus.keys import Keys
from ateam.bus.notices import NoticeBox
from ateam.client import Target, Team
from ateam.config import standalone_agent
from ateam.config.schema import TeamSpec
from ateam.providers import EchoProvider
from ateam.wire.notices import NoticeKind
from tests._wait import async_wait_for


async def test_idle_is_told_once_per_busy_stretch_not_on_every_wake(
    target: Target, team: Team, client: aioredis.Redis, tmp_path: Path
) -> None:
    config = standalone_agent("proj", "mate", tmp_path / "mate")
    spec = config.spec.model_copy(update={"take_tasks": True, "team": TeamSpec(notify=("lead",))})
    agent = Agent(dataclasses.replace(config, spec=spec), target, EchoProvider())
    await agent.start()
    box = NoticeBox(client, Keys(target.namespace))
    try:
        await async_wait_for(agent.parts.puller.listening.is_set, 10)
        worker = agent.parts.worker

        async def kinds() -> list[NoticeKind]:
            return [n.kind for n in await box.pending("proj/lead")]

        async def went_idle(count: int) -> bool:
            return (await kinds()).count(NoticeKind.IDLE) == count

        await async_wait_for(lambda: agent.parts.status.state == "idle", 10, "mate idle")
        assert await kinds() == []  # idle from the start is no news: nothing was done

        task = await team.tasks.add("proj", title="write the parser", created_by="proj/lead")
        await async_wait_for(lambda: went_idle(1), 20, "the idle notice")
        assert await kinds() == [NoticeKind.FINISHED, NoticeKind.IDLE]
        [finished, _] = await box.pending("proj/lead")
        assert finished.board_task == task.id and finished.text.startswith("echo: [board task")

        for _ in range(3):  # an idle agent wakes now and then: no notice each time
            worker.wake()
            await async_wait_for(lambda: not worker._work.is_set(), 10, "the wake-up seen")
        assert await kinds() == [NoticeKind.FINISHED, NoticeKind.IDLE]
    finally:
        await agent.stop()
