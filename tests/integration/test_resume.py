"""Consoles resume from their last offset; trimmed ranges are reported (SPEC §4.5)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ateam.bus.connection import RedisTarget
from tests._wait import wait_for

from .conftest import (
    KEYS,
    START_TIMEOUT_S,
    AgentFactory,
    Bus,
    ConsoleFactory,
    run_ateam,
    write_project,
)

pytestmark = pytest.mark.integration


def offset_key(redis_url: str, agent_id: str) -> str:
    """How the console names an agent in offsets.json: bus endpoint, namespace, id."""
    return f"{RedisTarget(redis_url, 'test').describe()} {KEYS.ns}{agent_id}"


def test_restarted_console_resumes_without_duplicates_or_holes(
    start_agent: AgentFactory,
    start_console: ConsoleFactory,
    bus: Bus,
    redis_url: str,
    tmp_path: Path,
    isolated_home: Path,
) -> None:
    agent_id = "scroll/zeus"
    prefix = f"[A:{agent_id}] "
    root = write_project(tmp_path / "scroll", "scroll", delay_ms=30)
    start_agent(agent_id, cwd=root)
    numbered = [f"line {i:02d}" for i in range(1, 31)]
    expected = [f"echo: {numbered[0]}", *numbered[1:]]

    before = start_console()
    before.send(f"/tail {agent_id}")
    before.wait_line(f"tailing {agent_id}")
    sent = run_ateam("send", agent_id, "\n".join(numbered) + "\n", "--redis", redis_url)
    assert sent.returncode == 0, sent.stderr
    task_id = sent.stdout.strip()
    before.wait_line(prefix + "line 08")
    before.send("/quit")  # the user leaves mid-stream…
    assert before.wait_exit() == 0
    assert task_id not in bus.task_ends(agent_id), "the task ended before the console left"
    offsets = json.loads((isolated_home / "console" / "offsets.json").read_text())
    assert offsets[offset_key(redis_url, agent_id)] > 0

    after = start_console()  # …and comes back
    after.send(f"/tail {agent_id}")
    after.wait_line(f"--- task {task_id} done")

    def content(lines: list[str]) -> list[str]:
        """What the agent's answer put on screen: every agent line except the markers."""
        return [
            line[len(prefix):] for line in lines
            if line.startswith(prefix)
            and not re.match(r"(--- task |owner is now |tailing |state: )", line[len(prefix):])
        ]  # fmt: skip

    seen_before = content(before.lines)
    seen_after = content(after.lines)
    assert seen_before, before.lines
    assert seen_after, after.lines
    # The first console may have left in the middle of a line; it shows that line's start
    # and the new one its rest. Anything else is a duplicate or a hole.
    joined = [*seen_before[:-1], seen_before[-1] + seen_after[0], *seen_after[1:]]
    assert expected in (seen_before + seen_after, joined), (before.lines, after.lines)
    assert not [line for line in after.lines if "tail gap" in line]


def test_offset_older_than_the_log_reports_a_gap(
    start_agent: AgentFactory,
    start_console: ConsoleFactory,
    bus: Bus,
    redis_url: str,
    isolated_home: Path,
) -> None:
    agent_id = "trim/zeus"
    prefix = f"[A:{agent_id}] "
    start_agent(agent_id)
    for i in range(5):
        sent = run_ateam("send", agent_id, f"message {i}", "--redis", redis_url)
        assert sent.returncode == 0, sent.stderr
    last_task = sent.stdout.strip()
    wait_for(lambda: last_task in bus.task_ends(agent_id), START_TIMEOUT_S, "the last task")
    # Trim the replay log down to the last task, as if 10 000 newer events had pushed the
    # rest out.
    first_kept = max(
        offset for offset, body in bus.events(agent_id)
        if body.get("type") == "task.start" and body.get("task_id") == last_task
    )  # fmt: skip
    bus.client.xtrim(KEYS.events(agent_id), minid=f"{first_kept}-0", approximate=False)
    assert bus.events(agent_id)[0][0] == first_kept > 2
    message = f"tail gap: events 1..{first_kept - 1} are no longer available"

    tail = run_ateam("tail", agent_id, "--from", "1", "--redis", redis_url)

    assert tail.returncode == 0, tail.stderr
    lines = tail.stdout.splitlines()
    assert lines[0] == prefix + message, lines
    assert prefix + "echo: message 4" in lines
    assert sum("tail gap" in line for line in lines) == 1

    # A console whose remembered offset has been trimmed says so too, then carries on.
    offsets = isolated_home / "console" / "offsets.json"
    offsets.parent.mkdir(parents=True, exist_ok=True)
    offsets.write_text(json.dumps({offset_key(redis_url, agent_id): 1}))
    console = start_console()
    console.send(f"/tail {agent_id}")
    console.wait_line(prefix + f"tail gap: events 2..{first_kept - 1} are no longer available")
    console.wait_line(prefix + "echo: message 4")


def test_tail_prints_the_line_still_being_streamed(
    start_agent: AgentFactory, bus: Bus, redis_url: str, tmp_path: Path
) -> None:
    agent_id = "midway/zeus"
    root = write_project(tmp_path / "midway", "midway", delay_ms=50)
    start_agent(agent_id, cwd=root)
    text = " ".join(f"word{i:02d}" for i in range(60))  # about 3 s of streaming
    sent = run_ateam("send", agent_id, text, "--redis", redis_url)
    assert sent.returncode == 0, sent.stderr
    task_id = sent.stdout.strip()
    wait_for(
        lambda: any(b.get("type") == "token" for _, b in bus.events(agent_id)),
        START_TIMEOUT_S,
        "the answer to start streaming",
    )

    tail = run_ateam("tail", agent_id, "--from", "1", "--redis", redis_url)

    assert tail.returncode == 0, tail.stderr
    assert task_id not in bus.task_ends(agent_id), "too late: the task is over"
    # What has streamed so far is shown, even though its line is not finished yet.
    answer = [line for line in tail.stdout.splitlines() if line.startswith(f"[A:{agent_id}] echo:")]
    assert len(answer) == 1, tail.stdout
    assert f"echo: {text}".startswith(answer[0][len(f"[A:{agent_id}] ") :].rstrip())
