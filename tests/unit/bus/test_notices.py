"""Teammates' notices against a real Redis (issue 26): the bounded store, who is told,
and what a receiving agent's context holds and when it lets go of a notice."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
import redis.asyncio as aioredis

from ateam.agent.context.notices import NOTICES_HEADER, NoticeFeed
from ateam.agent.loop.notices import Notifier
from ateam.bus.board import TaskBoard
from ateam.bus.codec import pack
from ateam.bus.connection import RedisTarget
from ateam.bus.keys import Keys
from ateam.bus.notices import NOTICES_MAX, NoticeBox
from ateam.config.schema import AgentSpec
from ateam.wire.board import BoardTask
from ateam.wire.notices import NoticeKind, TeamNotice, one_line

P = "proj"


@pytest.fixture
def keys(target: RedisTarget) -> Keys:
    return Keys(target.namespace)


@pytest.fixture
def box(client: aioredis.Redis, keys: Keys) -> NoticeBox:
    return NoticeBox(client, keys)


def notice(n: int, kind: NoticeKind = NoticeKind.FINISHED) -> TeamNotice:
    return TeamNotice(
        id=f"n{n}", sender="proj/mate", kind=kind, at=float(n), board_task=f"t-{n}", title="x"
    )


class Recorder:
    """An agent's event stream, as a list."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, etype: str, **fields: Any) -> int:
        self.events.append((etype, fields))
        return len(self.events)


async def test_the_store_keeps_the_newest_in_order_and_consumes_only_what_was_read(
    box: NoticeBox, client: aioredis.Redis, keys: Keys
) -> None:
    for n in range(NOTICES_MAX + 5):
        await box.post("proj/lead", notice(n))
    waiting = await box.pending("proj/lead")
    assert [w.id for w in waiting] == [f"n{n}" for n in range(5, NOTICES_MAX + 5)]
    assert 0 < await client.ttl(keys.notices("proj/lead"))

    await client.rpush(keys.notices("proj/lead"), b"not msgpack", pack({"id": "half"}))
    read = await box.pending("proj/lead")
    assert len(read) == NOTICES_MAX  # unreadable entries are skipped, not fatal
    await box.post("proj/lead", notice(999))  # arrives between the read and the removal
    await box.consume("proj/lead", read)
    assert [w.id for w in await box.pending("proj/lead")] == ["n999"]
    assert await box.pending("proj/other") == []


async def test_a_post_wakes_the_receivers_channel(
    box: NoticeBox, client: aioredis.Redis, keys: Keys
) -> None:
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    await pubsub.subscribe(keys.notices_channel("proj/lead"))
    await box.post("proj/lead", notice(1))
    message = None
    for _ in range(10):  # the subscription's own confirmation comes first, as None
        message = await pubsub.get_message(timeout=1)
        if message is not None:
            break
    assert message is not None and b"n1" in message["data"]
    await pubsub.aclose()


async def finished_task(board: TaskBoard, by: str, *, ok: bool = True) -> BoardTask:
    task = await board.add(P, title="port\nthe   parser", created_by=by)
    await board.claim(P, task.id, agent="proj/mate")
    if ok:
        return await board.done(P, task.id, agent="proj/mate", result="done: key sk-live-1\n" * 40)
    return await board.fail(P, task.id, agent="proj/mate", reason="tests fail")


async def test_the_subscribers_and_the_creator_hear_a_tasks_end_once_each(
    box: NoticeBox, client: aioredis.Redis, keys: Keys
) -> None:
    board = TaskBoard(client, keys)
    stream = Recorder()
    notifier = Notifier(
        box, "proj/mate", ("lead", "mate", "lead"), stream, lambda s: s.replace("sk-live-1", "****")
    )
    mine = await finished_task(board, "proj/lead")  # the lead is subscriber and creator
    await notifier.finished(mine)
    [told] = await box.pending("proj/lead")
    assert told.kind is NoticeKind.FINISHED and told.board_task == mine.id
    assert told.title == "port the parser"  # one line
    assert "\n" not in told.text and len(told.text) <= 200 and "sk-live-1" not in told.text
    assert await box.pending("proj/mate") == []  # never itself
    assert stream.events[-1][0] == "team.notice" and stream.events[-1][1]["to"] == ["proj/lead"]

    other = await finished_task(board, "proj/planner", ok=False)  # another agent added it
    await notifier.finished(other)
    [failed] = await box.pending("proj/planner")
    assert failed.kind is NoticeKind.FAILED and failed.text == "tests fail"
    assert len(await box.pending("proj/lead")) == 2

    quiet = Notifier(box, "proj/mate", (), stream, str)
    person = await finished_task(board, "cli")  # a person has no model to tell
    await quiet.finished(person)
    assert stream.events[-1][1]["to"] == []  # consoles still show it
    for by in ("mcp:claude", "other/lead"):  # an outsider, another project's agent
        await quiet.finished(await finished_task(board, by))
        assert stream.events[-1][1]["to"] == []

    await quiet.idle()  # nobody asked: not even a line on the stream
    assert stream.events[-1][1]["kind"] == "finished"
    await notifier.idle()
    assert (await box.pending("proj/lead"))[-1].kind is NoticeKind.IDLE

    # A task that ended elsewhere, or never ended here, is no news of this agent.
    before = len(stream.events)
    await notifier.finished(None)
    reopened = await board.add(P, title="y", created_by="proj/lead")
    await notifier.finished(reopened)
    assert len(stream.events) == before


async def test_a_tasks_end_replayed_after_a_crash_is_told_once_even_if_consumed_meanwhile(
    box: NoticeBox, client: aioredis.Redis, keys: Keys
) -> None:
    # kill -9 after the board was marked and the notice sent, before the queue item was
    # done: the restarted agent reads the board again and tells the same end again.
    board = TaskBoard(client, keys)
    stream = Recorder()
    notifier = Notifier(box, "proj/mate", ("lead",), stream, str)
    task = await finished_task(board, "cli", ok=False)
    await notifier.finished(task)
    again = Notifier(box, "proj/mate", ("lead",), stream, str)  # the restarted process
    await again.finished(await board.get(P, task.id))
    [told] = await box.pending("proj/lead")
    assert told.board_task == task.id
    assert [e for e, _ in stream.events] == ["team.notice"]

    await box.consume("proj/lead", [told])  # the lead's next task took it already
    await again.finished(await board.get(P, task.id))
    assert await box.pending("proj/lead") == []
    assert not await box.post("proj/lead", told)  # the store refuses the id itself

    # The same task ending the same way again later (reopened) is news again.
    await board.reopen(P, task.id, by="cli")
    await board.claim(P, task.id, agent="proj/mate")
    await again.finished(await board.fail(P, task.id, agent="proj/mate", reason="broke"))
    [later] = await box.pending("proj/lead")
    assert later.kind is NoticeKind.FAILED and later.id != told.id


async def test_a_receivers_context_shows_notices_until_the_next_task_consumes_them(
    box: NoticeBox, client: aioredis.Redis, keys: Keys
) -> None:
    stream = Recorder()
    feed = NoticeFeed(box, client, keys, "proj/lead", stream)
    await box.post("proj/lead", notice(1))  # waiting before the agent starts
    listening = asyncio.create_task(feed.listen())
    try:
        await asyncio.wait_for(feed.listening.wait(), 5)
        assert "n1" in feed.inbox and "t-1" in feed.render()
        await box.post("proj/lead", notice(2, NoticeKind.IDLE))  # pushed while it runs
        for _ in range(100):
            if "n2" in feed.inbox:
                break
            await asyncio.sleep(0.05)
        assert [e[1]["id"] for e in stream.events] == ["n1", "n2"]  # each arrival once

        await feed.begin_task()
        rendered = feed.render()
        assert rendered.startswith(NOTICES_HEADER)
        assert "- proj/mate finished board task t-1 (x)" in rendered
        assert "- proj/mate is idle: nothing queued" in rendered
        assert await box.pending("proj/lead") == []  # shown to this task: gone from the bus

        await box.post("proj/lead", notice(3))  # mid-task: shown from the next call on
        await feed.catch_up()
        assert "t-3" in feed.render() and "t-1" in feed.render()
        await feed.begin_task()
        assert "t-1" not in feed.render() and "t-3" in feed.render()
        await feed.begin_task()
        assert feed.render() == ""
        assert len(stream.events) == 3
    finally:
        listening.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listening


def test_notify_names_are_checked_like_agent_names() -> None:
    spec = AgentSpec.model_validate({"team": {"notify": ["lead", "lead", "qa-1"]}})
    assert spec.team.notify == ("lead", "qa-1")
    with pytest.raises(ValueError, match="invalid agent name"):
        AgentSpec.model_validate({"team": {"notify": ["proj/lead"]}})


def test_one_line_flattens_and_clips() -> None:
    assert one_line("a\n  b\tc") == "a b c"
    assert one_line("x" * 300) == "x" * 199 + "…"
