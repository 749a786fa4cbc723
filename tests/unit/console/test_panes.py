"""Panes mode: the Textual console, driven headless with Pilot against a real Redis.

Agents are simulated with the library code real agents use (registry heartbeats, the
event publisher); tests that need an agent to answer RPCs start one in-process with the
echo provider.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import tracemalloc
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from rich.style import Style
from rich.text import Text
from textual import events
from textual.app import App, ComposeResult
from textual.pilot import Pilot
from textual.strip import Strip
from textual.widgets import Input, Label, OptionList, RichLog, Static

from ateam.agent.runtime.process import Agent
from ateam.bus.connection import RedisTarget, make_client
from ateam.bus.context_items import ContextStore
from ateam.bus.events import Event, Gap
from ateam.bus.keys import Keys
from ateam.bus.publisher import EventPublisher
from ateam.bus.registry import AgentEntry, Heartbeat
from ateam.config import standalone_agent
from ateam.console.controller import ConsoleController, ConsoleView
from ateam.console.panes import (
    EXIT_ERROR,
    EXIT_PLAIN,
    EXIT_QUIT,
    LINE_MAX,
    AskScreen,
    CommandInput,
    ConsoleApp,
    PaletteScreen,
    StreamLog,
)
from ateam.console.panes import stream_log as panes
from ateam.providers import EchoProvider
from tests._wait import async_wait_for

SIZE = (120, 40)


class NullView:
    """The view of a second, UI-less console (the one that takes over)."""

    def event(self, event: Event) -> None: ...

    def gap(self, gap: Gap) -> None: ...

    def unsettled(self, agent: str) -> int | None:
        return None

    def info(self, text: str, agent: str | None = None) -> None: ...

    def banner(self, text: str, *, level: str = "info") -> None: ...

    def table(self, rows: list[dict[str, Any]], columns: list[str]) -> None: ...

    async def ask(self, question: str) -> str:
        return ""


def make_app(target: RedisTarget, **kwargs: Any) -> ConsoleApp:
    def factory(view: ConsoleView) -> ConsoleController:
        return ConsoleController(target, view, session="console:test:panes")

    return ConsoleApp(factory, **kwargs)


async def started(app: ConsoleApp) -> ConsoleController:
    await asyncio.wait_for(app.ready.wait(), 10)
    assert app.controller is not None
    return app.controller


def entry(agent: str, **fields: Any) -> AgentEntry:
    project, name = agent.split("/")
    defaults: dict[str, Any] = {"model": "echo", "host": "build-1", "state": "idle"}
    return AgentEntry(id=agent, name=name, project=project, **{**defaults, **fields})


def agent_ids(app: ConsoleApp) -> list[str]:
    agents = app.query_one("#agents", OptionList)
    return [str(agents.get_option_at_index(i).id) for i in range(agents.option_count)]


def agent_row(app: ConsoleApp, agent: str) -> str:
    return str(app.query_one("#agents", OptionList).get_option(agent).prompt)


def stream_lines(app: ConsoleApp) -> list[str]:
    return [strip.text.rstrip() for strip in app.query_one("#stream", RichLog).lines]


def static_text(app: ConsoleApp, selector: str) -> str:
    return str(app.query_one(selector, Static).content)


def first_style(strip: Strip) -> Style:
    style = next(iter(strip)).style
    assert style is not None
    return style


CONTROLS = {"tab": "\t", "enter": "\r", "backspace": "\x7f"}
"""The characters the terminal driver gives these keys (the rest have none)."""


def burst(app: App[Any], *keys: str) -> None:
    """Send keys the way the terminal driver does, back to back with no wait in between.

    ``Pilot.press`` lets the app go idle after every key; keys from SSH, tmux
    ``send-keys`` or a paste arrive faster than that.
    """
    assert app._driver is not None
    for key in keys:
        event = events.Key(key, key if len(key) == 1 else CONTROLS.get(key))
        event.set_sender(app)
        app._driver.send_message(event)


async def type_line(pilot: Pilot[Any], line: str) -> None:
    command = pilot.app.query_one("#command", Input)
    command.value = line
    await pilot.press("enter")


@pytest.fixture
async def zeus(target: RedisTarget, tmp_path: Path) -> AsyncIterator[Agent]:
    agent = Agent(standalone_agent("proj", "zeus", tmp_path), target, EchoProvider())
    await agent.start()
    yield agent
    await agent.stop()


async def test_agent_list_follows_joins_and_leaves(
    target: RedisTarget, client: aioredis.Redis
) -> None:
    keys = Keys(target.namespace)
    app = make_app(target)
    async with app.run_test(size=SIZE):
        await started(app)
        assert agent_ids(app) == []
        zeus = Heartbeat(client, keys, entry("proj/zeus", ctx_pct=12.4, queue_len=2))
        await zeus.beat()
        await async_wait_for(lambda: agent_ids(app) == ["proj/zeus"])
        assert "proj/zeus idle" in agent_row(app, "proj/zeus")
        assert "echo · 12% · build-1 · q2" in agent_row(app, "proj/zeus")
        hera = Heartbeat(client, keys, entry("proj/hera", state="busy"))
        await hera.beat()
        await async_wait_for(lambda: agent_ids(app) == ["proj/hera", "proj/zeus"])
        await hera.leave()
        await async_wait_for(lambda: agent_ids(app) == ["proj/zeus"])
        assert "agent proj/hera left" in static_text(app, "#banners")


async def test_palette_filters_agents_and_enter_attaches(
    target: RedisTarget, client: aioredis.Redis
) -> None:
    keys = Keys(target.namespace)
    for agent in ("proj/zeus", "proj/hera", "ops/ares"):
        await Heartbeat(client, keys, entry(agent)).beat()
    app = make_app(target)
    async with app.run_test(size=SIZE) as pilot:
        controller = await started(app)
        await async_wait_for(lambda: len(agent_ids(app)) == 3)
        await pilot.press("f1")
        await async_wait_for(lambda: isinstance(app.screen, PaletteScreen))
        matches = app.screen.query_one("#matches", OptionList)
        assert matches.option_count == 3
        await pilot.press("escape")  # closing it attaches nothing
        await async_wait_for(lambda: not isinstance(app.screen, PaletteScreen))
        assert controller.attached is None

        await pilot.press("f1")
        await async_wait_for(lambda: isinstance(app.screen, PaletteScreen))
        await pilot.press("H", "e")  # case-insensitive substring
        matches = app.screen.query_one("#matches", OptionList)
        await async_wait_for(lambda: matches.option_count == 1)
        assert matches.get_option_at_index(0).id == "proj/hera"
        await pilot.press("enter")
        await async_wait_for(lambda: controller.attached == "proj/hera")
        assert not isinstance(app.screen, PaletteScreen)
        await async_wait_for(
            lambda: "proj/hera · idle · writer" in str(app.query_one("#centre").border_title)
        )
        assert "▸ proj/hera" in agent_row(app, "proj/hera")


async def test_palette_lists_the_command_table_after_a_slash(target: RedisTarget) -> None:
    from ateam.console.commands import COMMANDS
    from ateam.console.panes.command_input import CommandInput

    app = make_app(target)
    async with app.run_test(size=SIZE) as pilot:
        await started(app)
        await pilot.press("f1")
        await async_wait_for(lambda: isinstance(app.screen, PaletteScreen))
        await pilot.press("/")
        matches = app.screen.query_one("#matches", OptionList)
        # Every command of the one table, no other list.
        await async_wait_for(lambda: matches.option_count == len(COMMANDS))
        await pilot.press("p", "l", "a", "n")
        await async_wait_for(lambda: matches.option_count == 1)
        assert matches.get_option_at_index(0).id == "/plan"
        assert COMMANDS["plan"].help in str(matches.get_option_at_index(0).prompt)
        await pilot.press("enter")
        await async_wait_for(lambda: not isinstance(app.screen, PaletteScreen))
        # Left in the command bar for its arguments, not run.
        assert app.query_one("#command", CommandInput).value == "/plan "


async def test_tab_extends_then_lists_then_steps_like_a_shell(
    target: RedisTarget, client: aioredis.Redis
) -> None:
    keys = Keys(target.namespace)
    for agent in ("proj/zeus", "proj/zephyr"):
        await Heartbeat(client, keys, entry(agent)).beat()
    app = make_app(target)
    async with app.run_test(size=SIZE) as pilot:
        await started(app)
        await async_wait_for(lambda: len(agent_ids(app)) == 2)
        bar = app.query_one("#command", Input)
        bar.focus()
        await pilot.press(*"/att")
        await pilot.press("tab")
        await async_wait_for(lambda: bar.value == "/attach ")
        await pilot.press(*"ze")
        await pilot.press("tab")  # what both share
        await async_wait_for(lambda: bar.value == "/attach proj/ze")
        await pilot.press("tab")  # nothing more to add: the matches are listed
        await async_wait_for(lambda: "proj/zephyr" in static_text(app, "#message"))
        assert "proj/zeus" in static_text(app, "#message")
        assert bar.value == "/attach proj/ze"
        await pilot.press("tab")  # then each in turn
        await async_wait_for(lambda: bar.value == "/attach proj/zephyr")
        await pilot.press("tab")
        await async_wait_for(lambda: bar.value == "/attach proj/zeus")
        assert app.focused is bar  # TAB completed instead of moving the focus


async def test_tab_in_a_burst_completes_what_was_typed_before_it(target: RedisTarget) -> None:
    app = make_app(target)
    async with app.run_test(size=SIZE):
        await started(app)
        bar = app.query_one("#command", CommandInput)
        bar.focus()
        burst(app, "/", "a", "t", "t", "tab")
        await async_wait_for(lambda: bar.value == "/attach ", timeout=3)
        assert app.focused is bar


async def test_matches_of_a_tab_that_arrive_as_the_app_closes_are_dropped(
    target: RedisTarget,
) -> None:
    # A TAB sets the line at once and posts its matches to be shown; a test (or a user)
    # closing the app in between left the message for a screen already taken down.
    app = make_app(target)
    async with app.run_test(size=SIZE) as pilot:
        await started(app)
        await app.query_one("#message", Static).remove()
        bar = app.query_one("#command", CommandInput)
        bar.post_message(CommandInput.Candidates(["/attach", "/agent"]))
        await pilot.pause()


async def test_a_burst_of_lines_is_typed_and_submitted_in_order(target: RedisTarget) -> None:
    app = make_app(target)
    async with app.run_test(size=SIZE):
        await started(app)
        bar = app.query_one("#command", CommandInput)
        bar.focus()
        burst(app, "h", "i", "enter", "y", "o", "u", "backspace", "enter", "a", "b", "left", "x")
        await async_wait_for(lambda: bar.history == ["hi", "yo"] and bar.value == "axb", timeout=3)


async def test_stream_shows_tokens_and_tool_output_in_colour(
    target: RedisTarget, client: aioredis.Redis
) -> None:
    keys = Keys(target.namespace)
    await Heartbeat(client, keys, entry("proj/zeus")).beat()
    publisher = EventPublisher(client, keys, "proj/zeus")
    await publisher.start()
    app = make_app(target)
    try:
        async with app.run_test(size=SIZE) as pilot:
            controller = await started(app)
            await type_line(pilot, "/attach proj/zeus")
            await async_wait_for(lambda: controller.attached == "proj/zeus")
            publisher.emit("token", text="hel")
            publisher.emit("token", text="lo world\nstill wri")
            await async_wait_for(lambda: "still wri" in static_text(app, "#live"))
            publisher.emit("token", text="ting\n")
            publisher.emit("tool.start", name="os.exec", input={"cmd": "ls --color"})
            publisher.emit("tool.output", text="\x1b[31mred\x1b[0m plain\n\x1b[1;32mgreen ")
            publisher.emit("tool.output", text="continues\n")
            publisher.emit("tool.end", name="os.exec", exit_code=0, duration_s=0.25)
            publisher.emit("model.switch", **{"from": "big", "to": "small", "reason": "429"})
            publisher.emit("error", msg="the provider failed")
            await publisher.flush(5)
            await async_wait_for(lambda: "error: the provider failed" in stream_lines(app))
            lines = stream_lines(app)
            start = lines.index("hello world")
            assert lines[start : start + 8] == [
                "hello world",
                "still writing",
                "▶ $ ls --color",
                "red plain",
                "green continues",
                "◀ os.exec exit 0 (0.25s)",
                "⇄ model switch: big → small (429)",
                "error: the provider failed",
            ]
            strips = app.query_one("#stream", RichLog).lines[start : start + 8]
            red = next(s for s in strips[3] if s.text == "red")
            assert red.style is not None and red.style.color is not None
            assert red.style.color.name == "color(1)"  # ANSI red, kept
            # The colour set on one line carries over to the next, as in a terminal.
            green = [s for s in strips[4] if s.text.strip()]
            assert all(
                s.style and s.style.color and s.style.color.name == "color(2)" for s in green
            )
            assert all(s.style and s.style.bold for s in green)
            tool = first_style(strips[2])
            assert tool.color is not None and tool.color.name == "cyan"
            switch = first_style(strips[6])
            assert switch.bold and switch.color is not None and switch.color.name == "yellow"
            error = first_style(strips[7])
            assert error.color is not None and error.color.name == "red"
            # Plain model text has no colour of its own.
            plain = next(iter(strips[0])).style
            assert plain is None or plain.color is None
    finally:
        await publisher.aclose()


async def test_typed_text_reaches_the_agent_and_its_answer_streams_back(
    target: RedisTarget, zeus: Agent
) -> None:
    app = make_app(target)
    async with app.run_test(size=SIZE) as pilot:
        controller = await started(app)
        await type_line(pilot, "/attach zeus")
        await async_wait_for(lambda: controller.attached == "proj/zeus")
        await type_line(pilot, "hello there")
        await async_wait_for(lambda: "echo: hello there" in stream_lines(app))
        # Up brings the last line back for editing.
        await pilot.press("up")
        assert app.query_one("#command", Input).value == "hello there"


async def test_takeover_turns_the_pane_read_only(
    target: RedisTarget, client: aioredis.Redis
) -> None:
    await Heartbeat(client, Keys(target.namespace), entry("proj/zeus")).beat()
    app = make_app(target)
    async with app.run_test(size=SIZE):
        controller = await started(app)
        await app.run_line("/attach proj/zeus")
        await async_wait_for(
            lambda: app.query_one("#centre").border_title == "proj/zeus · idle · writer"
        )
        assert not app.query_one("#readonly").display
        other = ConsoleController(target, NullView(), session="console:test:other")
        other.ownership._grace_s = 0.1
        await other.start()
        try:
            await other.execute("/attach proj/zeus --takeover")
            await async_wait_for(lambda: controller.read_only)
            await async_wait_for(lambda: app.query_one("#centre").has_class("read-only"))
            assert app.query_one("#centre").border_title == "proj/zeus · idle · READ-ONLY"
            assert app.query_one("#readonly").display
            assert "another console owns proj/zeus" in static_text(app, "#readonly")
            placeholder = app.query_one("#command", Input).placeholder
            assert placeholder.startswith("read-only for proj/zeus")
            assert "took over proj/zeus" in static_text(app, "#banners")
            # Typing now is refused by the console, as one line.
            await app.run_line("anything")
            assert static_text(app, "#message").startswith("error [ownership.denied]")
        finally:
            await other.aclose()


async def test_waiting_agents_ring_and_show_a_banner(
    target: RedisTarget, client: aioredis.Redis
) -> None:
    keys = Keys(target.namespace)
    await Heartbeat(client, keys, entry("proj/zeus")).beat()
    app = make_app(target)
    bells: list[None] = []
    app.bell = lambda: bells.append(None)  # type: ignore[method-assign]
    publisher = EventPublisher(client, keys, "proj/zeus")
    await publisher.start()
    try:
        async with app.run_test(size=SIZE):
            await started(app)
            await async_wait_for(lambda: agent_ids(app) == ["proj/zeus"])
            assert bells == []
            # Registry path: an agent that joins already waiting.
            await Heartbeat(client, keys, entry("proj/hera", state="waiting")).beat()
            banner = "⏳ agent proj/hera is waiting for approval"
            await async_wait_for(lambda: banner in static_text(app, "#banners"))
            assert len(bells) == 1
            assert agent_row(app, "proj/hera").startswith("⏳proj/hera waiting")
            # Event path: a followed agent says so before the registry is read again.
            await app.run_line("/tail proj/zeus")
            publisher.emit("state", state="waiting")
            await publisher.flush(5)
            await async_wait_for(
                lambda: "⏳ agent proj/zeus is waiting" in static_text(app, "#banners")
            )
            assert len(bells) == 2
            assert banner in static_text(app, "#banners")  # both stay visible
            assert agent_row(app, "proj/zeus").startswith("⏳")
    finally:
        await publisher.aclose()


async def test_a_flood_keeps_the_stream_within_its_scrollback(
    target: RedisTarget, client: aioredis.Redis
) -> None:
    await Heartbeat(client, Keys(target.namespace), entry("proj/zeus")).beat()
    scrollback = 500
    app = make_app(target, scrollback=scrollback)
    # 2.5 KiB frames of terminal-width lines; the last one runs on into the next frame.
    head, body = "y" * 20, "x" * 79
    frame = (body + "\n") * 32 + head
    async with app.run_test(size=(200, 40)) as pilot:  # wide enough not to wrap a line
        controller = await started(app)
        await app.run_line("/attach proj/zeus")
        view = app.view
        log = app.query_one("#stream", RichLog)

        async def flood(first: int, count: int) -> None:
            for i in range(first, first + count):
                view.event(Event("proj/zeus", i, "tool.output", 0.0, {"text": frame}))
                if i % 4000 == 0:
                    await pilot.pause()  # let frames be drawn while the flood goes on
                    assert view.pending_lines <= scrollback
                    assert len(log.lines) <= scrollback

        await flood(1, 10_000)
        # Trace the second half only (tracing is slow): with the buffers full already,
        # whatever it keeps growing with would show here as 26 MB more.
        tracemalloc.start()
        try:
            await flood(10_001, 10_000)  # 52 MB in all
            await async_wait_for(lambda: not view.pending)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert len(log.lines) <= scrollback
        assert view.buffered_chars() <= scrollback * LINE_MAX
        assert peak < 12 * 1024 * 1024, f"{peak} bytes held at the peak"
        # The newest lines are the flood's last ones, and its half line is shown live.
        lines = stream_lines(app)
        last = max(i for i, line in enumerate(lines) if line == head + body)
        assert lines[last + 1 : last + 32] == [body] * 31
        await async_wait_for(lambda: static_text(app, "#live") == head)
        # The resume point stays before the half line, so a restart shows it whole.
        assert view.unsettled("proj/zeus") == 20_000
        assert controller.attached == "proj/zeus"


async def test_an_endless_line_is_cut_rather_than_grown(
    target: RedisTarget, client: aioredis.Redis
) -> None:
    await Heartbeat(client, Keys(target.namespace), entry("proj/zeus")).beat()
    app = make_app(target)
    async with app.run_test(size=SIZE):
        await started(app)
        await app.run_line("/attach proj/zeus")
        view = app.view
        for i in range(128):  # 1 MiB without a newline
            view.event(Event("proj/zeus", i + 1, "tool.output", 0.0, {"text": "z" * 8192}))
            assert len(view.partial("proj/zeus")) <= LINE_MAX
        await async_wait_for(lambda: not view.pending)
        assert sum(1 for line in stream_lines(app) if set(line) == {"z"}) >= 255


async def test_command_errors_show_as_one_line(target: RedisTarget) -> None:
    app = make_app(target)
    async with app.run_test(size=SIZE) as pilot:
        await started(app)
        await type_line(pilot, "/frobnicate")
        await async_wait_for(lambda: static_text(app, "#message"))
        assert static_text(app, "#message").startswith(
            "error [bad_request]: unknown command /frobnicate"
        )
        await type_line(pilot, "/attach proj/nobody")
        await async_wait_for(lambda: "agent.not_found" in static_text(app, "#message"))
        message = static_text(app, "#message")
        assert "\n" not in message and "Traceback" not in message
        assert not any("Traceback" in line for line in stream_lines(app))
        assert app.is_running


async def test_ask_is_a_modal_and_queue_clear_waits_for_yes(
    target: RedisTarget, zeus: Agent
) -> None:
    app = make_app(target)
    async with app.run_test(size=SIZE) as pilot:
        await started(app)
        await app.run_line("/attach proj/zeus")
        zeus.parts.worker.enqueue("pending work", source="test")
        await type_line(pilot, "/queue clear")
        await async_wait_for(lambda: isinstance(app.screen, AskScreen))
        assert "clear every pending item of proj/zeus" in str(app.screen.query_one(Label).content)
        await pilot.press("n", "o", "enter")
        await async_wait_for(lambda: "queue clear cancelled" in stream_lines(app))
        await type_line(pilot, "/queue clear")
        await async_wait_for(lambda: isinstance(app.screen, AskScreen))
        await pilot.press("y", "e", "s", "enter")
        await async_wait_for(lambda: any(line.startswith("cleared ") for line in stream_lines(app)))
        assert not isinstance(app.screen, AskScreen)


async def test_ctrl_c_interrupts_when_attached(target: RedisTarget, zeus: Agent) -> None:
    app = make_app(target)
    async with app.run_test(size=SIZE) as pilot:
        await started(app)
        await app.run_line("/attach proj/zeus")
        await pilot.press("ctrl+c")
        await async_wait_for(lambda: "agent is idle" in stream_lines(app))
        assert app.is_running


async def test_ctrl_c_asks_before_quitting_when_not_attached(target: RedisTarget) -> None:
    app = make_app(target)
    async with app.run_test(size=SIZE) as pilot:
        await started(app)
        await pilot.press("ctrl+c")
        await async_wait_for(lambda: "press Ctrl+C again" in static_text(app, "#banners"))
        assert app.is_running
        await pilot.press("ctrl+c")
        await async_wait_for(lambda: app.return_value is not None)
    assert app.return_value == EXIT_QUIT


@pytest.mark.parametrize(("line", "result"), [("/quit", EXIT_QUIT), ("/ui panes off", EXIT_PLAIN)])
async def test_quit_and_ui_off_end_the_app_and_release_ownership(
    target: RedisTarget, client: aioredis.Redis, line: str, result: str
) -> None:
    keys = Keys(target.namespace)
    await Heartbeat(client, keys, entry("proj/zeus")).beat()
    app = make_app(target)
    async with app.run_test(size=SIZE) as pilot:
        await started(app)
        await app.run_line("/attach proj/zeus")
        assert await client.exists(keys.owner("proj/zeus"))
        await type_line(pilot, line)
        await async_wait_for(lambda: app.return_value is not None)
    assert app.return_value == result
    assert app.attached_at_exit == "proj/zeus"  # so plain mode can attach again
    assert not await client.exists(keys.owner("proj/zeus"))


async def test_an_unreachable_bus_ends_the_app_with_its_error(namespace: str) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    target = RedisTarget(f"redis://127.0.0.1:{port}/0", "test", namespace=namespace)
    app = make_app(target)
    async with app.run_test(size=SIZE):
        await async_wait_for(lambda: app.return_value is not None)
    assert app.return_value == EXIT_ERROR
    assert app.return_code == 2
    assert app.startup_error is not None
    assert app.startup_error.one_line().startswith("error [redis.unavailable]: cannot reach Redis")


# the stream pane ---------------------------------------------------------------------------


class LogsApp(App[None]):
    """A StreamLog beside a plain RichLog, to compare the two."""

    def __init__(self, max_lines: int = 5000) -> None:
        super().__init__()
        self.max_lines = max_lines

    def compose(self) -> ComposeResult:
        yield StreamLog(id="stream", max_lines=self.max_lines, wrap=True, min_width=1)
        yield RichLog(id="rich", max_lines=self.max_lines, wrap=True, min_width=1)


def cells(strip: Strip) -> list[tuple[str, Style]]:
    """What a row draws: its characters and styles, unstyled spans as the null style."""
    return [(s.text, s.style or Style()) for s in strip if s.text]


async def test_stream_rows_draw_as_richlog_draws_them() -> None:
    texts = [
        Text.from_ansi("\x1b[31mred\x1b[0m plain \x1b[1;4mbold\x1b[0m"),
        Text("styled whole", "bold cyan"),
        Text.from_ansi("dim \x1b[7mreversed\x1b[27m", style="dim"),
        Text(""),
        Text("trailing   "),
        Text("wide 日本語 characters", "magenta"),
        Text("tab\tstop"),
        Text("a line longer than the forty columns of the pane, so wrapped", "yellow"),
    ]
    async with LogsApp().run_test(size=(100, 20)) as pilot:
        await pilot.pause()
        stream = pilot.app.query_one("#stream", StreamLog)
        rich = pilot.app.query_one("#rich", RichLog)
        stream.write_lines(texts, 40)
        rich.write(Text("\n").join(texts), width=40)
        assert len(stream.lines) == len(rich.lines) == len(texts) + 1  # one line wraps
        assert [cells(s) for s in stream.lines] == [cells(s) for s in rich.lines]


async def test_kept_rows_leave_nothing_for_the_cycle_collector() -> None:
    # RichLog keeps some twenty tracked objects a row (a strip, its caches, a second
    # strip); a full scrollback of them made each full collection stop the app.
    async with LogsApp().run_test(size=(100, 20)) as pilot:
        await pilot.pause()
        log = pilot.app.query_one(StreamLog)
        log.write_lines([Text("warm up")], 80)
        gc.collect()
        before = len(gc.get_objects())
        # One write (each write queues a scroll) and no pause: nothing drawn in between.
        log.write_lines(
            (Text.from_ansi(f"\x1b[3{n % 8}mline {n}\x1b[0m plain") for n in range(2000)), 80
        )
        gc.collect()
        assert len(log.lines) == 2001
        assert len(gc.get_objects()) - before < 100  # RichLog: 44 000


async def test_styles_no_kept_row_uses_are_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(panes, "STYLES_MAX", 16)
    async with LogsApp(max_lines=10).run_test(size=(100, 20)) as pilot:
        await pilot.pause()
        log = pilot.app.query_one(StreamLog)
        for n in range(200):  # a new colour on every line, as a gradient would print
            log.write_lines([Text.from_ansi(f"\x1b[38;2;{n};0;0mshade {n}\x1b[0m")], 80)
            assert len(log._styles) <= 2 * 16
        assert [s.text.rstrip() for s in log.lines] == [f"shade {n}" for n in range(190, 200)]
        colours = [next(iter(strip)).style for strip in log.lines]
        assert [c.color.triplet.red for c in colours if c and c.color and c.color.triplet] == list(
            range(190, 200)
        )


async def test_the_startup_heap_is_frozen_while_the_console_runs(target: RedisTarget) -> None:
    # Full collections walk every object they are not told to skip: a started console
    # holds 100 000 that live as long as it does, 70-100 ms with keystrokes waiting.
    app = make_app(target)
    async with app.run_test(size=SIZE):
        await started(app)
        assert gc.get_freeze_count() > 10_000
    assert gc.get_freeze_count() == 0


# snapshots -------------------------------------------------------------------------------


@pytest.fixture
def registered(target: RedisTarget) -> Callable[[list[AgentEntry]], None]:
    """Register agents before an app runs (snapshot tests run the app on their own loop)."""

    def register(entries: list[AgentEntry]) -> None:
        async def beat() -> None:
            client = make_client(target)
            try:
                for item in entries:
                    await Heartbeat(client, Keys(target.namespace), item).beat()
            finally:
                await client.aclose()

        asyncio.run(beat())

    return register


def no_blink(app: ConsoleApp) -> None:
    for widget in app.screen.query(Input):
        widget.cursor_blink = False


def test_snapshot_main_layout(
    snap_compare: Callable[..., bool],
    target: RedisTarget,
    registered: Callable[[list[AgentEntry]], None],
) -> None:
    registered(
        [
            entry("proj/zeus", ctx_pct=12.5, queue_len=2),
            entry("proj/hera", state="waiting", model="small", host="build-2"),
        ]
    )
    app = make_app(target)

    async def run_before(pilot: Pilot[Any]) -> None:
        await started(app)
        await async_wait_for(lambda: len(agent_ids(app)) == 2)
        await app.run_line("/attach proj/zeus")
        await app.run_line("/tail proj/hera")
        events: list[tuple[str, str, dict[str, Any]]] = [
            ("proj/zeus", "task.start", {"task_id": "q-1", "text": "list the files"}),
            ("proj/zeus", "token", {"text": "Let me look at the files.\n"}),
            ("proj/zeus", "tool.start", {"name": "os.exec", "input": {"cmd": "ls --color"}}),
            ("proj/zeus", "tool.output", {"text": "\x1b[34mdocs\x1b[0m  \x1b[32mrun.sh\x1b[0m\n"}),
            ("proj/zeus", "tool.end", {"name": "os.exec", "exit_code": 0, "duration_s": 0.1}),
            ("proj/zeus", "model.switch", {"from": "big", "to": "small", "reason": "429"}),
            ("proj/zeus", "error", {"msg": "rate limited, retrying"}),
            ("proj/zeus", "token", {"text": "Two entries: docs and run"}),
            ("proj/hera", "token", {"text": "checking the tests\nall green\n"}),
            ("proj/hera", "approval.request", {"tool": "os.exec", "args": {"cmd": "rm -r build"},
                                               "request_id": "r-1"}),
        ]  # fmt: skip
        for offset, (agent, etype, data) in enumerate(events, start=1):
            app.view.event(Event(agent, offset, etype, 0.0, data))
        await async_wait_for(lambda: not app.view.pending and not app.view.tails_dirty)
        await async_wait_for(lambda: "proj/hera is waiting" in static_text(app, "#banners"))
        no_blink(app)
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_snapshot_palette(
    snap_compare: Callable[..., bool],
    target: RedisTarget,
    registered: Callable[[list[AgentEntry]], None],
) -> None:
    registered([entry("proj/zeus"), entry("proj/hera"), entry("ops/ares")])
    app = make_app(target)

    async def run_before(pilot: Pilot[Any]) -> None:
        await started(app)
        await async_wait_for(lambda: len(agent_ids(app)) == 3)
        await pilot.press("f1")
        await async_wait_for(lambda: isinstance(app.screen, PaletteScreen))
        no_blink(app)
        await pilot.press("p", "r", "o")
        await async_wait_for(lambda: app.screen.query_one("#matches", OptionList).option_count == 2)
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


async def test_other_live_agents_are_tailed_on_the_right_without_asking(
    target: RedisTarget, client: aioredis.Redis
) -> None:
    keys = Keys(target.namespace)
    for agent in ("proj/zeus", "proj/hera", "proj/ares"):
        await Heartbeat(
            client, keys, entry(agent, state="busy" if agent == "proj/ares" else "idle")
        ).beat()
    app = make_app(target, auto_tails=1)
    publisher = EventPublisher(client, keys, "proj/ares")
    await publisher.start()
    try:
        async with app.run_test(size=SIZE):
            controller = await started(app)
            await app.run_line("/attach proj/zeus")
            await async_wait_for(lambda: controller.auto_tailed == {"proj/ares"})  # the busy one
            publisher.emit("token", text="compiling module 7 of 9\n")
            await publisher.flush(5)
            await async_wait_for(
                lambda: "compiling module 7 of 9" in static_text(app, "#tails-text")
            )
            text = static_text(app, "#tails-text")
            assert "proj/ares · busy" in text
            assert "proj/hera" not in text  # one place only
            assert "proj/zeus" not in text  # the attached agent is in the centre
    finally:
        await publisher.aclose()


async def test_a_blocking_context_item_rings_and_shows_a_banner(
    target: RedisTarget, client: aioredis.Redis
) -> None:
    app = make_app(target)
    bells: list[None] = []
    app.bell = lambda: bells.append(None)  # type: ignore[method-assign]
    store = ContextStore(client, Keys(target.namespace))
    async with app.run_test(size=SIZE):
        await started(app)
        await store.post("proj", type="status", title="tests are green", urgency="attention")
        await async_wait_for(
            lambda: "ATTENTION status from a console" in static_text(app, "#banners")
        )
        assert bells == []
        await store.post(
            "proj", type="request", title="need a DB password", urgency="blocking",
            source_agent="proj/zeus",
        )  # fmt: skip
        banner = "BLOCKING request from proj/zeus: need a DB password"
        await async_wait_for(lambda: banner in static_text(app, "#banners"))
        assert len(bells) == 1
