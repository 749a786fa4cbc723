"""``Registry.list`` at scale (issue 28 §4): the rows come out in id order without a
final sort, decoded once per change of bytes, and exactly the agents registered."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis

from ateam.bus.codec import pack
from ateam.bus.connection import RedisTarget
from ateam.bus.keys import Keys
from ateam.bus.registry import AgentEntry, Heartbeat, Registry
from ateam.bus.registry_log import log_key
from ateam.bus.registry_rows import in_id_order

# Names whose plain sort is not their agents' id order ("a-b" < "a" as "a-b/" < "a/").
PROJECTS = ("a", "a-b", "a.c", "ab", "A", "a_b", "a0")


def entry(agent: str, **fields: Any) -> AgentEntry:
    project, name = agent.split("/")
    return AgentEntry(id=agent, name=name, project=project, **{"state": "idle", **fields})


def test_projects_are_ordered_so_their_agents_come_in_id_order() -> None:
    ids = [f"{project}/{name}" for project in PROJECTS for name in ("x", "a-1", "Z")]
    ordered = in_id_order(sorted(PROJECTS))
    assert [i for p in ordered for i in sorted(i for i in ids if i.startswith(f"{p}/"))] == sorted(
        ids
    )
    assert sorted(PROJECTS) != ordered  # the plain sort would have been wrong
    assert in_id_order(["a", "b/c"]) == []  # a foreign name: the caller sorts


async def test_a_listing_of_many_agents_is_exactly_the_registered_set_in_id_order(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    agents = [f"{PROJECTS[i % len(PROJECTS)]}/n{(i * 7919) % 1000:03d}" for i in range(350)]
    for i, agent in enumerate(agents):
        await Heartbeat(client, keys, entry(agent, pid=i, queue_len=i % 3)).beat()
    registry = Registry(client, keys)
    for _ in range(2):  # decoded, then reused
        views = await registry.list()
        assert [view.id for view in views] == sorted(agents)
        by_id = {view.id: view for view in views}
        for i, agent in enumerate(agents):
            shown = by_id[agent].to_json()
            assert shown["pid"] == i and shown["queue_len"] == i % 3
            assert shown["state"] == "idle" and shown["heartbeat_age_s"] < 5


async def test_a_project_named_with_a_slash_still_lists_in_id_order(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    for agent in ("b/one", "a/two", "a-b/three"):
        await Heartbeat(client, keys, entry(agent)).beat()
    await client.sadd(keys.projects, "a/x")  # a foreign writer's project name
    assert [v.id for v in await Registry(client, keys).list()] == ["a-b/three", "a/two", "b/one"]


async def test_an_entry_filed_under_another_agents_id_is_skipped(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    await Heartbeat(client, keys, entry("proj/zeus")).beat()
    sec, _ = await client.time()
    # proj/hera's field holds zeus's entry: keys built from it would name the wrong agent.
    await client.hset(keys.registry("proj"), "proj/hera", pack(entry("proj/zeus").to_wire()))
    await client.hset(keys.heartbeats("proj"), "proj/hera", sec * 1000)
    # A foreign writer notes nothing in the change log: read whole each time to see it.
    registry = Registry(client, keys, resync_s=0)
    assert [v.id for v in await registry.list()] == ["proj/zeus"]
    assert [v.id for v in await registry.list()] == ["proj/zeus"]  # remembered as rejected

    # Once it holds its own entry, it is listed.
    await client.hset(keys.registry("proj"), "proj/hera", pack(entry("proj/hera").to_wire()))
    assert [v.id for v in await registry.list()] == ["proj/hera", "proj/zeus"]


async def listed_bdf(client: aioredis.Redis, keys: Keys) -> Registry:
    """A registry that has listed agents b, d and f of ``proj`` once."""
    for name in ("b", "d", "f"):
        await Heartbeat(client, keys, entry(f"proj/{name}")).beat()
    registry = Registry(client, keys)
    assert [v.id for v in await registry.list()] == ["proj/b", "proj/d", "proj/f"]
    return registry


async def test_a_warm_listing_follows_joins_leaves_and_rewrites_in_id_order(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    # The cache keeps each project's sorted ids while they stay the same set: a join, a
    # leave or a rewrite between two listings must each show in the next one.
    keys = Keys(target.namespace)
    registry = await listed_bdf(client, keys)

    rewritten = Heartbeat(client, keys, entry("proj/d"))
    rewritten.entry.queue_len = 7
    await rewritten.beat()
    views = await registry.list()
    assert [(v.id, v.entry.queue_len) for v in views] == [
        ("proj/b", 0),
        ("proj/d", 7),
        ("proj/f", 0),
    ]

    await Heartbeat(client, keys, entry("proj/c")).beat()
    await Heartbeat(client, keys, entry("proj/a")).beat()
    assert [v.id for v in await registry.list()] == [f"proj/{n}" for n in "abcdf"]

    await registry.forget("proj", ["proj/b", "proj/f"])
    assert [v.id for v in await registry.list()] == ["proj/a", "proj/c", "proj/d"]
    assert [v.id for v in await registry.list()] == ["proj/a", "proj/c", "proj/d"]


async def hgetalls(client: aioredis.Redis, command: str = "hgetall") -> int:
    """How many HGETALL (or ``command``) the server has run (its command statistics)."""
    stats = await client.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


async def test_a_warm_listing_reads_the_entries_only_when_the_change_log_moved(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    # An agent writes its entry when it changes, not when it beats: listing again reads
    # the beats and exits (two HGETALL), and once a change is noted the entries of the
    # agents noted (one HMGET beside the log's) and the beats again (one more HGETALL,
    # see the test of an agent joining between the round trips for why the beats).
    keys = Keys(target.namespace)
    zeus = Heartbeat(client, keys, entry("proj/zeus"))
    await zeus.beat()
    await Heartbeat(client, keys, entry("proj/hera")).beat()
    registry = Registry(client, keys)
    first = await registry.list()
    before = await hgetalls(client)
    assert [v.id for v in await registry.list()] == ["proj/hera", "proj/zeus"]
    assert await hgetalls(client) - before == 2

    zeus.entry.state = "busy"
    await zeus.beat()  # the entry written, then noted
    before, hmgets = await hgetalls(client), await hgetalls(client, "hmget")
    views = await registry.list()
    assert await hgetalls(client) - before == 3
    assert await hgetalls(client, "hmget") - hmgets == 2  # the log's version, then zeus
    assert [(v.id, v.state) for v in views] == [("proj/hera", "idle"), ("proj/zeus", "busy")]
    assert views[0].entry is first[0].entry  # hera's bytes did not change: not decoded

    # A write the log does not note (a foreign writer's) shows once the log is lost (a
    # copy of it is then void) or the resync bound has passed.
    await client.hset(keys.registry("proj"), "proj/hera", b"not msgpack")
    assert [v.id for v in await registry.list()] == ["proj/hera", "proj/zeus"]
    assert [v.id for v in await Registry(client, keys, resync_s=0).list()] == ["proj/zeus"]
    await client.delete(log_key(keys, "proj"))
    assert [v.id for v in await registry.list()] == ["proj/zeus"]
    before = await hgetalls(client)
    await registry.list()
    assert await hgetalls(client) - before == 4  # no log to compare with: read whole


async def test_a_listing_reads_only_the_agents_the_log_noted_unless_it_was_trimmed_past(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    # At 10 000 agents a project's hash is 4 MB: a listing after a few agents changed
    # reads those entries, not the hash. Joined, changed and forgotten agents all come
    # through the log; a log trimmed past what this registry read sends it to the hash.
    keys = Keys(target.namespace)
    registry = await listed_bdf(client, keys)

    await Heartbeat(client, keys, entry("proj/a")).beat()  # joins
    changed = Heartbeat(client, keys, entry("proj/d"))
    changed.entry.queue_len = 3
    await changed.beat()
    await registry.forget("proj", ["proj/f"])
    before = await hgetalls(client)
    views = await registry.list()
    assert await hgetalls(client) - before == 3  # beats, exits; the beats again
    assert [(v.id, v.entry.queue_len) for v in views] == [
        ("proj/a", 0),
        ("proj/b", 0),
        ("proj/d", 3),
    ]

    # An un-noted write stays unseen by a patch; once the log says changes were trimmed
    # away past this registry's version, the hash is read whole and shows it.
    await client.hset(keys.registry("proj"), "proj/b", b"not msgpack")
    changed.entry.queue_len = 4
    await changed.beat()
    views = await registry.list()
    assert [(v.id, v.entry.queue_len) for v in views] == [
        ("proj/a", 0),
        ("proj/b", 0),
        ("proj/d", 4),
    ]
    changed.entry.queue_len = 5
    await changed.beat()
    await client.hset(log_key(keys, "proj"), "floor", 10**6)
    before = await hgetalls(client)
    views = await registry.list()
    assert await hgetalls(client) - before == 4  # the registry's hash too
    assert [(v.id, v.entry.queue_len) for v in views] == [("proj/a", 0), ("proj/d", 5)]


async def test_a_registry_kept_across_a_flushed_server_lists_what_is_there_now(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    # The new log has a new epoch: a version that happens to match the old one does not
    # keep the old hash.
    keys = Keys(target.namespace)
    await Heartbeat(client, keys, entry("proj/zeus")).beat()
    registry = Registry(client, keys)
    assert [v.id for v in await registry.list()] == ["proj/zeus"]
    await client.delete(keys.registry("proj"), log_key(keys, "proj"), keys.heartbeats("proj"))
    await Heartbeat(client, keys, entry("proj/hera")).beat()  # version 1 again
    assert [v.id for v in await registry.list()] == ["proj/hera"]


async def test_an_agent_joining_between_the_two_round_trips_is_listed_not_forgotten(
    client: aioredis.Redis, target: RedisTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The entries are read in a second round trip: an agent that joins after the first
    # has an entry there. Its beat must be read with it, or it would read as an agent
    # gone for good, and be forgotten (its entry and beat deleted) by this listing.
    keys = Keys(target.namespace)
    await Heartbeat(client, keys, entry("proj/hera")).beat()
    registry = Registry(client, keys)
    read_entries = registry._entries

    async def joined_meanwhile(whole: list[str], patches: dict[str, list[bytes]]) -> Any:
        await Heartbeat(client, keys, entry("proj/zeus")).beat()
        return await read_entries(whole, patches)

    monkeypatch.setattr(registry, "_entries", joined_meanwhile)
    views = await registry.list()

    assert [(v.id, v.connected) for v in views] == [("proj/hera", True), ("proj/zeus", True)]
    assert await client.hexists(keys.registry("proj"), "proj/zeus")
