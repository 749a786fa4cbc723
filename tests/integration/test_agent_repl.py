"""The agent's local REPL on a real terminal: a real ``ateam agent`` in a pseudo-terminal."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pexpect
import pytest

from tests._wait import wait_for

from .conftest import (
    START_TIMEOUT_S,
    Bus,
    ateam_cmd,
    subprocess_env,
    write_project,
)

AGENT = "proj/zeus"


@pytest.fixture
def repl_agent(own_redis: Any, tmp_path: Path) -> Iterator[tuple[pexpect.spawn, Path]]:
    """``ateam agent`` on a pty, at its first prompt; yields (child, agent dir)."""
    root = write_project(tmp_path / "work", "proj", delay_ms=0)
    cmd = ateam_cmd("agent", "--project", "proj", "--name", "zeus", "--redis", own_redis.url)
    env = subprocess_env(PROMPT_TOOLKIT_NO_CPR="1", TERM="xterm")
    child = pexpect.spawn(
        cmd[0], cmd[1:], cwd=str(root), env=env, encoding="utf-8", dimensions=(40, 200)
    )
    try:
        # The prompt's trailing space is drawn separately, after the reserved menu lines.
        child.expect_exact("proj/zeus [idle]>", timeout=START_TIMEOUT_S)
        yield child, root / ".ateam" / "agents" / "zeus"
    finally:
        if child.isalive():
            child.kill(9)
        child.close(force=True)


def send(child: pexpect.spawn, line: str) -> None:
    child.send(line + "\r")


def test_repl_status_task_and_inbox_scan(repl_agent: tuple[pexpect.spawn, Path], bus: Bus) -> None:
    child, agent_dir = repl_agent

    send(child, "status")
    child.expect(r"state idle", timeout=10)

    send(child, "hello from the repl")
    child.expect(r"queued (q-[0-9a-f-]+)", timeout=10)
    task_id = child.match.group(1)
    end = wait_for(lambda: bus.task_ends(AGENT).get(task_id), 20, "task.end of the REPL task")
    assert end.get("ok", True)
    starts = [b for _, b in bus.events(AGENT) if b.get("type") == "task.start"]
    assert any(b.get("task_id") == task_id and b.get("source") == "local" for b in starts)

    inbox = agent_dir / "inbox"
    inbox.mkdir()
    (inbox / "job.md").write_text("please check the build\n")
    send(child, "inbox scan")
    child.expect_exact("please check the build", timeout=10)
    child.expect_exact("enqueue job.md? [y/N]", timeout=10)
    send(child, "y")
    child.expect(r"inbox: queued (q-[0-9a-f-]+); moved to processed/job\.md", timeout=10)
    inbox_task = child.match.group(1)
    assert not (inbox / "job.md").exists()
    assert (inbox / "processed" / "job.md").read_text() == "please check the build\n"
    wait_for(lambda: bus.task_ends(AGENT).get(inbox_task), 20, "task.end of the inbox task")
    starts = [b for _, b in bus.events(AGENT) if b.get("type") == "task.start"]
    assert any(b.get("task_id") == inbox_task and b.get("source") == "inbox" for b in starts)

    # Ctrl+C is a key here: it clears the line and never stops the agent.
    child.send("never sent")
    child.sendcontrol("c")
    send(child, "queue")
    child.expect(r"\d+ pending", timeout=10)
    assert child.isalive()
    assert all(b.get("text") != "never sent" for _, b in bus.events(AGENT))

    # Ctrl+D closes the REPL only: the agent keeps serving.
    child.sendcontrol("d")
    child.expect_exact("REPL closed; the agent keeps running", timeout=10)
    entry = bus.entry(AGENT)
    assert entry is not None and entry["state"] in ("idle", "busy") and child.isalive()
    # With the REPL gone the terminal delivers SIGINT again, and SIGTERM still stops it.
    child.kill(15)
    child.expect(pexpect.EOF, timeout=START_TIMEOUT_S)
    child.close()
    assert child.exitstatus == 0, re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", str(child.before))


def test_sigterm_stops_the_agent_while_the_repl_is_up(
    repl_agent: tuple[pexpect.spawn, Path], bus: Bus
) -> None:
    child, _ = repl_agent
    child.send("half a line")
    child.kill(15)
    child.expect(pexpect.EOF, timeout=START_TIMEOUT_S)
    child.close()
    assert child.exitstatus == 0
    assert bus.entry(AGENT) is None  # left the registry on the way out
