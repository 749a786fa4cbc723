"""The command bar: history on Up/Down, TAB completion, keys applied in the order typed."""

from __future__ import annotations

from typing import Any, ClassVar

from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.reactive import Reactive
from textual.widgets import Input

from ateam.completion import ShellTab


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
        # On an empty bar there is no line to move in: Home and End read the stream.
        Binding("home", "home_or_top", show=False),
        Binding("end", "end_or_bottom", show=False),
    ]

    virtual_size = Reactive(Size(0, 0), layout=False)
    """Input stores the line's width here on every key; Textual's own declaration asks
    for a layout on each change, which re-renders the whole screen per keystroke. The
    bar's size never depends on its text (fixed height, full width), so a repaint of the
    bar is all a key needs."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.history: list[str] = []
        self._at = 0
        self.tab: ShellTab | None = None
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

    class Candidates(Message):
        """A TAB that could not choose: the matches, for the app to show."""

        def __init__(self, candidates: tuple[str, ...]) -> None:
            super().__init__()
            self.candidates = candidates

    def action_complete(self) -> None:
        """TAB as in a shell: complete or extend the word, list the matches, then step."""
        if self.tab is None:
            return
        done = self.tab.press(self.value, self.cursor_position)
        if done is None:
            self.app.bell()  # nothing matches, as a shell says it
            return
        self.value, self.cursor_position = done.line, done.cursor
        self.post_message(self.Candidates(done.candidates))

    async def action_home_or_top(self) -> None:
        if self.value:
            self.action_home()
        else:
            await self.app.run_action("stream('home')")

    async def action_end_or_bottom(self) -> None:
        if self.value:
            self.action_end()
        else:
            await self.app.run_action("stream('end')")

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
