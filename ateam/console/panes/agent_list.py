"""The agent list: rows of marker, id and state over model, ctx %, host and queue."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from rich.text import Text
from textual.content import Content
from textual.geometry import Size
from textual.visual import Visual
from textual.widget import Widget
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from ateam.client import AgentStatus

STATE_STYLES = {
    "idle": "green",
    "busy": "cyan",
    "waiting": "bold yellow",
    "disconnected": "red",
    "restarting": "yellow",
    "shutdown": "dim",
}


def agent_prompt(view: AgentStatus, state: str, *, attached: bool) -> Text:
    """Two lines of the agent list: marker, id and state; model, ctx %, host, queue."""
    entry = view.entry
    marker = "⏳" if state == "waiting" else ("▸ " if attached else "  ")
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(marker, "bold yellow" if state == "waiting" else "bold")
    text.append(entry.id, "bold" if attached else "")
    text.append(f" {state}\n", STATE_STYLES.get(state, "dim"))
    model = entry.model or "-"
    if entry.pinned:
        model += " (pinned)"
    details = f"  {model} · {entry.ctx_pct:.0f}% · {entry.host or '-'} · q{entry.queue_len}"
    text.append(details, "dim")
    return text


class AgentPrompt:
    """An agent's row as :func:`agent_prompt` draws it, drawn only when first shown.

    A state change of the whole team changes every row at once, and drawing each
    (about 7 µs of Rich text) was 70 ms of that 110 ms redraw at 10 000 agents;
    OptionList asks a prompt for its drawing only when the row comes into view
    (``visualize``).
    """

    __slots__ = ("attached", "state", "view")

    def __init__(self, view: AgentStatus, state: str, *, attached: bool) -> None:
        self.view = view
        self.state = state
        self.attached = attached

    def text(self) -> Text:
        """The row's two lines."""
        return agent_prompt(self.view, self.state, attached=self.attached)

    def visualize(self, widget: Widget | None = None, obj: object = None) -> Visual:
        """The row drawn, as Textual asks of a prompt it is about to show (its protocol
        names two arguments, its ``visualize()`` passes none: both are accepted)."""
        return Content.from_rich_text(self.text())

    def __str__(self) -> str:
        return self.text().plain


ROW_LINES = 2
"""Lines of every row (:func:`agent_prompt`: two, never wrapped)."""


class AgentList(OptionList):
    """The agent list, whose rows change one at a time at the cost of one row.

    OptionList forgets every row's drawing and height when one prompt changes, and
    measures them all again: with a thousand agents, tens of milliseconds per state
    change. Every row here is two lines (:func:`agent_prompt` never wraps), so a
    changed row replaces its option in place and nothing else moves, and the map of
    lines to rows is arithmetic (:meth:`_update_lines`): OptionList lays out every
    prompt it lists to learn its height, most of a second per join at 10 000 agents,
    during which the console took no key (issue 28 §4).
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rows: dict[str, tuple[Any, ...]] = {}
        """Each listed agent's row, by what it shows."""
        self.waiting: set[str] = set()
        """The listed agents waiting for an approval."""

    def redraw(
        self,
        known: Mapping[str, AgentStatus],
        dirty: Iterable[str],
        *,
        state_of: Callable[[AgentStatus], str],
        attached: str | None,
    ) -> bool:
        """Bring the rows of ``dirty`` agents in line with ``known``; True if one started
        waiting. Only joins and leaves list the agents again (rows drawn are reused)."""
        changed: dict[str, AgentPrompt] = {}
        moved = newly_waiting = False
        for agent in dirty:
            view = known.get(agent)
            if view is None:
                moved = self.rows.pop(agent, None) is not None or moved
                self.waiting.discard(agent)
                continue
            state = state_of(view)
            entry = view.entry
            row = (state, entry.model, entry.pinned, round(entry.ctx_pct), entry.host,
                   entry.queue_len, agent == attached)  # fmt: skip
            if state == "waiting" and agent not in self.waiting:
                self.waiting.add(agent)
                newly_waiting = True
            elif state != "waiting":
                self.waiting.discard(agent)
            if self.rows.get(agent) == row:
                continue
            moved = moved or agent not in self.rows
            self.rows[agent] = row
            changed[agent] = AgentPrompt(view, state, attached=agent == attached)
        if moved:
            self.set_rows((a, changed.get(a) or self.get_option(a)) for a in sorted(self.rows))
            self.border_title = f"agents ({len(self.rows)})"
        elif changed:
            for agent, prompt in changed.items():
                self.set_row(agent, prompt)
            self.refresh()  # once: a refresh per row was most of a redraw of thousands
        return newly_waiting

    def set_row(self, agent: str, prompt: AgentPrompt) -> None:
        """Show ``prompt`` as ``agent``'s row (which must be listed) at the next refresh."""
        index = self.get_option_index(agent)
        old = self.get_option_at_index(index)
        new = Option(prompt, id=agent)
        try:
            # OptionList's own bookkeeping, kept as it keeps it (three maps of one list).
            self._options[index] = new
            del self._option_to_index[old]
            self._option_to_index[new] = index
            self._id_to_option[agent] = new
        except (AttributeError, KeyError, TypeError):  # a Textual that keeps them otherwise
            self.replace_option_prompt(agent, prompt)

    def set_rows(self, rows: Iterable[tuple[str, AgentPrompt | Option]]) -> None:
        """List exactly ``rows`` (``(id, prompt or the option already shown)``), in order,
        keeping the highlighted agent and the scroll position."""
        current = self.highlighted_option
        keep = current.id if current is not None else None
        scroll_y = self.scroll_y
        options = [
            shown if isinstance(shown, Option) else Option(shown, id=agent) for agent, shown in rows
        ]
        self.set_options(options)
        ids = [option.id for option in options]
        if keep in ids:
            self.highlighted = ids.index(keep)
        self.scroll_to(y=scroll_y, animate=False, immediate=True)

    def _update_lines(self) -> None:
        """OptionList's map of lines to rows, extended to the rows added since, without
        measuring a prompt: each row is :data:`ROW_LINES` lines."""
        try:  # OptionList's own cache, kept as it keeps it
            cache, region = self._line_cache, self.scrollable_content_region
            lines, heights, index_to_line = cache.lines, cache.heights, cache.index_to_line
        except AttributeError:  # a Textual that keeps it otherwise: measure as it does
            super()._update_lines()
            return
        if not region:
            return
        for index in range(len(lines) // ROW_LINES, len(self._options)):
            index_to_line[index] = len(lines)
            heights[index] = ROW_LINES
            lines.extend((index, line) for line in range(ROW_LINES))
        size = Size(region.width - self._get_left_gutter_width(), len(lines))
        if size != self.virtual_size:
            self.virtual_size = size
            self._scroll_update(size)
