"""The console's commands: one table, read by dispatch, ``/help``, TAB and the palettes.

One module per family of commands, each exporting its :class:`Command` records:

- :mod:`.session`: help, ps, attach, detach, who, tail, untail, ui, quit
- :mod:`.task`: input, interrupt, cancel, queue, history, ctx
- :mod:`.prompt`: sys, reloadsysprompt, tools, models, use, save, handoff, summarize,
  clearhistory (and ``# text`` overlay lines)
- :mod:`.approval`: approve, apply, reject, edit, pending
- :mod:`.plan`, :mod:`.kb`, :mod:`.context`: the plan, knowledge bases, team context
- :mod:`.modes`: delegate
- :mod:`.board`: tasks (the team's task board)
- :mod:`.work`: diff, merge, discard (an agent's or a task's branch)
- :mod:`.mail`: broadcast (one input to every running agent of the project)
- :mod:`.fleet`, :mod:`.offload`: agents, agent, spawn, stop; offload
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ateam.client import bus_errors
from ateam.console.commands import (
    approval,
    board,
    context,
    fleet,
    kb,
    mail,
    modes,
    offload,
    plan,
    prompt,
    session,
    task,
    work,
)
from ateam.console.commands.base import Call, Command
from ateam.console.session import ConsoleSession
from ateam.errors import UsageError

if TYPE_CHECKING:
    from ateam.completion import CommandCompleter

__all__ = [
    "COMMANDS",
    "Call",
    "Command",
    "command_line",
    "completer",
    "palette_entries",
    "run_line",
]

COMMANDS: Mapping[str, Command] = {
    command.name: command
    for family in (
        session,
        task,
        prompt,
        approval,
        plan,
        modes,
        kb,
        context,
        board,
        work,
        mail,
        fleet,
        offload,
    )
    for command in family.COMMANDS
}
"""Every console command by name, in the order ``/help`` lists them."""


async def run_line(console: ConsoleSession, line: str) -> None:
    """Run one line typed by the user; raises AteamError on failure.

    ``/name args`` runs a command, ``# text`` adds to the agent's prompt overlay, and
    anything else is input for the attached agent.
    """
    text = line.rstrip("\n")
    if not text.strip():
        return
    with bus_errors():  # NOPERM, LOADING, a dropped link: one line, not a trace
        if text.startswith("#"):
            await prompt.add_overlay_line(console, text[1:].strip())
        elif text.startswith("/"):
            await _run_command(console, text[1:])
        else:
            await console.send_input(text)


async def _run_command(console: ConsoleSession, text: str) -> None:
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"cannot parse command: {exc}") from exc
    if not words:
        raise UsageError("empty command")
    command = COMMANDS.get(words[0])
    if command is None:
        raise UsageError(f"unknown command /{words[0]}")
    await command.run(Call(console, command, words[1:], COMMANDS))


def palette_entries() -> list[tuple[str, str, str]]:
    """Every command as the F1 palette lists it: name, usage, help line."""
    return [(c.name, c.usage, c.help) for c in COMMANDS.values()]


def command_line(name: str, *args: str) -> str:
    """The line that runs command ``name`` with ``args`` (for palettes and menus)."""
    command = COMMANDS[name]  # a KeyError here is a typo in the caller, not user input
    return " ".join([f"/{command.name}", *map(shlex.quote, args)])


def completer(
    console: ConsoleSession, *, cwd: str | os.PathLike[str] | None = None
) -> CommandCompleter:
    """TAB completion over :data:`COMMANDS` and the agents the console knows."""
    # Imported here: scripts on a pipe never pay for loading prompt-toolkit.
    from ateam.completion import CommandCompleter

    return CommandCompleter(
        lambda: COMMANDS,
        lambda: console.known,
        cwd=cwd,
        agent_commands=[c.name for c in COMMANDS.values() if c.takes_agent],
    )
