"""Panes mode (SPEC §6): the console as a Textual app.

Layout::

    ┌ banners: waiting-for-approval, ownership, connection ───────────────────┐
    ├ agents ──────┬ attached stream ─────────────────────────┬ tails ────────┤
    │ ⏳ p/zeus     │ tokens joined into lines, tool output     │ p/hera · busy │
    │   model 12%  │ with its ANSI colours, tool boundaries,   │  last lines   │
    │   host · q2  │ errors and model switches styled apart    │  of each      │
    │              │ the unfinished line, live                 │  tailed agent │
    ├──────────────┴───────────────────────────────────────────┴───────────────┤
    │ last error or notice (one line)                                          │
    │ > command bar                                                            │
    └ footer: F1 agents · ^C interrupt · ^Q quit ──────────────────────────────┘

All logic lives in :class:`~ateam.console.controller.ConsoleController`; this module
only renders what it is told and feeds typed lines back.

Throttling: the controller's tail loop calls :class:`PanesView` once per event, and the
view only appends to buffers. A timer drains them into the widgets at most ~60 times
a second, with a time budget per frame, so a flood of output costs a bounded amount of
work per frame and keystrokes are handled between frames. Commands run one at a time
in a worker, so a slow command never freezes typing either.

Scrollback bound: the stream widget keeps at most ``scrollback`` lines. Lines waiting
to be drawn are kept as the frames they came in (one string each) up to the same
number of lines and ``scrollback * LINE_MAX`` characters; older ones are dropped with a
visible "not drawn" note, as they would have scrolled out anyway. An unterminated line
is cut every :data:`LINE_MAX` characters and each tail keeps a few lines, so 50 MB of
tool output leaves memory where the scrollback setting puts it.

Garbage collection: pauses of the cycle collector, not drawing, were what kept keys
waiting in a flood. The stream widget (:class:`StreamLog`) keeps its rows in a form
the collector does not track, and the objects that exist once the console is up are
frozen out of full collections (``ConsoleApp._freeze_startup_heap``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, NamedTuple, Self, cast, overload

from rich.ansi import AnsiDecoder
from rich.cells import cell_len
from rich.console import ConsoleOptions, RenderableType
from rich.measure import measure_renderables
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events, on, work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.cache import LRUCache
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.geometry import Size
from textual.screen import ModalScreen
from textual.strip import Strip
from textual.widgets import Footer, Input, Label, OptionList, RichLog, Static
from textual.widgets.option_list import Option

from ateam.bus.events import Event, EventType, Gap, decode_chunk
from ateam.bus.registry import AgentView
from ateam.completion import CommandCompleter, TabCycler
from ateam.console.controller import (
    ConsoleController,
    ConsoleView,
    handoff_line,
    kb_progress_line,
    table_lines,
)
from ateam.errors import AteamError, cli_exit_code

EXIT_QUIT = "quit"
"""``run()`` result after ``/quit``, Ctrl+Q or a confirmed Ctrl+C."""
EXIT_PLAIN = "plain"
"""``run()`` result after ``/ui panes off``: the caller continues in plain mode."""
EXIT_ERROR = "error"
"""``run()`` result when the console could not start; see ``ConsoleApp.startup_error``."""

DEFAULT_SCROLLBACK = 5000
LINE_MAX = 4096
"""Longest line kept: a newline-free flood is cut into lines of this many characters."""
TAIL_LINES = 4
"""Lines shown per agent in the right-hand tails."""
AUTO_TAILS = 4
"""Other live agents followed unasked in the right column (busy ones first)."""
_BANNER_STYLES = {"warn": "bold yellow", "alert": "bold white on red"}
FRAME_S = 1 / 60
TAILS_FRAME_S = 0.1
"""The tails are glanced at, not read: 10 redraws a second spare the CPU of 60."""
FRAME_BUDGET_S = 0.008
"""Time one frame may spend drawing stream lines; the rest waits for the next frame."""
DRAW_CHUNK = 200
STYLES_MAX = 4096
"""Distinct styles the stream pane numbers before it forgets those no kept row uses."""
LINE_CACHE = 256
"""Rows of the stream pane kept drawn as strips: a few screens' worth for scrolling."""
SYNC_S = 0.25
"""How often the agent list and banners are compared with the controller's registry."""
QUIT_CONFIRM_S = 3.0

# C0 controls other than tab and ESC would reach the terminal raw (a BEL, a backspace)
# and corrupt the screen; ESC sequences are turned into styles by the ANSI decoder, and
# carriage returns are applied before this table removes the rest.
_CONTROLS = {c: None for c in (*range(0x00, 0x09), *range(0x0B, 0x1B), *range(0x1C, 0x20), 0x7F)}


class Kind(StrEnum):
    """How a buffered line becomes styled text when it is drawn."""

    STYLED = "styled"
    """Text written by the console itself, drawn in the line's style."""
    MODEL = "model"
    """Model text: escape sequences are interpreted, nothing carries over between lines."""
    OUTPUT = "output"
    """Tool output: colours carry over from line to line, as in the terminal it ran in."""


class Lines(NamedTuple):
    """Consecutive lines from one source, drawn the same way, kept as one string.

    A frame of tool output stays one string until it is drawn: a flood then costs a few
    slices and a newline count per event, not a Python object per line, and lines that
    are dropped before they are drawn are never split at all.
    """

    agent: str | None
    offset: int | None
    """Offset of the first event whose text is in these lines (None for console lines)."""
    text: str
    """The lines, joined by newlines."""
    nlines: int
    style: str = ""
    kind: Kind = Kind.STYLED


def lines_of(
    agent: str | None, offset: int | None, text: str, style: str = "", kind: Kind = Kind.STYLED
) -> Lines:
    return Lines(agent, offset, text, text.count("\n") + 1, style, kind)


def _visible(line: str) -> str:
    """What a terminal would leave of ``line``: text after a carriage return overwrites."""
    line = line.rstrip("\r")
    if "\r" in line:
        line = line.rsplit("\r", 1)[-1]
    return line.translate(_CONTROLS)


def _chop(text: str) -> list[str]:
    """``text`` in pieces of at most :data:`LINE_MAX` characters (at least one piece)."""
    if len(text) <= LINE_MAX:
        return [text]
    return [text[i : i + LINE_MAX] for i in range(0, len(text), LINE_MAX)]


def _fit(texts: list[str]) -> list[str]:
    """Lines longer than :data:`LINE_MAX` cut into pieces (drawn as several rows)."""
    if not texts or max(map(len, texts)) <= LINE_MAX:
        return texts
    return [piece for text in texts for piece in _chop(text)]


def _cut(text: str, count: int) -> int:
    """Index of the newline that ends the first ``count`` lines of ``text``."""
    at = -1
    for _ in range(count):
        at = text.index("\n", at + 1)
    return at


@dataclass
class _Stream:
    """One agent's text stream: the line still being written, and where it began."""

    agent: str
    parts: list[str] = field(default_factory=list)
    size: int = 0
    began: int = 0
    """Offset of the first event that contributed to the unfinished line."""
    kind: Kind = Kind.MODEL

    def feed(self, text: str, offset: int, kind: Kind) -> list[Lines]:
        """Add a chunk of text; return the lines it completes."""
        if not self.parts:
            self.began, self.kind = offset, kind
        first_nl = text.find("\n")
        if first_nl < 0:
            self.parts.append(text)
            self.size += len(text)
            if self.size <= LINE_MAX:
                return []
            # No newline for too long: cut the line rather than let it grow.
            pieces = _chop("".join(self.parts))
            done = [lines_of(self.agent, self.began, "\n".join(pieces[:-1]), "", self.kind)]
            self._restart(pieces[-1], offset, kind)
            return done
        last_nl = text.rfind("\n")
        head = "".join(self.parts) + text[:first_nl] if self.parts else text[:first_nl]
        if self.began == offset and self.kind == kind:
            done = [lines_of(self.agent, offset, head + text[first_nl:last_nl], "", kind)]
        else:
            done = [Lines(self.agent, self.began, head, 1, "", self.kind)]
            if last_nl > first_nl:
                middle = text[first_nl + 1 : last_nl]
                done.append(lines_of(self.agent, offset, middle, "", kind))
        pieces = _chop(text[last_nl + 1 :])
        if len(pieces) > 1:
            done.append(lines_of(self.agent, offset, "\n".join(pieces[:-1]), "", kind))
        self._restart(pieces[-1], offset, kind)
        return done

    def _restart(self, rest: str, offset: int, kind: Kind) -> None:
        self.parts = [rest] if rest else []
        self.size = len(rest)
        self.began = offset
        self.kind = kind

    def take(self) -> Lines | None:
        """The unfinished line, now treated as finished (before a boundary is drawn)."""
        if not self.parts:
            return None
        line = Lines(self.agent, self.began, "".join(self.parts), 1, "", self.kind)
        self._restart("", 0, Kind.MODEL)
        return line

    @property
    def partial(self) -> str:
        return "".join(self.parts)

    @property
    def unsettled(self) -> int | None:
        return self.began if self.parts else None


class PanesView(ConsoleView):
    """The :class:`ConsoleView` of panes mode: buffers only, drawn by the app's timer.

    Events of the attached agent (and console messages) go to the centre; events of
    other followed agents go to their tails. Nothing here touches a widget, so the
    controller's loops never wait on rendering.
    """

    def __init__(
        self,
        app: ConsoleApp | None = None,
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
        """States from ``state`` events, newer than the registry until it is re-read."""
        self._streams: dict[str, _Stream] = {}
        self._pending_from: dict[str, int] = {}

    # where things go --------------------------------------------------------------

    @property
    def centre_agent(self) -> str | None:
        controller = self.app.controller if self.app is not None else None
        return controller.attached if controller is not None else None

    def _put(self, lines: Lines) -> None:
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
                rest = oldest.text[_cut(oldest.text, excess) + 1 :]
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

    def _stream(self, event: Event, kind: Kind) -> None:
        data = event.data
        text = data.get("text")
        if not isinstance(text, str) or "b64" in data:
            text = decode_chunk(data).decode("utf-8", "replace")
        stream = self._streams.get(event.agent)
        if stream is None:
            stream = self._streams[event.agent] = _Stream(event.agent)
        for lines in stream.feed(text, event.offset, kind):
            self._put(lines)
        if event.agent != self.centre_agent:
            self.tails_dirty = True

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
                cut = _cut(oldest.text, count)
                rest = oldest._replace(text=oldest.text[cut + 1 :], nlines=oldest.nlines - count)
                self.pending.appendleft(rest)
                oldest = oldest._replace(text=oldest.text[:cut], nlines=count)
                self.pending_chars -= 1  # the newline between the two parts
            taken.append(oldest)
            count -= oldest.nlines
            self.pending_lines -= oldest.nlines
            self.pending_chars -= len(oldest.text)
        return taken

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
        handler = _RENDERERS.get(event.type)
        if handler is None:
            self._say(event, f"{event.type} {json.dumps(event.data, default=str)}", "dim")
            return
        handler(self, event)

    def gap(self, gap: Gap) -> None:
        self._say(gap, gap.message(), "yellow")

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

    def table(self, rows: list[dict[str, Any]], columns: list[str]) -> None:
        if not rows:
            self.info("no agents")
            return
        header, *body = table_lines(rows, columns)
        self._put(lines_of(None, None, header, "bold"))
        for line in body:
            self.info(line)

    async def ask(self, question: str) -> str:
        if self.app is None:
            return ""
        return await self.app.ask(question)

    # renderers, one per event type ---------------------------------------------------

    def _token(self, event: Event) -> None:
        self._stream(event, Kind.MODEL)

    def _tool_output(self, event: Event) -> None:
        self._stream(event, Kind.OUTPUT)

    def _tool_start(self, event: Event) -> None:
        args = event.data.get("input") or {}
        name = event.data.get("name")
        if name == "os.exec" and isinstance(args, dict):
            shown = f"$ {args.get('cmd')}"
        else:
            shown = f"{name} {json.dumps(args, ensure_ascii=False, default=str)}"
        self._say(event, f"▶ {shown}", "bold cyan")

    def _tool_end(self, event: Event) -> None:
        data = event.data
        reason = data.get("reason")
        failed = False
        if data.get("exit_code") is not None or reason not in (None, "exited"):
            status = f"exit {data.get('exit_code')}"
            if reason not in (None, "exited"):
                status += f" ({reason})"
            failed = data.get("exit_code") != 0
        elif data.get("ok"):
            status = "ok"
        else:
            status = f"failed [{data.get('code')}]: {data.get('error')}"
            failed = True
        text = f"◀ {data.get('name')} {status} ({data.get('duration_s')}s)"
        self._say(event, text, "red" if failed else "dim cyan")

    def _task_start(self, event: Event) -> None:
        self._say(event, f"─── task {event.task_id}: {event.data.get('text')}", "dim")

    def _task_end(self, event: Event) -> None:
        ok = event.data.get("ok")
        outcome = "done" if ok else f"failed: {event.data.get('error')}"
        took = event.data.get("duration_s")
        timing = f" ({took}s)" if took is not None else ""
        self._say(event, f"─── task {event.task_id} {outcome}{timing}", "dim" if ok else "red")

    def _warn(self, event: Event) -> None:
        self._say(event, f"warn: {event.data.get('msg')}", "yellow")

    def _error(self, event: Event) -> None:
        code = f" [{event.data['code']}]" if event.data.get("code") else ""
        self._say(event, f"error{code}: {event.data.get('msg')}", "bold red")

    def _state(self, event: Event) -> None:
        state = str(event.data.get("state"))
        self.live_states[event.agent] = state
        self.status_dirty = True
        if state in ("waiting", "shutdown"):
            self._say(event, f"state: {state}", "bold yellow")

    def _ownership(self, event: Event) -> None:
        self._say(event, f"owner is now {event.data.get('owner') or 'nobody'}", "dim")

    def _model_switch(self, event: Event) -> None:
        data = event.data
        text = f"⇄ model switch: {data.get('from')} → {data.get('to')} ({data.get('reason')})"
        self._say(event, text, "bold yellow")

    def _diff_proposed(self, event: Event) -> None:
        data = event.data
        self._say(event, f"*** {data.get('tool')} wants to change {data.get('path')}:", "bold")
        for line in str(data.get("diff", "")).splitlines():
            self._say(event, line, _diff_style(line))
        request = data.get("request_id")
        self._say(event, f"*** waiting for you: /apply, /reject or /edit {request}", "bold magenta")

    def _approval_request(self, event: Event) -> None:
        data = event.data
        args = json.dumps(data.get("args"), ensure_ascii=False, default=str)
        self._say(
            event,
            f"*** approval needed: {data.get('tool')} {args} — "
            f"/approve or /reject {data.get('request_id')}",
            "bold magenta",
        )

    def _approval_resolved(self, event: Event) -> None:
        data = event.data
        reason = f" ({data.get('reason')})" if data.get("reason") else ""
        self._say(event, f"{data.get('request_id')}: {data.get('decision')}{reason}", "magenta")

    def _prompt(self, event: Event) -> None:
        data = event.data
        text = f"prompt {data.get('action')} (v{data.get('version')}): {data.get('reason')}"
        self._say(event, text, "dim")

    def _kb_progress(self, event: Event) -> None:
        self._say(event, kb_progress_line(event.data), "dim")

    def _context(self, event: Event) -> None:
        data = event.data
        if data.get("action") in ("summarized", "summary_failed"):
            why = f": {data.get('error')}" if data.get("error") else ""
            self._say(event, f"working context {data.get('action')}{why}", "dim")
            return
        self._say(event, f"context {json.dumps(data, default=str)}", "dim")

    def _handoff(self, event: Event) -> None:
        line = handoff_line(event.data)
        if line:
            self._say(event, line, "dim")


_RENDERERS: dict[str, Callable[[PanesView, Event], None]] = {
    EventType.TOKEN: PanesView._token,
    EventType.TOOL_OUTPUT: PanesView._tool_output,
    EventType.TOOL_START: PanesView._tool_start,
    EventType.TOOL_END: PanesView._tool_end,
    EventType.TASK_START: PanesView._task_start,
    EventType.TASK_END: PanesView._task_end,
    EventType.WARN: PanesView._warn,
    EventType.ERROR: PanesView._error,
    EventType.STATE: PanesView._state,
    EventType.OWNERSHIP: PanesView._ownership,
    EventType.MODEL_SWITCH: PanesView._model_switch,
    EventType.DIFF_PROPOSED: PanesView._diff_proposed,
    EventType.APPROVAL_REQUEST: PanesView._approval_request,
    EventType.APPROVAL_RESOLVED: PanesView._approval_resolved,
    EventType.PROMPT: PanesView._prompt,
    EventType.CONTEXT: PanesView._context,
    EventType.HANDOFF: PanesView._handoff,
    EventType.KB_PROGRESS: PanesView._kb_progress,
}

# Order matters: "+++"/"---" headers are bold before "+"/"-" lines are coloured.
_DIFF_STYLES: tuple[tuple[str, str], ...] = (
    ("+++", "bold"),
    ("---", "bold"),
    ("@@", "cyan"),
    ("+", "green"),
    ("-", "red"),
)


def _diff_style(line: str) -> str:
    for start, style in _DIFF_STYLES:
        if line.startswith(start):
            return style
    return ""


_STATE_STYLES = {
    "idle": "green",
    "busy": "cyan",
    "waiting": "bold yellow",
    "disconnected": "red",
    "restarting": "yellow",
    "shutdown": "dim",
}


def agent_prompt(view: AgentView, state: str, *, attached: bool) -> Text:
    """Two lines of the agent list: marker, id and state; model, ctx %, host, queue."""
    entry = view.entry
    marker = "⏳" if state == "waiting" else ("▸ " if attached else "  ")
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(marker, "bold yellow" if state == "waiting" else "bold")
    text.append(entry.id, "bold" if attached else "")
    text.append(f" {state}\n", _STATE_STYLES.get(state, "dim"))
    model = entry.model or "-"
    if entry.pinned:
        model += " (pinned)"
    details = f"  {model} · {entry.ctx_pct:.0f}% · {entry.host or '-'} · q{entry.queue_len}"
    text.append(details, "dim")
    return text


Row = tuple[str | int, ...]
"""One row of the stream pane: each segment's text followed by its style's number."""


def _pairs(row: Row) -> Iterator[tuple[str, int]]:
    """The ``(text, style number)`` of each segment of ``row``."""
    return zip(cast("tuple[str, ...]", row[0::2]), cast("tuple[int, ...]", row[1::2]), strict=True)


class StreamLog(RichLog):
    """A :class:`RichLog` whose kept rows cost the garbage collector nothing.

    RichLog keeps each row as a :class:`Strip`: the strip, its segment list, seven
    caches, and a second strip cached in the first, some twenty objects per row that
    CPython's cycle collector walks on every full collection. A full scrollback is
    100 000 objects more, and a flood, which replaces them every second or so, sets off
    such collections about as often: each stopped the app for 50-200 ms, keystrokes
    included. Here a row is a tuple of strings and style numbers, which the collector
    stops tracking at its first pass; rows become strips only when drawn, and only
    those on screen are kept drawn (:data:`LINE_CACHE`).

    ``lines`` still reads as RichLog's list of strips, made on demand.
    """

    def __init__(self, **kwargs: Any) -> None:
        self._rows: list[Row] = []
        self._styles: list[Style | None] = []
        self._style_ids: dict[Style | None, int] = {}
        self._styles_max = STYLES_MAX
        super().__init__(**kwargs)
        self._line_cache = LRUCache(LINE_CACHE)

    @property  # type: ignore[override]  # read-only strips over the rows, not a list
    def lines(self) -> Sequence[Strip]:
        return _Strips(self)

    @lines.setter
    def lines(self, value: list[Strip]) -> None:
        # Only RichLog.__init__ assigns, an empty list: rows are added by ``write``.
        self._rows = [self._row(list(strip))[0] for strip in value]

    def write(
        self,
        content: RenderableType | object,
        width: int | None = None,
        expand: bool = False,
        shrink: bool = True,
        scroll_end: bool | None = None,
        animate: bool = False,
    ) -> Self:
        """Render ``content`` into rows at the bottom of the log (as RichLog does)."""
        if not self._size_known:
            # RichLog queues the write and replays it here once the size is known.
            return super().write(content, width, expand, shrink, scroll_end, animate)
        renderable = self._make_renderable(content)
        console = self.app.console
        options = console.options
        if isinstance(renderable, Text) and not self.wrap:
            options = options.update(overflow="ignore", no_wrap=True)
        if width is None:
            width = self._render_width(renderable, options, expand=expand, shrink=shrink)
        lines = Segment.split_lines(console.render(renderable, options.update_width(width)))
        rows = self._rows_of(lines)
        if not rows:  # nothing rendered still takes a row, as in RichLog
            rows.append(((" " * width, self._style_id(None)), width))
        self._add(rows, scroll_end, animate)
        return self

    def write_lines(
        self, texts: Iterable[Text], width: int | None, *, scroll_end: bool | None = None
    ) -> None:
        """Write each of ``texts`` as ``write(text, width)`` would, all in one go.

        A line that fits ``width`` is made into its segments directly: Rich's wrapping
        would leave it as it is, at twenty times the cost (25 µs a line against 1).
        """
        if not self._size_known or width is None:
            self.write(Text("\n").join(texts), width, scroll_end=scroll_end)
            return
        console = self.app.console
        options = console.options.update_width(width)
        if not self.wrap:
            options = options.update(overflow="ignore", no_wrap=True)

        def lines() -> Iterator[Iterable[Segment]]:
            for text in texts:
                plain = text.plain
                simple = "\t" not in plain and text.justify in (None, "default")
                if not simple or cell_len(plain) > width:
                    yield from Segment.split_lines(console.render(text, options))
                elif text.spans:
                    yield text.render(console)
                else:
                    # Text.render leaves out the text's own style when it has no spans.
                    yield [Segment(plain, console.get_style(text.style))] if plain else []

        self._add(self._rows_of(lines()), scroll_end, animate=False)

    def _rows_of(self, lines: Iterable[Iterable[Segment]]) -> deque[tuple[Row, int]]:
        """``lines`` as rows, with their widths; only as many as the log keeps."""
        if len(self._styles) > self._styles_max:
            self._renumber_styles()
        # Rows that would be trimmed at once are never kept, nor their styles numbered.
        return deque(map(self._row, lines), maxlen=self.max_lines)

    def _add(self, rows: deque[tuple[Row, int]], scroll_end: bool | None, animate: bool) -> None:
        if not rows:
            return
        self._rows.extend(row for row, _ in rows)
        self._widest_line_width = max(self._widest_line_width, *(cells for _, cells in rows), 0)
        if self.max_lines is not None and len(self._rows) > self.max_lines:
            excess = len(self._rows) - self.max_lines
            self._start_line += excess
            del self._rows[:excess]
            self.refresh()
        self.virtual_size = Size(self._widest_line_width, len(self._rows))
        if self.auto_scroll if scroll_end is None else scroll_end:
            self.scroll_end(animate=animate, immediate=False, x_axis=False)

    def _render_width(
        self, renderable: RenderableType, options: ConsoleOptions, *, expand: bool, shrink: bool
    ) -> int:
        """RichLog's width for a write that names none: measured, fitted to the pane."""
        measured = measure_renderables(self.app.console, options, [renderable]).maximum
        pane = self.scrollable_content_region.width
        width = measured
        if expand and measured < pane:
            width = pane
        if shrink and measured > pane:
            width = pane
        return max(width, self.min_width)

    def _row(self, line: Iterable[Segment]) -> tuple[Row, int]:
        """``line`` as a row, and its width in cells."""
        row: list[str | int] = []
        cells = 0
        for text, style, control in line:
            if control:
                continue  # cursor movement: a row of a log has nowhere to move it to
            row += (text, self._style_id(style))
            cells += cell_len(text)
        return tuple(row), cells

    def _style_id(self, style: Style | None) -> int:
        found = self._style_ids.get(style)
        if found is None:
            found = self._style_ids[style] = len(self._styles)
            self._styles.append(style)
        return found

    def _renumber_styles(self) -> None:
        """Forget the styles no kept row uses (output in ever new colours, say)."""
        styles, self._styles, self._style_ids = self._styles, [], {}
        self._rows = [
            tuple(item for text, i in _pairs(row) for item in (text, self._style_id(styles[i])))
            for row in self._rows
        ]
        # Renumbering is a pass over every row: when most styles are in use, wait longer.
        self._styles_max = max(STYLES_MAX, 2 * len(self._styles))
        self._line_cache.clear()

    def strip(self, y: int) -> Strip:
        """Row ``y`` (0 is the oldest kept) as a strip."""
        styles = self._styles
        return Strip([Segment(text, styles[i]) for text, i in _pairs(self._rows[y])])

    def clear(self) -> Self:
        self._rows.clear()
        self._styles.clear()
        self._style_ids.clear()
        self._line_cache.clear()
        self._start_line = 0
        self._widest_line_width = 0
        self._deferred_renders.clear()
        self.virtual_size = Size(0, 0)
        self.refresh()
        return self

    def _render_line(self, y: int, scroll_x: int, width: int) -> Strip:
        if y >= len(self._rows):
            return Strip.blank(width, self.rich_style)
        key = (y + self._start_line, scroll_x, width, self._widest_line_width)
        line = self._line_cache.get(key)
        if line is None:
            line = self.strip(y).crop_extend(scroll_x, scroll_x + width, self.rich_style)
            self._line_cache[key] = line
        return line


class _Strips(Sequence[Strip]):
    """A :class:`StreamLog`'s rows read as strips, made as they are read."""

    def __init__(self, log: StreamLog) -> None:
        self._log = log

    def __len__(self) -> int:
        return len(self._log._rows)

    @overload
    def __getitem__(self, index: int) -> Strip: ...

    @overload
    def __getitem__(self, index: slice) -> list[Strip]: ...

    def __getitem__(self, index: int | slice) -> Strip | list[Strip]:
        if isinstance(index, slice):
            return [self._log.strip(y) for y in range(len(self))[index]]
        return self._log.strip(range(len(self))[index])


class CommandInput(Input):
    """The command bar, with the lines typed before on Up and Down.

    Keys take effect in the order they arrive, however fast: ``/att`` and TAB in one
    burst (a paste, SSH, tmux ``send-keys``) complete to ``/attach``.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "history(-1)", show=False),
        Binding("down", "history(1)", show=False),
        # Not a priority binding: those run as the app receives the key, before the
        # characters ahead of it in this widget's queue are typed. _on_key runs it in
        # turn, and stops the key there so the screen's Tab does not move the focus.
        Binding("tab", "complete", show=False),
    ]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.history: list[str] = []
        self._at = 0
        self.cycler: TabCycler | None = None
        """Set once the controller exists: the same completion as plain mode."""

    async def _on_key(self, event: events.Key) -> None:
        # Textual runs a focused widget's bindings once the key has bubbled up to the
        # app, and this widget goes on typing the keys queued behind it meanwhile: a
        # burst of "hi", Enter, "yo" would submit "hiyo". Run them here, in turn.
        if event.is_printable:
            return  # Input._on_key types it, next in the MRO
        for binding in self._bindings.key_to_bindings.get(event.key, ()):
            if await self.app.run_action(binding.action, self):
                event.stop()
                return

    async def action_submit(self) -> None:
        """Enter: hand the line on, and empty the bar before the next key is typed."""
        line = self.value
        self.remember(line)
        self.value = ""
        self.post_message(self.Submitted(self, line))

    def action_complete(self) -> None:
        """TAB completes commands, agent ids and paths; a second TAB cycles."""
        if self.cycler is None:
            return
        done = self.cycler.press(self.value, self.cursor_position)
        if done is not None:
            self.value, self.cursor_position = done

    def remember(self, line: str) -> None:
        if line and (not self.history or self.history[-1] != line):
            self.history.append(line)
            del self.history[:-500]
        self._at = len(self.history)

    def action_history(self, step: int) -> None:
        if not self.history:
            return
        self._at = max(0, min(len(self.history), self._at + step))
        self.value = self.history[self._at] if self._at < len(self.history) else ""
        self.cursor_position = len(self.value)


class PaletteScreen(ModalScreen[str | None]):
    """F1: a filterable list of the agents on the bus; Enter attaches to the chosen one."""

    DEFAULT_CSS = """
    PaletteScreen { align: center middle; }
    #palette { width: 72; height: auto; max-height: 24; border: thick $accent;
               background: $surface; padding: 0 1; }
    #palette OptionList { height: auto; max-height: 16; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss_palette", "close", show=False),
        Binding("up", "move(-1)", show=False),
        Binding("down", "move(1)", show=False),
    ]

    def __init__(self, agents: Callable[[], list[str]]) -> None:
        super().__init__()
        self._agents = agents

    def compose(self) -> ComposeResult:
        with Vertical(id="palette"):
            yield Label("[b]Attach to an agent[/b]  type to filter · Enter attaches · Esc closes")
            yield Input(placeholder="filter", id="filter")
            yield OptionList(id="matches")

    def on_mount(self) -> None:
        self.refilter("")
        self.query_one("#filter", Input).focus()

    def refilter(self, text: str) -> None:
        needle = text.strip().lower()
        ids = [a for a in self._agents() if needle in a.lower()]
        matches = self.query_one("#matches", OptionList)
        matches.set_options(Option(Text(agent), id=agent) for agent in ids)
        if ids:
            matches.highlighted = 0

    @on(Input.Changed, "#filter")
    def _changed(self, event: Input.Changed) -> None:
        self.refilter(event.value)

    @on(Input.Submitted, "#filter")
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        option = self.query_one("#matches", OptionList).highlighted_option
        if option is not None:
            self.dismiss(option.id)

    @on(OptionList.OptionSelected, "#matches")
    def _selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(event.option.id)

    def action_move(self, step: int) -> None:
        matches = self.query_one("#matches", OptionList)
        if step < 0:
            matches.action_cursor_up()
        else:
            matches.action_cursor_down()

    def action_dismiss_palette(self) -> None:
        self.dismiss(None)


class AskScreen(ModalScreen[str]):
    """One question, one line of answer (confirmations); Escape answers nothing."""

    DEFAULT_CSS = """
    AskScreen { align: center middle; }
    #ask { width: 72; height: auto; border: thick $warning; background: $surface;
           padding: 0 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "cancel", show=False),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="ask"):
            yield Label(Text(self.question))
            yield Input(id="answer")

    def on_mount(self) -> None:
        self.query_one("#answer", Input).focus()

    @on(Input.Submitted, "#answer")
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss("")


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
    #centre { width: 1fr; height: 1fr; border: round $primary; }
    #centre.read-only { border: round $error; }
    #readonly { height: auto; display: none; background: $error-darken-2; padding: 0 1; }
    #centre.read-only #readonly { display: block; }
    #stream { height: 1fr; scrollbar-size-vertical: 1; }
    #live { height: auto; max-height: 4; }
    #tails { width: 32; height: 1fr; border: round $secondary; }
    #tails-text { text-wrap: nowrap; text-overflow: ellipsis; }
    #agents { text-wrap: nowrap; text-overflow: ellipsis; }
    #message { height: 1; padding: 0 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f1", "palette", "agents", priority=True),
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
        self._refreshing = False
        self._refresh_wanted = False
        self._session_closed = False
        self._known_ref: object = None
        self._rows: list[tuple[Any, ...]] = []
        self._waiting: set[str] = set()
        self._status: tuple[Any, ...] = ()
        self._drawn_status: tuple[Any, ...] = ()
        self._live = ""
        self._quit_armed_at = 0.0
        self._decoders: dict[str, AnsiDecoder] = {}
        self._froze = False
        self._tails_drawn_at = 0.0

    # layout ---------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(id="banners")
        with Horizontal(id="body"):
            yield OptionList(id="agents")
            with Vertical(id="centre"):
                yield Static(id="readonly")
                yield StreamLog(id="stream", max_lines=self.scrollback, wrap=True, min_width=1)
                yield Static(id="live")
            with VerticalScroll(id="tails"):
                yield Static(id="tails-text")
        yield Static(id="message")
        yield CommandInput(id="command", placeholder="connecting…")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#agents").border_title = "agents"
        self.query_one("#tails").border_title = "tails"
        self.query_one("#centre").border_title = "not attached"
        self.set_interval(FRAME_S, self._frame)
        self.set_interval(SYNC_S, self._sync)
        self._start()
        self._run_commands()

    @work(exclusive=True, group="start", exit_on_error=False)
    async def _start(self) -> None:
        controller = self._factory(self.view)
        controller.front_end = "panes"
        controller.panes_possible = True
        controller.auto_tail_limit = self._auto_tails  # the right column: the rest of the team
        self.controller = controller
        self.query_one("#command", CommandInput).cycler = TabCycler(
            CommandCompleter.for_controller(controller)
        )
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
        self.query_one("#message", Static).update("")
        words = line.split()
        if words[:1] == ["/ui"]:
            await self._ui(words[1:])
            return
        try:
            await controller.execute(line)
        except AteamError as exc:
            self.show_error(exc.one_line())
        except Exception as exc:  # a bug behind one command must not end the console
            self.show_error(f"error [internal]: {line.split()[0]} failed: {exc!r}")
        if controller.quit_requested:
            await self.leave(EXIT_QUIT)

    async def _ui(self, args: list[str]) -> None:
        if args == ["panes", "off"]:
            await self.leave(EXIT_PLAIN)
        elif args == ["panes", "on"]:
            self.view.info("already in panes mode")
        else:
            self.show_error("error [bad_request]: usage: /ui panes on|off")

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
            self.show_error(exc.one_line())

    async def ask(self, question: str) -> str:
        """Show ``question`` in a modal and wait for the answer ("" when dismissed)."""
        answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        def done(value: str | None) -> None:
            if not answer.done():
                answer.set_result(value or "")

        await self.push_screen(AskScreen(question), done)
        return await answer

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

        def chosen(agent: str | None) -> None:
            if agent:
                self._commands.put_nowait(f"/attach {agent}")

        self.push_screen(PaletteScreen(self._agent_ids), chosen)

    def _agent_ids(self) -> list[str]:
        return sorted(self.controller.known) if self.controller is not None else []

    @on(OptionList.OptionSelected, "#agents")
    def _agent_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option.id:
            self._commands.put_nowait(f"/attach {event.option.id}")
            self.query_one("#command").focus()

    # drawing -------------------------------------------------------------------------------

    def _frame(self) -> None:
        """One frame: drain buffered lines into the widgets within the frame budget."""
        if not self.is_running:
            return  # shutting down: the widgets may already be gone
        view = self.view
        if view.pending or view.skipped:
            self._draw_stream()
        live = view.partial(view.centre_agent)
        if live != self._live:
            self._live = live
            shown = live[-1000:]  # the widget shows a few rows of the newest text
            self.query_one("#live", Static).update(Text.from_ansi(_visible(shown)))
        now = time.monotonic()
        if view.tails_dirty and now - self._tails_drawn_at >= TAILS_FRAME_S:
            view.tails_dirty = False
            self._tails_drawn_at = now
            self._draw_tails()
        if view.status_dirty or self._status_key() != self._status:
            view.status_dirty = False
            self._sync()

    def _draw_stream(self) -> None:
        view = self.view
        log = self.query_one("#stream", StreamLog)
        follow = log.scroll_offset.y >= log.max_scroll_y
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
        texts = _fit([_visible(text) for text in lines.text.split("\n")])
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
            out.append(f" · {state}\n", _STATE_STYLES.get(state, "dim"))
            for text, style in self.view.tails.get(agent, ()):
                out.append_text(Text.from_ansi(_visible(text), style=style or "dim"))
                out.append("\n")
            partial = self.view.partial(agent)
            if partial:
                out.append_text(Text.from_ansi(_visible(partial[-200:]), style="dim"))
                out.append("\n")
            out.append("\n")
        if not shown:
            out.append("other agents' output\nshows here (/tail ID)", "dim")
        self.query_one("#tails-text", Static).update(out)

    # registry, banners, ownership ------------------------------------------------------------

    def banner_posted(self) -> None:
        """Any banner may follow a registry change (join, leave, back): re-read it now."""
        controller = self.controller
        if controller is None:
            return
        self._refresh_wanted = True
        if self._refreshing:
            return  # the running refresh goes round once more
        self._refreshing = True

        async def refresh() -> None:
            try:
                while self._refresh_wanted:
                    self._refresh_wanted = False
                    with contextlib.suppress(Exception):  # the controller's poll retries
                        await controller.refresh_agents()
            finally:
                self._refreshing = False
            if self.is_running:
                self._sync()

        self._side_task(refresh())

    def _state_of(self, view: AgentView) -> str:
        return self.view.live_states.get(view.id, view.state)

    def _status_key(self) -> tuple[Any, ...]:
        controller = self.controller
        if controller is None:
            return ()
        return (controller.attached, controller.read_only)

    def _sync(self) -> None:
        """Bring the agent list, banners and the stream's title in line with the session."""
        controller = self.controller
        if controller is None or not self.is_running:
            return  # not connected yet, or shutting down with the widgets already gone
        if controller.known is not self._known_ref:
            # A fresh registry read supersedes the states seen in events before it.
            self._known_ref = controller.known
            self.view.live_states.clear()
        views = sorted(controller.known.values(), key=lambda v: v.id)
        states = {v.id: self._state_of(v) for v in views}
        rows = [
            (v.id, states[v.id], v.entry.model, v.entry.pinned, round(v.entry.ctx_pct),
             v.entry.host, v.entry.queue_len, v.id == controller.attached)
            for v in views
        ]  # fmt: skip
        if rows != self._rows:
            self._rows = rows
            self._draw_agents(views, states, controller.attached)
            self.view.tails_dirty = True
        waiting = {agent for agent, state in states.items() if state == "waiting"}
        if waiting - self._waiting:
            self.bell()
        self._waiting = waiting
        self.view.prune_tails(
            [*controller.tailed, *controller.auto_tailed, *(a for a in [controller.attached] if a)]
        )
        self._status = self._status_key()
        self._draw_status(controller)

    def _draw_agents(
        self, views: list[AgentView], states: dict[str, str], attached: str | None
    ) -> None:
        agents = self.query_one("#agents", OptionList)
        current = agents.highlighted_option
        keep = current.id if current is not None else None
        agents.set_options(
            Option(agent_prompt(v, states[v.id], attached=v.id == attached), id=v.id) for v in views
        )
        ids = [v.id for v in views]
        if keep in ids:
            agents.highlighted = ids.index(keep)
        agents.border_title = f"agents ({len(views)})"

    def _draw_status(self, controller: ConsoleController) -> None:
        last = self.view.banners[-1] if self.view.banners else None
        key = (tuple(sorted(self._waiting)), last, controller.attached, controller.read_only)
        if key == self._drawn_status:
            return
        self._drawn_status = key
        bar = Text()
        for waiting in sorted(self._waiting):
            bar.append(f"⏳ agent {waiting} is waiting for approval", "bold black on yellow")
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
        if agent is None:
            centre.border_title = "not attached"
            command.placeholder = "/attach ID or F1 to pick an agent; /help lists commands"
        elif read_only:
            centre.border_title = f"{agent} · READ-ONLY"
            command.placeholder = f"read-only for {agent}: /attach {agent} --takeover to write"
            self.query_one("#readonly", Static).update(
                Text(
                    f"read-only: another console owns {agent}; "
                    f"/attach {agent} --takeover to write again"
                )
            )
        else:
            centre.border_title = f"{agent} · writer"
            command.placeholder = f"message for {agent} (Enter sends); /help lists commands"
