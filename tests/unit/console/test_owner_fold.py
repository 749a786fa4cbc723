"""A one-call claim's come and go (``ateam send``) is not shown, live or replayed."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator

import pytest

from ateam.agent.runtime.process import Agent
from ateam.bus.connection import RedisTarget
from ateam.bus.events import Event
from ateam.client import Team
from ateam.console.controller import ConsoleController
from ateam.console.owners import OwnerFold
from ateam.console.plain import PlainView
from tests._wait import async_wait_for
from tests.unit.console.test_controller import RecordingView

AGENT = "proj/zeus"


def change(offset: int, owner: str | None, previous: str | None, kind: str | None) -> Event:
    data = {"owner": owner, "previous": previous}
    if kind is not None or owner is None:
        data["kind"] = kind
    return Event(AGENT, offset, "ownership", 0.0, data)


def shown(fold: OwnerFold, events: list[Event]) -> list[str | None]:
    return [e.data["owner"] for e in events if fold.shown(e) and e.type == "ownership"]


def test_a_one_call_claim_and_its_release_are_folded_away() -> None:
    fold = OwnerFold()
    events = [
        change(1, "send:box:1:a", None, "call"),
        Event(AGENT, 2, "task.start", 0.0, {"task_id": "q-1", "text": "hi"}),
        change(3, None, "send:box:1:a", None),
        # Back to back: one call's claim noticed straight after another's.
        change(4, "send:box:2:b", None, "call"),
        change(5, "stop:box:3:c", "send:box:2:b", "call"),
        change(6, None, "stop:box:3:c", None),
    ]
    assert shown(fold, events) == []
    assert fold.shown(events[1])  # everything else is shown


def test_a_console_claim_shows_and_a_run_that_changes_the_owner_shows_once() -> None:
    fold = OwnerFold()
    events = [
        change(1, "console:box:9:x", None, "console"),
        # A script took it over from the console and let it go: the console lost it.
        change(2, "send:box:1:a", "console:box:9:x", "call"),
        change(3, None, "send:box:1:a", None),
        change(4, "console:box:7:y", None, "console"),
    ]
    assert shown(fold, events) == ["console:box:9:x", None, "console:box:7:y"]


def test_events_of_an_agent_without_claim_kinds_fold_by_session_id() -> None:
    fold = OwnerFold()
    old = [
        Event(AGENT, 1, "ownership", 0.0, {"owner": "send:box:1:a", "previous": None}),
        Event(AGENT, 2, "ownership", 0.0, {"owner": None, "previous": "send:box:1:a"}),
        Event(AGENT, 3, "ownership", 0.0, {"owner": "console:box:9:x", "previous": None}),
    ]
    assert shown(fold, old) == ["console:box:9:x"]


@pytest.fixture
async def sender(target: RedisTarget) -> AsyncIterator[Team]:
    async with await Team.connect(target, session="send:box:1:abc") as team:
        yield team


async def test_sends_leave_no_owner_lines_live_or_on_attach(
    target: RedisTarget, agent: Agent, sender: Team
) -> None:
    watching = RecordingView()
    watcher = ConsoleController(target, watching)
    await watcher.start()
    try:
        await watcher.execute(f"/tail {AGENT}")
        for text in ("one", "two", "three"):
            sent = await sender.agent(AGENT).send(text, source="cli")  # a one-call claim
            # The agent notices the release on its next look at the claim (a heartbeat
            # or a call): looked at now rather than waited for.
            await agent.parts.upkeep.current_owner()
            await watching.wait_for(
                lambda sent=sent: any(
                    e.type == "task.end" and e.task_id == sent.id for e in watching.events
                )
            )
        kinds = [e.type for e in watching.events]
        assert kinds.count("task.start") == 3
        assert "ownership" not in kinds

        # A console attaching later replays the agent's recent past without the churn.
        out = io.StringIO()
        console = ConsoleController(target, PlainView(asyncio.Queue(), out))
        await console.start()
        try:
            await console.execute(f"/attach {AGENT}")
            await agent.parts.upkeep.current_owner()  # the console's own claim, noticed
            mine = f"[A:{AGENT}] owner is now {console.session}"
            await async_wait_for(lambda: mine in out.getvalue())
        finally:
            await console.aclose()
        replayed = out.getvalue()
        assert replayed.count(f"[A:{AGENT}] --- task ") == 6  # three starts, three ends
        assert replayed.count("owner is now") == 1
        owners = [e.data["owner"] for e in watching.events if e.type == "ownership"]
        assert owners == [console.session]
    finally:
        await watcher.aclose()
