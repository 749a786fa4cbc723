"""The task board with real agents (issue 12): killing the agent that holds a claim puts
the task back to open within the heartbeat TTL, and ``ateam tasks fail`` gives a task up.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from ateam.bus.codec import unpack
from ateam.constants import HEARTBEAT_TTL_S
from tests._wait import wait_for

from .conftest import KEYS, AgentFactory, Bus, run_ateam, write_project

pytestmark = pytest.mark.integration

SLACK_S = 1.5
"""Two busy cores: process scheduling on top of the TTL (the survivor looks again the
moment the holder's heartbeat key expires, not an interval later)."""


def tasks(*args: str, redis_url: str, cwd: Path) -> Any:
    """``ateam tasks ARGS --json`` run to completion; its exit code and parsed output."""
    done = run_ateam("tasks", *args, "--json", "--redis", redis_url, cwd=cwd)
    return done.returncode, (json.loads(done.stdout) if done.returncode == 0 else done.stderr)


def stored(bus: Bus, task_id: str) -> dict[str, Any]:
    """The task as Redis holds it: read raw, so reading it reconciles nothing."""
    raw = bus.client.hget(KEYS.board("proj"), task_id)
    assert raw is not None
    record: dict[str, Any] = unpack(raw)  # type: ignore[arg-type]
    return record


def test_killing_the_holder_reopens_its_task_within_the_ttl(
    start_agent: AgentFactory, bus: Bus, redis_url: str, tmp_path: Path
) -> None:
    root = write_project(tmp_path / "proj", "proj", agents=("a", "b"))
    holder = start_agent("proj/a", cwd=root)
    start_agent("proj/b", cwd=root)
    rc, task = tasks("add", "port", "the", "parser", redis_url=redis_url, cwd=root)
    assert rc == 0, task
    rc, kept = tasks("add", "held", "by", "the", "living", redis_url=redis_url, cwd=root)
    assert rc == 0, kept
    rc, claimed = tasks("claim", task["id"], "--as", "proj/a", redis_url=redis_url, cwd=root)
    assert rc == 0 and claimed["assignee"] == "proj/a", claimed
    rc, _ = tasks("claim", kept["id"], "--as", "proj/b", redis_url=redis_url, cwd=root)
    assert rc == 0

    killed_at = time.monotonic()
    holder.kill9()  # the agent process itself: nothing restarts it, nothing says goodbye
    assert stored(bus, task["id"])["status"] == "claimed"  # its heartbeat is still fresh

    # proj/b's upkeep notices; nobody lists the board meanwhile.
    wait_for(
        lambda: stored(bus, task["id"])["status"] == "open",
        HEARTBEAT_TTL_S + SLACK_S,
        "the killed holder's task to be open again",
    )
    elapsed = time.monotonic() - killed_at
    assert elapsed <= HEARTBEAT_TTL_S + SLACK_S

    rc, board = tasks("ls", redis_url=redis_url, cwd=root)
    assert rc == 0
    rows = {row["id"]: row for row in board}
    assert rows[task["id"]]["status"] == "open" and rows[task["id"]]["assignee"] == ""
    assert rows[task["id"]]["reason"] == "assignee proj/a lost (heartbeat)"
    assert rows[kept["id"]]["status"] == "claimed" and rows[kept["id"]]["assignee"] == "proj/b"
    rc, again = tasks("claim", task["id"], "--as", "proj/b", redis_url=redis_url, cwd=root)
    assert rc == 0 and again["assignee"] == "proj/b" and again["reason"] == ""


def test_fail_gives_a_task_up_with_its_reason_and_only_for_the_holder(
    tmp_path: Path, redis_url: str
) -> None:
    root = write_project(tmp_path / "proj", "proj")
    rc, task = tasks("add", "migrate", "the", "db", redis_url=redis_url, cwd=root)
    assert rc == 0, task
    rc, _ = tasks("claim", task["id"], "--as", "proj/a", redis_url=redis_url, cwd=root)
    assert rc == 0

    rc, err = tasks(
        "fail", task["id"], "--as", "proj/b", "--reason", "no", redis_url=redis_url, cwd=root
    )
    assert rc == 1 and err.startswith("error [task.claimed]") and "proj/a" in err
    no_reason = run_ateam("tasks", "fail", task["id"], "--as", "proj/a", cwd=root)
    assert no_reason.returncode == 4 and "--reason" in no_reason.stderr
    rc, err = tasks(
        "fail", "t-0000000000", "--as", "proj/a", "--reason", "x", redis_url=redis_url, cwd=root
    )
    assert rc != 0 and "task.not_found" in err

    rc, failed = tasks(
        "fail", task["id"], "--as", "proj/a", "--reason", "schema locked",
        redis_url=redis_url, cwd=root,
    )  # fmt: skip
    assert rc == 0, failed
    assert failed["status"] == "failed" and failed["reason"] == "schema locked"
    plain = run_ateam(
        "tasks", "fail", task["id"], "--as", "proj/a", "--reason", "again",
        "--redis", redis_url, cwd=root,
    )  # fmt: skip
    assert plain.returncode == 1 and "task.claimed" in plain.stderr  # finished: no second finish
