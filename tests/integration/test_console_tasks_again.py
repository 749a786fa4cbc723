"""``/tasks reopen|retry`` on a real plain console (issue 26 §4): a failed task sent back,
the task waiting for it saying so in ``/tasks``, and a task that is not failed refused.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from .conftest import AgentFactory, ConsoleFactory, attach_and_send, run_ateam, write_project
from .test_fleet import mark, wait_after

pytestmark = pytest.mark.integration

ADDED = re.compile(r"^added (t-[0-9a-f]{10}) to the board of p: ")


def test_reopen_and_retry_from_the_console(
    start_agent: AgentFactory, start_console: ConsoleFactory, tmp_path: Path, redis_url: str
) -> None:
    root = write_project(tmp_path / "p", "p", agents=("zeus", "hera"))
    start_agent("p/zeus", cwd=root)
    start_agent("p/hera", cwd=root)
    console = start_console()
    attach_and_send(console, "p/zeus")

    def added(line: str) -> str:
        start = mark(console)
        console.send(line)
        found = ADDED.match(wait_after(console, start, ADDED.match))
        assert found is not None
        return found.group(1)

    first = added("/tasks add port the parser")
    second = added(f"/tasks add ship it --after {first}")
    start = mark(console)
    console.send(f"/tasks claim {first}")  # as the attached agent, which is running
    wait_after(console, start, f"claimed {first} by p/zeus")
    console.send(f"/tasks fail {first} --reason 'grammar unclear'")
    wait_after(console, start, f"failed {first} by p/zeus")

    start = mark(console)
    console.send("/tasks ls")
    row = wait_after(console, start, lambda line: line.startswith(second))
    assert row.rstrip().endswith(f"blocked by {first} (failed)")

    start = mark(console)
    console.send(f"/tasks retry {first[:7]}")
    wait_after(
        console,
        start,
        f"retried {first}, offered to p/zeus first: port the parser (it failed: grammar unclear)",
    )
    # Open now, nothing to reopen (another console: one on a pipe stops at an error).
    other = start_console()
    attach_and_send(other, "p/hera", f"/tasks reopen {first}")  # the same board
    error = other.wait_line("error [")
    assert error.startswith("error [task.claimed]") and "is open" in error
    assert "only a failed task" in error and other.wait_exit() != 0

    start = mark(console)
    console.send(f"/tasks claim {first}")
    wait_after(console, start, f"claimed {first} by p/zeus")
    console.send(f"/tasks fail {first} --reason 'still unclear'")
    wait_after(console, start, f"failed {first} by p/zeus")
    console.send(f"/tasks reopen {first}")
    wait_after(console, start, f"reopened {first}: port the parser (it failed: still unclear)")

    listed = run_ateam("tasks", "ls", "--json", "--redis", redis_url, cwd=root)
    board = {row["id"]: row for row in json.loads(listed.stdout)}
    assert board[first]["status"] == "open" and board[first]["reopened"] == 2
    assert board[first]["reason"].startswith("reopened by console:")
    assert board[second]["blocked_by"] == [{"id": first, "failed": False}]
