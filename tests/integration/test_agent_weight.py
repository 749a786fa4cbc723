"""An agent process carries no front end (issue 28 §2: an agent weighs little).

``ateam agent`` used to build the whole verb table, which imports every front end's
module — the client library, the console's tables and diffs, rich and pygments — into
a process that runs for hours and uses none of them. The process is started as a
supervisor starts it and watched with ``PYTHONPROFILEIMPORTTIME``, which lists every
module the interpreter imports, at start-up and while it serves.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import AgentFactory

pytestmark = pytest.mark.integration

FRONT_ENDS = ("ateam.cli.parser", "ateam.client", "ateam.console", "rich", "pygments")
"""Packages an echo agent must never import: the CLI's verb table and what it pulls in."""


def is_front_end(module: str) -> bool:
    return any(module == top or module.startswith(top + ".") for top in FRONT_ENDS)


def imported(stderr: str) -> set[str]:
    """Every module named in ``-X importtime`` lines."""
    return {
        line.rsplit("|", 1)[1].strip()
        for line in stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }


def test_an_echo_agent_process_imports_no_front_end(
    start_agent: AgentFactory, tmp_path: Path
) -> None:
    agent = start_agent("light/zeus", env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert agent.terminate() == 0
    modules = imported(agent.stderr())
    assert "ateam.agent.runtime.build" in modules  # the listing is the agent's own
    leaked = sorted(m for m in modules if is_front_end(m))
    assert leaked == []
