"""The panes' :class:`ConsoleView`: events become buffered lines, drawn later by the app.

Throttling: the session's tail loop calls :class:`PanesView` once per event, and the
view only appends to buffers. The app drains them into the widgets on a timer, with a
time budget per frame, so a flood of output costs a bounded amount of work per frame.

Scrollback bound: lines waiting to be drawn are kept as the frames they came in (one
string each) up to ``scrollback`` lines and ``scrollback * LINE_MAX`` characters; older
ones are dropped with a visible "not drawn" note, as they would have scrolled out
anyway. An unterminated line is cut every :data:`LINE_MAX` characters and each tail
keeps a few lines, so 50 MB of tool output leaves memory where the setting puts it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from rich.text import Text

from ateam.client import Event, Gap
from ateam.console.panes.assembler import LineAssembler
from ateam.console.panes.lines import LINE_MAX, Kind, Lines, cut, lines_of
from ateam.console.render import Chunk, Tone, render, render_gap
from ateam.console.session import ConsoleView
from ateam.console.tables import table_lines
from ateam.wire import events as wire

DEFAULT_SCROLLBACK = 5000
TAIL_LINES = 4
"""Lines shown per agent in the right-hand tails."""
_BANNER_STYLES = {"warn": "bold yellow", "alert": "bold white on red"}


class _Attached(Protocol):
    @property
    def attached(self) -> str | None: ...


class PanesHost(Protocol):
    """What the view needs of the app around it (the app imports the view, not back)."""

    @property
    def controller(self) -> _Attached | None: ...

    def bell(self) -> None: ...

    def banner_posted(self) -> None:
        """A banner was added (the status bar shows the newest)."""

    def wake(self) -> None:
        """Something was buffered: the app draws it on its next frame."""

    async def ask(self, question: str) -> str: ...

    def page(self, title: str, text: Text) -> None:
        """Show ``text`` on a scrollable screen of its own."""


class PanesView(ConsoleView):
    """The :class:`ConsoleView` of panes mode: buffers only, drawn by the app's timer.

    Events of the attached agent (and console messages) go to the centre; events of
    other followed agents go to their tails. Nothing here touches a widget, so the
    controller's loops never wait on rendering.
    """

    def __init__(
        self,
        app: PanesHost | None = None,
        *,
        scrollback: int = DEFAULT_SCROLLBACK,
        tail_lines: int = TAIL_LINES,
    ) -> None:
        self.app = app
        self.scrollback = scrollback
        self.pending: deque[Lines] = deque()
        """Centre lines not yet drawn, oldest first: at most ``scrollback`` lines and
        ``scrollback * LINE_MAX`` characters."""
        self.pending_lines = 0
        self.pending_chars = 0
        self.skipped = 0
        """Centre lines dropped before they could be drawn (a flood outran the screen)."""
        self.tails: dict[str, deque[tuple[str, str]]] = {}
        """The newest ``(text, style)`` lines of each other followed agent."""
        self.tail_lines = tail_lines
        self.tails_dirty = False
        self.status_dirty = False
        self.banners: deque[tuple[str, str]] = deque(maxlen=3)
        """Newest banners, ``(text, level)``; the bar shows the last one."""
        self.live_states: dict[str, str] = {}
        """States from ``state`` events, newer than the registry until it says otherwise."""
        self._state_changes: set[str] = set()
        self._streams: dict[str, LineAssembler] = {}
        self._pending_from: dict[str, int] = {}

    # where things go --------------------------------------------------------------

    @property
    def centre_agent(self) -> str | None:
        controller = self.app.controller if self.app is not None else None
        return controller.attached if controller is not None else None

    def _wake(self) -> None:
        if self.app is not None:
            self.app.wake()

    def _put(self, lines: Lines) -> None:
        self._wake()
        agent = lines.agent
        if agent is None or agent == self.centre_agent:
            self.pending.append(lines)
            self.pending_lines += lines.nlines
            self.pending_chars += len(lines.text)
            if agent is not None and lines.offset is not None:
                self._pending_from.setdefault(agent, lines.offset)
            self._trim()
            return
        tail = self.tails.get(agent)
        if tail is None:
            tail = self.tails[agent] = deque(maxlen=self.tail_lines)
        newest = lines.text.rsplit("\n", self.tail_lines)[-self.tail_lines :]
        tail.extend((text[:LINE_MAX], lines.style) for text in newest)
        self.tails_dirty = True

    def _trim(self) -> None:
        """Drop the oldest undrawn lines beyond the bound: they would scroll out anyway."""
        max_chars = self.scrollback * LINE_MAX
        while self.pending_lines > self.scrollback or self.pending_chars > max_chars:
            excess = self.pending_lines - self.scrollback
            oldest = self.pending.popleft()
            self.pending_lines -= oldest.nlines
            self.pending_chars -= len(oldest.text)
            kept: Lines | None = None
            if 0 < excess < oldest.nlines:
                rest = oldest.text[cut(oldest.text, excess) + 1 :]
                kept = oldest._replace(text=rest, nlines=oldest.nlines - excess)
            elif excess <= 0 and not self.pending:
                # Over in characters only, and this block is all there is: keep its end.
                kept = lines_of(
                    oldest.agent, oldest.offset, oldest.text[-max_chars:], oldest.style, oldest.kind
                )
            if kept is not None:
                self.pending.appendleft(kept)
                self.pending_lines += kept.nlines
                self.pending_chars += len(kept.text)
            self.skipped += oldest.nlines - (kept.nlines if kept is not None else 0)

    def _say(self, event: Event | Gap, text: str, style: str = "") -> None:
        """A whole line of ``event``'s agent; an unfinished streamed line goes first."""
        agent = event.agent
        offset = event.offset if isinstance(event, Event) else event.first
        self._finish(agent)
        self._put(lines_of(agent, offset, text, style))

    def _finish(self, agent: str) -> None:
        stream = self._streams.get(agent)
        taken = stream.take() if stream is not None else None
        if taken is not None:
            self._put(taken)

    def _stream(self, event: Event, text: str, kind: Kind) -> None:
        stream = self._streams.get(event.agent)
        if stream is None:
            stream = self._streams[event.agent] = LineAssembler(event.agent)
        for lines in stream.feed(text, event.offset, kind):
            self._put(lines)
        if event.agent != self.centre_agent:
            self.tails_dirty = True
        self._wake()  # the line still being written is shown too

    def partial(self, agent: str | None) -> str:
        """The line ``agent`` is still writing (shown live under the stream)."""
        stream = self._streams.get(agent) if agent is not None else None
        return stream.partial if stream is not None else ""

    def buffered_chars(self) -> int:
        """Characters held by the view's buffers (the scrollback bound, measured)."""
        total = self.pending_chars
        total += sum(len(text) for tail in self.tails.values() for text, _ in tail)
        return total + sum(stream.size for stream in self._streams.values())

    # the drawing side --------------------------------------------------------------

    def take_pending(self, count: int) -> list[Lines]:
        """Up to ``count`` of the oldest undrawn centre lines, for one draw."""
        taken: list[Lines] = []
        while self.pending and count > 0:
            oldest = self.pending.popleft()
            if oldest.nlines > count:
                at = cut(oldest.text, count)
                rest = oldest._replace(text=oldest.text[at + 1 :], nlines=oldest.nlines - count)
                self.pending.appendleft(rest)
                oldest = oldest._replace(text=oldest.text[:at], nlines=count)
                self.pending_chars -= 1  # the newline between the two parts
            taken.append(oldest)
            count -= oldest.nlines
            self.pending_lines -= oldest.nlines
            self.pending_chars -= len(oldest.text)
        return taken

    def take_state_changes(self) -> set[str]:
        """The agents whose state an event changed since the last call."""
        changed, self._state_changes = self._state_changes, set()
        return changed

    def drawn(self) -> None:
        """Recompute where each agent's undrawn centre lines begin, after a frame."""
        self._pending_from.clear()
        for lines in self.pending:
            if lines.agent is not None and lines.offset is not None:
                self._pending_from.setdefault(lines.agent, lines.offset)

    def settle(self) -> None:
        """Treat everything received as shown (the console is leaving)."""
        for agent in list(self._streams):
            self._finish(agent)
        self._streams.clear()
        self._pending_from.clear()

    def prune_tails(self, keep: Iterable[str]) -> None:
        wanted = set(keep)
        for agent in [a for a in self.tails if a not in wanted]:
            del self.tails[agent]
        for agent in [a for a in self._streams if a not in wanted and a != self.centre_agent]:
            del self._streams[agent]

    # ConsoleView --------------------------------------------------------------------

    def event(self, event: Event) -> None:
        if isinstance(payload := event.payload, wire.StateChange):
            self.live_states[event.agent] = payload.state
            self._state_changes.add(event.agent)
            self.status_dirty = True
            self._wake()
        shown = render(event)
        if isinstance(shown, Chunk):
            text = f"{_DIM}{shown.text}{_UNDIM}" if shown.thinking else shown.text
            self._stream(event, text, Kind.OUTPUT if shown.output else Kind.MODEL)
            return
        for line in shown:
            self._say(event, _MARKS.get(line.tone, "") + line.text, _TONE_STYLES[line.tone])

    def gap(self, gap: Gap) -> None:
        line = render_gap(gap)
        self._say(gap, line.text, _TONE_STYLES[line.tone])

    def unsettled(self, agent: str) -> int | None:
        """First offset of ``agent`` not yet drawn in full: undrawn lines or a half line."""
        stream = self._streams.get(agent)
        starts = [self._pending_from.get(agent), stream.unsettled if stream is not None else None]
        known = [s for s in starts if s is not None]
        return min(known) if known else None

    def info(self, text: str, agent: str | None = None) -> None:
        shown = f"[{agent}] {text}" if agent and agent != self.centre_agent else text
        self._put(lines_of(None, None, shown))

    def error(self, text: str) -> None:
        self._put(lines_of(None, None, text, "bold red"))

    def banner(self, text: str, *, level: str = "info") -> None:
        self.banners.append((text, level))
        style = _BANNER_STYLES.get(level, "bold")
        self._put(lines_of(None, None, f"*** {text}", style))
        self.status_dirty = True
        if self.app is not None:
            if level == "alert":  # a blocking context item: someone must act
                self.app.bell()
            self.app.banner_posted()

    def table(self, rows: Sequence[Mapping[str, object]], columns: list[str]) -> None:
        if not rows:
            self.info("no agents")
            return
        header, *body = table_lines(rows, columns)
        self._put(lines_of(None, None, header, "bold"))
        for line in body:
            self.info(line)

    def page(self, title: str, text: Text) -> None:
        # Its first lines (the files changed) stay in the centre, the whole on a screen.
        self.info(title)
        if self.app is not None:
            self.app.page(title, text)
        else:
            self.info(text.plain.rstrip("\n"))

    async def ask(self, question: str) -> str:
        if self.app is None:
            return ""
        return await self.app.ask(question)


_DIM, _UNDIM = "\x1b[2m", "\x1b[22m"
"""How a coding agent's reasoning is dimmed in model text (which reads escapes)."""

# How the panes dress the renderer's tones.
_TONE_STYLES: dict[Tone, str] = {
    Tone.TEXT: "",
    Tone.QUIET: "dim",
    Tone.RULE: "dim",
    Tone.RULE_FAILED: "red",
    Tone.TOOL: "bold cyan",
    Tone.TOOL_DONE: "dim cyan",
    Tone.TOOL_FAILED: "red",
    Tone.WARN: "yellow",
    Tone.ERROR: "bold red",
    Tone.STATE: "bold yellow",
    Tone.SWITCH: "bold yellow",
    Tone.HEADING: "bold",
    Tone.ASK: "bold magenta",
    Tone.ANSWER: "magenta",
    Tone.DIFF_FILE: "bold",
    Tone.DIFF_HUNK: "cyan",
    Tone.DIFF_ADD: "green",
    Tone.DIFF_DEL: "red",
}
_MARKS: dict[Tone, str] = {Tone.RULE: "─── ", Tone.RULE_FAILED: "─── ", Tone.SWITCH: "⇄ "}
