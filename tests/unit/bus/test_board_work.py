"""A board task's branch (issue 27): ``record_work`` against a real Redis, only by the
task's assignee, in any status, and the record read back by every reader."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from ateam.bus.board import TaskBoard
from ateam.bus.keys import Keys
from ateam.errors import TaskClaimed, TaskNotFound
from ateam.wire.board import BoardTask, TaskStatus
from ateam.wire.work import WorkRecord

P = "proj"
MADE = WorkRecord(branch="ateam/a/t-1", base="main", worktree="/r/.ateam/worktrees/a/t-1")
DONE = WorkRecord(
    branch="ateam/a/t-1", base="main", worktree=MADE.worktree, commit="ab" * 20,
    files=2, insertions=10, deletions=3,
)  # fmt: skip


@pytest.fixture
def board(client: aioredis.Redis, namespace: str) -> TaskBoard:
    return TaskBoard(client, Keys(namespace))


async def claimed(board: TaskBoard, agent: str = "proj/a") -> BoardTask:
    task = await board.add(P, title="write the parser", created_by="cli")
    return await board.claim(P, task.id, agent=agent)


async def test_the_assignee_records_its_branch_and_every_reader_sees_it(board: TaskBoard) -> None:
    task = await claimed(board)
    assert task.work is None and task.to_wire()["work"] is None  # none until recorded

    first = await board.record_work(P, task.id, agent="proj/a", work=MADE)
    assert first.work == MADE and first.status is TaskStatus.CLAIMED
    assert first.updated == task.updated  # the claim's own times are left alone
    later = await board.record_work(P, task.id, agent="proj/a", work=DONE)
    assert later.work == DONE

    read = await board.get(P, task.id)
    assert read is not None and read.work == DONE
    assert read.to_wire()["work"] == DONE.to_wire()
    assert [t.work for t in await board.list(P)] == [DONE]
    assert BoardTask.from_wire(read.to_wire()) == read
    assert DONE.summary() == f"ateam/a/t-1 @{'ab' * 5} 2 files +10 -3"


@pytest.mark.parametrize("end", ["done", "fail"])
async def test_the_assignee_records_it_after_the_task_ended_too(board: TaskBoard, end: str) -> None:
    # The model may end the task itself (tasks.done) before the agent's commit is counted.
    task = await claimed(board)
    if end == "done":
        await board.done(P, task.id, agent="proj/a", result="ok")
    else:
        await board.fail(P, task.id, agent="proj/a", reason="red")
    recorded = await board.record_work(P, task.id, agent="proj/a", work=DONE)
    assert recorded.work == DONE and recorded.status is not TaskStatus.CLAIMED


async def test_only_the_assignee_may_record(board: TaskBoard) -> None:
    task = await claimed(board)
    await board.record_work(P, task.id, agent="proj/a", work=MADE)
    with pytest.raises(TaskClaimed) as refused:
        await board.record_work(P, task.id, agent="proj/b", work=DONE)
    assert refused.value.detail["assignee"] == "proj/a"
    read = await board.get(P, task.id)
    assert read is not None and read.work == MADE  # unchanged

    open_task = await board.add(P, title="nobody has it", created_by="cli")
    with pytest.raises(TaskClaimed):
        await board.record_work(P, open_task.id, agent="proj/a", work=MADE)
    with pytest.raises(TaskNotFound):
        await board.record_work(P, "t-0000000000", agent="proj/a", work=MADE)
