"""``ateam agent`` is parsed without the verb table (issue 28 §2: an agent weighs little).

The fast path must keep the verb's behaviour: the same options, bad usage answered with
ateam's usage exit, ``--help`` from the full parser, and a process that has not imported
the CLI's other verbs, the client library or the console.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ateam.cli import main
from ateam.cli.agent_verb import fast_path
from ateam.exits import Exit

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    ("argv", "fast"),
    [
        (["agent", "--name", "zeus"], True),
        (["agent", "--name", "zeus", "--no-repl", "--redis", "unix:///x"], True),
        (["agent", "--help"], False),
        (["agent", "--name", "zeus", "-h"], False),
        (["ps"], False),
        ([], False),
    ],
)
def test_only_an_agent_start_takes_the_fast_path(argv: list[str], fast: bool) -> None:
    assert fast_path(argv) is fast


def test_bad_usage_of_agent_is_the_usage_exit(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["agent"]) == Exit.USAGE
    assert "--name" in capsys.readouterr().err
    assert main(["agent", "--name", "zeus", "--bogus"]) == Exit.USAGE


def test_an_agent_start_never_builds_the_verb_table(tmp_path: Path) -> None:
    # A refusal (a project name ateam rejects) ends the start before any connection.
    code = """
        import sys
        from ateam.cli import main
        status = main(["agent", "--project", "no/such", "--name", "zeus", "--no-repl"])
        heavy = ("ateam.cli.parser", "ateam.client", "ateam.console", "rich")
        print(status != 0, sorted(m for m in sys.modules if m.startswith(heavy)))
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=50,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True []", done.stderr


def test_main_runs_twice_in_one_process() -> None:
    # A verb's module imports the submodule ateam.cli._run; the function main ends
    # through must not be a name that import rebinds (it was: "'module' object is not
    # callable" at the second run in one interpreter).
    program = (
        "from ateam.cli import main\n"
        "for _ in range(2):\n"
        "    args = ['tasks', 'ls', '--project', 'p', '--redis', 'redis://127.0.0.1:1']\n"
        "    assert main(args) == 2\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
