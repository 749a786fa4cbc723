"""The stream pane: a :class:`RichLog` whose kept rows cost the garbage collector nothing.

It also keeps its reader's place: scrolled back (keys, the mouse wheel, a search), new
rows do not move the view; they are counted (:attr:`StreamLog.unseen`) until the reader
is back at the end, and the log follows again. And its rows follow the pane's width: a
line wrapped over several rows is joined again and wrapped anew when the pane is
resized (side panes folded or shown, the terminal resized).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple, Self, cast, overload

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderableType
from rich.measure import measure_renderables
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.cache import LRUCache
from textual.events import Resize
from textual.geometry import Size
from textual.message import Message
from textual.reactive import Reactive
from textual.strip import Strip
from textual.widgets import RichLog

STYLES_MAX = 4096
"""Distinct styles the stream pane numbers before it forgets those no kept row uses."""
LINE_CACHE = 256
"""Rows of the stream pane kept drawn as strips: a few screens' worth for scrolling."""

Row = tuple[str | int, ...]
"""One row of the stream pane: each segment's text followed by its style's number."""
FOUND = Style(reverse=True, bold=True)
"""How the text a search found is marked in its row."""
START, NEXT, NEXT_AFTER_SPACE = 0, 1, 2
"""How a row follows the one before it: a line of its own, the rest of the same line, or
the rest after a space that wrapping dropped (a word that filled its row exactly)."""


class Found(NamedTuple):
    """Where a search found its text: a row (counted from the first row ever written,
    so trimming the oldest does not move it) and the cells of the match in it."""

    row: int
    start: int
    end: int


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

    A new row costs no layout: Textual lays out the whole screen (and draws every pane
    again) whenever a widget's virtual size changes, which here is every line written.
    Only the log's own scrollbars depend on it, and they are brought up to date here.
    """

    virtual_size = Reactive(Size(0, 0), layout=False)

    class Moved(Message):
        """The reader left the end of the log or came back to it, or rows came unseen."""

    def __init__(self, **kwargs: Any) -> None:
        self.following = True
        """At the end of the log, where new rows are shown as they come."""
        self.unseen = 0
        """Rows written while the reader was scrolled back."""
        self.found: Found | None = None
        self._rows: list[Row] = []
        self._joins = bytearray()
        """Per row, how it follows the row before (:data:`START`, :data:`NEXT`, …)."""
        self._wrapped_at = 0
        """The width the rows were last wrapped at (0: not yet known)."""
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
        self._joins = bytearray(len(self._rows))

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
        rows = self._rows_of((line, START) for line in lines)
        if not rows:  # nothing rendered still takes a row, as in RichLog
            rows.append(((" " * width, self._style_id(None)), width, START))
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

        self._wrapped_at = width

        def lines() -> Iterator[tuple[Iterable[Segment], int]]:
            for text in texts:
                plain = text.plain
                simple = "\t" not in plain and text.justify in (None, "default")
                if not simple or cell_len(plain) > width:
                    yield from _wrapped(text, console, options)
                elif text.spans:
                    yield text.render(console), START
                else:
                    # Text.render leaves out the text's own style when it has no spans.
                    style = console.get_style(text.style)
                    yield ([Segment(plain, style)] if plain else []), START

        self._add(self._rows_of(lines()), scroll_end, animate=False)

    def _rows_of(self, lines: Iterable[tuple[Iterable[Segment], int]]) -> deque[_Made]:
        """``lines`` as rows, with their widths; only as many as the log keeps."""
        if len(self._styles) > self._styles_max:
            self._renumber_styles()
        # Rows that would be trimmed at once are never kept, nor their styles numbered.
        return deque(((*self._row(line), join) for line, join in lines), maxlen=self.max_lines)

    def _add(self, rows: deque[_Made], scroll_end: bool | None, animate: bool) -> None:
        if not rows:
            return
        self._rows.extend(row for row, _, _ in rows)
        self._joins.extend(join for _, _, join in rows)
        self._widest_line_width = max(self._widest_line_width, *(cells for _, cells, _ in rows), 0)
        excess = 0
        if self.max_lines is not None and len(self._rows) > self.max_lines:
            excess = len(self._rows) - self.max_lines
            self._start_line += excess
            del self._rows[:excess]
            del self._joins[:excess]
            self.refresh()
        self._set_virtual_size(Size(self._widest_line_width, len(self._rows)))
        if self.auto_scroll if scroll_end is None else scroll_end:
            self.scroll_end(animate=animate, immediate=False, x_axis=False)
            return
        # Scrolled back: the reader stays on the rows they were reading, even as the
        # oldest rows are trimmed from above them, and is told how much came below.
        if excess:
            self.scroll_to(y=max(0, self.scroll_y - excess), animate=False, immediate=True)
        self.unseen += len(rows)
        self.post_message(self.Moved())

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        # Only the reader scrolls back (the log itself only ever scrolls to the end),
        # so a position short of the end is theirs to keep.
        following = round(new_value) >= self.max_scroll_y
        if following != self.following:
            self.following = following
            if following:
                self.unseen = 0
            self.post_message(self.Moved())

    # following the pane's width ------------------------------------------------------------

    def on_resize(self, event: Resize) -> None:
        super().on_resize(event)
        width = self.scrollable_content_region.width
        if self.wrap and self._wrapped_at and width > 0 and width != self._wrapped_at:
            self.rewrap(width)

    def rewrap(self, width: int) -> None:
        """Wrap every kept line again at ``width``, keeping the reader on what they read."""
        console = self.app.console
        options = console.options.update_width(width)
        styles = self._styles
        top = int(self.scroll_y)
        lines: list[list[Segment]] = []
        top_line = 0
        for y, (row, join) in enumerate(zip(self._rows, self._joins, strict=True)):
            segments = [Segment(text, styles[i]) for text, i in _pairs(row)]
            if join == START or not lines:
                lines.append(segments)
            else:
                if join == NEXT_AFTER_SPACE:
                    lines[-1].append(Segment(" "))
                lines[-1].extend(segments)
            if y == top:
                top_line = len(lines) - 1
        made: list[_Made] = []
        new_top = 0
        for index, segments in enumerate(lines):
            if index == top_line:
                new_top = len(made)
            if Segment.get_line_length(segments) <= width:
                made.append((*self._row(segments), START))
                continue
            text = Text(end="")
            for part in segments:
                text.append(part.text, part.style)
            made.extend((*self._row(line), join) for line, join in _wrapped(text, console, options))
        self._rows = [row for row, _, _ in made]
        self._joins = bytearray(join for _, _, join in made)
        self._widest_line_width = max((cells for _, cells, _ in made), default=0)
        self._wrapped_at = width
        self.found = None  # its row moved
        self._line_cache.clear()
        self._set_virtual_size(Size(self._widest_line_width, len(self._rows)))
        self.refresh()
        if self.following:
            self.scroll_end(animate=False, immediate=False, x_axis=False)
        else:
            self.scroll_to(y=new_top, animate=False, immediate=True)

    # reading back -------------------------------------------------------------------------

    def page(self, where: str) -> None:
        """Scroll by keyboard: ``page_up``, ``page_down``, ``home`` (the oldest row) or
        ``end`` (the newest, following again)."""
        _PAGES[where](self)

    def row_text(self, y: int) -> str:
        """Row ``y``'s text (0 is the oldest kept)."""
        return "".join(cast("tuple[str, ...]", self._rows[y][0::2]))

    def find(self, text: str, *, older: bool = True, again: bool = False) -> Found | None:
        """Find ``text`` (any case), from the newest row up, or from the last match on.

        Without ``again`` the search starts at the bottom of the rows on screen (the
        newest when following), so typing refines the match nearest to where the reader
        is; with it, the next match past the last one, ``older`` or newer. The match is
        marked and scrolled into the middle of the pane; None when there is none.
        """
        needle = text.casefold()
        if not needle or not self._rows:
            return None
        count = len(self._rows)
        if again and self.found is not None:
            here = self.found.row - self._start_line
            start = here - 1 if older else here + 1
        else:
            bottom = int(self.scroll_y) + max(self.scrollable_content_region.height, 1) - 1
            start = min(bottom, count - 1) if older else 0
        order = range(start, -1, -1) if older else range(max(start, 0), count)
        for y in order:
            if 0 <= y < count and (at := self.row_text(y).casefold().find(needle)) >= 0:
                return self._mark(y, at, len(needle))
        return None

    def _mark(self, y: int, at: int, length: int) -> Found:
        plain = self.row_text(y)
        start = cell_len(plain[:at])
        found = Found(y + self._start_line, start, start + cell_len(plain[at : at + length]))
        self.found = found
        self._line_cache.clear()
        self.refresh()
        height = max(self.scrollable_content_region.height, 1)
        self.scroll_to(y=max(0, y - height // 2), animate=False, immediate=True)
        return found

    def clear_found(self) -> None:
        if self.found is not None:
            self.found = None
            self._line_cache.clear()
            self.refresh()

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
        self.found = None
        self._rows.clear()
        self._joins.clear()
        self._styles.clear()
        self._style_ids.clear()
        self._line_cache.clear()
        self._start_line = 0
        self._widest_line_width = 0
        self._deferred_renders.clear()
        self._set_virtual_size(Size(0, 0))
        self.refresh()
        return self

    def _set_virtual_size(self, size: Size) -> None:
        if size != self.virtual_size:
            self.virtual_size = size
            # What a layout would do for this widget: scrollbars shown, hidden or resized
            # (showing one the first time is a layout of its own, by Textual).
            self._scroll_update(size)

    def _render_line(self, y: int, scroll_x: int, width: int) -> Strip:
        if y >= len(self._rows):
            return Strip.blank(width, self.rich_style)
        key = (y + self._start_line, scroll_x, width, self._widest_line_width)
        line = self._line_cache.get(key)
        if line is None:
            strip = self.strip(y)
            found = self.found
            if found is not None and found.row == key[0]:
                before, match, after = strip.divide([found.start, found.end, strip.cell_length])
                strip = Strip.join([before, match.apply_style(FOUND), after])
            line = strip.crop_extend(scroll_x, scroll_x + width, self.rich_style)
            self._line_cache[key] = line
        return line


_Made = tuple[Row, int, int]
"""A row as made: its segments and styles, its width in cells, how it joins the last."""


def _wrapped(
    text: Text, console: Console, options: ConsoleOptions
) -> Iterator[tuple[list[Segment], int]]:
    """``text`` wrapped into rows, each with how it joins the row before.

    Wrapping drops the space between two words when the first fills its row exactly; the
    row after says so, so joining the rows again (:meth:`StreamLog.rewrap`) gives the
    line back as it was.
    """
    plain = text.plain
    at = 0
    for n, line in enumerate(Segment.split_lines(console.render(text, options))):
        shown = "".join(segment.text for segment in line)
        join = START
        if n:
            join = NEXT
            if plain[at : at + 1] == " " and not shown.startswith(" "):
                join, at = NEXT_AFTER_SPACE, at + 1
        at += len(shown)
        yield line, join


_PAGES: dict[str, Callable[[StreamLog], None]] = {
    "page_up": lambda log: log.scroll_page_up(animate=False),
    "page_down": lambda log: log.scroll_page_down(animate=False),
    "home": lambda log: log.scroll_home(animate=False, x_axis=False),
    "end": lambda log: log.scroll_end(animate=False, x_axis=False),
}
"""The keys that move through the stream, by the name the app's bindings give them."""


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
