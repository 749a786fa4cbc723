"""``ateam completion bash|zsh|fish``: a shell completion script for ``ateam``.

The script is generated from the same parser the command uses (``shtab`` walks it), so
it knows every verb, action and flag. Agent names and task ids change while a shell
runs, so the script asks for them as it completes: it runs the hidden helper
``ateam __complete agents|tasks|work`` (:mod:`ateam.cli._complete`), with the Python and
the ateam that printed it.

Install it once, for instance::

    ateam completion bash > ~/.local/share/bash-completion/completions/ateam
    ateam completion zsh > "${fpath[1]}/_ateam"
    ateam completion fish > ~/.config/fish/completions/ateam.fish
"""

from __future__ import annotations

import argparse
import shlex
import sys

SHELLS = ("bash", "zsh", "fish")
HELPER = "__complete"
"""The hidden verb the script runs for live names (never listed in ``--help``)."""

_POSITIONALS: dict[str, str] = {
    "id": "agents",
    "ids": "agents",
    "names": "agents",
    "task_id": "tasks",
    "target": "work",
}
"""A positional's ``dest`` → what the helper completes it with."""
_OPTIONS: dict[str, str] = {"--as": "agents"}
"""An option → what the helper completes its value with."""
_PATHS: dict[str, str] = {
    "dir": "directory",
    "paths": "file",
    "token_file": "file",
    "password_file": "file",
}
"""A ``dest`` that names a directory or a file → the shell's own path completion."""


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script of ``parser`` (``ateam``'s whole parser) for ``shell``."""
    import shtab

    helper = shlex.join([sys.executable, "-m", "ateam", HELPER])
    paths = {"directory": shtab.DIRECTORY, "file": shtab.FILE}
    for action in _actions(parser):
        if action.option_strings:
            kind = next((_OPTIONS[o] for o in action.option_strings if o in _OPTIONS), None)
        else:
            kind = _POSITIONALS.get(action.dest)
        if kind is not None:
            action.complete = shtab.cmd(f"{helper} {kind}")  # type: ignore[attr-defined]
        elif action.dest in _PATHS:
            action.complete = paths[_PATHS[action.dest]]  # type: ignore[attr-defined]
    return shtab.complete(parser, shell=shell)


def _actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """Every action of ``parser`` and of its sub-parsers, at every depth."""
    found = []
    for action in parser._actions:
        found.append(action)
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                found += _actions(sub)
    return found


def completion_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("shell", choices=SHELLS, help="the shell to print the script for")
