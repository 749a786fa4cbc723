"""Makes the shell completion scripts that ship in ``ateam/cli/completions/``.

Run after changing a verb, an action or a flag (a unit test fails until then)::

    python -m ateam.cli._completion_gen

``shtab`` walks ``ateam``'s whole parser and writes each shell's script; positionals
and options that name agents, tasks or work run the hidden helper (written as
:data:`~ateam.cli.completion.PLACEHOLDER`, replaced when the script is printed), and
those that name files or directories use the shell's own path completion. Never run
when a script is printed: ``shtab`` and the parser's building are the cost that
shipping the output saves.
"""

from __future__ import annotations

import argparse
import sys

from ateam.cli.completion import HELPER, PLACEHOLDER, SHELLS, script_path
from ateam.cli.parser import build_parser

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


def generate(shell: str) -> str:
    """The script for ``shell`` made from ``ateam``'s whole parser, placeholder and all."""
    import shtab

    parser = build_parser()
    paths = {"directory": shtab.DIRECTORY, "file": shtab.FILE}
    for action in _actions(parser):
        if action.option_strings:
            kind = next((_OPTIONS[o] for o in action.option_strings if o in _OPTIONS), None)
        else:
            kind = _POSITIONALS.get(action.dest)
        if kind is not None:
            action.complete = shtab.cmd(f"{PLACEHOLDER} {kind}")  # type: ignore[attr-defined]
        elif action.dest in _PATHS:
            action.complete = paths[_PATHS[action.dest]]  # type: ignore[attr-defined]
    made: str = shtab.complete(parser, shell=shell)
    # print() added the newline when the script was printed straight from shtab.
    return made + "\n"


def _actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """Every action of ``parser`` and of its sub-parsers, at every depth."""
    found = []
    for action in parser._actions:
        found.append(action)
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                found += _actions(sub)
    return found


def main() -> int:
    for shell in SHELLS:
        made = generate(shell)
        if f"{PLACEHOLDER} agents" not in made:  # a shtab that dropped the live names
            raise SystemExit(f"{shell}: the script never runs the {HELPER} helper")
        script_path(shell).write_text(made, encoding="utf-8")
        print(f"wrote {script_path(shell)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
