"""The composition root: a part given ready-made is the one every other part uses."""

from __future__ import annotations

from pathlib import Path

import pytest

from ateam.agent.native.tools import BUILTIN_TOOLS
from ateam.agent.runtime.build import build_parts
from ateam.agent.runtime.process import Agent
from ateam.agent.state.queue import DurableQueue
from ateam.bus.connection import RedisTarget
from ateam.config import standalone_agent
from ateam.providers import EchoProvider
from tests._wait import async_wait_for


async def test_a_swapped_part_is_the_one_the_running_agent_uses(
    target: RedisTarget, tmp_path: Path
) -> None:
    config = standalone_agent("proj", "zeus", tmp_path)
    queue = DurableQueue(config.state_dir)
    parts = build_parts(config, target, EchoProvider(), queue=queue)
    assert parts.queue is queue and parts.keeper is not None

    agent = Agent(config, target, EchoProvider(), parts=parts)
    await agent.start()
    try:
        assert agent.parts.queue is queue
        queued = agent.parts.worker.enqueue("hello", source="test")
        await async_wait_for(lambda: queue.current is None and not queue.pending())
        turns = agent.parts.history.tail(5)
        assert [t["content"] for t in turns] == ["hello", "echo: hello"]
        assert turns[0]["task_id"] == queued.item.id
    finally:
        await agent.stop()


@pytest.mark.parametrize(
    ("swap", "message"),
    [("quue", "no part named quue"), ("plugin_warnings", "plugin_warnings cannot be swapped")],
)
def test_a_part_that_does_not_exist_or_cannot_be_swapped_is_refused(
    target: RedisTarget, tmp_path: Path, swap: str, message: str
) -> None:
    config = standalone_agent("proj", "zeus", tmp_path)
    with pytest.raises(TypeError, match=message):
        build_parts(config, target, EchoProvider(), **{swap: []})


def test_the_builtin_list_holds_the_workspace_and_the_state_tools() -> None:
    names = {item.name for item in BUILTIN_TOOLS}
    assert {"os.exec", "fs.read", "fs.patch", "plan.read", "memory.decide"} <= names
    assert {"context.post", "context.read", "kb.search", "kb.ingest", "agents.list"} <= names
    assert {"tasks.fail", "tasks.reopen", "tasks.retry"} <= names
    # Issue 26 added team.broadcast, plan.approve, plan.reject, tasks.reopen, tasks.retry.
    assert len(names) == len(BUILTIN_TOOLS) == 28
