"""What a running ``echo`` agent has imported: only what its configuration uses.

An idle agent's memory and its start are mostly its imports (issue 28 §2): every
module below is one an echo agent given ``--redis`` never runs, so none may be loaded
by the time it serves. A real agent is started on a real server with
``python -X importtime``, which names each module as the process imports it; it is
stopped a moment after it answers, and what it printed is the list.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ateam.bus.connection import RedisTarget, make_client
from ateam.bus.keys import Keys
from ateam.bus.rpc import RpcClient
from tests.conftest import RedisProcess

pytestmark = pytest.mark.timeout(90)

NOT_FOR_AN_ECHO_AGENT = (
    # Providers it is not configured with, and their SDKs.
    "openai",
    "anthropic",
    "agents",
    "httpx",
    "ateam.providers.openai",
    "ateam.providers.anthropic",
    "ateam.providers.scripted",
    # Front ends, and what only they draw with.
    "ateam.cli.parser",
    "ateam.client",
    "ateam.console",
    "ateam.mcp",
    "mcp",
    "textual",
    "rich",
    "pygments",
    "prompt_toolkit",
    "shtab",
    # The KB's stores, their engine and file reading: opened at the first kb call only.
    "chromadb",
    "ateam.kb.store",
    "ateam.kb.chunking",
    "ateam.kb._paths",
    # A server given by URL: the embedded server's module is never needed; nor file
    # locks, which only it and a handoff to a successor take.
    "ateam.bus.embedded",
    "portalocker",
    # git and the worktrees: its configuration says `worktree: none`.
    "ateam.worktrees",
    # The PTY, loaded by the first os.exec.
    "ateam.tools.pty",
    "ptyprocess",
    # Only a misspelt setting or a proposed edit needs a diff.
    "difflib",
    # The redactor's stream prefilter: the echo model's output is not a tool's.
    "hyperscan",
    "re2",
)
"""Each a module or a package (its submodules count)."""


def _served(url: str, agent_id: str, deadline: float) -> bool:
    async def ask() -> bool:
        target = RedisTarget(url, "test")
        client = make_client(target)
        try:
            rpc = RpcClient(client, Keys(target.namespace))
            while time.monotonic() < deadline:
                try:
                    await rpc.call(agent_id, "status", timeout=1.0)
                    return True
                except Exception:  # not serving yet: its queue has no reader
                    await asyncio.sleep(0.1)
            return False
        finally:
            await client.aclose()

    return asyncio.run(ask())


def test_an_idle_echo_agent_imports_nothing_it_does_not_use(
    redis_server: RedisProcess, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATEAM_")}
    env["ATEAM_HOME"] = str(tmp_path / "home")
    env["ATEAM_RUNTIME_DIR"] = str(tmp_path / "run")
    work = tmp_path / "work"
    work.mkdir()
    argv = ["agent", "--project", "weigh", "--name", "echo", "--no-repl"]
    proc = subprocess.Popen(
        [sys.executable, "-X", "importtime", "-m", "ateam", *argv, "--redis", redis_server.url],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert _served(redis_server.url, "weigh/echo", time.monotonic() + 60)
        time.sleep(1.0)  # idle a moment: its heartbeat and upkeep run too
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)

    imported = {
        line.split("|")[-1].strip() for line in err.splitlines() if line.startswith("import time:")
    }
    assert {"redis", "pydantic", "ateam.agent.runtime.process"} <= imported  # it ran
    loaded = sorted(
        m for m in imported if any(m == n or m.startswith(n + ".") for n in NOT_FOR_AN_ECHO_AGENT)
    )
    assert loaded == []


# Every model class an agent defines, walked once its modules are imported.
_BUILT_AT_IMPORT = """
import ateam.agent.runtime.build, ateam.agent.runtime.main, ateam.agent.runtime.process
from pydantic import BaseModel

def below(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from below(sub)

for cls in below(BaseModel):
    built = cls.__dict__.get("__pydantic_complete__")
    a_tools_arguments = cls.__module__ == "ateam.tools.registry"  # made at first use
    if cls.__module__.startswith("ateam.") and (built or a_tools_arguments):
        print(f"{cls.__module__}.{cls.__qualname__}")
"""


def test_importing_an_agent_builds_no_model_validator() -> None:
    """A pydantic validator is built at a model's first use, never by its import.

    Building one costs time and memory (issue 28 §2), and an agent meets few of its
    models before it serves: its configuration files' and its registry entry's. So every
    model is ``defer_build``, and no default made at import (a section left out, the
    echo model) goes through a validator. A tool's arguments model is not even a class
    until the tool is first described or called.
    """
    done = subprocess.run(
        [sys.executable, "-c", _BUILT_AT_IMPORT], capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == []
