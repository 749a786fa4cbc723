"""A full disk pauses, it does not eat work (issue 10), on a really full filesystem.

The agent's ``state/`` is a 1 MiB tmpfs mounted for the test and filled to ENOSPC
while a task runs: the agent goes ``blocked`` (``ps``, ``/ps``, a console banner), keeps
both tasks queued, refuses a new input with ``storage.full`` instead of acknowledging
it, and resumes by itself once the filler is deleted. Mounting needs root, which CI has;
elsewhere the test says why it cannot run.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._wait import wait_for

from .conftest import (
    START_TIMEOUT_S,
    AgentFactory,
    Bus,
    ConsoleFactory,
    run_ateam,
    write_project,
)

pytestmark = pytest.mark.integration

DISK_SIZE = "1m"


@pytest.fixture
def small_disk() -> Iterator[Callable[[Path], Path]]:
    """``small_disk(path)`` mounts a private 1 MiB tmpfs on ``path``; unmounted after."""
    mounted: list[Path] = []

    def mount(path: Path) -> Path:
        if os.geteuid() != 0:
            pytest.skip("a real full disk needs a tmpfs mount, which needs root (CI has it)")
        path.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE},mode=0700", "tmpfs", str(path)],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, f"cannot mount a tmpfs: {done.stderr}"
        mounted.append(path)
        return path

    yield mount
    for path in mounted:
        # Lazily if an agent still has a file open there: the test's own kill comes later.
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(directory: Path) -> Path:
    """Write a filler file until the filesystem says ENOSPC; returns it."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    block = bytes(64 * 1024)
    try:
        while True:
            os.write(fd, block)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)
    return filler


def live_items(queue: Path) -> list[str]:
    """Ids added to the queue file and not done, in order (the file is the truth)."""
    live: dict[str, None] = {}
    for line in queue.read_bytes().splitlines():
        op = json.loads(line)
        if op["op"] == "add":
            live[op["id"]] = None
        elif op["op"] == "done":
            live.pop(op["id"], None)
    return list(live)


def send(agent_id: str, text: str, redis_url: str) -> str:
    sent = run_ateam("send", agent_id, text, "--redis", redis_url)
    assert sent.returncode == 0, sent.stderr
    return sent.stdout.strip()


def blocked_entry(bus: Bus, agent_id: str) -> dict[str, Any] | None:
    entry = bus.entry(agent_id)
    return entry if entry is not None and entry.get("state") == "blocked" else None


def test_a_full_disk_blocks_the_agent_keeps_the_work_and_resumes(
    small_disk: Callable[[Path], Path],
    start_agent: AgentFactory,
    start_console: ConsoleFactory,
    bus: Bus,
    redis_url: str,
    tmp_path: Path,
) -> None:
    agent_id = "full/zeus"
    root = write_project(tmp_path / "full", "full", delay_ms=100)
    state = small_disk(root / ".ateam" / "agents" / "zeus" / "state")
    agent = start_agent(agent_id, cwd=root)
    console = start_console()
    console.send(f"/tail {agent_id}")
    console.wait_line(f"tailing {agent_id}")

    # Turns of ~4 KiB or more: each needs fresh blocks, not the slack of a file's last one.
    def text(tag: str) -> str:
        return " ".join(f"{tag}{i}-" + "x" * 100 for i in range(40))  # ~4 s to stream

    first = send(agent_id, text("a"), redis_url)
    second = send(agent_id, text("b"), redis_url)
    wait_for(
        lambda: any(
            b.get("type") == "token" and b.get("task_id") == first for _, b in bus.events(agent_id)
        ),
        START_TIMEOUT_S,
        "the first task to stream",
    )
    filler = fill(state)

    # The first answer cannot be recorded: the agent stops taking work, and says why.
    entry = wait_for(lambda: blocked_entry(bus, agent_id), START_TIMEOUT_S, "state blocked")
    assert "No space left on device" in entry["alert"], entry
    assert entry["current_task"] is None
    ps = run_ateam("ps", "--json", "--redis", redis_url)
    assert ps.returncode == 0, ps.stderr
    [row] = [r for r in json.loads(ps.stdout) if r["id"] == agent_id]
    assert row["state"] == "blocked" and "No space left on device" in row["alert"]
    warns = [b for _, b in bus.events(agent_id) if b.get("code") == "storage.full"]
    assert warns and warns[0]["type"] == "warn" and "blocked" in warns[0]["msg"], warns
    console.wait_line(lambda line: f"*** agent {agent_id} is blocked: " in line)
    console.send("/ps")
    console.wait_line(lambda line: line.startswith(agent_id) and "blocked" in line)

    # Nothing was lost or failed: both tasks are still queued, neither ended.
    assert live_items(state / "queue.jsonl") == [first, second]
    assert bus.task_ends(agent_id) == {}
    # An input that cannot be written is refused, never acknowledged.
    refused = run_ateam("send", agent_id, text("c"), "--redis", redis_url)
    assert refused.returncode != 0, refused.stdout
    assert "storage.full" in refused.stderr and "No space left" in refused.stderr
    assert live_items(state / "queue.jsonl") == [first, second]
    assert blocked_entry(bus, agent_id) is not None  # still waiting for room

    # Room again: the agent notices by itself and does the work, in order.
    filler.unlink()
    wait_for(
        lambda: {first, second} <= set(bus.task_ends(agent_id)),
        3 * START_TIMEOUT_S,
        "both tasks to finish once there is room",
    )
    ends = bus.task_end_list(agent_id)
    assert [(e["task_id"], e["ok"]) for e in ends] == [(first, True), (second, True)], ends
    entry = wait_for(
        lambda: (e := bus.entry(agent_id)) is not None and e["state"] == "idle" and e,
        START_TIMEOUT_S,
        "the agent to be idle",
    )
    assert entry["alert"] is None
    console.wait_line(f"*** agent {agent_id} is no longer blocked; its work resumes")

    # Each answer is in the history once, and the pause cost the first task no attempt.
    turns = [json.loads(line) for line in (state / "history.jsonl").read_bytes().splitlines()]
    answers = [t["task_id"] for t in turns if t["role"] == "assistant"]
    assert answers == [first, second]
    ops = [json.loads(line) for line in (state / "queue.jsonl").read_bytes().splitlines()]
    starts = [op["attempts"] for op in ops if op["op"] == "start" and op["id"] == first]
    assert starts == [1, 1], ops
    assert agent.running()
    assert agent.terminate() == 0


def test_an_agent_restarted_on_a_full_disk_serves_refuses_inputs_and_says_so_until_room(
    small_disk: Callable[[Path], Path],
    start_agent: AgentFactory,
    bus: Bus,
    redis_url: str,
    tmp_path: Path,
) -> None:
    agent_id = "idle/zeus"
    root = write_project(tmp_path / "idle", "idle", delay_ms=0)
    state = small_disk(root / ".ateam" / "agents" / "zeus" / "state")
    agent = start_agent(agent_id, cwd=root)
    done = send(agent_id, "one task, so the queue has something to compact", redis_url)
    wait_for(lambda: done in bus.task_ends(agent_id), START_TIMEOUT_S, "the first task")
    assert agent.terminate() == 0
    filler = fill(state)
    # Restarted on the full disk: the compaction at start waits for room, the agent serves.
    agent = start_agent(agent_id, cwd=root)

    refused = run_ateam("send", agent_id, "x" * 20_000, "--redis", redis_url)  # past any slack
    assert refused.returncode != 0 and "storage.full" in refused.stderr, refused.stderr
    entry = wait_for(lambda: blocked_entry(bus, agent_id), START_TIMEOUT_S, "state blocked")
    assert "No space left on device" in entry["alert"]

    filler.unlink()
    wait_for(
        lambda: (e := bus.entry(agent_id)) is not None and e["state"] == "idle" and not e["alert"],
        START_TIMEOUT_S,
        "the agent to be idle again",
    )
    accepted = send(agent_id, "hello again", redis_url)
    wait_for(lambda: accepted in bus.task_ends(agent_id), START_TIMEOUT_S, "the task to end")
    assert agent.terminate() == 0
