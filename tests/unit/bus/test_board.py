"""The team task board against a real Redis (issue 12): atomic claims, dependencies,
ownership of a claim, and orphans of a lost agent put back."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from ateam.bus.board import DETAIL_MAX_BYTES, PRIORITY_LIMIT, TITLE_MAX_CHARS, TaskBoard
from ateam.bus.codec import pack, unpack
from ateam.bus.connection import RedisTarget, make_client
from ateam.bus.keys import Keys
from ateam.errors import BadRequest, TaskBlocked, TaskClaimed, TaskNotFound
from ateam.wire.board import BoardTask, TaskStatus

P = "proj"


@pytest.fixture
def keys(target: RedisTarget) -> Keys:
    return Keys(target.namespace)


@pytest.fixture
def board(client: aioredis.Redis, keys: Keys) -> TaskBoard:
    return TaskBoard(client, keys)


async def stored(client: aioredis.Redis, keys: Keys) -> dict[bytes, bytes]:
    return dict(await client.hgetall(keys.board(P)))


async def test_add_get_and_list_by_priority_then_age(board: TaskBoard) -> None:
    low = await board.add(P, title="write docs", created_by="proj/lead")
    high = await board.add(P, title=" fix the bug ", priority=5, created_by="proj/lead")
    later_low = await board.add(P, title="tidy", detail="d" * 10, created_by="cli")

    assert low.id.startswith("t-") and len(low.id) == 12
    assert high.title == "fix the bug"  # stripped
    assert low.status is TaskStatus.OPEN and low.assignee == "" and low.created > 0
    assert await board.get(P, low.id) == low
    assert await board.get(P, "t-0000000000") is None
    assert [t.id for t in await board.list(P)] == [high.id, low.id, later_low.id]
    assert await board.list(P, status="claimed") == []
    assert await board.list("other") == []


def test_wire_round_trip() -> None:
    task = BoardTask(
        id="t-1",
        project=P,
        title="x",
        status=TaskStatus.CLAIMED,
        created_by="cli",
        created=1,
        updated=2,
        assignee="proj/a",
        depends_on=("t-0",),
    )
    assert BoardTask.from_wire(unpack(pack(task.to_wire()))) == task


async def test_ten_concurrent_claims_one_winner(board: TaskBoard, target: RedisTarget) -> None:
    task = await board.add(P, title="contended", created_by="cli")
    clients = [make_client(target) for _ in range(10)]
    try:
        boards = [TaskBoard(c, Keys(target.namespace)) for c in clients]
        results = await asyncio.gather(
            *(b.claim(P, task.id, agent=f"proj/a{i}") for i, b in enumerate(boards)),
            return_exceptions=True,
        )
    finally:
        for c in clients:
            await c.aclose()
    winners = [r for r in results if isinstance(r, BoardTask)]
    losers = [r for r in results if isinstance(r, TaskClaimed)]
    assert len(winners) == 1 and len(losers) == 9, results
    winner = winners[0].assignee
    assert all(winner in str(loser) and loser.detail["assignee"] == winner for loser in losers)
    now = await board.get(P, task.id)
    assert now is not None and now.status is TaskStatus.CLAIMED and now.assignee == winner


async def test_dependency_blocks_until_done(board: TaskBoard) -> None:
    first = await board.add(P, title="first", created_by="cli")
    second = await board.add(P, title="second", depends_on=[first.id], created_by="cli")

    with pytest.raises(TaskBlocked) as blocked:
        await board.claim(P, second.id, agent="proj/b")
    assert blocked.value.code == "task.blocked"
    assert blocked.value.detail["blocked_by"] == [first.id] and first.id in str(blocked.value)
    assert (await board.get(P, second.id)) == second  # unchanged

    await board.claim(P, first.id, agent="proj/a")
    with pytest.raises(TaskBlocked):  # claimed is not done
        await board.claim(P, second.id, agent="proj/b")
    done = await board.done(P, first.id, agent="proj/a", result="ok")
    assert done.status is TaskStatus.DONE and done.result == "ok"

    claimed = await board.claim(P, second.id, agent="proj/b")
    assert claimed.status is TaskStatus.CLAIMED and claimed.assignee == "proj/b"
    assert claimed.depends_on == (first.id,)


async def test_only_the_assignee_finishes(board: TaskBoard) -> None:
    task = await board.add(P, title="mine", created_by="cli")
    with pytest.raises(TaskClaimed):  # open: nobody's yet
        await board.done(P, task.id, agent="proj/a")
    await board.claim(P, task.id, agent="proj/a")
    before = await board.get(P, task.id)

    with pytest.raises(TaskClaimed) as refused:
        await board.done(P, task.id, agent="proj/b", result="stolen")
    assert refused.value.code == "task.claimed" and "proj/a" in str(refused.value)
    with pytest.raises(TaskClaimed):
        await board.fail(P, task.id, agent="proj/b", reason="no")
    assert await board.get(P, task.id) == before

    failed = await board.fail(P, task.id, agent="proj/a", reason="tests red")
    assert failed.status is TaskStatus.FAILED and failed.reason == "tests red"
    assert failed.assignee == "proj/a" and failed.updated >= failed.created
    with pytest.raises(TaskClaimed):  # finished: no second finish, no new claim
        await board.done(P, task.id, agent="proj/a")
    with pytest.raises(TaskClaimed):
        await board.claim(P, task.id, agent="proj/c")


async def test_reopen_orphans_only_of_dead_assignees(board: TaskBoard) -> None:
    dead = await board.add(P, title="held by the dead", created_by="cli")
    alive = await board.add(P, title="held by the living", created_by="cli")
    finished = await board.add(P, title="finished by the dead", created_by="cli")
    untouched = await board.add(P, title="open", created_by="cli")
    await board.claim(P, dead.id, agent="proj/gone")
    await board.claim(P, alive.id, agent="proj/here")
    await board.claim(P, finished.id, agent="proj/gone")
    await board.done(P, finished.id, agent="proj/gone")

    reopened = await board.reopen_orphans(P, alive={"proj/here"})

    assert [t.id for t in reopened] == [dead.id]
    back = await board.get(P, dead.id)
    assert back is not None and back.status is TaskStatus.OPEN and back.assignee == ""
    assert back.reason == "assignee proj/gone lost (heartbeat)"
    assert (await board.get(P, alive.id)).assignee == "proj/here"  # type: ignore[union-attr]
    assert (await board.get(P, finished.id)).status is TaskStatus.DONE  # type: ignore[union-attr]
    assert (await board.get(P, untouched.id)).status is TaskStatus.OPEN  # type: ignore[union-attr]
    assert await board.reopen_orphans(P, alive=()) == [
        await board.get(P, alive.id)
    ]  # the living one too, once nobody is alive
    # and a reopened task is claimable again
    assert (await board.claim(P, dead.id, agent="proj/next")).assignee == "proj/next"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"title": ""}, "title must not be empty"),
        ({"title": "   "}, "title must not be empty"),
        ({"title": "x" * (TITLE_MAX_CHARS + 1)}, "title is 201 characters"),
        ({"title": "t", "detail": "x" * (DETAIL_MAX_BYTES + 1)}, "detail is"),
        ({"title": "t", "depends_on": ["t-ffffffffff"]}, "no task t-ffffffffff"),
        ({"title": "t", "priority": True}, "priority"),
        ({"title": "t", "depends_on": "t-1"}, "not one string"),
    ],
)
async def test_bad_input_changes_nothing(
    board: TaskBoard,
    client: aioredis.Redis,
    keys: Keys,
    kwargs: dict[str, object],
    message: str,
) -> None:
    existing = await board.add(P, title="there", created_by="cli")
    before = await stored(client, keys)
    with pytest.raises(BadRequest, match=message):
        await board.add(P, created_by="cli", **kwargs)  # type: ignore[arg-type]
    assert await stored(client, keys) == before
    assert [t.id for t in await board.list(P)] == [existing.id]


async def test_unknown_ids_are_not_found(
    board: TaskBoard, client: aioredis.Redis, keys: Keys
) -> None:
    await board.add(P, title="there", created_by="cli")
    before = await stored(client, keys)
    for call in (
        board.claim(P, "t-nope", agent="proj/a"),
        board.done(P, "t-nope", agent="proj/a"),
        board.fail(P, "t-nope", agent="proj/a", reason="x"),
    ):
        with pytest.raises(TaskNotFound) as missing:
            await call
        assert missing.value.code == "task.not_found" and "t-nope" in str(missing.value)
    assert await stored(client, keys) == before
    with pytest.raises(BadRequest):
        await board.list("not a project!")


async def test_a_priority_out_of_range_is_a_bad_request_and_a_bad_record_is_skipped(
    board: TaskBoard, client: aioredis.Redis, keys: Keys
) -> None:
    with pytest.raises(BadRequest, match="priority"):
        await board.add("p", title="huge", priority=10**20, created_by="p/lead")
    edge = await board.add("p", title="edge", priority=PRIORITY_LIMIT, created_by="p/lead")
    claimed = await board.claim("p", edge.id, agent="p/a")
    assert claimed.priority == PRIORITY_LIMIT  # exact after the Lua round trip
    await client.hset(keys.board("p"), "t-garbage", b"\xc1not msgpack")
    assert [t.id for t in await board.list("p")] == [edge.id]
