"""The console as its front ends and tests drive it: a session that runs typed lines.

:class:`ConsoleController` is the :class:`~ateam.console.session.ConsoleSession` (the
connection, attach and ownership, offsets and the background loops) plus the command
table (:mod:`ateam.console.commands`). Front ends give it a
:class:`~ateam.console.session.ConsoleView` and feed it lines; tests drive it directly.
"""

from __future__ import annotations

from collections.abc import Mapping

from ateam.console.commands import COMMANDS, Command, command_line, run_line
from ateam.console.session import ConsoleSession, ConsoleView

__all__ = ["ConsoleController", "ConsoleView"]


class ConsoleController(ConsoleSession):
    """One console session that runs command lines (:func:`ateam.console.commands.run_line`)."""

    commands: Mapping[str, Command] = COMMANDS
    """The command table, read by TAB completion and ``/help``."""

    async def execute(self, line: str) -> None:
        """Run one line typed by the user; raises AteamError on failure."""
        await run_line(self, line)

    def pick(self, agent: str) -> str:
        """The line that picking ``agent`` in the agent list or the palette runs."""
        return command_line("attach", agent)
