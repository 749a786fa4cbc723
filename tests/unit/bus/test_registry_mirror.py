"""The registry kept from its change log (issue 28 §4), against a real Redis.

A :class:`RegistryMirror` must list exactly what :meth:`Registry.list` lists through
joins, changes, departures, exits, a host that dies and a Redis that lost its data, and
an idle tick of the session snapshot must not read the registry whole.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis.asyncio as aioredis

from ateam.bus import registry_log
from ateam.bus.connection import RedisTarget, make_client
from ateam.bus.keys import Keys
from ateam.bus.registry import AgentEntry, Heartbeat, Registry
from ateam.bus.registry_mirror import RegistryMirror
from ateam.bus.snapshot import SnapshotReader
from ateam.wire.registry import AgentStatus, FinalExit
from tests.servers.redis import RedisProcess


@pytest.fixture
def keys(target: RedisTarget) -> Keys:
    return Keys(target.namespace)


def entry(agent: str, **fields: Any) -> AgentEntry:
    project, name = agent.split("/")
    return AgentEntry(id=agent, name=name, project=project, **fields)


async def join(client: aioredis.Redis, keys: Keys, agent: str, **fields: Any) -> Heartbeat:
    beat = Heartbeat(client, keys, entry(agent, **fields))
    await beat.beat()
    return beat


def shown(views: list[AgentStatus]) -> list[tuple[str, str, AgentEntry]]:
    return [(view.id, view.state, view.entry) for view in views]


async def same(mirror: RegistryMirror, registry: Registry) -> list[tuple[str, str, AgentEntry]]:
    """The mirror's listing, checked against a whole read (the mirror first: a listing
    forgets agents gone too long, and the mirror must find that out by itself)."""
    mine = shown(await mirror.list())
    assert mine == shown(await registry.list())
    return mine


async def silence(client: aioredis.Redis, keys: Keys, agents: list[str], age_s: int) -> None:
    """The agents' last beats ``age_s`` ago on the server's clock (their host died)."""
    sec, _ = await client.time()
    for agent in agents:
        await client.hset(keys.heartbeats(agent.split("/")[0]), agent, (int(sec) - age_s) * 1000)


async def test_the_mirror_lists_what_the_registry_lists_through_every_change(
    client: aioredis.Redis, keys: Keys
) -> None:
    beats = {
        f"proj{i % 3}/a{i:02d}": await join(
            client, keys, f"proj{i % 3}/a{i:02d}", state="idle", host=f"h{i % 2}"
        )
        for i in range(30)
    }
    mirror, registry = RegistryMirror(client, keys), Registry(client, keys)
    assert len(await same(mirror, registry)) == 30
    whole = mirror.full_reads

    generation = mirror.generation
    await same(mirror, registry)
    assert mirror.generation == generation  # idle: nothing moved, nothing read whole

    changed = beats["proj1/a01"]
    changed.entry = changed.entry.model_copy(update={"state": "busy", "current_task": "q-1"})
    await changed.beat()
    listed = dict((agent, state) for agent, state, _ in await same(mirror, registry))
    assert listed["proj1/a01"] == "busy" and mirror.generation > generation

    await beats.pop("proj2/a02").leave()
    assert "proj2/a02" not in [agent for agent, _, _ in await same(mirror, registry)]
    await join(client, keys, "proj3/new", state="waiting")
    assert ("proj3/new", "waiting") in [(a, s) for a, s, _ in await same(mirror, registry)]

    final = FinalExit(agent="proj0/gone", code=12, reason="bad config", at=time.time())
    await registry.record_exit(final)
    assert ("proj0/gone", "exited") in [(a, s) for a, s, _ in await same(mirror, registry)]
    await registry.clear_exit("proj0/gone")
    assert "proj0/gone" not in [a for a, _, _ in await same(mirror, registry)]

    # Host h1 dies: its agents stop beating; nobody writes anything about them.
    dead = [agent for agent in beats if int(agent[-2:]) % 2 == 1]
    await silence(client, keys, dead, 30)
    states = {agent: state for agent, state, _ in await same(mirror, registry)}
    assert {states[agent] for agent in dead} == {"disconnected"}
    assert {states[a] for a in beats if a not in dead} <= {"idle", "busy"}
    await silence(client, keys, dead, 200)  # gone longer than they are shown
    left = [agent for agent, _, _ in await same(mirror, registry)]
    assert not set(dead) & set(left) and len(left) == 30 - 1 - len(dead) + 1
    # All of it learnt from the log and the lapse check (a new project is read once).
    assert mirror.full_reads == whole + 1


async def test_a_redis_that_lost_its_data_is_read_whole_again(own_redis: RedisProcess) -> None:
    keys = Keys("mirror:")
    client = make_client(RedisTarget(own_redis.url, "test", namespace=keys.ns))
    try:
        for i in range(3):
            await join(client, keys, f"proj/old{i}")
        mirror, registry = RegistryMirror(client, keys), Registry(client, keys)
        assert len(await same(mirror, registry)) == 3
        await client.flushall()
        assert await same(mirror, registry) == []  # the project itself is gone
        # More notes than before the loss: the version alone would not tell.
        for i in range(6):
            beat = await join(client, keys, f"proj/new{i}")
            beat.entry = beat.entry.model_copy(update={"state": "busy"})
            await beat.beat()
        listed = await same(mirror, registry)
        assert [agent for agent, _, _ in listed] == [f"proj/new{i}" for i in range(6)]
    finally:
        await client.aclose()


async def test_changes_trimmed_before_a_reader_saw_them_make_it_read_whole(
    client: aioredis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(registry_log, "CHANGES_KEPT", 4)
    beats = [await join(client, keys, f"proj/a{i}") for i in range(3)]
    mirror, registry = RegistryMirror(client, keys), Registry(client, keys)
    await same(mirror, registry)
    whole = mirror.full_reads
    for i in range(10):
        await join(client, keys, f"proj/b{i}")
    await beats[0].leave()
    assert len(await same(mirror, registry)) == 12
    assert mirror.full_reads == whole + 1
    assert await client.zcard(registry_log.changes_key(keys, "proj")) == 4


async def sent_bytes(client: aioredis.Redis) -> int:
    stats = await client.info("stats")
    return int(stats["total_net_output_bytes"])


async def test_an_idle_snapshot_tick_does_not_read_the_registry_whole(
    client: aioredis.Redis, keys: Keys
) -> None:
    beats = [
        await join(client, keys, f"proj{i % 3}/agent{i:04d}", state="idle", cwd="/w" * 40)
        for i in range(600)
    ]
    registry_bytes = 0
    for project in ("proj0", "proj1", "proj2"):
        values = await client.hvals(keys.registry(project))
        registry_bytes += sum(len(value) for value in values)
    reader = SnapshotReader(client, keys)
    first = await reader.read()
    assert sum(len(p.agents) for p in first.projects) == 600

    before = await sent_bytes(client)
    again = await reader.read()
    idle = await sent_bytes(client) - before
    assert sum(len(p.agents) for p in again.projects) == 600
    # A few hundred bytes of marks and small replies (and the INFO reply itself), where a
    # whole read is every entry.
    assert idle < registry_bytes / 20, (idle, registry_bytes)
    assert again.mark == first.mark

    busy = beats[1]
    busy.entry = busy.entry.model_copy(update={"state": "busy"})
    await busy.beat()
    before = await sent_bytes(client)
    moved = await reader.read()
    one = await sent_bytes(client) - before
    assert one < registry_bytes / 20, (one, registry_bytes)
    assert moved.mark != again.mark
    [view] = [v for p in moved.projects for v in p.agents if v.id == "proj1/agent0001"]
    assert view.state == "busy"


async def test_a_change_the_caller_does_not_show_is_swapped_in_without_moving_the_generation(
    client: aioredis.Redis, keys: Keys
) -> None:
    beats = [await join(client, keys, f"proj/a{i}", state="idle") for i in range(5)]
    mirror = RegistryMirror(client, keys, relevant=lambda entry: entry.state)
    registry = Registry(client, keys)
    await same(mirror, registry)
    generation = mirror.generation

    spent = beats[2]
    spent.entry = spent.entry.model_copy(update={"usage": {"input_tokens": 1234}})
    await spent.beat()
    listed = {view.id: view for view in await mirror.list()}
    assert listed["proj/a2"].entry.usage == {"input_tokens": 1234}  # the listing is current
    assert mirror.generation == generation  # ...but nothing the caller shows moved
    await same(mirror, registry)

    spent.entry = spent.entry.model_copy(update={"state": "busy"})
    await spent.beat()
    assert {v.id: v.state for v in await mirror.list()}["proj/a2"] == "busy"
    assert mirror.generation > generation
