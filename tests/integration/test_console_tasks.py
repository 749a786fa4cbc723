"""``/tasks`` on a real plain console (issue 12): the board of the attached agent's
project, listed, added to, claimed (by the attached agent unless ``--as`` says), finished
and given up, with refusals as one-line errors.
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


def test_tasks_from_the_console(
    start_agent: AgentFactory, start_console: ConsoleFactory, tmp_path: Path, redis_url: str
) -> None:
    root = write_project(tmp_path / "p", "p", agents=("zeus", "hera"))
    start_agent("p/zeus", cwd=root)
    start_agent("p/hera", cwd=root)

    def refused(line: str) -> str:
        """The error a console prints for ``line``; a console on a pipe stops at it."""
        other = start_console()
        attach_and_send(other, "p/hera", line)  # the board of p/hera's project
        error = other.wait_line("error [")
        assert other.wait_exit() != 0
        return error

    console = start_console()
    attach_and_send(console, "p/zeus")
    start = mark(console)
    console.send("/tasks")
    wait_after(console, start, "no tasks on the board of p")
    console.send("/tasks add port the parser --priority 3 --detail 'see issue 7'")
    first = ADDED.match(wait_after(console, start, ADDED.match))
    assert first is not None
    first_id = first.group(1)
    start = mark(console)
    console.send(f"/tasks add ship it --after {first_id[:7]}")  # a task id cut short
    second = ADDED.match(wait_after(console, start, ADDED.match))
    assert second is not None
    second_id = second.group(1)

    blocked = refused(f"/tasks claim {second_id}")
    assert blocked.startswith("error [task.blocked]") and first_id in blocked
    start = mark(console)
    console.send(f"/tasks claim {first_id}")
    wait_after(console, start, f"claimed {first_id} by p/zeus: port the parser")

    start = mark(console)
    console.send("/tasks ls")
    header = wait_after(console, start, lambda line: line.startswith("ID "))
    assert header.split() == ["ID", "STATUS", "PRIO", "ASSIGNEE", "AFTER", "TITLE", "NOTE"]
    row = wait_after(console, start, lambda line: line.startswith(first_id))
    assert row.split()[1:4] == ["claimed", "3", "p/zeus"]
    row = wait_after(console, start, lambda line: line.startswith(second_id))
    assert row.split()[1:5] == ["open", "0", "-", first_id]

    start = mark(console)
    # A task id cut short, with or without its t-, and an agent's name cut short.
    console.send(f"/tasks done {first_id[2:7]} --result 'merged in abc123'")
    wait_after(console, start, f"done {first_id} by p/zeus")
    not_held = refused(f"/tasks fail {second_id} --as hera --reason 'no time'")
    assert not_held.startswith("error [task.claimed]")  # open: nobody holds it yet
    console.send(f"/tasks claim {second_id[:7]} --as he")
    wait_after(console, start, f"claimed {second_id} by p/hera")
    no_reason = refused(f"/tasks fail {second_id} --as p/hera")
    assert no_reason.startswith("error [bad_request]") and "fail needs --reason" in no_reason
    console.send(f"/tasks fail {second_id} --as p/hera --reason 'no time'")
    wait_after(console, start, f"failed {second_id} by p/hera")

    start = mark(console)
    console.send("/tasks ls --status failed")
    row = wait_after(console, start, lambda line: line.startswith(second_id))
    assert row.split()[1] == "failed" and row.rstrip().endswith("no time")
    assert "--priority needs a whole number" in refused("/tasks add --priority high x")

    # The verbs see what the console did, and the refusals changed nothing.
    listed = run_ateam("tasks", "ls", "--json", "--redis", redis_url, cwd=root)
    board = {row["id"]: row for row in json.loads(listed.stdout)}
    assert set(board) == {first_id, second_id}
    assert board[first_id]["status"] == "done" and board[first_id]["result"] == "merged in abc123"
    assert board[first_id]["detail"] == "see issue 7"
    assert board[first_id]["created_by"].startswith("console:")
    assert board[second_id]["status"] == "failed" and board[second_id]["reason"] == "no time"
    assert board[second_id]["assignee"] == "p/hera"
