"""What the command line imports before it does anything: help and the parser stay light.

`ateam --help` and `import ateam.cli` run on every shell TAB and every typo; each heavy
library here costs tens to hundreds of milliseconds of start-up (redis-py alone ~0.2 s).
A verb imports them when it runs. Each case runs in a fresh interpreter: this test
session has long since imported all of them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import RedisProcess

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
    "ateam completion bash": f"from ateam.cli import main; main(['completion', 'bash']); {_DUMP}",
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


# --- what a verb on the bus imports -----------------------------------------------------

NOT_FOR_PS = (
    # Front ends and providers ps never shows.
    "textual",
    "prompt_toolkit",
    "rich.syntax",
    "pygments",
    "mcp",
    "openai",
    "anthropic",
    "agents",
    "chromadb",
    "httpx",
    "ateam.mcp",
    "ateam.providers",
    "ateam.agent",
    # The KB, the worktrees and the tools: a connect loads them at first use only.
    "ateam.kb",
    "ateam.worktrees",
    "ateam.tools",
    # Redaction's user (the stream framer) and the session snapshot builder.
    "ateam.bus.coalesce",
    "ateam.bus.snapshot",
    # Nothing is configured around the verb: no YAML parser, no schema of its files.
    "yaml",
    "ateam.config.loader",
    "ateam.config.schema",
    # A server given by URL: no embedded server's module, nor its file locks.
    "ateam.bus.embedded",
    "portalocker",
)
"""What ``ateam ps`` and ``ateam send`` import none of (each name: the module or package)."""

NOT_FOR_PS_ALONE = (
    # ps calls no agent: no RPC client, no reply models, no agent handle.
    "ateam.bus.rpc",
    "ateam.wire.rpc",
    "ateam.wire.results",
    "ateam.client.agent",
    # nor reads events, the board, the context items or mailboxes.
    "ateam.bus.tail",
    "ateam.wire.events",
    "ateam.bus.board",
    "ateam.bus.context_items",
    "ateam.bus.mailbox",
    # A single server: ateam's Cluster and Sentinel helpers (an agent's tail uses them).
    "ateam.bus.cluster",
)
"""What ``ateam ps`` does without, ``send`` not always."""


def _imports_none_of(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


def _verb_modules(argv: list[str], cwd: Path) -> tuple[set[str], str]:
    """What ``ateam ARGV`` imports, run in ``cwd`` by a fresh interpreter; and its output."""
    program = (
        "import contextlib, io\n"
        "from ateam.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        f"    code = main({argv!r})\n"
        "print(f'exit {code}: {out.getvalue()}')\n"
        f"{_DUMP}"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, cwd=cwd
    )
    assert done.returncode == 0, done.stderr
    return {line for line in done.stderr.splitlines() if line}, done.stdout


def test_ps_imports_only_what_it_shows(redis_server: RedisProcess, tmp_path: Path) -> None:
    # A real server, an empty directory and an empty ATEAM_HOME (isolated_home): ps
    # connects, reads the registry and prints its table, with nothing configured.
    modules, out = _verb_modules(["ps", "--redis", redis_server.url], tmp_path)

    assert out.startswith("exit 0: ")  # it ran to the end, on the bus
    assert {"redis", "ateam.client.team", "ateam.wire.registry"} <= modules
    assert _imports_none_of(modules, NOT_FOR_PS + NOT_FOR_PS_ALONE) == []


def test_send_imports_no_more_than_ps(redis_server: RedisProcess, tmp_path: Path) -> None:
    # To an agent that is not there: the name is looked up in the registry, and the
    # refusal is the verb's own (agent.not_found, exit 4), with no module of NOT_FOR_PS
    # on the way.
    modules, out = _verb_modules(
        ["send", "nobody/here", "hi", "--redis", redis_server.url], tmp_path
    )

    assert out.startswith("exit 4: ")
    assert any("[agent.not_found]" in line for line in modules)  # the error, on stderr
    assert "ateam.client.team" in modules
    assert _imports_none_of(modules, NOT_FOR_PS) == []
