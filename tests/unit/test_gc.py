"""The collector held off while a real ``ateam`` process starts (ateam/_gc.py).

Each case runs in a fresh interpreter: the rules are about a process's own collector,
and this test session's must be left alone.

An interpreter may start with objects frozen already (pyenv's Python 3.12 here has 375),
so each case compares with the count it started with (``base``).
"""

from __future__ import annotations

import subprocess
import sys


def _run(program: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_hold_then_settle_turns_the_collector_off_and_on_again() -> None:
    program = (
        "import gc\n"
        "base = gc.get_freeze_count()\n"
        "from ateam import _gc\n"
        "_gc.hold(); print(gc.isenabled())\n"
        "_gc.settle(); print(gc.isenabled(), gc.get_freeze_count() > base)\n"
    )

    assert _run(program) == ["False", "True", "True"]


def test_settle_without_hold_changes_nothing() -> None:
    # A program that turned its collector off itself keeps it off.
    program = (
        "import gc\n"
        "base = gc.get_freeze_count()\n"
        "from ateam import _gc\n"
        "gc.disable(); _gc.settle()\n"
        "print(gc.isenabled(), gc.get_freeze_count() - base)\n"
    )

    assert _run(program) == ["False", "0"]


def test_a_verb_runs_with_the_collector_on() -> None:
    # A verb may run for hours (console, tail -f): once its module is imported, the
    # collector is back. The verb here says whether it is on, as its exit status.
    program = (
        "import argparse, gc\n"
        "from ateam import _gc\n"
        "from ateam.cli._verb import handler_at\n"
        "def verb(args):\n"
        "    return int(gc.isenabled())\n"
        "_gc.hold()\n"
        "print(handler_at('__main__:verb')(argparse.Namespace()))\n"
    )

    assert _run(program) == ["1"]


def test_the_command_freezes_what_is_left_for_its_exit_and_a_caller_is_left_alone() -> None:
    program = (
        "import contextlib, gc, io, sys\n"
        "base = gc.get_freeze_count()\n"
        "from ateam.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['completion', 'bash'])\n"
        "print(gc.isenabled(), gc.get_freeze_count() - base)\n"
        "sys.argv = ['ateam', 'completion', 'bash']\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main()\n"
        "print(gc.get_freeze_count() > base)\n"
    )

    assert _run(program) == ["True", "0", "True"]
