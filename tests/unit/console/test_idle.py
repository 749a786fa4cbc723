"""A console with a silent team does no work that grows with the team (issue 14).

The registry reaches the console as notices (joins, changes, leaves) and a slow check
that asks Redis only which agents stopped beating. These tests count what the console
asks Redis on a server of their own (``INFO commandstats``, which counts a script's own
commands too): over a silent window it never reads the registry's entries, however
many agents beat, and it still learns of
agents that join, die without leaving, come back and are gone for good. In panes mode a
change redraws its agent's row only, and nothing is drawn while nothing changes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable
from typing import Any

import pytest
import redis.asyncio as aioredis

import ateam.console.session as session_mod
from ateam.bus.connection import RedisTarget, make_client
from ateam.bus.keys import Keys
from ateam.bus.registry import AgentEntry, Heartbeat
from ateam.console.controller import ConsoleController
from ateam.console.panes import ConsoleApp
from tests._wait import async_wait_for
from tests.unit.console.test_controller import RecordingView
from tests.unit.console.test_panes import SIZE, agent_ids, agent_row, make_app, started

CHECK_S = 0.3
"""The liveness check's period in these tests (3 s in real life)."""
SILENCE_S = 3.5
"""A silent window longer than the 3 s the console used to re-read the registry in."""


def entry(agent: str, **fields: Any) -> AgentEntry:
    project, name = agent.split("/")
    return AgentEntry(
        id=agent, name=name, project=project, **{"model": "echo", "state": "idle", **fields}
    )


class Team:
    """Simulated agents beating every half second, the way agents do (``Heartbeat``)."""

    def __init__(self, client: aioredis.Redis, keys: Keys, agents: Iterable[str]) -> None:
        self.client = client
        self.keys = keys
        self.beats = {agent: Heartbeat(client, keys, entry(agent)) for agent in agents}
        self.count = 0
        """Beats sent so far."""
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def beat(self) -> None:
        for heartbeat in list(self.beats.values()):
            await heartbeat.beat()
            self.count += 1

    def start(self) -> None:
        self._stop.clear()

        async def loop() -> None:
            while not self._stop.is_set():
                await self.beat()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), 0.5)

        self._task = asyncio.create_task(loop())

    async def stop(self) -> None:
        """Stop beating between two rounds, so every beat sent is counted."""
        self._stop.set()
        if self._task is not None:
            await self._task

    async def die(self, agent: str, seconds: float) -> None:
        """``agent`` stops beating without leaving; its last beat is ``seconds`` old."""
        self.beats.pop(agent, None)
        sec, _ = await self.client.time()
        stamp = int((sec - seconds) * 1000)
        await self.client.hset(self.keys.heartbeats(agent.split("/")[0]), agent, stamp)


async def calls(client: aioredis.Redis) -> dict[str, int]:
    """How many times each command ran since the last reset, scripts' own included.

    Failed calls are left out: a script's first EVALSHA on a fresh server answers
    NOSCRIPT, and runs only once loaded.
    """
    stats = await client.info("commandstats")
    return {
        name.removeprefix("cmdstat_"): int(found["calls"]) - int(found.get("failed_calls", 0))
        for name, found in stats.items()
        if isinstance(found, dict)
    }


@pytest.fixture
def own_target(own_redis: Any, namespace: str) -> RedisTarget:
    return RedisTarget(own_redis.url, "test", namespace=namespace)


@pytest.fixture
async def own_client(own_target: RedisTarget) -> AsyncIterator[aioredis.Redis]:
    c = make_client(own_target)
    yield c
    await c.aclose()


@pytest.fixture(autouse=True)
def quick_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session_mod, "LIVENESS_CHECK_S", CHECK_S)


async def test_a_silent_team_is_never_read_again(
    own_target: RedisTarget, own_client: aioredis.Redis
) -> None:
    agents = [f"{project}/a{i:02d}" for project in ("proj", "ops") for i in range(20)]
    team = Team(own_client, Keys(own_target.namespace), agents)
    await team.beat()
    team.start()
    view = RecordingView()
    console = ConsoleController(own_target, view)
    await console.start()
    try:
        await async_wait_for(lambda: len(console.known) == len(agents), 10, "the team listed")
        await team.stop()  # no beat in flight while the counts are reset
        await own_client.config_resetstat()
        beats = team.count
        team.start()
        await asyncio.sleep(SILENCE_S)  # a window of silence: what happens in it is counted
        await team.stop()
        await console.aclose()
        beats = team.count - beats
        ran = await calls(own_client)
        # The liveness check: one call per project per period, whatever the team's size,
        # and its one HGETALL (of the heartbeat stamps, in Redis) is the only one made: no
        # entry is read, so the team's size costs the console nothing while nothing happens.
        checks = ran.get("evalsha", 0)
        assert 2 <= checks <= 2 * (SILENCE_S / CHECK_S + 2)
        assert ran.get("hgetall", 0) == checks
        assert ran.get("smembers", 0) == 0
        # And the agents: one stamp per beat, no entry written again, nothing announced.
        assert beats >= len(agents)
        assert ran.get("hset", 0) == beats
        assert ran.get("publish", 0) == 0
    finally:
        await console.aclose()
        await team.stop()


async def test_joins_deaths_returns_and_departures_without_reading_the_registry(
    own_target: RedisTarget, own_client: aioredis.Redis
) -> None:
    keys = Keys(own_target.namespace)
    team = Team(own_client, keys, ["proj/a", "proj/b", "proj/c"])
    await team.beat()
    team.start()
    view = RecordingView()
    console = ConsoleController(own_target, view)
    await console.start()
    try:
        await async_wait_for(lambda: len(console.known) == 3, 10, "three agents listed")
        await own_client.config_resetstat()

        team.beats["proj/new"] = Heartbeat(own_client, keys, entry("proj/new", state="busy"))
        await async_wait_for(lambda: "proj/new" in console.known, 10, "the new agent known")
        assert console.known["proj/new"].state == "busy"

        await team.die("proj/b", 30)  # killed: no leave, its heartbeat lapses
        await view.wait_for(lambda: "agent proj/b is disconnected" in view.banners, 10)
        assert console.known["proj/b"].state == "disconnected"

        team.beats["proj/b"] = Heartbeat(own_client, keys, entry("proj/b"))
        await view.wait_for(lambda: "agent proj/b is back" in view.banners, 10)
        assert console.known["proj/b"].connected

        await team.die("proj/c", 200)  # silent for longer than it is shown
        await async_wait_for(lambda: "proj/c" not in console.known, 10, "proj/c dropped")
        assert await own_client.hget(keys.registry("proj"), "proj/c") is None

        await console.aclose()
        # All of it without a full read: the only HGETALLs are the checks' own, in Redis.
        ran = await calls(own_client)
        assert ran.get("hgetall", 0) == ran.get("evalsha", 0) > 0
        assert ran.get("smembers", 0) == 0
    finally:
        await console.aclose()
        await team.stop()


async def test_the_panes_redraw_one_row_per_change_and_nothing_while_idle(
    target: RedisTarget, client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    frames: list[None] = []
    frame = ConsoleApp._frame

    def counted(app: ConsoleApp) -> None:
        frames.append(None)
        frame(app)

    monkeypatch.setattr(ConsoleApp, "_frame", counted)
    keys = Keys(target.namespace)
    agents = [f"proj/a{i:02d}" for i in range(30)]
    beats = {agent: Heartbeat(client, keys, entry(agent)) for agent in agents}
    for heartbeat in beats.values():
        await heartbeat.beat()
    app = make_app(target)
    async with app.run_test(size=SIZE):
        await started(app)
        await async_wait_for(lambda: agent_ids(app) == agents, 10, "the list of 30")
        listed = app.query_one("#agents")
        before = {agent: listed.get_option(agent) for agent in agents}  # type: ignore[attr-defined]

        # Nothing changes: after the frames that drew the list, no frame at all.
        await async_wait_for(lambda: not app.view.pending and not app.view.tails_dirty)
        drawn = len(frames)
        await asyncio.sleep(0.5)  # ~30 frames at the console's 60 a second, were it ticking
        assert len(frames) - drawn <= 1

        beats["proj/a07"].entry.state = "busy"
        await beats["proj/a07"].beat()
        await async_wait_for(lambda: "proj/a07 busy" in agent_row(app, "proj/a07"))
        after = {agent: listed.get_option(agent) for agent in agents}  # type: ignore[attr-defined]
        redrawn = [agent for agent in agents if after[agent] is not before[agent]]
        assert redrawn == ["proj/a07"]
        assert len(frames) > drawn  # the change woke the frames up
