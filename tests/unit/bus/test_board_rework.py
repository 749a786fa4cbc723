"""A finished task back to open because its work was discarded (issue 27, ``ateam discard
--reopen``): ``rework`` against a real Redis, for done and failed tasks only."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from ateam.bus.board import TaskBoard
from ateam.bus.keys import Keys
from ateam.errors import TaskClaimed, TaskNotFound
from ateam.wire.board import TaskStatus
from ateam.wire.work import WorkRecord

P = "proj"
WORK = WorkRecord(branch="ateam/a/t-1", base="main", commit="ab" * 20, files=1, insertions=2)


@pytest.fixture
def board(client: aioredis.Redis, namespace: str) -> TaskBoard:
    return TaskBoard(client, Keys(namespace))


async def test_a_done_task_goes_back_to_open_without_its_result_or_work(board: TaskBoard) -> None:
    task = await board.add(P, title="write the parser", created_by="cli")
    await board.claim(P, task.id, agent="proj/a")
    await board.record_work(P, task.id, agent="proj/a", work=WORK)
    await board.done(P, task.id, agent="proj/a", result="parser written")

    again = await board.rework(P, task.id, by="cli", why="its work was discarded")
    assert again.status is TaskStatus.OPEN and again.assignee == ""
    assert again.result == "" and again.work is None and again.reopened == 1
    assert again.last_error == "its work was discarded (by cli)"
    assert await board.get(P, task.id) == again
    claimed = await board.claim(P, task.id, agent="proj/b")  # anyone may take it again
    assert claimed.assignee == "proj/b"


async def test_a_failed_task_keeps_why_it_failed(board: TaskBoard) -> None:
    task = await board.add(P, title="write the parser", created_by="cli")
    await board.claim(P, task.id, agent="proj/a")
    await board.fail(P, task.id, agent="proj/a", reason="no grammar")
    again = await board.rework(P, task.id, by="cli", why="discarded")
    assert again.status is TaskStatus.OPEN
    assert again.last_error == "no grammar; discarded (by cli)"


async def test_an_open_or_claimed_task_or_an_unknown_one_is_refused(board: TaskBoard) -> None:
    task = await board.add(P, title="write the parser", created_by="cli")
    with pytest.raises(TaskClaimed):
        await board.rework(P, task.id, by="cli", why="x")
    await board.claim(P, task.id, agent="proj/a")
    with pytest.raises(TaskClaimed) as refused:
        await board.rework(P, task.id, by="cli", why="x")
    assert refused.value.detail["status"] == "claimed"
    assert (await board.get(P, task.id)).status is TaskStatus.CLAIMED  # type: ignore[union-attr]
    with pytest.raises(TaskNotFound):
        await board.rework(P, "t-0000000000", by="cli", why="x")
