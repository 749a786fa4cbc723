"""Panes mode fits the terminal: side panes fold, the stream is read back, searched.

Driven headless with Pilot against a real Redis, as in ``test_panes.py``; the stream's
lines are written through the app's own view, the way events reach it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis.asyncio as aioredis
from rich.console import Console
from rich.text import Text
from textual import events
from textual.pilot import Pilot

from ateam.bus.connection import RedisTarget
from ateam.bus.events import Event
from ateam.bus.keys import Keys
from ateam.bus.registry import AgentEntry, Heartbeat
from ateam.console.panes import CommandInput, ConsoleApp, StreamLog
from ateam.console.panes.find import FindBar
from ateam.console.panes.layout import (
    SHOWN_NARROW,
    Sides,
    SidesChoice,
    auto_sides,
    sides_for,
    toggled,
)
from ateam.console.panes.stream_log import NEXT_AFTER_SPACE, START, _wrapped
from tests._wait import async_wait_for
from tests.unit.console.test_panes import (
    agent_ids,
    entry,
    make_app,
    no_blink,
    registered,  # noqa: F401  (a fixture)
    started,
    static_text,
)

SIZES = {"80x24": (80, 24), "120x40": (120, 40), "200x50": (200, 50)}


def screen_lines(app: ConsoleApp) -> list[str]:
    """The screen as text, one string per terminal row."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


def shown(app: ConsoleApp, selector: str) -> bool:
    return app.query_one(selector).display and app.query_one(selector).region.width > 0


async def attached_app(
    target: RedisTarget, client: aioredis.Redis, **kwargs: Any
) -> tuple[ConsoleApp, Keys]:
    keys = Keys(target.namespace)
    for agent in ("proj/zeus", "proj/hera"):
        await Heartbeat(client, keys, entry(agent)).beat()
    return make_app(target, **kwargs), keys


def write(app: ConsoleApp, first: int, count: int, text: str = "line") -> None:
    for i in range(first, first + count):
        app.view.event(Event("proj/zeus", i, "token", 0.0, {"text": f"{text} {i}\n"}))


async def drawn(app: ConsoleApp) -> None:
    await async_wait_for(lambda: not app.view.pending)


# the widths ---------------------------------------------------------------------------


def test_the_stream_gets_most_of_every_width() -> None:
    for width in (60, 80, 99, 100, 119, 120, 159, 160, 200, 300):
        sides = auto_sides(width)
        assert width - sides.agents - sides.tails >= max(width * 0.55, width - 68), width
    assert auto_sides(80) == Sides(0, 0)  # the default terminal: the stream alone
    assert auto_sides(100).tails == 0 < auto_sides(100).agents  # tails fold first
    assert auto_sides(200) == Sides(34, 32)


def test_f3_shows_folded_panes_and_hides_shown_ones() -> None:
    assert toggled(80, SidesChoice.AUTO) == SidesChoice.SHOWN
    assert sides_for(80, SidesChoice.SHOWN) == SHOWN_NARROW
    assert toggled(80, SidesChoice.SHOWN) == SidesChoice.HIDDEN
    assert toggled(200, SidesChoice.AUTO) == SidesChoice.HIDDEN
    assert sides_for(200, SidesChoice.HIDDEN) == Sides(0, 0)
    assert sides_for(200, SidesChoice.SHOWN) == Sides(34, 32)  # wide: the full panes
    assert sides_for(110, SidesChoice.SHOWN) == SHOWN_NARROW  # both, where one fits


async def test_at_80x24_the_stream_gets_the_width_and_f3_brings_the_panes_back(
    target: RedisTarget, client: aioredis.Redis
) -> None:
    app, _ = await attached_app(target, client)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app)
        await async_wait_for(lambda: len(agent_ids(app)) == 2)
        await app.run_line("/attach proj/zeus")
        long = "the quick brown fox jumps over the lazy dog and keeps on running " * 2
        app.view.event(Event("proj/zeus", 1, "token", 0.0, {"text": long.strip() + "\n"}))
        await drawn(app)
        await pilot.pause()
        assert not shown(app, "#agents") and not shown(app, "#tails")
        stream = app.query_one("#stream", StreamLog)
        assert stream.scrollable_content_region.width >= 74
        screen = "\n".join(screen_lines(app))
        # What must not be cut: the agent and its state, where to type, how to get the
        # panes back, and the line itself, wrapped at the stream's width.
        assert "proj/zeus · idle · writer" in screen
        assert "F3 agents · tails" in screen
        assert "message for proj/zeus" in screen
        assert "the quick brown fox jumps over the lazy dog and keeps on running the" in screen

        await pilot.press("f3")
        await async_wait_for(lambda: shown(app, "#agents") and shown(app, "#tails"))
        assert app.query_one("#agents").region.width == SHOWN_NARROW.agents
        await pilot.press("f3")
        await async_wait_for(lambda: not shown(app, "#agents") and not shown(app, "#tails"))


async def test_the_panes_fold_and_unfold_as_the_terminal_is_resized(
    target: RedisTarget, client: aioredis.Redis
) -> None:
    app, _ = await attached_app(target, client)
    async with app.run_test(size=(200, 50)) as pilot:
        await started(app)
        assert shown(app, "#agents") and shown(app, "#tails")
        await pilot.resize_terminal(110, 40)
        await async_wait_for(lambda: shown(app, "#agents") and not shown(app, "#tails"))
        await pilot.resize_terminal(80, 24)
        await async_wait_for(lambda: not shown(app, "#agents"))
        await pilot.resize_terminal(200, 50)
        await async_wait_for(lambda: shown(app, "#agents") and shown(app, "#tails"))


@pytest.mark.parametrize("size", list(SIZES), ids=list(SIZES))
def test_snapshot_fits(
    size: str,
    snap_compare: Callable[..., bool],
    target: RedisTarget,
    registered: Callable[[list[AgentEntry]], None],  # noqa: F811
) -> None:
    registered(
        [
            entry("proj/zeus", ctx_pct=12.5, queue_len=2, state="busy"),
            entry("proj/hera", state="waiting", model="small", host="build-2"),
        ]
    )
    app = make_app(target)

    async def run_before(pilot: Pilot[Any]) -> None:
        await started(app)
        await async_wait_for(lambda: len(agent_ids(app)) == 2)
        await app.run_line("/attach proj/zeus")
        await app.run_line("/tail proj/hera")
        said = (
            "The build failed in two places: the parser rejects a trailing comma in "
            "config.yaml, and test_roundtrip expects the old field order.\n"
        )
        for offset, data in enumerate(
            [
                {"text": said},
                {"text": "Fixing the parser first, then the test.\n"},
            ],
            start=1,
        ):
            app.view.event(Event("proj/zeus", offset, "token", 0.0, data))
        app.view.event(Event("proj/hera", 1, "token", 0.0, {"text": "checking the tests\n"}))
        await async_wait_for(lambda: not app.view.pending and not app.view.tails_dirty)
        await async_wait_for(lambda: "proj/hera is waiting" in static_text(app, "#banners"))
        no_blink(app)
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZES[size], run_before=run_before)


# reading back -------------------------------------------------------------------------


async def test_page_keys_scroll_back_and_new_lines_do_not_yank_the_reader(
    target: RedisTarget, client: aioredis.Redis
) -> None:
    app, _ = await attached_app(target, client)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app)
        await app.run_line("/attach proj/zeus")
        log = app.query_one("#stream", StreamLog)
        write(app, 1, 200)
        await drawn(app)
        await async_wait_for(lambda: log.is_vertical_scroll_end and log.max_scroll_y > 0)
        assert not app.query_one("#below").display
        # As in the wheel test below: the scroll to the end that drawing asked for lands
        # after a refresh, and could otherwise follow the key and undo it (flaky on 3.12).
        await pilot.pause()
        await pilot.pause()

        await pilot.press("pageup")
        await async_wait_for(lambda: not log.following)
        top = log.scroll_y
        assert top < log.max_scroll_y
        assert "scrolled back" in static_text(app, "#below")
        assert app.query_one("#below").display

        write(app, 201, 5)
        await drawn(app)
        await async_wait_for(lambda: "↓ 5 new lines below" in static_text(app, "#below"))
        assert log.scroll_y == top  # left where they were reading

        await pilot.press("ctrl+end")
        await async_wait_for(lambda: log.following and not app.query_one("#below").display)
        assert log.unseen == 0
        write(app, 206, 3)
        await drawn(app)
        await async_wait_for(lambda: log.is_vertical_scroll_end and "line 208" in log.row_text(-1))

        # Home and End on an empty command bar go to the ends of the stream; with a
        # line in the bar they move in the line.
        await pilot.press("home")
        await async_wait_for(lambda: log.scroll_y == 0)
        await pilot.press("end")
        await async_wait_for(lambda: log.following)
        bar = app.query_one("#command", CommandInput)
        bar.value = "draft"
        await pilot.press("home")
        assert bar.cursor_position == 0 and log.following


async def test_the_wheel_scrolls_back_and_trimming_keeps_the_reader_in_place(
    target: RedisTarget, client: aioredis.Redis
) -> None:
    app, _ = await attached_app(target, client, scrollback=100)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app)
        await app.run_line("/attach proj/zeus")
        log = app.query_one("#stream", StreamLog)
        write(app, 1, 100)
        await drawn(app)
        await async_wait_for(lambda: log.is_vertical_scroll_end and log.max_scroll_y > 0)
        # The scroll to the end that drawing the output asked for runs after a refresh:
        # let it land first, or it can follow the wheel and take the reader back down.
        await pilot.pause()
        await pilot.pause()
        for _ in range(5):
            log.post_message(events.MouseScrollUp(log, 5, 5, 0, 0, 0, False, False, False))
        await async_wait_for(lambda: not log.following)
        await pilot.pause()
        first = int(log.scroll_y)
        reading = log.row_text(first)
        # The oldest rows are trimmed from above what is being read: it stays on screen.
        write(app, 101, 30)
        await drawn(app)
        await pilot.pause()
        assert log.row_text(int(log.scroll_y)) == reading
        assert log.unseen == 30


async def test_ctrl_f_finds_text_older_and_newer_and_esc_gives_the_bar_back(
    target: RedisTarget, client: aioredis.Redis
) -> None:
    app, _ = await attached_app(target, client)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app)
        await app.run_line("/attach proj/zeus")
        log = app.query_one("#stream", StreamLog)
        write(app, 1, 150)
        for n, i in enumerate((20, 60, 140), start=1):
            app.view.event(Event("proj/zeus", 1000 + n, "token", 0.0, {"text": f"Needle {i}\n"}))
            write(app, 2000 + 10 * n, 5, "filler")
        await drawn(app)
        await pilot.press("ctrl+f")
        finder = app.query_one("#find", FindBar)
        await async_wait_for(lambda: app.focused is finder)
        await pilot.press(*"needle")  # any case

        def marked() -> str:
            found = log.found
            assert found is not None
            return log.row_text(found.row - log._start_line)[found.start : found.end]

        def on_screen(text: str) -> bool:
            return any(text in line for line in screen_lines(app))

        await async_wait_for(lambda: log.found is not None and "Needle 140" in on_screen_row(log))
        assert marked() == "Needle"
        await pilot.press("enter")  # older
        await async_wait_for(lambda: "Needle 60" in on_screen_row(log))
        await async_wait_for(lambda: on_screen("Needle 60"))
        await pilot.press("up")
        await async_wait_for(lambda: "Needle 20" in on_screen_row(log))
        await pilot.press("up")  # none older: said, and the mark stays
        await async_wait_for(lambda: "no older match" in static_text(app, "#message"))
        assert "Needle 20" in on_screen_row(log)
        await pilot.press("down")
        await async_wait_for(lambda: "Needle 60" in on_screen_row(log))
        assert not log.following

        await pilot.press("escape")
        await async_wait_for(lambda: app.focused is app.query_one("#command"))
        assert log.found is None and not finder.display
        assert on_screen("Needle 60")  # the stream stays where the search left it


def on_screen_row(log: StreamLog) -> str:
    """The text of the row the search marked."""
    found = log.found
    return "" if found is None else log.row_text(found.row - log._start_line)


def test_wrapping_remembers_the_spaces_it_drops() -> None:
    console = Console(width=80)
    text = Text("aaaa bbbb cc dd eeeeeeeeee f")
    for width in (4, 5, 6, 7):
        rows = list(_wrapped(text, console, console.options.update_width(width)))
        joined = ""
        for segments, join in rows:
            joined += (" " if join == NEXT_AFTER_SPACE else "") + "".join(s.text for s in segments)
        assert joined == text.plain, (width, rows)
        assert rows[0][1] == START and all(join != START for _, join in rows[1:])


async def test_wrapped_lines_are_wrapped_again_when_the_stream_narrows_and_widens(
    target: RedisTarget, client: aioredis.Redis
) -> None:
    app, _ = await attached_app(target, client)
    said = " ".join(f"word{i:02d}" for i in range(24))  # 167 cells: 3 rows at 78
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app)
        await app.run_line("/attach proj/zeus")
        log = app.query_one("#stream", StreamLog)
        app.view.event(Event("proj/zeus", 1, "token", 0.0, {"text": said + "\n"}))
        await drawn(app)

        def rows_of_said() -> list[str]:
            texts = [log.row_text(y) for y in range(len(log.lines))]
            first = next(y for y, row in enumerate(texts) if row.startswith("word00"))
            last = next(y for y, row in enumerate(texts) if "word23" in row)
            return texts[first : last + 1]

        wide = rows_of_said()
        assert len(wide) == 3
        await pilot.press("f3")  # the side panes take 46 columns: the line rewraps
        await async_wait_for(lambda: len(rows_of_said()) > 4)
        narrow = rows_of_said()
        assert max(len(row.rstrip()) for row in narrow) <= log.scrollable_content_region.width
        assert " ".join(row.strip() for row in narrow) == said  # no word cut or lost
        await pilot.press("f3")
        await async_wait_for(lambda: len(rows_of_said()) == 3)
        assert rows_of_said() == wide


async def test_help_ends_with_the_keys_f3_among_them(target: RedisTarget) -> None:
    app = make_app(target)
    async with app.run_test(size=(80, 24)):
        await started(app)
        await app.run_line("/help")
        await drawn(app)
        log = app.query_one("#stream", StreamLog)
        text = " ".join(log.row_text(y) for y in range(len(log.lines)))
        assert "F3 side panes" in text and "Ctrl+F find" in text
