"""F1: the agent palette."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList
from textual.widgets.option_list import Option


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
