"""Fencing covers the files too (issue 9, issue 22, SPEC §4.2).

A process frozen (SIGSTOP) past its lock TTL loses its identity to a second instance.
When it runs again it must not write one more byte into the shared ``state/`` files:
not the rest of the assistant turn it was streaming, not the queue, not the record of
its event offsets, nothing. Its successor on the same host cannot even start on the
files while it is frozen (they are ``flock``-ed for the instance's whole life), and runs
the interrupted task once the frozen one has noticed its loss and exited 14.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from ateam.bus.codec import unpack
from ateam.bus.ownership import Ownership
from ateam.bus.rpc import RpcClient
from ateam.constants import LOCK_TTL_S
from tests._wait import async_wait_for

from .conftest import (
    KEYS,
    START_TIMEOUT_S,
    AgentFactory,
    Bus,
    wait_serving,
    write_project,
)

pytestmark = pytest.mark.integration

AGENT = "fenced/zeus"


def turns(state: Path) -> list[dict[str, Any]]:
    path = state / "history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def listing(state: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under ``state/``: inode, mtime and a digest of its bytes.

    An atomic replace changes the inode, an append the mtime and the digest: a file any
    process wrote in between shows up as different.
    """
    out = {}
    for path in sorted(state.rglob("*")):
        if path.is_file():
            stat = path.stat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            out[str(path.relative_to(state))] = (stat.st_ino, stat.st_mtime_ns, digest)
    return out


def lock_holder_pid(bus: Bus) -> int | None:
    raw = bus.client.get(KEYS.lock(AGENT))
    return int(unpack(raw)["pid"]) if raw is not None else None  # type: ignore[arg-type]


@pytest.mark.timeout(150)
async def test_a_thawed_instance_writes_nothing_after_its_successor_took_over(
    start_agent: AgentFactory, bus: Bus, client: aioredis.Redis, tmp_path: Path
) -> None:
    root = write_project(tmp_path / "fenced", "fenced", delay_ms=60)
    state = root / ".ateam" / "agents" / "zeus" / "state"
    first = start_agent(AGENT, cwd=root)
    owner = Ownership(client, KEYS, "test:fencing", ttl_s=150)
    await owner.acquire(AGENT)
    rpc = RpcClient(client, KEYS, caller="test:fencing", auth=owner.token)
    # One finished task first, so the state directory holds the files a task leaves.
    done = (await rpc.call(AGENT, "input", {"text": "warm up"}, timeout=5))["id"]
    await async_wait_for(lambda: done in bus.task_ends(AGENT), START_TIMEOUT_S, "a first task")
    # Its usage counts are saved within a heartbeat; waited for, so the freeze below
    # cannot catch that write half-done (a write past its fence check finishes on thaw).
    await async_wait_for(
        lambda: (state / "usage.json").exists(), START_TIMEOUT_S, "the usage counts saved"
    )
    text = " ".join(f"w{i}" for i in range(60))  # ~3.6 s of streaming at 60 ms a word
    item = (await rpc.call(AGENT, "input", {"text": text}, timeout=5))["id"]
    await async_wait_for(
        lambda: sum(b.get("type") == "token" for _, b in bus.events(AGENT)) >= 3,
        START_TIMEOUT_S,
        "the first instance to stream",
    )
    first_fence = int(bus.client.get(KEYS.fence(AGENT)) or 0)

    os.kill(first.pid, signal.SIGSTOP)
    frozen_at = time.time()
    second = None
    try:
        # Past the lock TTL the identity is free on the bus...
        await async_wait_for(
            lambda: not bus.client.exists(KEYS.lock(AGENT)), LOCK_TTL_S + 10, "the lock to lapse"
        )
        second = start_agent(AGENT, cwd=root, wait=False)
        # ...and the second instance wins it (fence + 1) and records that fence, but not
        # the files: they are still held by the frozen process, so it cannot start work.
        await async_wait_for(
            lambda: lock_holder_pid(bus) == second.pid, START_TIMEOUT_S, "the takeover"
        )
        await async_wait_for(
            lambda: (state / "fence").read_text().strip() == str(first_fence + 1),
            START_TIMEOUT_S,
            "the successor to record its fence",
        )
        assert int(bus.client.get(KEYS.fence(AGENT)) or 0) == first_fence + 1
        assert second.running() and bus.serving(AGENT, second.pid) is None
        assert first.running()
        # The successor is held too, so whatever changes in state/ until the first one
        # has exited is the first one's doing. Frozen, it cannot keep its lock fresh:
        # the test keeps it held (its value, untouched) however long the thaw takes.
        os.kill(second.pid, signal.SIGSTOP)
        bus.client.pexpire(KEYS.lock(AGENT), 150_000)
        before = listing(state)
    finally:
        os.kill(first.pid, signal.SIGCONT)

    # Thawed, the first one finds its lock gone and exits 14 without another write.
    try:
        assert first.wait_exit() == 14, first.stderr()
        after = listing(state)
    finally:
        if second is not None:
            os.kill(second.pid, signal.SIGCONT)
    kinds = {"queue.jsonl", "history.jsonl", "handoff.json", "context/progress.json"}
    assert kinds | {"usage.json", "fence", "instance.lock"} <= before.keys(), before
    # Each file's last writer: the one that wrote it before the freeze (or the
    # successor, `fence`), never the thawed instance: none is new, none changed.
    written = {
        name: "created" if name not in before else "rewritten"
        for name in after
        if after[name] != before.get(name)
    }
    written.update({name: "deleted" for name in before if name not in after})
    assert written == {}, f"the fenced-off instance wrote in state/: {written}"

    assert second is not None
    wait_serving(bus, second, timeout=START_TIMEOUT_S)
    await async_wait_for(
        lambda: item in bus.task_ends(AGENT), 2 * START_TIMEOUT_S, "the successor to re-run it"
    )
    assert bus.task_ends(AGENT)[item]["ok"] is True
    # The successor numbers its events right after the last one the stream took from
    # the first instance: readers are told of no gap, since there was none.
    offsets = [offset for offset, _ in bus.events(AGENT)]
    skipped = sorted(set(range(1, offsets[-1] + 1)) - set(offsets))
    assert skipped == [], f"offsets {skipped} were skipped"
    assert offsets == sorted(set(offsets))
    # And now it is the last writer of the files its work touched.
    final = listing(state)
    for name in ("queue.jsonl", "history.jsonl"):
        assert final[name] != before[name], f"the successor never wrote {name}"

    turns_written = turns(state)
    late = [t for t in turns_written if t.get("fence") == first_fence and t["ts"] >= frozen_at]
    assert late == [], f"the fenced-off instance wrote {late}"
    # The successor finished the task: one complete answer, written under its own fence.
    answers = [t for t in turns_written if t["role"] == "assistant" and t["task_id"] == item]
    assert [t["fence"] for t in answers] == [first_fence + 1]
    assert answers[0]["content"] == f"echo: {text}"
    queue = await RpcClient(client, KEYS).call(AGENT, "queue.list", timeout=5)
    assert queue["current"] is None and queue["pending"] == []
    assert "Traceback" not in first.stderr() + second.stderr()
