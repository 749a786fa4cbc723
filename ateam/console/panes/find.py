"""Ctrl+F: find text in the stream pane, the way a pager or a browser does.

Typing searches as you type, from the bottom of what is on screen up; Enter (or Up)
goes to the next older match, Down to the next newer one, and Esc closes the bar and
gives the command bar back, leaving the stream where the search left it (End or
Ctrl+End follows the newest output again).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from textual import on
from textual.binding import Binding, BindingType
from textual.widgets import Input

from ateam.console.panes.stream_log import Found, StreamLog

HELP = "find in the stream — Enter/↑ older · ↓ newer · Esc closes"


class FindBar(Input):
    """The search line, shown over the command bar while Ctrl+F is open.

    Args:
        log: the stream pane it searches.
        report: shows one line about the search (a match, or none).
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "again(True)", show=False),
        Binding("up", "again(True)", show=False),
        Binding("down", "again(False)", show=False),
        Binding("escape", "close", show=False),
    ]

    def __init__(
        self, log: Callable[[], StreamLog], report: Callable[[str], None], *, id: str
    ) -> None:
        super().__init__(placeholder=HELP, id=id)
        self._log = log
        self._report = report
        self.on_close: Callable[[], None] = lambda: None
        """Called once the bar is closed (the app gives the focus back)."""

    @on(Input.Changed)
    def _typed(self, event: Input.Changed) -> None:
        event.stop()
        self._show(self._log().find(self.value), older=True)

    def action_again(self, older: bool) -> None:
        self._show(self._log().find(self.value, older=older, again=True), older=older)

    def _show(self, found: Found | None, *, older: bool) -> None:
        if not self.value:
            self._log().clear_found()
            self._report("")
        elif found is None:
            way = "older" if older else "newer"
            self._report(f"find: no {way} match for {self.value!r}")
        else:
            self._report(f"find: {self.value!r} — Enter/↑ older, ↓ newer, Esc closes")

    def action_close(self) -> None:
        self._log().clear_found()
        self._report("")
        self.value = ""
        self.remove_class("open")
        self.on_close()
