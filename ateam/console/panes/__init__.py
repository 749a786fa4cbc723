"""Panes mode: the console as a Textual app, one module per widget or screen.

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
    └ footer: F1 agents · F3 side panes · ^F find · ^C interrupt · ^Q quit ──────┘

The side panes shrink with the terminal and fold away below 100 columns (tails first,
below 120), leaving the stream the width; F3 brings them back (:mod:`.layout`).

- :mod:`.app`: :class:`ConsoleApp`, the layout, frame timer and command worker.
- :mod:`.layout`: the side panes' widths for a terminal's width; :mod:`.find`: Ctrl+F.
- :mod:`.view`: :class:`PanesView`, events into buffered lines (no widget touched).
- :mod:`.lines`, :mod:`.assembler`: text utilities; streamed text joined into lines.
- :mod:`.stream_log`, :mod:`.command_input`, :mod:`.agent_list`: the widgets.
- :mod:`.palette`, :mod:`.ask`: the F1 palette and the question screen.
"""

from ateam.console.panes.app import (
    AUTO_TAILS,
    EXIT_ERROR,
    EXIT_PLAIN,
    EXIT_QUIT,
    ConsoleApp,
    ControllerFactory,
)
from ateam.console.panes.ask import AskScreen
from ateam.console.panes.command_input import CommandInput
from ateam.console.panes.lines import LINE_MAX
from ateam.console.panes.palette import PaletteScreen
from ateam.console.panes.stream_log import StreamLog
from ateam.console.panes.view import DEFAULT_SCROLLBACK, TAIL_LINES, PanesView

__all__ = [
    "AUTO_TAILS",
    "DEFAULT_SCROLLBACK",
    "EXIT_ERROR",
    "EXIT_PLAIN",
    "EXIT_QUIT",
    "LINE_MAX",
    "TAIL_LINES",
    "AskScreen",
    "CommandInput",
    "ConsoleApp",
    "ControllerFactory",
    "PaletteScreen",
    "PanesView",
    "StreamLog",
]
