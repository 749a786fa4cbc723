"""The panes console's Textual app: layout, the frame timer, commands, leaving.

One class, over 600 lines on purpose: Textual routes keys, messages and timers to the
App's own handlers, which share the frame budget and the command worker.

All logic lives in the UI-free console session; the app renders what its view
(:class:`~ateam.console.panes.view.PanesView`) buffered and feeds typed lines back.

Throttling: a timer drains the view's buffers into the widgets at most ~60 times a
second, with a time budget per frame, so a flood of output costs a bounded amount of
work per frame and keystrokes are handled between frames. Commands run one at a time
in a worker, so a slow command never freezes typing either.

Idling: the frame timer stops once a frame leaves nothing to draw, and whatever gives
it work (an event, a banner, a registry change) wakes it (:meth:`ConsoleApp.wake`). The
agent list is redrawn row by row, for the agents the session says changed; nothing is
compared or redrawn on a timer, so a console with a large, silent team idles.

Garbage collection: pauses of the cycle collector, not drawing, were what kept keys
waiting in a flood. The stream widget (:class:`StreamLog`) keeps its rows in a form
the collector does not track, and the objects that exist once the console is up are
frozen out of full collections (``ConsoleApp._freeze_startup_heap``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import Any, ClassVar

from rich.ansi import AnsiDecoder
from rich.text import Text
from textual import events, on, work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.timer import Timer
from textual.widgets import Footer, Input, OptionList, Static

from ateam.client import AgentStatus
from ateam.completion import ShellTab, columns
from ateam.console.commands import command_line, completer, palette_entries
from ateam.console.controller import ConsoleController
from ateam.console.hints import console_line
from ateam.console.panes.agent_list import STATE_STYLES, AgentList
from ateam.console.panes.ask import AskScreen
from ateam.console.panes.command_input import CommandInput
from ateam.console.panes.find import FindBar
from ateam.console.panes.layout import SidesChoice, sides_for, toggled
from ateam.console.panes.lines import Kind, Lines, fit, visible
from ateam.console.panes.pager import PagerScreen
from ateam.console.panes.palette import PaletteScreen
from ateam.console.panes.stream_log import StreamLog
from ateam.console.panes.tasks import TasksScreen, board_loader, opens_board
from ateam.console.panes.view import DEFAULT_SCROLLBACK, TAIL_LINES, PanesView
from ateam.console.session import ConsoleView
from ateam.errors import AteamError
from ateam.exits import cli_exit_code

EXIT_QUIT = "quit"
"""``run()`` result after ``/quit``, Ctrl+Q or a confirmed Ctrl+C."""
EXIT_PLAIN = "plain"
"""``run()`` result after ``/ui panes off``: the caller continues in plain mode."""
EXIT_ERROR = "error"
"""``run()`` result when the console could not start; see ``ConsoleApp.startup_error``."""

AUTO_TAILS = 4
"""Other live agents followed unasked in the right column (busy ones first)."""
FRAME_S = 1 / 60
TAILS_FRAME_S = 0.1
"""The tails are glanced at, not read: 10 redraws a second spare the CPU of 60."""
LIVE_FRAME_S = 0.05
"""The line being written grows token by token: 20 redraws a second read as smooth."""
FRAME_BUDGET_S = 0.008
"""Time one frame may spend drawing stream lines; the rest waits for the next frame."""
DRAW_CHUNK = 200
QUIT_CONFIRM_S = 3.0
CANDIDATE_ROWS = 4
"""Rows of TAB's matches shown above the command bar; more are counted, not listed."""


ControllerFactory = Callable[[ConsoleView], ConsoleController]


class ConsoleApp(App[str]):
    """The panes console.

    Args:
        controller_factory: builds the session's controller around the app's view
            (``lambda view: ConsoleController(target, view)``); called on mount.
        scrollback: most lines kept in the stream pane.

    ``run()`` / ``run_async()`` return :data:`EXIT_QUIT`, :data:`EXIT_PLAIN` (``/ui
    panes off``) or :data:`EXIT_ERROR` (with ``startup_error`` and ``return_code`` set).
    """

    TITLE = "ateam"
    ENABLE_COMMAND_PALETTE = False
    AUTO_FOCUS = "#command"
    CSS = """
    #banners { height: auto; max-height: 4; padding: 0 1; background: $boost; }
    #body { height: 1fr; }
    #agents { width: 34; height: 1fr; border: round $secondary; }
    #agents.folded, #tails.folded { display: none; }
    #centre { width: 1fr; height: 1fr; border: round $primary; }
    #centre.read-only { border: round $error; }
    #readonly { height: auto; display: none; background: $error-darken-2; padding: 0 1; }
    #centre.read-only #readonly { display: block; }
    #stream { height: 1fr; scrollbar-size-vertical: 1; }
    #live { height: auto; max-height: 4; }
    #below { height: 1; display: none; background: $boost; color: $warning; padding: 0 1; }
    #centre.scrolled #below { display: block; }
    #centre.attached #live { min-height: 1; }
    #tails { width: 32; height: 1fr; border: round $secondary; }
    #tails-text { text-wrap: nowrap; text-overflow: ellipsis; }
    #agents { text-wrap: nowrap; text-overflow: ellipsis; }
    #message { height: auto; max-height: 4; padding: 0 1; }
    #find { display: none; }
    #find.open { display: block; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f1", "palette", "agents", priority=True),
        Binding("f2", "tasks", "tasks", show=False),
        Binding("f3", "sides", "side panes"),
        Binding("ctrl+f", "find", "find"),
        Binding("pageup", "stream('page_up')", "scroll", show=False),
        Binding("pagedown", "stream('page_down')", show=False),
        Binding("ctrl+home", "stream('home')", show=False),
        Binding("ctrl+end", "stream('end')", show=False),
        Binding("ctrl+c", "interrupt", "interrupt", priority=True),
        Binding("ctrl+q", "quit", "quit", priority=True),
    ]

    def __init__(
        self,
        controller_factory: ControllerFactory,
        *,
        scrollback: int = DEFAULT_SCROLLBACK,
        tail_lines: int = TAIL_LINES,
        first_lines: Sequence[str] = (),
        auto_tails: int = AUTO_TAILS,
    ) -> None:
        super().__init__()
        self._factory = controller_factory
        self._first_lines = list(first_lines)
        """Run once connected (re-attaching after ``/ui panes on`` in plain mode)."""
        self._auto_tails = auto_tails
        self.scrollback = scrollback
        self.view = PanesView(self, scrollback=scrollback, tail_lines=tail_lines)
        self.controller: ConsoleController | None = None
        self.startup_error: AteamError | None = None
        """Why the console could not start, when ``run()`` returned :data:`EXIT_ERROR`."""
        self.attached_at_exit: str | None = None
        """The agent this session was attached to when it closed (its claim is released),
        so a caller switching to plain mode can attach again."""
        self.ready = asyncio.Event()
        """Set once the controller has connected."""
        self._commands: asyncio.Queue[str] = asyncio.Queue()
        self._side_tasks: set[asyncio.Task[None]] = set()
        self._session_closed = False
        self._dirty_rows: set[str] = set()
        self._drawn_attached: str | None = None
        self._status: tuple[Any, ...] = ()
        self._drawn_status: tuple[Any, ...] = ()
        self._live = ""
        self._live_rows = -1
        self._slow_drawn_at = 0.0
        self._tails_rows = -1
        self._quit_armed_at = 0.0
        self._decoders: dict[str, AnsiDecoder] = {}
        self._froze = False
        self._tails_drawn_at = 0.0
        self._frame_timer: Timer | None = None
        self.sides = SidesChoice.AUTO
        """Side panes as the user chose with F3 (``auto``: by the terminal's width)."""

    # layout ---------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(id="banners")
        with Horizontal(id="body"):
            yield AgentList(id="agents")
            with Vertical(id="centre"):
                yield Static(id="readonly")
                yield StreamLog(id="stream", max_lines=self.scrollback, wrap=True, min_width=1)
                yield Static(id="below")
                yield Static(id="live")
            with VerticalScroll(id="tails"):
                yield Static(id="tails-text")
        yield Static(id="message")
        yield FindBar(lambda: self.query_one("#stream", StreamLog), self._tell, id="find")
        yield CommandInput(id="command", placeholder="connecting…")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#agents").border_title = "agents"
        self.query_one("#tails").border_title = "tails"
        self.query_one("#centre").border_title = "not attached"
        self.query_one("#find", FindBar).on_close = self._focus_command
        self._fit_sides()
        self._frame_timer = self.set_interval(FRAME_S, self._frame)
        self._start()
        self._run_commands()

    @work(exclusive=True, group="start", exit_on_error=False)
    async def _start(self) -> None:
        controller = self._factory(self.view)
        controller.front_end = "panes"
        controller.panes_possible = True
        controller.auto_tail_limit = self._auto_tails  # the right column: the rest of the team
        controller.agents_changed = self._agents_changed
        self.controller = controller
        self.query_one("#command", CommandInput).tab = ShellTab(completer(controller))
        try:
            await controller.start()
        except AteamError as exc:
            self.startup_error = exc
            with contextlib.suppress(Exception):
                await controller.aclose()
            self.controller = None
            # The caller prints ``startup_error.one_line()`` (or falls back to plain mode).
            self.exit(EXIT_ERROR, return_code=cli_exit_code(exc))
            return
        self.view.banner("connected — /help for commands, F1 for agents")
        self._freeze_startup_heap()
        for line in self._first_lines:
            self._commands.put_nowait(line)
        self.ready.set()

    def _freeze_startup_heap(self) -> None:
        """Leave what exists once connected out of the cycle collector's full collections.

        A full collection walks every tracked object, and a started console holds some
        110 000 (Textual, its widgets and styles, the modules): 70-100 ms with the app
        stopped, keystrokes included. Drawing a flood creates and drops strips fast
        enough to set one off every second or so. Nearly all of those objects live as
        long as the app, so they are frozen (collected first, so no garbage is kept);
        full collections then walk only what came after. Unfrozen on unmount, so the
        app's own cycles can be collected once it is gone.
        """
        gc.collect()
        gc.freeze()
        self._froze = True

    def on_resize(self, event: events.Resize) -> None:
        # Before App's own handler has taken the new size: the event's is the one.
        self._fit_sides(event.size.width)

    def _fit_sides(self, width: int | None = None) -> None:
        """Give the side panes the widths the terminal's width (and F3) leave them."""
        sides = sides_for(self.size.width if width is None else width, self.sides)
        for selector, width in (("#agents", sides.agents), ("#tails", sides.tails)):
            pane = self.query_one(selector)
            pane.set_class(not width, "folded")
            if width:
                pane.styles.width = width
        # Folded, the panes are one key away: the stream's frame says which.
        centre = self.query_one("#centre")
        centre.border_subtitle = "" if sides.agents and sides.tails else "F3 agents · tails"
        self.view.status_dirty = True
        self.wake()

    def _focus_command(self) -> None:
        self.query_one("#command").focus()

    def action_sides(self) -> None:
        """F3: bring the side panes back when folded, put them away when shown."""
        self.sides = toggled(self.size.width, self.sides)
        self._fit_sides()

    # reading back -----------------------------------------------------------------------

    def action_stream(self, where: str) -> None:
        """PageUp/PageDown, Ctrl+Home/Ctrl+End (and Home/End on an empty command bar)."""
        if len(self.screen_stack) == 1:
            self.query_one("#stream", StreamLog).page(where)

    def action_find(self) -> None:
        """Ctrl+F: the find bar, over the command bar until Esc."""
        if len(self.screen_stack) > 1:
            return
        bar = self.query_one("#find", FindBar)
        bar.add_class("open")
        bar.focus()

    @on(CommandInput.Candidates)
    def _candidates(self, event: CommandInput.Candidates) -> None:
        """The matches a TAB could not choose between, in columns above the bar."""
        message = next(iter(self.query("#message").results(Static)), None)
        if message is None:
            return  # posted by a TAB just before the app closed: nowhere to show them
        rows = columns(event.candidates, max(message.content_region.width, 20))
        if len(rows) > CANDIDATE_ROWS:
            # Laid out down then across: row r holds the matches whose index is r mod rows.
            kept = CANDIDATE_ROWS - 1
            more = sum(1 for i in range(len(event.candidates)) if i % len(rows) >= kept)
            rows = [*rows[:kept], f"… and {more} more: type more of the name"]
        message.update(Text("\n".join(rows), "dim", no_wrap=True, overflow="ellipsis"))

    def _tell(self, text: str) -> None:
        self.query_one("#message", Static).update(Text(text, "italic", no_wrap=True))

    @on(StreamLog.Moved)
    def _draw_below(self) -> None:
        """The line under a stream the reader scrolled back in: how much came since."""
        log = self.query_one("#stream", StreamLog)
        self.query_one("#centre").set_class(not log.following, "scrolled")
        new = log.unseen
        what = f"↓ {new} new line{'s' if new != 1 else ''} below" if new else "↑ scrolled back"
        self.query_one("#below", Static).update(f"{what} — PageDown or Ctrl+End to follow")

    # commands ---------------------------------------------------------------------------

    @on(Input.Submitted, "#command")
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()  # the bar has already remembered and cleared the line
        if event.value.strip():
            self._commands.put_nowait(event.value)

    @work(exclusive=True, group="commands", exit_on_error=False)
    async def _run_commands(self) -> None:
        """Run typed lines one after another, so their effects keep the order typed."""
        await self.ready.wait()
        while True:
            line = await self._commands.get()
            await self.run_line(line)

    async def run_line(self, line: str) -> None:
        """Run one command line; errors become a single line, never a traceback."""
        controller = self.controller
        if controller is None:
            return
        if opens_board(line):  # ``/tasks`` alone: the board as a screen, not a table
            self.action_tasks()
            return
        self.query_one("#message", Static).update("")
        try:
            await controller.execute(line)
        except AteamError as exc:
            self.show_error(console_line(exc, line, controller.attached))
        except Exception as exc:  # a bug behind one command must not end the console
            self.show_error(f"error [internal]: {line.split()[0]} failed: {exc!r}")
        # Attached, detached, tailed or read-only now: the titles and tails may change.
        self.view.status_dirty = self.view.tails_dirty = True
        self.wake()
        if controller.quit_requested:
            # ``/ui panes off`` ends this front end for the caller to continue in plain.
            await self.leave(EXIT_PLAIN if controller.switch_to == "plain" else EXIT_QUIT)

    def show_error(self, text: str) -> None:
        """One line in the message bar (and in the stream, to keep a record)."""
        line = text.splitlines()[0] if text else ""
        self.query_one("#message", Static).update(Text(line, "bold red", no_wrap=True))
        self.view.error(line)

    def _side_task(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` beside the command queue; cancelled if the app stops first."""
        task = asyncio.ensure_future(coro)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    async def _quietly(self, line: str) -> None:
        controller = self.controller
        if controller is None:
            return
        try:
            await controller.execute(line)
        except AteamError as exc:
            self.show_error(console_line(exc, line, controller.attached))

    async def ask(self, question: str) -> str:
        """Show ``question`` in a modal and wait for the answer ("" when dismissed)."""
        answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        def done(value: str | None) -> None:
            if not answer.done():
                answer.set_result(value or "")

        await self.push_screen(AskScreen(question), done)
        return await answer

    def page(self, title: str, text: Text) -> None:
        """A long text (``/diff``) on a scrollable screen; Escape closes it."""
        self.push_screen(PagerScreen(title, text))

    # leaving ------------------------------------------------------------------------------

    async def leave(self, result: str) -> None:
        """Draw what is left, close the session (releasing ownership), then exit."""
        self._frame()
        await self._close_controller()
        self.exit(result)

    async def _close_controller(self) -> None:
        if self._session_closed:
            return
        self._session_closed = True
        self.view.settle()
        if self.controller is not None:
            self.attached_at_exit = self.controller.attached
            await self.controller.aclose()

    async def on_unmount(self) -> None:
        # Reached when the app stops any other way (a test ending, a signal): the
        # session must still release its ownership and save its offsets.
        for task in list(self._side_tasks):
            task.cancel()
        await self._close_controller()
        if self._froze:
            self._froze = False
            gc.unfreeze()

    async def action_quit(self) -> None:
        await self.leave(EXIT_QUIT)

    def action_interrupt(self) -> None:
        """Ctrl+C: interrupt the attached agent; when not attached, ask before quitting."""
        screen = self.screen
        if isinstance(screen, PaletteScreen):
            screen.dismiss(None)
            return
        if isinstance(screen, AskScreen):
            screen.dismiss("")
            return
        controller = self.controller
        if controller is not None and controller.attached and not controller.read_only:
            # Not queued behind a running command: an interrupt must not wait.
            self._side_task(self._quietly("/interrupt"))
            return
        now = time.monotonic()
        if now - self._quit_armed_at <= QUIT_CONFIRM_S:
            self._side_task(self.leave(EXIT_QUIT))
            return
        self._quit_armed_at = now
        self.view.banner("not attached: press Ctrl+C again (or /quit) to leave the console")

    # palette ------------------------------------------------------------------------------

    def action_palette(self) -> None:
        if len(self.screen_stack) > 1:
            return  # a palette or a question is already open

        def chosen(choice: str | None) -> None:
            if choice is None:
                return
            if choice.startswith("/"):  # a command: left in the bar for its arguments
                bar = self.query_one("#command", CommandInput)
                bar.value = f"{choice} "
                bar.cursor_position = len(bar.value)
                bar.focus()
                return
            self._commands.put_nowait(self._pick(choice))

        self.push_screen(PaletteScreen(self._agent_ids, palette_entries), chosen)

    def action_tasks(self) -> None:
        """F2: the project's task board; Enter leaves the next step in the command bar."""
        if self.controller is None or len(self.screen_stack) > 1:
            return

        def chosen(line: str | None) -> None:
            if line:
                bar = self.query_one("#command", CommandInput)
                bar.value = line
                bar.cursor_position = len(line)
                bar.focus()

        console = self.controller
        self.push_screen(TasksScreen(board_loader(console), news=console.board_news), chosen)

    def _agent_ids(self) -> list[str]:
        return sorted(self.controller.known) if self.controller is not None else []

    def _pick(self, agent: str) -> str:
        """What picking ``agent`` runs: the session decides (a watch-only one tails)."""
        if self.controller is None:
            return command_line("attach", agent)
        return self.controller.pick(agent)

    @on(OptionList.OptionSelected, "#agents")
    def _agent_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option.id:
            self._commands.put_nowait(self._pick(event.option.id))
            self.query_one("#command").focus()

    # drawing -------------------------------------------------------------------------------

    def _frame(self) -> None:
        """One frame: drain buffered lines into the widgets within the frame budget."""
        if not self.is_running:
            return  # shutting down: the widgets may already be gone
        view = self.view
        now = time.monotonic()
        drew = bool(view.pending or view.skipped)
        if drew:
            self._draw_stream()
        live = view.partial(view.centre_agent)
        # Every frame that changes the screen is a screen update, which draws again each
        # pane it overlaps: the live line and the tails share slow frames (the tails every
        # other one). The live line also goes with the stream, so a finished line never
        # shows twice or not at all.
        slow = now - self._slow_drawn_at >= LIVE_FRAME_S
        if slow:
            self._slow_drawn_at = now
        if live != self._live and (drew or slow):
            self._live = live
            self._draw_live(live)
        if slow and view.tails_dirty and now - self._tails_drawn_at >= TAILS_FRAME_S - FRAME_S:
            view.tails_dirty = False
            self._tails_drawn_at = now
            self._draw_tails()
        if view.status_dirty or self._status_key() != self._status:
            view.status_dirty = False
            self._sync()
        idle = not (view.pending or view.skipped or view.tails_dirty or view.status_dirty)
        if idle and live == self._live and self._frame_timer is not None:
            self._frame_timer.pause()

    def wake(self) -> None:
        """Something waits to be drawn: run the frame timer, which stops when idle."""
        if self._frame_timer is not None:
            self._frame_timer.resume()

    def _draw_stream(self) -> None:
        view = self.view
        log = self.query_one("#stream", StreamLog)
        follow = log.following
        # Wrap at the pane's width: left to itself RichLog measures against the whole
        # console, which is not the pane.
        width = log.scrollable_content_region.width or None
        started = time.perf_counter()
        if view.skipped:
            note = f"… {view.skipped} lines not drawn (output faster than the screen)"
            view.skipped = 0
            log.write(Text(note, "dim yellow"), width=width, scroll_end=follow)
        while view.pending and time.perf_counter() - started < FRAME_BUDGET_S:
            # Line by line, so the garbage of one line is gone before the next is made:
            # a whole chunk's worth alive at once outlives young collections and is
            # promoted, which brings on full collections sooner.
            chunk = view.take_pending(DRAW_CHUNK)
            log.write_lines(
                (text for lines in chunk for text in self._render(lines)), width, scroll_end=follow
            )
        view.drawn()

    def _render(self, lines: Lines) -> Iterator[Text]:
        """The styled lines of ``lines``, made one at a time as they are drawn."""
        agent = lines.agent
        texts = fit([visible(text) for text in lines.text.split("\n")])
        if lines.kind == Kind.OUTPUT and agent is not None:
            decoder = self._decoders.get(agent)
            if decoder is None:
                decoder = self._decoders[agent] = AnsiDecoder()
            return map(decoder.decode_line, texts)
        if agent is not None:
            # A tool boundary or other notice: colours of the last output end there.
            self._decoders.pop(agent, None)
        if lines.kind == Kind.MODEL:
            return (Text.from_ansi(text, style=lines.style) for text in texts)
        return (Text(text, lines.style) for text in texts)

    def _draw_live(self, live: str) -> None:
        """The line the attached agent is still writing, under the stream.

        A layout (a reflow and redraw of the whole screen) only when its height changes:
        the line grows token by token, and a layout per token was most of the console's
        work with one agent talking.
        """
        widget = self.query_one("#live", Static)
        text = Text.from_ansi(visible(live[-1000:]))  # the widget shows a few rows of it
        width = widget.content_region.width
        rows = len(text.wrap(self.console, width)) if text.plain and width > 0 else 0
        # While attached the row is kept even when empty (CSS): a line ending is no layout.
        rows = max(rows, 1 if self.controller is not None and self.controller.attached else 0)
        widget.update(text, layout=rows != self._live_rows)
        self._live_rows = rows

    def _draw_tails(self) -> None:
        controller = self.controller
        if controller is None:
            return
        followed = controller.tailed | controller.auto_tailed
        shown = sorted(a for a in followed if a != controller.attached)
        out = Text(no_wrap=True, overflow="ellipsis")
        for agent in shown:
            known = controller.known.get(agent)
            state = self._state_of(known) if known is not None else "gone"
            out.append(f"{agent}", "bold")
            out.append(f" · {state}\n", STATE_STYLES.get(state, "dim"))
            for text, style in self.view.tails.get(agent, ()):
                out.append_text(Text.from_ansi(visible(text), style=style or "dim"))
                out.append("\n")
            # The line being written, if any, takes the row that parts one agent from the
            # next: a line ending then changes no row count, so it needs no layout.
            partial = self.view.partial(agent)
            if partial:
                out.append_text(Text.from_ansi(visible(partial[-200:]), style="dim"))
            out.append("\n")
        if not shown:
            out.append("other agents' output\nshows here (/tail ID)", "dim")
        # Rows are never wrapped here (one per line): only a new count needs a layout.
        rows = out.plain.count("\n")
        self.query_one("#tails-text", Static).update(out, layout=rows != self._tails_rows)
        self._tails_rows = rows

    # registry, banners, ownership ------------------------------------------------------------

    def banner_posted(self) -> None:
        """A banner was added: the status bar shows it on the next frame."""
        self.wake()

    def _agents_changed(self, agents: set[str]) -> None:
        """The session's news: these agents' rows changed (the registry says so)."""
        for agent in agents:
            # The registry's word is newer than the states seen in events before it.
            self.view.live_states.pop(agent, None)
        self._dirty_rows |= agents
        self.view.status_dirty = True
        self.wake()

    def _state_of(self, view: AgentStatus) -> str:
        return self.view.live_states.get(view.id, view.state)

    def _status_key(self) -> tuple[Any, ...]:
        controller = self.controller
        if controller is None:
            return ()
        return (controller.attached, controller.read_only)

    def _sync(self) -> None:
        """Bring the agent list, banners and the stream's title in line with the session.

        Only the rows of agents that changed are drawn again: a silent team costs
        nothing here, however large.
        """
        controller = self.controller
        if controller is None or not self.is_running:
            return  # not connected yet, or shutting down with the widgets already gone
        dirty, self._dirty_rows = self._dirty_rows | self.view.take_state_changes(), set()
        attached = controller.attached
        if attached != self._drawn_attached:
            dirty |= {agent for agent in (attached, self._drawn_attached) if agent}
            self._drawn_attached = attached
        if dirty:
            self._draw_agents(controller, dirty)
        self.view.prune_tails(
            [*controller.tailed, *controller.auto_tailed, *(a for a in [attached] if a)]
        )
        self._status = self._status_key()
        self._draw_status(controller)

    def _draw_agents(self, controller: ConsoleController, dirty: set[str]) -> None:
        """Redraw the rows of ``dirty`` agents (see :meth:`AgentList.redraw`)."""
        agents = self.query_one("#agents", AgentList)
        newly_waiting = agents.redraw(
            controller.known, dirty, state_of=self._state_of, attached=controller.attached
        )
        if newly_waiting:
            self.bell()
        self.view.tails_dirty = True  # a tail's header shows its agent's state

    def _draw_status(self, controller: ConsoleController) -> None:
        last = self.view.banners[-1] if self.view.banners else None
        waiting = self.query_one("#agents", AgentList).waiting
        known = controller.known.get(controller.attached) if controller.attached else None
        # The attached agent's state rides in the stream's title: it must show when the
        # agent list is folded away (a narrow terminal).
        state = self._state_of(known) if known is not None else "gone"
        key = (tuple(sorted(waiting)), last, controller.attached, controller.read_only, state)
        if key == self._drawn_status:
            return
        self._drawn_status = key
        bar = Text()
        for waiter in sorted(waiting):
            bar.append(f"⏳ agent {waiter} is waiting for approval", "bold black on yellow")
            bar.append("\n")
        if last is not None:
            text, level = last
            bar.append(text, "bold red" if level == "warn" else "")
        bar.rstrip()
        self.query_one("#banners", Static).update(bar)
        centre = self.query_one("#centre")
        command = self.query_one("#command", CommandInput)
        agent = controller.attached
        read_only = bool(agent) and controller.read_only
        centre.set_class(read_only, "read-only")
        centre.set_class(agent is not None, "attached")
        if agent is None:
            centre.border_title = "not attached"
            command.placeholder = "/attach ID or F1 to pick an agent; /help lists commands"
        elif read_only:
            centre.border_title = f"{agent} · {state} · READ-ONLY"
            command.placeholder = f"read-only for {agent}: /attach {agent} --takeover to write"
            self.query_one("#readonly", Static).update(
                Text(
                    f"read-only: another console owns {agent}; "
                    f"/attach {agent} --takeover to write again"
                )
            )
        else:
            centre.border_title = f"{agent} · {state} · writer"
            command.placeholder = f"message for {agent} (Enter sends); /help lists commands"
