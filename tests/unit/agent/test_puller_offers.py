"""A take_tasks agent and a retried task (issue 26 §4): the agent that failed it takes it
before anything else, and a teammate refused by the offer looks again when it lapses
(no change is announced then). The real :class:`BoardPuller` on a real Redis."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from ateam.agent.loop.board_puller import BoardPuller, board_task_text
from ateam.bus.board import TaskBoard
from ateam.bus.keys import Keys
from ateam.bus.registry import AgentEntry, Heartbeat

P = "proj"


async def failed_by_a(board: TaskBoard, client: aioredis.Redis, keys: Keys) -> str:
    """A task proj/a (running: it beats) took and failed, then retried: offered to it."""
    await Heartbeat(client, keys, AgentEntry(id="proj/a", name="a", project=P)).beat()
    task = await board.add(P, title="flaky", created_by="cli")
    await board.claim(P, task.id, agent="proj/a")
    await board.fail(P, task.id, agent="proj/a", reason="timed out")
    assert (await board.retry(P, task.id, by="cli")).offered_to == "proj/a"
    return task.id


async def test_the_agent_offered_a_task_takes_it_first(
    client: aioredis.Redis, namespace: str
) -> None:
    keys = Keys(namespace)
    board = TaskBoard(client, keys)
    offered = await failed_by_a(board, client, keys)
    await board.add(P, title="more important", priority=9, created_by="cli")
    puller = BoardPuller(board, client, keys, P, "proj/a", enabled=True)

    taken = await puller.next_task()
    assert taken is not None and taken.id == offered and taken.assignee == "proj/a"
    assert "An earlier attempt failed: timed out" in board_task_text(taken)


async def test_a_teammate_refused_by_an_offer_looks_again_when_it_lapses(
    client: aioredis.Redis, namespace: str
) -> None:
    keys = Keys(namespace)
    board = TaskBoard(client, keys, offer_s=1.0)
    offered = await failed_by_a(board, client, keys)
    puller = BoardPuller(board, client, keys, P, "proj/b", enabled=True)
    woken = asyncio.Event()
    puller.on_news = woken.set

    assert await puller.next_task() is None  # offered to proj/a: refused, a look booked
    assert not puller.dirty
    await asyncio.wait_for(woken.wait(), 20)  # nothing announced: only the booking wakes it
    taken = await puller.next_task()
    assert taken is not None and taken.id == offered and taken.assignee == "proj/b"
