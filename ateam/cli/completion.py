"""``ateam completion bash|zsh|fish``: a shell completion script for ``ateam``.

The scripts ship inside the package (``completions/ateam.SHELL``): printing one reads a
file, so the command costs about what ``python -c pass`` does (issue 28 §1), where
building the whole parser and walking it with ``shtab`` cost twice that. They are made
from that same parser by :mod:`ateam.cli._completion_gen`, and a unit test
(``tests/unit/cli/test_completion_scripts.py``) makes them again and fails when they
differ, so a verb or flag added to the parser cannot be missing from them.

Agent names and task ids change while a shell runs, so the script asks for them as it
completes: it runs the hidden helper ``ateam __complete agents|tasks|work``
(:mod:`ateam.cli._complete`), with the Python and the ateam that printed it. The shipped
files hold :data:`PLACEHOLDER` where that command goes.

Install it once, for instance::

    ateam completion bash > ~/.local/share/bash-completion/completions/ateam
    ateam completion zsh > "${fpath[1]}/_ateam"
    ateam completion fish > ~/.config/fish/completions/ateam.fish
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

SHELLS = ("bash", "zsh", "fish")
HELPER = "__complete"
"""The hidden verb the script runs for live names (never listed in ``--help``)."""
PLACEHOLDER = "__ATEAM_COMPLETE_HELPER__"
"""Stands for the helper's command line in the shipped scripts: the Python that runs
ateam is known only where the script is printed. Plain word characters, which no shell
quoting in the scripts touches."""
SCRIPTS = Path(__file__).with_name("completions")
"""Where the scripts ship, one file per shell."""


def script_path(shell: str) -> Path:
    return SCRIPTS / f"ateam.{shell}"


def helper_command() -> str:
    """The command the script runs for live names: this Python, this ateam."""
    return shlex.join([sys.executable, "-m", "ateam", HELPER])


def shipped(shell: str) -> str:
    """The completion script for ``shell``, ready to source."""
    return script_path(shell).read_text(encoding="utf-8").replace(PLACEHOLDER, helper_command())


def print_script(shell: str) -> int:
    """``ateam completion SHELL``'s whole work (``main`` runs it before any parser)."""
    sys.stdout.write(shipped(shell))
    return 0


def completion_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("shell", choices=SHELLS, help="the shell to print the script for")
