"""The client against a real bus and an in-process agent: the calls every front end makes."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from ateam.agent.runtime.process import Agent
from ateam.client import (
    AgentHandle,
    AgentStatus,
    Event,
    EventType,
    Gap,
    NoticeKind,
    OwnerKind,
    Target,
    Team,
    secrets_notice,
)
from ateam.config import standalone_agent
from ateam.errors import AgentNotFound, OwnershipDenied, RedisUnavailable
from ateam.providers import EchoProvider

SECRET = "ghp_" + "a1B2c3D4e5F6" * 3
"""A GitHub token by its shape: a built-in pattern masks it."""


async def until_task_end(handle: AgentHandle, task_id: str, start: int = 1) -> list[Event]:
    """Every event of the agent from ``start`` up to the end of ``task_id``."""
    seen: list[Event] = []
    async with asyncio.timeout(10):
        async for item in handle.tail(start):
            assert not isinstance(item, Gap)
            seen.append(item)
            if item.type == EventType.TASK_END and item.task_id == task_id:
                return seen
    raise AssertionError("the tail ended")


def answer(events: list[Event]) -> str:
    return "".join(str(e.data.get("text", "")) for e in events if e.type == EventType.TOKEN)


async def test_agents_and_status(agent: Agent, team: Team) -> None:
    agents = await team.agents()
    assert [a.id for a in agents] == ["proj/zeus"]
    status = await team.status("proj/zeus")
    assert isinstance(status, AgentStatus)
    assert status.connected and status.entry.project == "proj"
    handle_status = await team.agent("proj/zeus").status()
    # The same agent through its handle (its state may move on between the two reads).
    assert handle_status is not None
    assert (handle_status.id, handle_status.entry.cwd) == (status.id, status.entry.cwd)
    assert await team.status("proj/nobody") is None
    assert await team.has_events("proj/zeus")
    assert not await team.has_events("proj/nobody")


async def test_connect_refuses_an_unreachable_bus() -> None:
    with pytest.raises(RedisUnavailable):
        await Team.connect(Target("redis://127.0.0.1:1/0", "test"))


async def test_send_masks_secrets_and_tail_shows_the_answer(agent: Agent, team: Team) -> None:
    zeus = team.agent("proj/zeus")
    sent = await zeus.send(f"hello {SECRET}")
    assert sent.redacted == 1 and sent.created
    assert secrets_notice(sent.redacted) is not None
    events = await until_task_end(zeus, sent.id)
    assert SECRET not in answer(events)
    assert answer(events).startswith("echo: hello ")
    offsets = [e.offset for e in events]
    assert offsets == list(range(1, len(offsets) + 1))
    # The one-call claim is gone again.
    assert await zeus.owner() is None


async def test_a_request_id_is_queued_once(agent: Agent, team: Team) -> None:
    zeus = team.agent("proj/zeus")
    rid = uuid.uuid4().hex
    first = await zeus.send("once", request_id=rid)
    again = await zeus.send("once", request_id=rid)
    assert again.id == first.id
    assert first.created and not again.created
    await until_task_end(zeus, first.id)
    turns = await zeus.history()
    assert [t.content for t in turns if t.role == "user"] == ["once"]


async def test_tail_from_an_offset_without_follow(agent: Agent, team: Team) -> None:
    zeus = team.agent("proj/zeus")
    sent = await zeus.send("one")
    everything = await until_task_end(zeus, sent.id)
    later = [item async for item in zeus.tail(3, follow=False)]
    assert all(isinstance(item, Event) for item in later)
    assert next(e.offset for e in later if isinstance(e, Event)) == 3
    expected = [e for e in everything if e.offset >= 3]
    assert later[: len(expected)] == expected  # events after the task's end may follow


async def test_multi_agent_tail(agent: Agent, team: Team) -> None:
    tail = team.tail()
    tail.add("proj/zeus", 0)
    assert tail.agents == ["proj/zeus"]
    sent = await team.agent("proj/zeus").send("many")
    async with asyncio.timeout(10):
        async for item in tail:
            assert isinstance(item, Event)
            if item.type == EventType.TASK_END and item.task_id == sent.id:
                break
    position = tail.position("proj/zeus")
    assert position is not None and position >= item.offset  # the end of the batch
    assert tail.trusted("proj/zeus") == position
    tail.remove("proj/zeus")
    assert tail.agents == []


async def test_attach_holds_and_releases(agent: Agent, team: Team, target: Target) -> None:
    zeus = team.agent("proj/zeus")
    async with zeus.attach() as attached:
        assert attached.previous is None
        assert zeus.held
        owner = await zeus.owner()
        assert owner is not None and owner.session == team.session
        assert owner.kind == OwnerKind.CONSOLE
        # As the holder, changing calls need no claim; the session's token is enough.
        sent = await attached.send("as the holder", claim=False)
        await until_task_end(zeus, sent.id)
        async with await Team.connect(target, takeover_grace_s=0.1) as other:
            with pytest.raises(OwnershipDenied):
                await other.agent("proj/zeus").send("not mine")
    assert not zeus.held
    assert await zeus.owner() is None


async def test_takeover(agent: Agent, team: Team, target: Target) -> None:
    zeus = team.agent("proj/zeus")
    await zeus.acquire()
    notices = await team.subscribe()
    try:
        async with await Team.connect(target, takeover_grace_s=0.1) as other:
            async with other.agent("proj/zeus").attach(takeover=True) as taken:
                assert taken.previous is not None
                assert taken.previous.session == team.session
                async with asyncio.timeout(5):
                    async for notice in notices:
                        if notice.kind == NoticeKind.SESSION and notice.event == "lost":
                            break
                assert notice.agent == "proj/zeus" and notice.data["by"] == other.session
                assert not await zeus.refresh()
                with pytest.raises(OwnershipDenied):
                    await zeus.call("interrupt")
    finally:
        await notices.aclose()


async def test_registry_notices(team: Team, target: Target, tmp_path: Path) -> None:
    notices = await team.subscribe()
    a = Agent(standalone_agent("proj", "hera", tmp_path), target, EchoProvider())
    await a.start()
    try:
        async with asyncio.timeout(5):
            async for notice in notices:
                if notice.kind == NoticeKind.REGISTRY and notice.event == "join":
                    break
        assert notice.agent == "proj/hera"
    finally:
        await a.stop()
        await notices.aclose()


async def test_cancel_interrupt_and_stop(team: Team, target: Target, tmp_path: Path) -> None:
    hera = Agent(standalone_agent("proj", "hera", tmp_path), target, EchoProvider())
    await hera.start()

    async def run_until_asked() -> None:  # what Agent.run does around its work
        await hera._stop.wait()
        await hera.stop()

    running = asyncio.create_task(run_until_asked())
    try:
        handle = team.agent("proj/hera")
        assert await handle.cancel() is None  # idle
        assert await handle.interrupt() is None
        assert await handle.cancel(hard=True) is None
        assert await handle.stop(wait=10)
        assert await team.status("proj/hera") is None
        with pytest.raises(AgentNotFound):
            await handle.send("anyone there?")
    finally:
        hera.request_shutdown()
        await running


async def test_history(agent: Agent, team: Team) -> None:
    zeus = team.agent("proj/zeus")
    sent = await zeus.send("remember me")
    await until_task_end(zeus, sent.id)
    turns = await zeus.history(2)
    assert [(t.role, t.content) for t in turns] == [
        ("user", "remember me"),
        ("assistant", "echo: remember me"),
    ]


async def test_plan(agent: Agent, team: Team) -> None:
    plan = team.agent("proj/zeus").plan
    assert await plan.read() == ""
    written = await plan.write(f"1. deploy with {SECRET}\n")
    assert written.redacted == 1
    appended = await plan.append("2. celebrate")
    assert appended.bytes > written.bytes
    text = await plan.read()
    assert SECRET not in text and "2. celebrate" in text
    full = await plan.get()
    assert full.text == text and full.path.endswith("plan.md") and full.bytes == appended.bytes
    assert await plan.delete()
    assert not await plan.delete()


async def test_kb_ingest_search_list(agent: Agent, team: Team, tmp_path: Path) -> None:
    notes = tmp_path / "notes.md"
    notes.write_text("# Deploys\nRoll back with make rollback.\n")
    kb = team.agent("proj/zeus").kb
    progress: list[tuple[int, int]] = []
    report = await kb.ingest(
        "agent", [str(notes)], on_progress=lambda p: progress.append((p.done, p.total))
    )
    assert len(report["ingested"]) == 1
    assert progress and progress[-1] == (1, 1)
    docs = await kb.list("agent")
    assert [d["path"] for d in docs] == [report["ingested"][0]["path"]]
    hits = await kb.search("agent", "how do I roll back a deploy", k=3)
    assert hits and hits[0]["doc_id"] == docs[0]["doc_id"]


async def test_context_post_and_ls(team: Team) -> None:
    item = await team.context.post(
        "proj", type="decision", title=f"use {SECRET} nowhere", urgency="attention"
    )
    assert SECRET not in item.title
    items = await team.context.ls("proj")
    assert [i.id for i in items] == [item.id]
    assert await team.context.get("proj", item.id) == item
    assert [i.id for i in await team.context.search("proj", "nowhere")] == [item.id]
    assert await team.context.ls("other") == []


async def test_context_post_is_a_notice(team: Team) -> None:
    notices = await team.subscribe()
    try:
        item = await team.context.post("proj", type="alert", title="disk full", urgency="blocking")
        async with asyncio.timeout(5):
            async for notice in notices:
                if notice.kind == NoticeKind.CONTEXT:
                    break
        assert notice.event == "post" and notice.data["id"] == item.id
    finally:
        await notices.aclose()


async def test_bootstrap_token(team: Team, target: Target) -> None:
    from ateam.client import redeem_bootstrap

    token = await team.issue_bootstrap("proj/far", {"model": "echo"})
    record = await redeem_bootstrap(target, token, "proj/far")
    assert record["agent_id"] == "proj/far" and record["spec"] == {"model": "echo"}
