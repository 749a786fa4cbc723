"""The write fence and the state-directory lock (issue 9: fencing covers the files)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from ateam.agent.context.handoff import HandoffStore
from ateam.agent.context.working import WorkingContext
from ateam.agent.runtime.build import build_parts
from ateam.agent.state.fence import StateDirLock, WriteFence
from ateam.agent.state.history import History, SummaryLog
from ateam.agent.state.queue import DurableQueue
from ateam.bus.connection import RedisTarget
from ateam.config import standalone_agent
from ateam.errors import LockLost
from ateam.providers import EchoProvider
from ateam.wire.turns import Turn


class Lease:
    """The two things the fence reads of an instance lock, set by the test."""

    def __init__(self) -> None:
        self.fence = 7
        self.expired = False

    def expired_locally(self) -> bool:
        return self.expired


def test_the_fence_refuses_while_the_lease_is_unconfirmed_and_for_good_once_lost() -> None:
    lease = Lease()
    fence = WriteFence(lease, "p/zeus")
    fence("the history")  # fine while the lease is fresh

    lease.expired = True
    with pytest.raises(LockLost) as refused:
        fence("the history")
    assert "refusing to write the history" in refused.value.message
    assert "could not confirm" in refused.value.message
    assert refused.value.detail == {"agent": "p/zeus", "fence": 7, "write": "the history"}
    assert not fence.open and not fence.lost

    # Unconfirmed is no proof of a loss (issue 13): once Redis confirms the lock (kept,
    # or taken again under a higher fence), writes go through again...
    lease.expired, lease.fence = False, 8
    fence("the queue")
    assert fence.open

    # ...but once another process is known to hold it, never again.
    fence.mark_lost()
    with pytest.raises(LockLost) as lost:
        fence("the queue")
    assert "has lost its instance lock (fence 8)" in lost.value.message
    assert fence.lost and not fence.open and fence.refused == 2


def test_every_store_writes_nothing_once_fenced(tmp_path: Path) -> None:
    lease = Lease()
    fence = WriteFence(lease, "p/zeus")
    queue = DurableQueue(tmp_path, fence=fence)
    queue.open()
    history = History(tmp_path, fence=fence)
    history.open()
    summaries = SummaryLog(tmp_path, fence=fence)
    handoff = HandoffStore(tmp_path, model="m", project="p", fence=fence)
    workctx = WorkingContext(tmp_path, fence=fence)
    queue.append("before", source="test")
    history.append(Turn(role="user", content="before"))
    before = {p.name: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}

    fence.mark_lost()
    writes = [
        lambda: queue.append("after", source="test"),
        lambda: history.append(Turn(role="assistant", content="half a turn")),
        lambda: summaries.append("a summary", window=(0, 1), model="m"),
        lambda: handoff.update({"task": {"description": "x"}}, author="m"),
        lambda: workctx.add_decision("d", rationale="r", impact="i", task="t"),
    ]
    for write in writes:
        with pytest.raises(LockLost):
            write()
    # Not even the handoff's empty lock file appears (issue 22: nothing at all).
    after = {p.name: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before
    assert fence.refused == len(writes)


async def test_every_state_writer_of_a_built_agent_asks_its_fence(
    target: RedisTarget, tmp_path: Path
) -> None:
    config = standalone_agent("proj", "zeus", tmp_path)
    parts = build_parts(config, target, EchoProvider())
    state = config.state_dir
    state.mkdir(parents=True)
    parts.write_fence.mark_lost()

    # The event offset record (issue 22): the events go to the stream, which has its
    # own fence in Lua; the file that says where numbering resumes is not written.
    await parts.events.start()
    parts.events.emit("token", text="numbered after the loss")
    await parts.events.aclose()
    # The scratch write that probes for room after a full disk.
    with pytest.raises(LockLost):
        parts.worker._probe_room(4096)
    # The stores, as wired: each was given this fence.
    with pytest.raises(LockLost):
        parts.ledger.save(parts.router.usage)
    with pytest.raises(LockLost):
        parts.handoff.update({"task": {"description": "x"}}, author="m")
    assert sorted(p.name for p in state.rglob("*")) == []
    await parts.client.aclose()


async def test_the_state_directory_has_one_holder_until_it_lets_go(tmp_path: Path) -> None:
    first = StateDirLock(tmp_path, "p/zeus")
    await first.acquire(wait_s=0)
    assert first.held and first.holder() == os.getpid()

    second = StateDirLock(tmp_path, "p/zeus")
    assert not second.try_acquire()
    kept_alive = 0

    async def keep_alive() -> None:
        nonlocal kept_alive
        kept_alive += 1

    began = time.monotonic()
    with pytest.raises(LockLost) as denied:
        await second.acquire(wait_s=0.5, keep_alive=keep_alive)
    assert time.monotonic() - began >= 0.5
    assert kept_alive >= 2  # the Redis lock it already holds was kept fresh meanwhile
    assert f"pid {os.getpid()}" in denied.value.message
    assert str(tmp_path) in denied.value.message

    # A waiter gets it as soon as the holder lets go.
    waiter = asyncio.create_task(second.acquire(wait_s=5))
    await asyncio.sleep(0.3)
    assert not waiter.done()
    first.release()
    await asyncio.wait_for(waiter, 5)
    assert second.held and not first.held
    second.release()
