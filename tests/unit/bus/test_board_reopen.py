"""A failed task goes back to work (issue 26 §4): ``reopen`` and ``retry`` against a real
Redis, from every status, and what a listing says about the tasks waiting for one.

Liveness is a real :class:`Heartbeat`'s ``alive`` key, as the retry reads it.
"""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from ateam.bus.board import TaskBoard
from ateam.bus.keys import Keys
from ateam.bus.registry import AgentEntry, Heartbeat
from ateam.errors import TaskClaimed, TaskNotFound
from ateam.wire.board import BoardTask, TaskStatus, blocked_by, blocked_note

P = "proj"


@pytest.fixture
def board(client: aioredis.Redis, namespace: str) -> TaskBoard:
    return TaskBoard(client, Keys(namespace))


async def beat(client: aioredis.Redis, namespace: str, agent: str) -> None:
    project, name = agent.split("/")
    entry = AgentEntry(id=agent, name=name, project=project)
    await Heartbeat(client, Keys(namespace), entry).beat()


async def in_status(board: TaskBoard, status: TaskStatus) -> BoardTask:
    """A task brought to ``status``; claimed, finished and failed by ``proj/a``."""
    task = await board.add(P, title=f"a {status} task", created_by="cli")
    if status is TaskStatus.OPEN:
        return task
    await board.claim(P, task.id, agent="proj/a")
    if status is TaskStatus.DONE:
        return await board.done(P, task.id, agent="proj/a", result="ok")
    if status is TaskStatus.FAILED:
        return await board.fail(P, task.id, agent="proj/a", reason="tests red")
    return await board.get(P, task.id) or task


@pytest.mark.parametrize("status", [TaskStatus.OPEN, TaskStatus.CLAIMED, TaskStatus.DONE])
@pytest.mark.parametrize("verb", ["reopen", "retry"])
async def test_only_a_failed_task_goes_back(
    board: TaskBoard, status: TaskStatus, verb: str
) -> None:
    task = await in_status(board, status)
    before = await board.get(P, task.id)
    with pytest.raises(TaskClaimed) as refused:
        await getattr(board, verb)(P, task.id, by="cli")
    assert refused.value.code == "task.claimed"
    assert refused.value.detail["status"] == str(status)
    assert "only a failed task" in refused.value.message
    assert await board.get(P, task.id) == before  # nothing changed
    with pytest.raises(TaskNotFound):
        await getattr(board, verb)(P, "t-0000000000", by="cli")


async def test_reopen_puts_a_failed_task_back_for_anyone_keeping_why(board: TaskBoard) -> None:
    task = await in_status(board, TaskStatus.FAILED)
    reopened = await board.reopen(P, task.id, by="proj/lead")
    assert reopened.status is TaskStatus.OPEN and reopened.assignee == ""
    assert reopened.last_error == "tests red" and reopened.reopened == 1
    assert reopened.reason == "reopened by proj/lead" and reopened.offered_to == ""
    with pytest.raises(TaskClaimed):  # open now: a second reopen is refused
        await board.reopen(P, task.id, by="proj/lead")

    claimed = await board.claim(P, task.id, agent="proj/b")  # anyone, at once
    assert claimed.assignee == "proj/b" and claimed.last_error == "tests red"
    failed = await board.fail(P, task.id, agent="proj/b", reason="still red")
    again = await board.reopen(P, failed.id, by="cli")
    assert again.last_error == "still red" and again.reopened == 2


async def test_retry_offers_the_task_to_the_running_agent_that_failed_it(
    board: TaskBoard, client: aioredis.Redis, namespace: str
) -> None:
    await beat(client, namespace, "proj/a")
    task = await in_status(board, TaskStatus.FAILED)
    retried = await board.retry(P, task.id, by="cli")
    assert retried.status is TaskStatus.OPEN and retried.offered_to == "proj/a"
    assert retried.offer_until > retried.updated and retried.last_error == "tests red"
    assert retried.reason == "retried by cli"

    with pytest.raises(TaskClaimed) as refused:
        await board.claim(P, task.id, agent="proj/b")
    assert refused.value.detail["offered_to"] == "proj/a"
    assert 0 < refused.value.detail["offer_left_s"] <= 30
    claimed = await board.claim(P, task.id, agent="proj/a")
    assert claimed.assignee == "proj/a" and claimed.offered_to == "" and claimed.offer_until == 0


async def test_retry_of_a_task_whose_agent_is_not_running_opens_it_to_anyone(
    board: TaskBoard,
) -> None:
    task = await in_status(board, TaskStatus.FAILED)  # proj/a never beat
    retried = await board.retry(P, task.id, by="cli")
    assert retried.status is TaskStatus.OPEN and retried.offered_to == ""
    assert (await board.claim(P, task.id, agent="proj/b")).assignee == "proj/b"


async def test_an_offer_lapses(client: aioredis.Redis, namespace: str) -> None:
    board = TaskBoard(client, Keys(namespace), offer_s=0.0)
    await beat(client, namespace, "proj/a")
    task = await in_status(board, TaskStatus.FAILED)
    retried = await board.retry(P, task.id, by="cli")
    assert retried.offered_to == "proj/a"  # offered, for no time at all
    assert (await board.claim(P, task.id, agent="proj/b")).assignee == "proj/b"


async def test_a_listing_says_what_an_open_task_waits_for(board: TaskBoard) -> None:
    broken = await in_status(board, TaskStatus.FAILED)
    running = await in_status(board, TaskStatus.CLAIMED)
    finished = await in_status(board, TaskStatus.DONE)
    waits = await board.add(
        P, title="ship", depends_on=[broken.id, running.id, finished.id], created_by="cli"
    )
    free = await board.add(P, title="docs", depends_on=[finished.id], created_by="cli")

    found = blocked_by(await board.list(P))
    assert found == {waits.id: ((broken.id, True), (running.id, False))}
    assert free.id not in found
    assert blocked_note(found[waits.id]) == f"blocked by {broken.id} (failed), {running.id}"
    assert blocked_note(()) == ""
