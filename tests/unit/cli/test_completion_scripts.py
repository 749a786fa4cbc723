"""The shell completion scripts shipped in the package: made from the parser, printed
without it.

``ateam completion SHELL`` prints a file (issue 28 §1); these tests make the scripts
again from the parser with ``shtab`` and fail when a shipped one differs, so a verb, an
action or a flag cannot be added without its completion.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ateam.cli._completion_gen import generate
from ateam.cli.completion import PLACEHOLDER, SHELLS, helper_command, script_path

REGENERATE = "python -m ateam.cli._completion_gen"


@pytest.mark.parametrize("shell", SHELLS)
def test_the_shipped_script_is_what_the_parser_makes_today(shell: str) -> None:
    made = generate(shell)

    assert f"{PLACEHOLDER} agents" in made and f"{PLACEHOLDER} tasks" in made
    assert script_path(shell).read_text(encoding="utf-8") == made, (
        f"ateam/cli/completions/ateam.{shell} is stale: run `{REGENERATE}`"
    )


_RUN = (
    "import contextlib, io, sys\n"
    "from ateam.cli import main\n"
    "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
    "    code = main(['completion', sys.argv[1]])\n"
    "sys.stdout.write(out.getvalue())\n"
    "print('\\n'.join(sorted(sys.modules)), file=sys.stderr)\n"
    "sys.exit(code)\n"
)


@pytest.mark.parametrize("shell", SHELLS)
def test_printing_a_script_builds_no_parser_and_imports_no_shtab(shell: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _RUN, shell], capture_output=True, text=True, timeout=60
    )

    assert done.returncode == 0, done.stderr
    # What the parser and shtab would print, the helper being this Python's ateam.
    assert done.stdout == generate(shell).replace(PLACEHOLDER, helper_command())
    assert f"{sys.executable} -m ateam __complete agents" in done.stdout
    modules = set(done.stderr.splitlines())
    assert "ateam.cli.completion" in modules  # the dump saw the command's imports
    assert sorted(modules & {"shtab", "ateam.cli.parser", "ateam.cli.arguments"}) == []
    assert sorted(m for m in modules if m.split(".")[0] in {"redis", "pydantic", "yaml"}) == []
    # Nor the error catalogue: a file printed has no error to word.
    assert sorted(modules & {"ateam.errors", "ateam.cli._hints", "typing_extensions"}) == []


def test_a_reader_gone_ends_the_print_quietly() -> None:
    # `ateam completion bash | true`: the reader has left before the script is written.
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "ateam", "completion", "bash"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write)

    assert done.stderr == ""
    assert done.returncode == 128 + 13  # as a shell shows a process that SIGPIPE ended
