"""The hint a person at a shell needs after an error: an ``ateam …`` command to type.

An error's own hint may name console commands (``/tail``, ``/attach --takeover``); a
verb's line names the verbs instead, and the agent the command line named.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ateam.errors import AteamError, Code

__all__ = ["CLI_HINTS", "cli_line"]


def _verb_path(args: argparse.Namespace) -> str:
    verb = str(getattr(args, "command", ""))
    action = getattr(args, f"{verb}_action", None)
    return f"{verb} {action}" if action else verb


def _agent(args: argparse.Namespace) -> str:
    """The agent the command line named (the first, when it named several)."""
    for field in ("id", "ids", "names"):
        given = getattr(args, field, None)
        if isinstance(given, list):
            given = given[0] if given else None
        if given:
            return str(given)
    return "NAME"


CLI_HINTS: dict[str, Callable[[argparse.Namespace], str]] = {
    Code.OWNERSHIP_DENIED: lambda args: (
        f"another console owns {_agent(args)}: watch it with `ateam tail {_agent(args)}`, or "
        f"take it over with `ateam attach {_agent(args)} --takeover` (or add --takeover here)"
    ),
    Code.BAD_REQUEST: lambda args: f"see `ateam {_verb_path(args)} --help`",
}
"""A code → the hint for a shell, where an error's own hint names console commands."""


def cli_line(error: AteamError, args: argparse.Namespace) -> str:
    """``error``'s one line, its hint worded for a command line.

    An error that says what to do itself (an empty hint, as a refusal an agent sent
    has) keeps it that way.
    """
    hint = CLI_HINTS.get(str(error.code))
    if hint is None or not error.hint:
        return error.one_line()
    return f"error [{error.code}]: {error.message} — {hint(args)}"
