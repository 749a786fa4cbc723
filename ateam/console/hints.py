"""Errors in the console's own words: what to do next, as a console command.

An error's hint is written for whoever meets it first, and several are met at a shell
(``see `ateam ps```). In a console the next step is a console command, about the agent
the failed line named (``/attach zeus --takeover``), so the console words the line
itself (:func:`console_line`) for the codes whose next step it has a command for.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable

from ateam.console.commands import COMMANDS
from ateam.errors import AteamError, Code

__all__ = ["console_line"]

Hint = Callable[[AteamError, str], str]
"""The console's hint for an error, given the agent the line was about (or ``ID``)."""


def _usage(exc: AteamError, agent: str) -> str:
    # An agent's refusal of a malformed request has no hint: its message says it all.
    return "/help lists the commands, /help NAME explains one" if exc.hint else ""


_HINTS: dict[str, Hint] = {
    Code.OWNERSHIP_DENIED: lambda exc, agent: (
        f"another console owns it: /tail {agent} to watch, /attach {agent} --takeover to write"
    ),
    Code.AGENT_NOT_FOUND: lambda exc, agent: (
        "/ps lists the agents on this bus, /agents the configured ones"
    ),
    Code.BAD_REQUEST: _usage,
    Code.TASK_NOT_FOUND: lambda exc, agent: "/tasks ls lists the board",
}


def console_line(exc: AteamError, line: str = "", attached: str | None = None) -> str:
    """``exc`` as one line for a console user who typed ``line`` (attached to ``attached``)."""
    hint = _HINTS.get(exc.code)
    if hint is None:
        return exc.one_line()
    said = hint(exc, _subject(line) or attached or "ID")
    return f"error [{exc.code}]: {exc.message}" + (f" — {said}" if said else "")


def _subject(line: str) -> str | None:
    """The agent a command line names, when its command takes one (``/attach zeus``)."""
    try:
        words = shlex.split(line)
    except ValueError:
        return None
    if len(words) < 2 or not words[0].startswith("/"):
        return None
    command = COMMANDS.get(words[0][1:])
    if command is None or not command.takes_agent or words[1].startswith("-"):
        return None
    return words[1]
