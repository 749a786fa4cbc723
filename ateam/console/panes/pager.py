"""A long read-only text on a screen of its own, scrolled with the keys (``/diff``)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static

__all__ = ["PagerScreen"]


class PagerScreen(ModalScreen[None]):
    """``text`` under ``title``, scrolled by arrows, PgUp/PgDn, Home/End; Escape or q closes."""

    DEFAULT_CSS = """
    PagerScreen { align: center middle; }
    #pager { width: 95%; height: 90%; border: thick $accent; background: $surface;
             padding: 0 1; }
    #pager-title { height: 1; text-style: bold; }
    #pager-body { height: 1fr; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "close", show=False),
        Binding("q", "close", "close", show=False),
    ]

    def __init__(self, title: str, text: Text) -> None:
        super().__init__()
        self.title_line = title
        self.text = text

    def compose(self) -> ComposeResult:
        with Vertical(id="pager"):
            yield Label(Text(f"{self.title_line}   (Esc or q closes)"), id="pager-title")
            with VerticalScroll(id="pager-body"):
                yield Static(self.text, id="pager-text")

    def on_mount(self) -> None:
        self.query_one("#pager-body", VerticalScroll).focus()

    def action_close(self) -> None:
        self.dismiss(None)
