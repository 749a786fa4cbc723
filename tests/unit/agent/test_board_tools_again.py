"""``tasks.reopen`` and ``tasks.retry`` from inside an agent (issue 26 §4): a real agent
on the scripted model sends failed tasks back; one not failed is refused."""

from __future__ import annotations

import json

import redis.asyncio as aioredis

from ateam.bus.board import TaskBoard
from ateam.wire.board import TaskStatus
from tests.unit.agent.test_board_tools import MakeAgent, P, board, calls, make_agent, run_task

__all__ = ["board", "make_agent"]  # fixtures, shared with the board tools' tests


async def test_an_agent_reopens_and_retries_failed_tasks(
    make_agent: MakeAgent, board: TaskBoard, client: aioredis.Redis
) -> None:
    theirs = await board.add(P, title="theirs", created_by="cli")
    await board.claim(P, theirs.id, agent="proj/other")
    await board.fail(P, theirs.id, agent="proj/other", reason="no access")
    mine = await board.add(P, title="mine", created_by="cli")
    after = await board.add(P, title="after", depends_on=[theirs.id, mine.id], created_by="cli")
    agent = await make_agent(
        calls(
            ("tasks.list", {"status": "open"}),
            ("tasks.retry", {"id": mine.id}),
            ("tasks.reopen", {"id": theirs.id}),
            ("tasks.claim", {"id": mine.id}),
            ("tasks.fail", {"id": mine.id, "reason": "flaky test"}),
            ("tasks.retry", {"id": mine.id}),
        )
    )

    ends = await run_task(agent, client)

    assert [(e["name"], e["ok"], e.get("code")) for e in ends] == [
        ("tasks.list", True, None),
        ("tasks.retry", False, "task.claimed"),  # open: not failed
        ("tasks.reopen", True, None),
        ("tasks.claim", True, None),
        ("tasks.fail", True, None),
        ("tasks.retry", True, None),
    ]
    reopened = await board.get(P, theirs.id)
    assert reopened is not None and reopened.status is TaskStatus.OPEN
    assert reopened.last_error == "no access" and reopened.reason == f"reopened by {agent.id}"
    assert reopened.offered_to == ""
    retried = await board.get(P, mine.id)
    assert retried is not None and retried.status is TaskStatus.OPEN
    assert retried.offered_to == agent.id and retried.last_error == "flaky test"
    # What the model read: what the open task waits for, the failed dependency marked.
    [listed, *_] = [t for t in agent.parts.history.tail(20) if t["role"] == "tool"]
    rows = {row["id"]: row for row in json.loads(listed["content"])}
    assert rows[after.id]["blocked_by"] == [
        {"id": theirs.id, "failed": True},
        {"id": mine.id, "failed": False},
    ]
    assert rows[mine.id]["blocked_by"] == []
