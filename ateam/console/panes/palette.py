"""F1: the palette — the agents to attach to, and (after a ``/``) the console's commands.

The commands come from the one command table (:data:`ateam.console.commands.COMMANDS`),
the same one ``/help`` and TAB read, so the palette never lists a command that does
not exist or misses one that does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList
from textual.widgets.option_list import Option

CommandEntry = tuple[str, str, str]
"""A command as the palette lists it: name, usage, help line."""


class PaletteScreen(ModalScreen[str | None]):
    """F1: a filterable list of the agents on the bus; Enter attaches to the chosen one.

    A filter that starts with ``/`` lists the commands instead; choosing one gives back
    ``/name`` for the command bar. The screen is dismissed with the agent id, the
    ``/name`` or ``None``.
    """

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

    def __init__(
        self,
        agents: Callable[[], list[str]],
        commands: Callable[[], Sequence[CommandEntry]] = lambda: (),
    ) -> None:
        super().__init__()
        self._agents = agents
        self._commands = commands

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
        matches = self.query_one("#matches", OptionList)
        if needle.startswith("/"):
            word = needle[1:]
            options = [
                Option(Text(f"{usage}  — {help_line}"), id=f"/{name}")
                for name, usage, help_line in self._commands()
                if word in name
            ]
        else:
            options = [Option(Text(a), id=a) for a in self._agents() if needle in a.lower()]
        matches.set_options(options)
        if options:
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
