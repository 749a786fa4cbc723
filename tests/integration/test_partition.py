"""A network partition longer than the lock's TTL (issue 13 point 4).

A TCP proxy the test controls (:mod:`tests.servers.proxy`) stands between the agent and
a real Redis and holds every byte for 20 s. Redis forgets the lock after its TTL; the
agent cannot confirm it, so it writes nothing durable meanwhile — but a partition is no
proof that another process took its identity, so it neither stops nor is restarted.
When the network returns it takes its lock again (nobody else did) under the next fence,
says what happened, and works on.

This is the suite's one test that waits out a long fault: 20 s of partition.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from ateam.bus.codec import unpack
from ateam.bus.connection import RedisTarget, make_client
from ateam.bus.ownership import Ownership
from ateam.bus.rpc import RpcClient
from ateam.constants import LOCK_TTL_S
from tests._wait import async_wait_for
from tests.servers.proxy import TcpProxy
from tests.servers.redis import RedisProcess

from .conftest import KEYS, START_TIMEOUT_S, AgentFactory, Bus, wait_serving, write_project

pytestmark = pytest.mark.integration

AGENT = "part/zeus"
PARTITION_S = 20.0


def lock_holder_pid(bus: Bus) -> int | None:
    raw = bus.client.get(KEYS.lock(AGENT))
    return int(unpack(raw)["pid"]) if raw is not None else None  # type: ignore[arg-type]


def warnings(bus: Bus, code: str) -> list[dict[str, Any]]:
    return [body for _, body in bus.events(AGENT) if body.get("code") == code]


@pytest.mark.timeout(150)
async def test_a_partition_longer_than_the_lock_ttl_neither_stops_nor_doubles_the_agent(
    own_redis: RedisProcess, start_agent: AgentFactory, bus: Bus, tmp_path: Path
) -> None:
    root = write_project(tmp_path / "part", "part")
    with TcpProxy("127.0.0.1", own_redis.port) as proxy:
        agent = start_agent(AGENT, cwd=root, redis_url=proxy.url)
        fence = int(bus.client.get(KEYS.fence(AGENT)) or 0)  # type: ignore[arg-type]
        # Busy when the partition starts: a task of ~15 s (300 words at 50 ms) that has to
        # record its turn while the lock cannot be confirmed.
        client = make_client(RedisTarget(own_redis.url, "test"))
        owner = Ownership(client, KEYS, "test:partition")
        await owner.acquire(AGENT)
        rpc = RpcClient(client, KEYS, caller="test:partition", auth=owner.token)
        long_text = " ".join(f"w{i}" for i in range(300))
        busy = (await rpc.call(AGENT, "input", {"text": long_text}, timeout=10))["id"]
        await async_wait_for(
            lambda: any(b.get("type") == "task.start" for _, b in bus.events(AGENT)),
            START_TIMEOUT_S,
            "the long task to start",
        )

        proxy.pause()
        began = time.monotonic()
        # Past the TTL Redis forgets the lock: from here on anyone could take it.
        await async_wait_for(
            lambda: not bus.client.exists(KEYS.lock(AGENT)),
            LOCK_TTL_S + 5,
            "the lock to lapse in Redis",
        )
        await asyncio.sleep(max(0.0, PARTITION_S - (time.monotonic() - began)))
        assert agent.running(), agent.stderr()
        proxy.resume()

        # Nobody took it: the agent's again, under the next fence, and it serves.
        await async_wait_for(
            lambda: lock_holder_pid(bus) == agent.pid, START_TIMEOUT_S, "the lock to be re-taken"
        )
        wait_serving(bus, agent)
        assert int(bus.client.get(KEYS.fence(AGENT)) or 0) == fence + 1  # type: ignore[arg-type]

        # The task that was running when the partition began ends, in this process.
        await async_wait_for(
            lambda: busy in bus.task_ends(AGENT), START_TIMEOUT_S + 20, "the long task to end"
        )
        assert bus.task_ends(AGENT)[busy]["ok"] is True
        # It writes again (the queue's append is fenced): a task runs to its end.
        try:
            await owner.acquire(AGENT)
            item = (await rpc.call(AGENT, "input", {"text": "after the partition"}, timeout=10))[
                "id"
            ]
            await async_wait_for(
                lambda: item in bus.task_ends(AGENT), START_TIMEOUT_S, "the task to end"
            )
            status = await rpc.call(AGENT, "status", timeout=10)
        finally:
            await client.aclose()
        assert bus.task_ends(AGENT)[item]["ok"] is True
        assert status["pid"] == agent.pid and status["fence"] == fence + 1

    # What happened is on the record: the lock unconfirmed, then taken again.
    assert warnings(bus, "lock.unconfirmed")
    (retaken,) = warnings(bus, "lock.retaken")
    assert retaken["fence"] == fence + 1
    assert agent.running()
    assert agent.terminate() == 0
    assert "Traceback" not in agent.stderr()
