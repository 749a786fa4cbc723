"""One browser tab's console: the panes console, run by textual-serve as a process.

Each WebSocket gets a process of its own (``python -m ateam.console.web``), so each tab
is a console session with its own ownership, exactly like a console in a terminal.
It finds the bus the way ``ateam console`` does, from the environment and the working
directory it inherits from the server.

A browser has no terminal to lend an editor, and cannot continue in plain mode, so
``$EDITOR`` and ``/ui`` are refused. A watch-only console (``--read-only``, for a
shared screen) refuses more: everything that attaches or writes, leaving what only
reads — ``/ps``, ``/tail`` and their like.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

from ateam.client import Target, resolve_target
from ateam.config import ProjectConfig, load_project
from ateam.console.commands import command_line
from ateam.console.controller import ConsoleController
from ateam.console.session import ConsoleView
from ateam.errors import (
    AteamError,
    ConfigError,
    OwnershipDenied,
    UsageError,
)
from ateam.exits import Exit, cli_exit_code

__all__ = ["WATCH_ONLY", "WatchOnly", "WebController", "run_session"]

ANY = frozenset({"*"})
WATCH_ONLY: Mapping[str, frozenset[str]] = {
    "help": ANY,
    "ps": ANY,
    "agents": ANY,
    "who": ANY,
    "tail": ANY,
    "untail": ANY,
    "quit": ANY,
    # "" is the command with no action word: its default, which reads.
    "context": frozenset({"", "ls", "search"}),
    "tasks": frozenset({"", "ls"}),
    "plan": frozenset({"", "read", "list"}),
}
"""What a watch-only console runs: each command with the action words that only read."""


class WatchOnly(OwnershipDenied):
    """A watch-only browser console refused a command that attaches or writes."""

    hint = (
        "this browser console only watches (--read-only); /tail ID follows an agent, /ps lists them"
    )


class WebController(ConsoleController):
    """The console session of one browser tab; ``watch_only`` for ``--read-only``."""

    def __init__(self, target: Target, view: ConsoleView, *, watch_only: bool = False) -> None:
        super().__init__(target, view)
        self.watch_only = watch_only
        self.edit_text = _no_editor

    async def execute(self, line: str) -> None:
        # Every line typed, picked in the palette or bound to a key comes through here.
        text = line.strip()
        if text.startswith("/"):
            _check_command(text[1:], watch_only=self.watch_only)
        elif text and self.watch_only:
            what = "an overlay line" if text.startswith("#") else "input"
            raise WatchOnly(f"{what} is refused")
        await super().execute(line)

    def pick(self, agent: str) -> str:
        # A watch-only tab follows the agent it picks; attaching would only be refused.
        return command_line("tail", agent) if self.watch_only else super().pick(agent)


def _check_command(text: str, *, watch_only: bool) -> None:
    try:
        words = shlex.split(text)
    except ValueError:
        return  # the command table reports it
    if not words:
        return
    name = words[0]
    if name == "ui":
        raise UsageError("/ui: a browser console stays in panes mode")
    if not watch_only:
        return
    allowed = WATCH_ONLY.get(name)
    action = words[1] if len(words) > 1 and not words[1].startswith("--") else ""
    if allowed is None:
        raise WatchOnly(f"/{name} is refused")
    if allowed is not ANY and action not in allowed:
        raise WatchOnly(f"/{name} {action} is refused")


async def _no_editor(text: str, *, suffix: str) -> str | None:
    raise UsageError(
        "a browser console cannot open an editor; give the text on the command line "
        "(/plan write TEXT, # TEXT)"
    )


def _project() -> ProjectConfig | None:
    try:
        return load_project(Path.cwd())
    except ConfigError:
        return None  # the server warned about it when it started


def run_session(*, watch_only: bool) -> int:
    """Run the panes console for one tab until it quits; returns the exit code."""
    from ateam.console.panes import EXIT_ERROR, ConsoleApp

    try:
        target = resolve_target(None, _project())  # ATEAM_REDIS_URL, set by the server
    except AteamError as exc:
        print(exc.one_line(), file=sys.stderr)
        return cli_exit_code(exc)
    app = ConsoleApp(lambda view: WebController(target, view, watch_only=watch_only))
    if app.run() == EXIT_ERROR:
        error = app.startup_error
        print(error.one_line() if error else "error: the console could not start", file=sys.stderr)
        return app.return_code or Exit.FAILED
    return 0
