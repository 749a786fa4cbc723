"""The console controller and plain view, driven directly against an in-process agent."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from ateam.agent.runtime.process import Agent
from ateam.bus.codec import pack
from ateam.bus.connection import RedisTarget
from ateam.bus.events import Event, Gap
from ateam.config import standalone_agent
from ateam.console.controller import ConsoleController
from ateam.console.plain import PlainView
from ateam.errors import AgentNotFound, OwnershipDenied, UsageError
from ateam.providers import EchoProvider
from tests._wait import async_wait_for


class RecordingView:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self.gaps: list[Gap] = []
        self.lines: list[str] = []
        self.banners: list[str] = []
        self.answers: asyncio.Queue[str] = asyncio.Queue()
        self.changed = asyncio.Event()

    def event(self, event: Event) -> None:
        self.events.append(event)
        self.changed.set()

    def gap(self, gap: Gap) -> None:
        self.gaps.append(gap)

    def unsettled(self, agent: str) -> int | None:
        return None

    def info(self, text: str, agent: str | None = None) -> None:
        self.lines.append(text)

    def banner(self, text: str, *, level: str = "info") -> None:
        self.banners.append(text)
        self.changed.set()

    def table(self, rows: list[dict[str, Any]], columns: list[str]) -> None:
        self.lines.extend(str(row["id"]) + " " + str(row["state"]) for row in rows)

    async def ask(self, question: str) -> str:
        self.lines.append(question)
        return await self.answers.get()

    async def wait_for(self, predicate: Any, timeout: float = 5.0) -> None:
        async def loop() -> None:
            while not predicate():
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(loop(), timeout)


@pytest.fixture
async def agent(target: RedisTarget, tmp_path: Path) -> AsyncIterator[Agent]:
    config = standalone_agent("proj", "zeus", tmp_path)
    a = Agent(config, target, EchoProvider())
    await a.start()
    yield a
    await a.stop()


@pytest.fixture
async def console(target: RedisTarget) -> AsyncIterator[tuple[ConsoleController, RecordingView]]:
    view = RecordingView()
    c = ConsoleController(target, view)
    await c.start()
    yield c, view
    await c.aclose()


async def test_attach_type_and_see_the_answer(
    agent: Agent, console: tuple[ConsoleController, RecordingView]
) -> None:
    c, view = console
    await c.execute("/attach zeus")  # a bare name resolves to proj/zeus
    assert c.attached == "proj/zeus"
    await c.execute("hello there")
    await view.wait_for(lambda: any(e.type == "task.end" for e in view.events))
    text = "".join(e.data.get("text", "") for e in view.events if e.type == "token")
    assert text == "echo: hello there"
    await c.wait_for_pending()
    await c.execute("/history 2")
    assert view.lines[-2:] == ["user: hello there", "assistant: echo: hello there"]
    offsets = [e.offset for e in view.events]
    assert offsets == sorted(set(offsets))
    assert c.offsets.get("proj/zeus") == offsets[-1]


async def test_second_console_is_read_only_after_takeover(
    agent: Agent, target: RedisTarget, console: tuple[ConsoleController, RecordingView]
) -> None:
    first, first_view = console
    await first.execute("/attach proj/zeus")
    second = ConsoleController(target, RecordingView())
    second.ownership._grace_s = 0.1
    await second.start()
    try:
        with pytest.raises(OwnershipDenied):
            await second.execute("/attach proj/zeus")
        await second.execute("/attach proj/zeus --takeover")
        await first_view.wait_for(lambda: any("read-only" in b for b in first_view.banners))
        assert first.read_only
        with pytest.raises(OwnershipDenied):
            await first.execute("still mine?")
        # Even bypassing the console's own check, the agent refuses the old session.
        with pytest.raises(OwnershipDenied):
            await first.rpc.call("proj/zeus", "input", {"text": "sneaky"})
        await second.execute("from the new owner")
        await second.wait_for_pending()
    finally:
        await second.aclose()


async def test_a_forged_takeover_notice_does_not_silence_the_owner(
    agent: Agent, target: RedisTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ateam.console.session as controller_mod

    monkeypatch.setattr(controller_mod, "OWNER_REFRESH_S", 0.1)
    monkeypatch.setattr(controller_mod, "TAKEOVER_GRACE_S", 0.1)
    view = RecordingView()
    c = ConsoleController(target, view)
    await c.start()
    try:
        await c.execute("/attach proj/zeus")
        # Anyone who can reach Redis can publish on a console's channel.
        notice = {"event": "lost", "agent": "proj/zeus", "by": "console:mallory"}
        await agent.parts.client.publish(c.keys.console_channel(c.session), pack(notice))
        await view.wait_for(lambda: any("read-only" in b for b in view.banners))
        # The ownership record still names this console: it writes again.
        await view.wait_for(lambda: any("writes again" in b for b in view.banners))
        assert not c.read_only
        await c.execute("still the writer")
        await c.wait_for_pending()
    finally:
        await c.aclose()


async def test_queue_clear_needs_confirmation(
    agent: Agent, console: tuple[ConsoleController, RecordingView]
) -> None:
    c, view = console
    await c.execute("/attach proj/zeus")
    agent.parts.worker.enqueue("pending work", source="test")
    view.answers.put_nowait("no")
    await c.execute("/queue clear")
    assert "queue clear cancelled" in view.lines
    await view.answers.put("yes")
    await c.execute("/queue clear")
    assert any(line.startswith("cleared") for line in view.lines)


async def test_bad_commands_have_codes(
    agent: Agent, console: tuple[ConsoleController, RecordingView]
) -> None:
    c, _ = console
    with pytest.raises(UsageError) as err:
        await c.execute("/frobnicate")
    assert err.value.code == "bad_request"
    with pytest.raises(UsageError):
        await c.execute("text while not attached")
    with pytest.raises(AgentNotFound):
        await c.execute("/attach proj/nobody")
    with pytest.raises(UsageError):
        await c.execute('/attach "unterminated')


async def test_join_and_leave_banners(
    target: RedisTarget, tmp_path: Path, console: tuple[ConsoleController, RecordingView]
) -> None:
    _, view = console
    a = Agent(standalone_agent("proj", "hera", tmp_path), target, EchoProvider())
    await a.start()
    await view.wait_for(lambda: "agent proj/hera joined" in view.banners)
    await a.stop()
    await view.wait_for(lambda: "agent proj/hera left" in view.banners)


def test_plain_view_joins_tokens_into_prefixed_lines() -> None:
    out = io.StringIO()
    view = PlainView(asyncio.Queue(), out)
    for offset, text in enumerate(["echo: hel", "lo\nsecond ", "line"], start=1):
        view.event(Event("p/a", offset, "token", 0.0, {"text": text, "task_id": "q-1"}))
    view.event(Event("p/a", 4, "task.end", 0.0, {"ok": True, "task_id": "q-1", "duration_s": 1}))
    view.gap(Gap("p/a", 5, 9))
    assert out.getvalue().splitlines() == [
        "[A:p/a] echo: hello",
        "[A:p/a] second line",
        "[A:p/a] --- task q-1 done (1s)",
        "[A:p/a] tail gap: events 5..9 are no longer available",
    ]


def test_plain_view_shows_binary_output_without_breaking() -> None:
    out = io.StringIO()
    view = PlainView(asyncio.Queue(), out)
    view.event(Event("p/a", 1, "token", 0.0, {"bin": b"\x80\xff\n\n"}))
    view.event(Event("p/a", 2, "task.end", 0.0, {"ok": False, "error": "interrupted"}))
    lines = out.getvalue().splitlines()
    assert lines == [
        "[A:p/a] \ufffd\ufffd",
        "[A:p/a] ",
        "[A:p/a] --- task None failed: interrupted",
    ]


def test_plain_view_reports_where_an_unfinished_line_starts() -> None:
    view = PlainView(asyncio.Queue(), io.StringIO())

    def token(offset: int, text: str) -> None:
        view.event(Event("p/a", offset, "token", 0.0, {"text": text}))

    token(5, "hel")
    assert view.unsettled("p/a") == 5
    token(6, "lo")
    assert view.unsettled("p/a") == 5  # the line still began at 5
    token(7, "!\nwor")
    assert view.unsettled("p/a") == 7
    token(8, "ld\n")
    assert view.unsettled("p/a") is None


async def test_console_saves_its_place_before_a_half_shown_line(
    agent: Agent, target: RedisTarget
) -> None:
    """A console killed mid-line must replay that line whole, not lose its start."""
    view = PlainView(asyncio.Queue(), io.StringIO())
    c = ConsoleController(target, view)
    await c.start()
    try:
        await c.execute("/attach proj/zeus")
        await agent.parts.upkeep.current_owner()  # its ownership event comes first, not mid-line
        first = agent.parts.events.emit("token", text="first line\nsecond ha")
        agent.parts.events.emit("token", text="lf")
        await agent.parts.events.flush(5)
        await async_wait_for(
            lambda: c.tail.position("proj/zeus") == agent.parts.events.last_offset,
            5,
            "the tail to reach the last event",
            interval=0.05,
        )
        saved = c.offsets.get("proj/zeus")
        assert saved == first - 1  # just before the half-shown line
    finally:
        c.tail.remove("proj/zeus")  # simulate a crash: nothing flushed on the way out
        await c.aclose()


async def test_a_malformed_event_does_not_stop_the_console(
    agent: Agent, console: tuple[ConsoleController, RecordingView]
) -> None:
    c, view = console
    await c.execute("/tail proj/zeus")
    await agent.parts.events.flush(5)
    keys = agent.parts.keys
    bad = agent.parts.events.last_offset + 1
    # A foreign writer puts junk into the stream: not msgpack, then a wrong-typed field.
    await agent.parts.client.xadd(keys.events("proj/zeus"), {"d": b"\xc1junk"}, id=f"{bad}-0")
    await agent.parts.client.xadd(
        keys.events("proj/zeus"), {"d": pack({"type": "token", "ts": "later"})}, id=f"{bad + 1}-0"
    )
    agent.parts.events._next = bad + 2  # the agent carries on after them
    agent.parts.events.emit("warn", msg="still here")
    await view.wait_for(lambda: any(e.data.get("msg") == "still here" for e in view.events))
    # Neither carries the agent's own stamp (its id and the offset): both are shown as
    # entries someone else wrote, each at its offset, and the stream goes on.
    foreign = [e for e in view.events if e.data.get("code") == "events.forged"]
    assert [e.offset for e in foreign] == [bad, bad + 1]
    assert all("not written by proj/zeus" in e.data["msg"] for e in foreign)


async def test_a_state_change_notice_refreshes_the_agent_list_without_waiting_for_the_poll(
    target: RedisTarget, client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ateam.console.session as controller_mod
    from ateam.bus.keys import Keys
    from ateam.bus.registry import AgentEntry, Heartbeat

    # No periodic check within the test: only the agent's notice can bring the news.
    monkeypatch.setattr(controller_mod, "LIVENESS_CHECK_S", 3600.0)
    view = RecordingView()
    console = ConsoleController(target, view)
    await console.start()
    try:
        keys = Keys(target.namespace)
        entry = AgentEntry(id="proj/ares", name="ares", project="proj", state="busy")
        heartbeat = Heartbeat(client, keys, entry)
        await heartbeat.beat()
        await view.wait_for(lambda: "agent proj/ares joined" in view.banners)
        entry.state = "waiting"
        await heartbeat.beat(changed=True)

        await async_wait_for(
            lambda: (
                (found := console.known.get("proj/ares")) is not None and found.state == "waiting"
            ),
            5,
            "proj/ares to be known as waiting",
        )
    finally:
        await console.aclose()


async def test_auto_tail_follows_other_live_agents_up_to_its_limit(
    agent: Agent, target: RedisTarget, tmp_path: Path
) -> None:
    others = [
        Agent(standalone_agent("proj", name, tmp_path / name), target, EchoProvider())
        for name in ("hera", "ares")
    ]
    for other in others:
        await other.start()
    view = RecordingView()
    c = ConsoleController(target, view)
    c.auto_tail_limit = 1
    await c.start()
    try:
        await c.execute("/attach proj/zeus")
        await c.refresh_agents(announce=False)
        # One place: the busy agent takes it over the idle ones; the attached one needs none.
        assert c.auto_tailed == {"proj/ares"}  # by id while all are idle
        assert sorted(c.tail.agents) == ["proj/ares", "proj/zeus"]

        c.auto_tail_limit = 2
        await c.refresh_agents(announce=False)
        assert c.auto_tailed == {"proj/ares", "proj/hera"}
        others[0].parts.worker.enqueue("hello from hera", source="test")
        await view.wait_for(lambda: any(e.agent == "proj/hera" for e in view.events))

        assert not [b for b in view.banners if "failed" in b]  # the tail loop survived
        await others[1].stop()
        await view.wait_for(lambda: "agent proj/ares left" in view.banners)
        await c.refresh_agents(announce=False)
        assert c.auto_tailed == {"proj/hera"}
        assert "proj/ares" not in c.tail.agents
    finally:
        await c.aclose()
        for other in others:
            if other.state.value != "stopped":
                await other.stop()


async def test_allow_external_opens_and_closes_the_door_for_mcp_clients(
    agent: Agent, target: RedisTarget, console: tuple[ConsoleController, RecordingView]
) -> None:
    from ateam.client import Team

    c, view = console
    with pytest.raises(UsageError):
        await c.execute("/allow external on")  # nothing attached
    await c.execute("/attach proj/zeus")
    async with await Team.connect(target) as outsider:
        handle = outsider.agent("proj/zeus")
        with pytest.raises(OwnershipDenied):
            await handle.relay("from cursor", source="mcp:cursor")
        await c.execute("/allow external on")
        assert "may now queue input to proj/zeus" in view.lines[-1]
        await c.execute("/who")
        assert "external input (ateam mcp): allowed" in view.lines[-3:]
        sent = await handle.relay("from cursor", source="mcp:cursor")
        assert sent.created
        await c.execute("/allow external off")
        with pytest.raises(OwnershipDenied):
            await handle.relay("again", source="mcp:cursor")
    with pytest.raises(UsageError):
        await c.execute("/allow external maybe")


async def test_a_console_that_reconnects_shows_the_urgent_items_it_missed(
    agent: Agent,
    target: RedisTarget,
    console: tuple[ConsoleController, RecordingView],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import redis.asyncio as aioredis

    import ateam.client.notices as notices_mod
    from ateam.client import Team

    c, view = console
    await c.execute("/ps")  # knows proj/zeus, so it knows project proj
    # A slow first retry leaves time to post while the console cannot hear.
    monkeypatch.setattr(
        notices_mod, "Backoff", lambda: notices_mod.Backoff(initial=1.0, jitter=0.0)
    )
    raw = aioredis.Redis.from_url(target.url)
    try:
        await raw.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
    finally:
        await raw.aclose()
    async with await Team.connect(target) as poster:
        await poster.context.post(
            "proj", type="alert", title="prod is down", urgency="blocking", source_runtime="cli"
        )
    await view.wait_for(lambda: any("prod is down" in b for b in view.banners), timeout=10)
    banner = next(b for b in view.banners if "prod is down" in b)
    assert banner.startswith("BLOCKING alert from cli")


def test_picking_an_agent_attaches_but_a_watch_only_browser_tab_tails(
    target: RedisTarget,
) -> None:
    # The agent list and the palette run what the session says picking means: a
    # watch-only browser tab would only be refused an /attach, so it follows instead.
    from ateam.console.web.session import WebController

    view = PlainView(asyncio.Queue(), io.StringIO())
    assert ConsoleController(target, view).pick("p/a b") == "/attach 'p/a b'"
    assert WebController(target, view).pick("p/a") == "/attach p/a"
    assert WebController(target, view, watch_only=True).pick("p/a") == "/tail p/a"
