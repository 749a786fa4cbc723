"""What the command line imports before it does anything: help and the parser stay light.

`ateam --help` and `import ateam.cli` run on every shell TAB and every typo; each heavy
library here costs tens to hundreds of milliseconds of start-up (redis-py alone ~0.2 s).
A verb imports them when it runs. Each case runs in a fresh interpreter: this test
session has long since imported all of them.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = (
    "redis",
    "pydantic",
    "pydantic_core",
    "yaml",
    "msgpack",
    "textual",
    "rich",
    "prompt_toolkit",
    "mcp",
    "openai",
    "anthropic",
    "agents",
    "chromadb",
    "httpx",
    "shtab",
    "asyncio",
)
"""Top-level packages no help or parsing path needs (asyncio: nothing is awaited yet)."""

_DUMP = "import sys; print('\\n'.join(sorted(sys.modules)), file=sys.stderr)"
"""Printed last, on stderr, so help on stdout does not mix with it."""

CASES: dict[str, str] = {
    "import ateam.cli": f"import ateam.cli; {_DUMP}",
    "ateam --help": f"from ateam.cli import main; main(['--help']); {_DUMP}",
    "ateam (no verb)": f"from ateam.cli import main; main([]); {_DUMP}",
    "ateam nosuchverb": f"from ateam.cli import main; main(['nosuchverb']); {_DUMP}",
    "ateam ps --help": f"from ateam.cli import main; main(['ps', '--help']); {_DUMP}",
    "ateam send --help": f"from ateam.cli import main; main(['send', '--help']); {_DUMP}",
}


def _modules(program: str) -> set[str]:
    """Every module in ``sys.modules`` once ``program`` has run in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return {line for line in done.stderr.splitlines() if line}


@pytest.mark.parametrize("case", CASES)
def test_help_and_the_parser_import_no_heavy_library(case: str) -> None:
    packages = {name.split(".")[0] for name in _modules(CASES[case])}

    assert "argparse" in packages  # the dump ran after the command, not before it
    assert sorted(packages & set(HEAVY)) == []


def test_top_level_help_imports_no_verb_module() -> None:
    # A verb's module is imported when that verb is built or run, never to list it.
    light = {"ateam.cli", "ateam.cli._verb", "ateam.cli._hints", "ateam.cli.parser"}
    light |= {"ateam.cli.arguments", "ateam.cli.completion"}  # argparse and constants
    light.add("ateam.cli.agent_verb")  # its fast_path check, asked first; nothing at its top

    cli = {m for m in _modules(CASES["ateam --help"]) if m.startswith("ateam.cli")}

    assert "ateam.cli.parser" in cli
    assert sorted(cli - light) == []


def test_no_verb_help_imports_a_heavy_library() -> None:
    # Every verb's and action's --help in one interpreter: what any of them imports stays.
    program = (
        "import contextlib, io\n"
        "from ateam.cli import VERBS, main\n"
        "paths = [[v.name, *([a.name] if a else [])] for v in VERBS"
        " for a in (v.actions or (None,))]\n"
        "assert len(paths) > 30, paths\n"
        "for path in paths:\n"
        "    with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "        assert main([*path, '--help']) == 0, path\n"
        "    assert out.getvalue().startswith('usage: ateam ' + ' '.join(path)), path\n"
        f"{_DUMP}"
    )
    packages = {name.split(".")[0] for name in _modules(program)}

    assert sorted(packages & set(HEAVY)) == []


def test_init_offers_every_known_coding_agent() -> None:
    # The choices are a constant so that `ateam init --help` need not import ateam.config.
    from ateam.config.runtimes import KNOWN
    from ateam.constants import ACP_RUNTIME_IDS

    assert sorted(ACP_RUNTIME_IDS) == sorted(KNOWN)
