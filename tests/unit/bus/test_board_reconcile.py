"""Lost claims put back (issue 12): a claim lasts as long as its holder's heartbeat.

Liveness is the registry's own keys, written by a real :class:`Heartbeat`; a lapsed
heartbeat is its ``alive`` key gone, which is what its TTL does.
"""

from __future__ import annotations

import time

import pytest
import redis.asyncio as aioredis

from ateam.bus.board import TaskBoard
from ateam.bus.keys import Keys
from ateam.bus.registry import AgentEntry, Heartbeat
from ateam.client.board import TasksApi
from ateam.errors import BadRequest
from ateam.wire.board import TaskStatus
from tests._wait import async_wait_for

P = "proj"


@pytest.fixture
def keys(client: aioredis.Redis, namespace: str) -> Keys:
    return Keys(namespace)


def board_of(client: aioredis.Redis, keys: Keys, lost_after_s: float = 0.0) -> TaskBoard:
    return TaskBoard(client, keys, lost_after_s=lost_after_s)


async def claims(client: aioredis.Redis, keys: Keys) -> dict[str, str]:
    raw = await client.hgetall(f"{keys.board(P)}:claims")
    return {k.decode(): v.decode() for k, v in raw.items()}


async def beating(client: aioredis.Redis, keys: Keys, agent: str) -> Heartbeat:
    project, name = agent.split("/")
    heartbeat = Heartbeat(client, keys, AgentEntry(id=agent, name=name, project=project))
    await heartbeat.beat()
    return heartbeat


async def test_only_claims_of_holders_without_heartbeat_or_restart_go_back(
    client: aioredis.Redis, keys: Keys
) -> None:
    board = board_of(client, keys)
    await beating(client, keys, "proj/here")
    restarting = await beating(client, keys, "proj/restarting")
    await restarting.grace(30)
    await restarting.leave()  # a planned restart leaves the registry, marker kept
    ids = {}
    for holder in ("proj/here", "proj/restarting", "proj/gone", "proj/me"):
        task = await board.add(P, title=f"held by {holder}", created_by="cli")
        await board.claim(P, task.id, agent=holder)
        ids[holder] = task.id
    finished = await board.add(P, title="finished by the gone", created_by="cli")
    await board.claim(P, finished.id, agent="proj/gone")
    await board.done(P, finished.id, agent="proj/gone", result="ok")
    untouched = await board.add(P, title="open", created_by="cli")

    reopened = await board.reconcile(P, keep={"proj/me"})

    assert [t.id for t in reopened] == [ids["proj/gone"]]
    back = await board.get(P, ids["proj/gone"])
    assert back is not None and back.status is TaskStatus.OPEN and back.assignee == ""
    assert back.reason == "assignee proj/gone lost (heartbeat)"
    for holder in ("proj/here", "proj/restarting", "proj/me"):
        kept = await board.get(P, ids[holder])
        assert kept is not None and kept.status is TaskStatus.CLAIMED and kept.assignee == holder
    assert (await board.get(P, finished.id)).status is TaskStatus.DONE  # type: ignore[union-attr]
    assert (await board.get(P, untouched.id)).status is TaskStatus.OPEN  # type: ignore[union-attr]
    assert await claims(client, keys) == {
        ids["proj/here"]: "proj/here",
        ids["proj/restarting"]: "proj/restarting",
        ids["proj/me"]: "proj/me",
    }
    assert await board.reconcile(P, keep={"proj/me"}) == []  # nothing more to do

    # The heartbeat lapses (its TTL ends the alive key): the claim goes back too, and
    # the reopened task is claimable again.
    await client.delete(keys.alive("proj/here"))
    assert [t.id for t in await board.reconcile(P)] == sorted([ids["proj/here"], ids["proj/me"]])
    again = await board.claim(P, ids["proj/here"], agent="proj/next")
    assert again.assignee == "proj/next" and again.reason == ""


async def test_a_holder_that_never_beats_has_the_ttl_to_show_up(
    client: aioredis.Redis, keys: Keys
) -> None:
    board = board_of(client, keys, lost_after_s=0.5)
    task = await board.add(P, title="claimed by a script", created_by="cli")
    claimed_at = time.monotonic()
    await board.claim(P, task.id, agent="proj/ghost")

    assert await board.reconcile(P) == []  # young: not yet
    assert (await board.get(P, task.id)).status is TaskStatus.CLAIMED  # type: ignore[union-attr]
    reopened = await async_wait_for(lambda: board.reconcile(P), 5.0, "the ghost's claim to lapse")
    assert time.monotonic() - claimed_at >= 0.5
    assert [t.id for t in reopened] == [task.id] and reopened[0].status is TaskStatus.OPEN


async def test_the_claims_index_follows_every_change(client: aioredis.Redis, keys: Keys) -> None:
    board = board_of(client, keys)
    done = await board.add(P, title="d", created_by="cli")
    failed = await board.add(P, title="f", created_by="cli")
    await board.claim(P, done.id, agent="proj/a")
    await board.claim(P, failed.id, agent="proj/b")
    assert await claims(client, keys) == {done.id: "proj/a", failed.id: "proj/b"}
    await board.done(P, done.id, agent="proj/a")
    await board.fail(P, failed.id, agent="proj/b", reason="no")
    assert await claims(client, keys) == {}
    assert await board.reconcile(P) == []


async def test_a_stale_index_entry_never_undoes_a_newer_claim(
    client: aioredis.Redis, keys: Keys
) -> None:
    board = board_of(client, keys)
    await beating(client, keys, "proj/next")
    task = await board.add(P, title="re-taken", created_by="cli")
    await board.claim(P, task.id, agent="proj/next")
    # As if the index were read while proj/gone still held it.
    await client.hset(f"{keys.board(P)}:claims", task.id, "proj/gone")

    assert await board.reconcile(P) == []
    still = await board.get(P, task.id)
    assert still is not None and still.assignee == "proj/next" and still.reason == ""
    assert await claims(client, keys) == {task.id: "proj/next"}  # set right on the way


async def test_listing_through_the_client_reconciles_first(
    client: aioredis.Redis, keys: Keys
) -> None:
    tasks = TasksApi(board_of(client, keys))
    task = await tasks.add(P, title="held by the dead", created_by="cli")
    await tasks.claim(P, task.id, agent="proj/dead")

    [listed] = await tasks.ls(P)

    assert (
        listed.status is TaskStatus.OPEN and listed.reason == "assignee proj/dead lost (heartbeat)"
    )
    assert await tasks.ls(P, status="claimed") == []
    with pytest.raises(BadRequest, match="status must be one of"):
        await tasks.ls(P, status="bogus")
