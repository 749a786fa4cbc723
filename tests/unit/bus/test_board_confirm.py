"""A replayed board task runs on one agent only (issue 22 point 2): ``confirm`` and the
reconcile's reopen, of which exactly one wins.

Liveness is the registry's own keys, written by a real :class:`Heartbeat`; a lapsed
heartbeat is its ``alive`` key gone, which is what its TTL does.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis

from ateam.bus.board import TaskBoard
from ateam.bus.keys import Keys
from ateam.bus.registry import AgentEntry, Heartbeat
from ateam.errors import TaskClaimed, TaskNotFound
from ateam.wire.board import TaskStatus

P = "proj"


@pytest.fixture
def board(client: aioredis.Redis, namespace: str) -> TaskBoard:
    # Claims count as old at once: only liveness and the confirm decide here.
    return TaskBoard(client, Keys(namespace), lost_after_s=0.0)


async def beat(client: aioredis.Redis, namespace: str, agent: str) -> None:
    project, name = agent.split("/")
    entry = AgentEntry(id=agent, name=name, project=project)
    await Heartbeat(client, Keys(namespace), entry).beat()


async def test_only_the_holder_confirms_a_claim(board: TaskBoard) -> None:
    held = await board.add(P, title="held", created_by="cli")
    claimed = await board.claim(P, held.id, agent="proj/a")
    opened = await board.add(P, title="open", created_by="cli")
    finished = await board.add(P, title="done", created_by="cli")
    await board.claim(P, finished.id, agent="proj/a")
    await board.done(P, finished.id, agent="proj/a", result="ok")

    confirmed = await board.confirm(P, held.id, agent="proj/a")

    assert confirmed.status is TaskStatus.CLAIMED and confirmed.assignee == "proj/a"
    # The task did not change: its claim's age still counts from the claim.
    assert confirmed.updated == claimed.updated
    with pytest.raises(TaskClaimed) as other:
        await board.confirm(P, held.id, agent="proj/b")
    assert other.value.detail == {"task": held.id, "status": "claimed", "assignee": "proj/a"}
    for task_id, status in ((opened.id, "open"), (finished.id, "done")):
        with pytest.raises(TaskClaimed) as refused:
            await board.confirm(P, task_id, agent="proj/a")
        assert refused.value.detail["status"] == status
    with pytest.raises(TaskNotFound):
        await board.confirm(P, "t-0000000000", agent="proj/a")


async def test_a_holder_back_and_confirmed_after_the_liveness_look_keeps_its_claim(
    board: TaskBoard, client: aioredis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race of a whole-team restart: a teammate judges proj/b lost (no heartbeat yet),
    then proj/b beats and confirms its replayed task, then the teammate's reopen runs."""
    task = await board.add(P, title="port the parser", created_by="cli")
    await board.claim(P, task.id, agent="proj/b")
    reopen = board._reopen_lost

    async def b_comes_back_first(*args: Any) -> Any:
        await beat(client, namespace, "proj/b")
        await board.confirm(P, task.id, agent="proj/b")  # proj/b is about to run it
        return await reopen(*args)

    monkeypatch.setattr(board, "_reopen_lost", b_comes_back_first)

    assert await board.reconcile(P, keep={"proj/a"}) == []

    kept = await board.get(P, task.id)
    assert kept is not None and kept.status is TaskStatus.CLAIMED and kept.assignee == "proj/b"
    with pytest.raises(TaskClaimed):
        await board.claim(P, task.id, agent="proj/a")  # so the teammate cannot take it


async def test_a_claim_reopened_first_cannot_be_confirmed(
    board: TaskBoard, client: aioredis.Redis, namespace: str
) -> None:
    task = await board.add(P, title="port the lexer", created_by="cli")
    await board.claim(P, task.id, agent="proj/b")

    assert [t.id for t in await board.reconcile(P, keep={"proj/a"})] == [task.id]
    await board.claim(P, task.id, agent="proj/a")  # the teammate takes it over
    await beat(client, namespace, "proj/b")  # proj/b is back, with its item replayed

    with pytest.raises(TaskClaimed) as refused:
        await board.confirm(P, task.id, agent="proj/b")
    assert refused.value.detail["assignee"] == "proj/a"
    assert await board.reconcile(P, keep={"proj/a"}) == []  # nothing of proj/a's reopened
