"""AgentListing: the registry kept current by notices and a check of lapsed heartbeats.

Real agents' write side (`Heartbeat`), real notices (`Team.subscribe`) and a real Redis;
the registry reader counts its full reads, so a test can tell news that came pushed from
news that came from reading every entry again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from ateam.bus.keys import Keys
from ateam.bus.registry import AgentEntry, AgentStatus, Heartbeat, Registry
from ateam.client import Notice, NoticeKind, Team
from ateam.client.listing import AgentListing


class CountingRegistry(Registry):
    """The real reader, counting how often it reads every entry."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.full_reads = 0

    async def list(self, projects: Any = None) -> list[AgentStatus]:
        self.full_reads += 1
        return await super().list(projects)


def entry(agent: str, **fields: Any) -> AgentEntry:
    project, name = agent.split("/")
    return AgentEntry(id=agent, name=name, project=project, **{"state": "idle", **fields})


@pytest.fixture
def keys(team: Team) -> Keys:
    return team.keys


@pytest.fixture
def registry(client: aioredis.Redis, keys: Keys) -> CountingRegistry:
    return CountingRegistry(client, keys)


@pytest.fixture
async def news(team: Team) -> AsyncIterator[AsyncIterator[Notice]]:
    notices = await team.subscribe()
    yield aiter(notices)
    await notices.aclose()


async def next_registry_notice(news: AsyncIterator[Notice]) -> Notice:
    async with asyncio.timeout(10):
        while (notice := await anext(news)).kind != NoticeKind.REGISTRY:
            pass
    return notice


async def age(client: aioredis.Redis, keys: Keys, agent: str, seconds: float) -> None:
    """Make ``agent``'s last beat ``seconds`` old (what a dead agent's stamp becomes)."""
    sec, _ = await client.time()
    await client.hset(keys.heartbeats(agent.split("/")[0]), agent, int((sec - seconds) * 1000))


async def test_notices_keep_the_listing_without_reading_the_registry(
    client: aioredis.Redis,
    keys: Keys,
    registry: CountingRegistry,
    news: AsyncIterator[Notice],
) -> None:
    zeus = Heartbeat(client, keys, entry("proj/zeus"))
    await zeus.beat()
    listing = AgentListing(registry)
    await listing.load()
    assert list(listing.agents) == ["proj/zeus"] and registry.full_reads == 1
    await next_registry_notice(news)  # zeus's own join, read already

    hera = Heartbeat(client, keys, entry("other/hera", state="busy"))
    await hera.beat()
    notice = await next_registry_notice(news)
    (change,) = listing.apply(notice)
    assert change.old is None and change.new is not None and change.shown
    assert listing.agents["other/hera"].state == "busy"

    hera.entry.state = "waiting"
    await hera.beat()
    (change,) = listing.apply(await next_registry_notice(news))
    assert change.old is not None and (change.old.state, listing.agents["other/hera"].state) == (
        "busy",
        "waiting",
    )

    await hera.leave()
    (change,) = listing.apply(await next_registry_notice(news))
    assert change.new is None and "other/hera" not in listing.agents
    assert registry.full_reads == 1 and not listing.stale


async def test_the_check_finds_the_dead_the_restarting_the_back_and_the_long_gone(
    client: aioredis.Redis, keys: Keys, registry: CountingRegistry
) -> None:
    beats = {a: Heartbeat(client, keys, entry(a)) for a in ("proj/a", "proj/b", "proj/c")}
    for beat in beats.values():
        await beat.beat()
    listing = AgentListing(registry)
    await listing.load()
    assert [c for c in await listing.check() if c.shown] == []

    await age(client, keys, "proj/a", 30)  # died without leaving
    await beats["proj/b"].grace(30)  # a planned restart
    await age(client, keys, "proj/b", 30)
    changes = {c.agent: c for c in await listing.check() if c.shown}
    assert sorted(changes) == ["proj/a", "proj/b"]
    assert listing.agents["proj/a"].state == "disconnected"
    assert listing.agents["proj/b"].state == "restarting"
    assert [c for c in await listing.check() if c.shown] == []  # still so: no news

    await beats["proj/b"].beat()  # back, with nothing new to announce
    (back,) = [c for c in await listing.check() if c.shown]
    assert back.agent == "proj/b" and listing.agents["proj/b"].state == "idle"

    await age(client, keys, "proj/a", 200)  # gone for longer than it is shown
    (gone,) = [c for c in await listing.check() if c.shown]
    assert gone.agent == "proj/a" and gone.new is None and "proj/a" not in listing.agents
    assert await client.hget(keys.registry("proj"), "proj/a") is None  # forgotten in Redis
    assert registry.full_reads == 1


async def test_a_forged_or_missed_notice_is_set_right_by_one_full_read(
    client: aioredis.Redis, keys: Keys, registry: CountingRegistry
) -> None:
    await Heartbeat(client, keys, entry("proj/zeus")).beat()
    listing = AgentListing(registry)
    await listing.load()
    # Anyone may publish on the channel: an agent that never beat.
    forged = entry("proj/ghost", state="waiting").to_wire()
    notice = Notice(NoticeKind.REGISTRY, "join", "proj/ghost", {"entry": forged}, "proj")
    listing.apply(notice)
    assert "proj/ghost" in listing.agents
    # A join nobody heard (the notice was lost).
    await Heartbeat(client, keys, entry("proj/quiet")).beat()
    await client.publish("nobody", b"")

    await listing.check()  # two beating, two held, but not the same two: read again
    assert sorted(listing.agents) == ["proj/quiet", "proj/zeus"]
    assert registry.full_reads == 2

    # An entry no reader accepts keeps the counts apart for good: read again once only.
    sec, _ = await client.time()
    await client.hset(keys.heartbeats("proj"), "proj/junk", sec * 1000)
    await listing.check()
    await listing.check()
    await listing.check()
    assert registry.full_reads == 3


async def test_an_entry_that_is_not_one_asks_for_a_full_read(registry: CountingRegistry) -> None:
    listing = AgentListing(registry)
    for notice in (
        Notice(NoticeKind.REGISTRY, "update", "", {"project": "new"}),  # a project announced
        Notice(NoticeKind.REGISTRY, "join", "proj/x", {"entry": {"id": "ops/x"}}, "proj"),
        Notice(NoticeKind.REGISTRY, "join", "proj/x", {"entry": "junk"}, "proj"),
    ):
        listing.stale = False
        assert listing.apply(notice) == []
        assert listing.stale


async def test_news_heard_while_reading_wins_over_what_was_read(
    client: aioredis.Redis, keys: Keys, registry: CountingRegistry
) -> None:
    await Heartbeat(client, keys, entry("proj/zeus")).beat()
    listing = AgentListing(registry)
    reading = asyncio.ensure_future(listing.load())
    await asyncio.sleep(0)  # the read has started and waits on Redis
    # zeus leaves meanwhile; the read may well still see it.
    listing.apply(Notice(NoticeKind.REGISTRY, "leave", "proj/zeus", {}, "proj"))
    await reading
    assert "proj/zeus" not in listing.agents


async def test_a_final_exit_is_listed_until_the_agent_joins_again(
    client: aioredis.Redis,
    keys: Keys,
    registry: CountingRegistry,
    news: AsyncIterator[Notice],
) -> None:
    from ateam.wire.registry import FinalExit

    listing = AgentListing(registry)
    await listing.load()
    final = FinalExit("proj/zeus", 20, "damaged", "error [storage.corrupt]", "/s/queue.jsonl")
    await registry.record_exit(final)
    [change] = listing.apply(await next_registry_notice(news))
    assert change.new is not None and change.new.state == "exited"
    assert change.new.final == final and "move /s/queue.jsonl aside" in str(change.new.entry.alert)
    # Not beating, and not counted among the beating: the check reads nothing again.
    reads = registry.full_reads
    assert await listing.check() == [] and registry.full_reads == reads
    assert [v.state for v in await registry.list()] == ["exited"]

    # Running again, its join wins and clears the record.
    await Heartbeat(client, keys, entry("proj/zeus")).beat()
    listing.apply(await next_registry_notice(news))
    assert listing.agents["proj/zeus"].state == "idle"
    assert [v.state for v in await registry.list()] == ["idle"]
    assert not await registry.clear_exit("proj/zeus")


async def test_a_malformed_exit_record_is_not_listed_and_breaks_nothing(
    client: aioredis.Redis, keys: Keys, registry: CountingRegistry
) -> None:
    from ateam.bus.codec import pack

    await Heartbeat(client, keys, entry("proj/hera")).beat()
    exits = keys.exits("proj")
    await client.hset(exits, "proj/a", b"\xc1 not msgpack")
    await client.hset(
        exits, "proj/b", pack({"agent": "proj/b", "code": 20, "reason": "x", "at": "soon"})
    )
    await client.hset(exits, "proj/c", pack({"agent": "other/c", "code": 20, "reason": "x"}))
    assert [v.id for v in await registry.list()] == ["proj/hera"]
