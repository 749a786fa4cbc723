"""Redis restarts, with and without persistence, under a busy agent (issue 13 point 4).

Redis is killed (SIGKILL) mid-task and started again on the same port. Without
persistence it comes back empty: the lock, the fence counter, the registry, the stream
and the console's claim are gone. None of that is proof that another process took the
agent's identity, so nothing stops: the agent takes its lock again under a fence above
any it was issued, announces itself again and publishes what it buffered meanwhile;
the task ends and its ``task.end`` is in the stream; the console claims the agent again
and writes without a takeover. With persistence (AOF) the lock is simply still there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ateam.bus.codec import unpack
from ateam.bus.connection import RedisTarget, make_client
from ateam.bus.lock import FENCE_FILE
from ateam.bus.rpc import RpcClient
from ateam.console.controller import ConsoleController
from tests._wait import async_wait_for, wait_for
from tests.servers.redis import RedisProcess

from .conftest import KEYS, START_TIMEOUT_S, AgentFactory, Bus, write_project
from .test_reconnect import RecordingView

pytestmark = pytest.mark.integration

AGENT = "restart/zeus"
FENCE_BEFORE = 41
"""The fence counter before the agent starts, so it holds fence 42: a Redis that lost the
counter restarts it at 1, which a fix without a high-water mark would hand out again."""

PERSISTENCE = {
    "none": ("--save", "", "--appendonly", "no"),
    "aof": ("--appendonly", "yes", "--appendfsync", "always"),
}


@pytest.fixture
def own_redis(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RedisProcess]:
    """This test's own server, restartable, with the persistence the test asks for."""
    server = RedisProcess(
        tmp_path / "redis-own", extra=PERSISTENCE[getattr(request, "param", "aof")]
    )
    server.start()
    yield server
    server.stop()


def fence_in_redis(bus: Bus) -> int:
    return int(bus.client.get(KEYS.fence(AGENT)) or 0)  # type: ignore[arg-type]


def lock_holder_pid(bus: Bus) -> int | None:
    raw = bus.client.get(KEYS.lock(AGENT))
    return int(unpack(raw)["pid"]) if raw is not None else None  # type: ignore[arg-type]


@pytest.mark.parametrize("own_redis", sorted(PERSISTENCE), indirect=True)
async def test_a_busy_agent_and_its_console_ride_out_a_redis_restart(
    own_redis: RedisProcess, start_agent: AgentFactory, bus: Bus, tmp_path: Path
) -> None:
    lost_everything = own_redis.extra == PERSISTENCE["none"]
    root = write_project(tmp_path / "restart", "restart", delay_ms=40)
    state = root / ".ateam" / "agents" / "zeus" / "state"
    bus.client.set(KEYS.fence(AGENT), FENCE_BEFORE)
    agent = start_agent(AGENT, cwd=root)
    fence = fence_in_redis(bus)
    assert fence == FENCE_BEFORE + 1
    assert (state / FENCE_FILE).read_text().strip() == str(fence)

    view = RecordingView()
    console = ConsoleController(RedisTarget(own_redis.url, "test"), view)
    await console.start()
    try:
        await console.execute(f"/attach {AGENT}")
        text = " ".join(f"word{i:02d}" for i in range(60))  # ~2.4 s of streaming
        await console.execute(text)
        (task_id,) = console.pending_tasks
        await async_wait_for(
            lambda: len(view.task_events(task_id, "token")) >= 3,
            START_TIMEOUT_S,
            "the answer to start streaming",
        )
        await asyncio.to_thread(own_redis.restart)
        assert task_id not in bus.task_ends(AGENT), "the restart came too late"

        # The task ends, and its end is in the (restarted) stream; the agent never exited.
        end = await async_wait_for(
            lambda: bus.task_ends(AGENT).get(task_id), 3 * START_TIMEOUT_S, "the task's end"
        )
        assert end["ok"] is True
        assert agent.running(), agent.stderr()

        # One instance, under a fence above any issued before: the lock is this
        # process's, the counter and the registry say so, and so does the local mark.
        await async_wait_for(
            lambda: (bus.entry(AGENT) or {}).get("fence") == fence_in_redis(bus),
            START_TIMEOUT_S,
            "the registry entry to carry the current fence",
        )
        after = fence_in_redis(bus)
        assert after > fence if lost_everything else after >= fence
        assert lock_holder_pid(bus) == agent.pid
        assert (state / FENCE_FILE).read_text().strip() == str(after)
        assert bus.serving(AGENT, agent.pid) is not None
        assert bus.client.sismember(KEYS.projects, "restart")  # listed by consoles again

        # The console claims the agent again by itself and writes: no takeover.
        await async_wait_for(
            lambda: bus.client.hget(KEYS.owner(AGENT), "session") == console.session.encode(),
            START_TIMEOUT_S,
            "the console to hold the agent again",
        )
        before = set(console.pending_tasks)
        await console.execute("once more")
        (second,) = console.pending_tasks - before
        await async_wait_for(
            lambda: bus.task_ends(AGENT).get(second), START_TIMEOUT_S, "the second task's end"
        )
        assert not console.read_only
        assert not [b for b in view.banners if "read-only" in b], view.banners
    finally:
        await console.aclose()

    retaken = [b for _, b in bus.events(AGENT) if b.get("code") == "lock.retaken"]
    if lost_everything:
        assert retaken and retaken[0]["fence"] == after
        assert any("claimed it again" in b for b in view.banners), view.banners
    else:
        assert retaken == []
    assert agent.running()
    assert agent.terminate() == 0
    assert "Traceback" not in agent.stderr()


async def test_an_idle_agent_survives_its_connections_being_killed(
    own_redis: RedisProcess, start_agent: AgentFactory, bus: Bus, tmp_path: Path
) -> None:
    root = write_project(tmp_path / "killed", "restart")
    agent = start_agent(AGENT, cwd=root)
    fence = fence_in_redis(bus)

    def beat() -> int:
        return int(bus.client.hget(KEYS.heartbeats("restart"), AGENT) or 0)  # type: ignore[arg-type]

    for _ in range(3):  # every pooled connection of the agent dies, three times over
        killed = bus.client.client_kill_filter(_type="normal", skipme=True)
        assert killed >= 1
        last = beat()
        await async_wait_for(lambda last=last: beat() > last, START_TIMEOUT_S, "a heartbeat")

    assert agent.running(), agent.stderr()
    assert fence_in_redis(bus) == fence  # nothing was lost, so nothing was re-taken
    assert lock_holder_pid(bus) == agent.pid
    wait_for(lambda: bus.serving(AGENT, agent.pid), START_TIMEOUT_S, "the agent to serve")
    async_client = make_client(RedisTarget(own_redis.url, "test"))
    try:
        status: Any = await RpcClient(async_client, KEYS).call(AGENT, "status", timeout=10)
    finally:
        await async_client.aclose()
    assert status["pid"] == agent.pid and status["fence"] == fence
    assert agent.terminate() == 0
