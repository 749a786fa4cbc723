"""The registry's write side scales with what changed (issue 14).

A beat stamps the heartbeat and renews liveness; it writes and announces the entry only
when the entry changed. The read side can ask which agents lapsed without reading the
entries (`Registry.lapsed`).
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from ateam.bus.codec import pack, unpack
from ateam.bus.connection import RedisTarget
from ateam.bus.keys import Keys
from ateam.bus.registry import AgentEntry, Heartbeat, Registry, id_digest

AGENT = "proj/zeus"


def entry(agent: str = AGENT, **fields: Any) -> AgentEntry:
    project, name = agent.split("/")
    return AgentEntry(id=agent, name=name, project=project, **{"state": "idle", **fields})


async def notices(pubsub: Any) -> list[dict[str, Any]]:
    """Every notice published so far (PUBLISH is answered after delivery)."""
    found = []
    while (
        message := await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.2)
    ) is not None:
        found.append(unpack(message["data"]))
    return found


async def test_a_beat_writes_the_entry_only_when_it_changed(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    pubsub = client.pubsub()
    await pubsub.subscribe(keys.registry_channel("proj"))
    await pubsub.get_message(timeout=1)
    beat = Heartbeat(client, keys, entry())
    await beat.beat()
    assert [n["event"] for n in await notices(pubsub)] == ["join"]
    stamp = await client.hget(keys.heartbeats("proj"), AGENT)

    # Mark the stored entry: a beat that wrote it again would overwrite the mark.
    await client.hset(keys.registry("proj"), AGENT, b"mark")
    await client.hset(keys.heartbeats("proj"), AGENT, 1)
    await beat.beat()
    assert await client.hget(keys.registry("proj"), AGENT) == b"mark"
    assert int(await client.hget(keys.heartbeats("proj"), AGENT)) >= int(stamp)
    assert await client.pttl(keys.alive(AGENT)) > 0
    assert await notices(pubsub) == []

    # A change is written and announced with the whole entry.
    beat.entry.state = "busy"
    beat.entry.queue_len = 3
    await beat.beat()
    (update,) = await notices(pubsub)
    assert update["event"] == "update" and update["agent"] == AGENT
    assert (update["entry"]["state"], update["entry"]["queue_len"]) == ("busy", 3)
    stored = unpack(await client.hget(keys.registry("proj"), AGENT))
    assert (stored["state"], stored["queue_len"]) == ("busy", 3)

    # The agent may still insist (a lock taken again): an update, same entry.
    await beat.beat(changed=True)
    assert [n["event"] for n in await notices(pubsub)] == ["update"]
    await pubsub.aclose()


async def test_an_agent_forgotten_by_a_reader_joins_again_on_its_next_beat(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    beat = Heartbeat(client, keys, entry())
    await beat.beat()
    pubsub = client.pubsub()
    await pubsub.subscribe(keys.registry_channel("proj"))
    await pubsub.get_message(timeout=1)
    # What a reader does with an agent silent for longer than it is shown.
    await Registry(client, keys).forget("proj", [AGENT])
    assert await Registry(client, keys).list() == []

    await beat.beat()  # nothing changed in the entry, yet it is written again
    assert [n["event"] for n in await notices(pubsub)] == ["join"]
    (view,) = await Registry(client, keys).list()
    assert view.id == AGENT and view.connected
    await pubsub.aclose()


async def test_lapsed_names_only_the_agents_past_the_ttl(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    agents = [f"proj/a{i}" for i in range(5)]
    for agent in agents:
        await Heartbeat(client, keys, entry(agent)).beat()
    registry = Registry(client, keys)
    quiet = await registry.lapsed("proj")
    assert (quiet.beating, quiet.stamps) == (5, {})
    # Which agents beat, as a reader can tell from the ids it holds.
    assert quiet.digest == sum(id_digest(agent) for agent in agents) % 2**32
    sec, _ = await client.time()
    assert abs(quiet.now_ms - sec * 1000) < 2000

    old = (sec - 30) * 1000
    await client.hset(keys.heartbeats("proj"), "proj/a3", old)
    lapse = await registry.lapsed("proj")
    assert (lapse.beating, lapse.stamps) == (5, {"proj/a3": old})
    assert (await registry.lapsed("other")).beating == 0  # a project nobody beats in


async def test_list_skips_entries_of_another_project_or_id(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    await Heartbeat(client, keys, entry()).beat()
    sec, _ = await client.time()
    # A foreign writer's entries: another project's, garbage; both beat.
    await client.hset(keys.registry("proj"), "ops/ares", pack(entry("ops/ares").to_wire()))
    await client.hset(keys.registry("proj"), "proj/junk", b"\x01not msgpack")
    await client.hset(keys.heartbeats("proj"), "ops/ares", sec * 1000)
    await client.hset(keys.heartbeats("proj"), "proj/junk", sec * 1000)
    assert [v.id for v in await Registry(client, keys).list()] == [AGENT]


async def test_a_listing_reuses_unchanged_entries_and_reads_every_change(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    zeus, hera = Heartbeat(client, keys, entry()), Heartbeat(client, keys, entry("proj/hera"))
    await zeus.beat()
    await hera.beat()
    registry = Registry(client, keys, resync_s=0)  # the hash read whole every time
    first = {view.id: view.entry for view in await registry.list()}

    zeus.entry.state = "busy"
    await zeus.beat()
    again = {view.id: view.entry for view in await registry.list()}
    assert again["proj/zeus"].state == "busy" and again["proj/zeus"] is not first["proj/zeus"]
    assert again["proj/hera"] is first["proj/hera"]  # its bytes did not change: not decoded

    # A forged entry in place of hera's is read as what it is now, not as the one kept
    # (when read: a foreign writer notes nothing in the change log; test_registry_rows).
    await client.hset(keys.registry("proj"), "proj/hera", b"not msgpack")
    assert [view.id for view in await registry.list()] == ["proj/zeus"]
