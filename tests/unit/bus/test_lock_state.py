"""The instance lock when Redis loses state: evidence decides, fences only grow (issue 13).

A lock, fence counter or stream that vanishes (a restart without persistence, a
``FLUSHALL``, an eviction) is lost *state*: the lock is taken again — only while nobody
else holds it — under a fence above any this identity was issued, which the agent keeps
in a local file. Only another holder is proof that the identity is lost.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from ateam.bus.connection import RedisTarget
from ateam.bus.keys import Keys
from ateam.bus.lock import InstanceLock, Renewal
from ateam.bus.publisher import EventPublisher
from ateam.errors import LockLost

AGENT = "proj/zeus"


@pytest.fixture
def keys(target: RedisTarget) -> Keys:
    return Keys(target.namespace)


async def forget_everything(client: aioredis.Redis, keys: Keys) -> None:
    """What a Redis restarted without persistence shows of the agent: nothing."""
    await client.delete(keys.lock(AGENT), keys.fence(AGENT), keys.events(AGENT))


async def test_fences_stay_above_the_high_water_mark_kept_on_disk(
    client: aioredis.Redis, keys: Keys, tmp_path: Path
) -> None:
    mark = tmp_path / "state" / "fence"
    first = InstanceLock(client, keys, AGENT, fence_file=mark)
    assert await first.acquire() == 1
    assert mark.read_text() == "1\n"
    await client.set(keys.fence(AGENT), 41)
    await first.release()
    assert await InstanceLock(client, keys, AGENT, fence_file=mark).acquire() == 42
    assert mark.read_text() == "42\n"

    # The next process of this identity starts on a Redis that lost everything: the
    # counter starts again at 1, but the fence does not.
    await forget_everything(client, keys)
    assert await InstanceLock(client, keys, AGENT, fence_file=mark).acquire() == 43
    assert int(await client.get(keys.fence(AGENT)) or 0) == 43


async def test_a_vanished_lock_is_taken_again_with_a_higher_fence(
    client: aioredis.Redis, keys: Keys, tmp_path: Path
) -> None:
    lock = InstanceLock(client, keys, AGENT, fence_file=tmp_path / "fence")
    await client.set(keys.fence(AGENT), 6)
    assert await lock.acquire() == 7
    assert await lock.refresh() is Renewal.KEPT

    await forget_everything(client, keys)
    assert await lock.refresh() is Renewal.RETAKEN
    assert lock.fence == 8 and (await lock.holder() or {}).get("pid") == lock.pid
    assert (tmp_path / "fence").read_text() == "8\n"
    assert await lock.refresh() is Renewal.KEPT


async def test_a_vanished_or_older_counter_under_our_lock_gets_a_new_fence(
    client: aioredis.Redis, keys: Keys
) -> None:
    lock = InstanceLock(client, keys, AGENT)
    await client.set(keys.fence(AGENT), 4)
    assert await lock.acquire() == 5
    await client.delete(keys.fence(AGENT))  # evicted on its own
    assert await lock.refresh() is Renewal.REFENCED
    assert lock.fence == 6
    await client.set(keys.fence(AGENT), 2)  # restored from an older snapshot
    assert await lock.refresh() is Renewal.REFENCED
    assert lock.fence == 7 and int(await client.get(keys.fence(AGENT)) or 0) == 7


async def test_a_counter_ahead_under_our_lock_is_our_own_lost_reply(
    client: aioredis.Redis, keys: Keys
) -> None:
    lock = InstanceLock(client, keys, AGENT)
    await lock.acquire()
    await client.incr(keys.fence(AGENT))  # a re-take of ours whose reply never came
    assert await lock.refresh() is Renewal.REFENCED
    assert lock.fence == 2


async def test_only_another_holder_is_proof_of_a_loss(client: aioredis.Redis, keys: Keys) -> None:
    lock = InstanceLock(client, keys, AGENT)
    await lock.acquire()
    await forget_everything(client, keys)
    # Another host's process took the identity while this one could not reach Redis.
    other = InstanceLock(client, keys, AGENT, host="elsewhere", pid=999_999)
    await other.acquire()
    with pytest.raises(LockLost):
        await lock.refresh()
    assert (await lock.holder() or {}).get("host") == "elsewhere"


async def test_a_restored_lock_of_a_dead_predecessor_is_taken_over(
    client: aioredis.Redis, keys: Keys
) -> None:
    dead = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    await dead.wait()
    lock = InstanceLock(client, keys, AGENT)
    await lock.acquire()
    # A snapshot from before this process started comes back with its predecessor's lock.
    await forget_everything(client, keys)
    await InstanceLock(client, keys, AGENT, pid=dead.pid).acquire()
    assert await lock.refresh() is Renewal.RETAKEN
    assert (await lock.holder() or {}).get("pid") == lock.pid
    assert "no longer running" in lock.warnings[-1]


async def test_concurrent_refreshes_take_a_vanished_lock_once(
    client: aioredis.Redis, keys: Keys
) -> None:
    lock = InstanceLock(client, keys, AGENT)
    await lock.acquire()
    await client.delete(keys.lock(AGENT))
    renewals = await asyncio.gather(*(lock.refresh() for _ in range(5)))
    assert sorted(renewals) == sorted([Renewal.RETAKEN] + [Renewal.KEPT] * 4)
    assert lock.fence == 2 == int(await client.get(keys.fence(AGENT)) or 0)


async def test_a_refused_fence_is_a_doubt_the_lock_settles(
    client: aioredis.Redis, keys: Keys
) -> None:
    lock = InstanceLock(client, keys, AGENT)
    await lock.acquire()
    fenced = asyncio.Event()
    pub = EventPublisher(client, keys, AGENT, fence=lambda: lock.fence, on_fenced=fenced.set)
    found: list[Renewal | LockLost] = []
    checks: set[asyncio.Task[None]] = set()

    async def settle() -> None:  # what the agent's upkeep does on a doubt
        try:
            found.append(await lock.refresh())
        except LockLost as exc:
            found.append(exc)
            return
        pub.fence_checked()

    def doubt() -> None:
        task = asyncio.create_task(settle())
        checks.add(task)
        task.add_done_callback(checks.discard)

    pub.on_fence_doubt = doubt
    await pub.start()
    pub.emit("token", text="before")
    assert await pub.flush(5)

    await forget_everything(client, keys)
    pub.emit("token", text="during")  # buffered while Redis lost everything
    pub.emit("task.end", ok=True, task_id="t1")
    assert await pub.flush(5)
    assert found == [Renewal.RETAKEN] and not fenced.is_set() and not pub.fenced
    assert lock.fence == 2
    bodies = [fields[b"d"] for _, fields in await client.xrange(keys.events(AGENT))]
    assert len(bodies) == 2 and b"task.end" in bodies[1]

    # Evidence: another process holds the lock now. The lock says so, the stream
    # refuses this writer's fence, and nothing more of it is written.
    await client.delete(keys.lock(AGENT))
    await InstanceLock(client, keys, AGENT, host="elsewhere", pid=1).acquire()
    pub.emit("token", text="too late")
    assert not await pub.flush(1)
    assert isinstance(found[-1], LockLost)
    assert len(await client.xrange(keys.events(AGENT))) == 2  # "too late" never went in
    await pub.aclose(flush_timeout=0.1)
    await asyncio.gather(*checks)


async def test_a_reused_fence_does_not_let_a_stale_writer_in(
    client: aioredis.Redis, keys: Keys
) -> None:
    lock = InstanceLock(client, keys, AGENT)
    assert await lock.acquire() == 1
    pub = EventPublisher(client, keys, AGENT, fence=lambda: lock.fence)
    pub.lock_value = lock.value
    doubts: list[int] = []
    pub.on_fence_doubt = lambda: doubts.append(lock.fence)
    await pub.start()

    # Redis lost everything while this process could not reach it, and an instance on
    # another host (with no high-water mark of this one's) was issued fence 1 as well.
    await forget_everything(client, keys)
    other = InstanceLock(client, keys, AGENT, host="elsewhere", pid=1)
    assert await other.acquire() == 1 == lock.fence
    pub.emit("token", text="stale")
    assert not await pub.flush(1)
    assert doubts and await client.xlen(keys.events(AGENT)) == 0
    with pytest.raises(LockLost):
        await lock.refresh()
    await pub.aclose(flush_timeout=0.1)
