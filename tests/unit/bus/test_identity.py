"""An agent instance's identity on the bus (issue 22 point 3): published, proven, withdrawn.

The heartbeat publishes the hash of the instance's token; only that token proves the
agent, and only while that instance is the one publishing.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from ateam.bus.connection import RedisTarget
from ateam.bus.identity import AgentIdentity, proven
from ateam.bus.keys import Keys
from ateam.bus.ownership import token_digest
from ateam.bus.registry import AgentEntry, Heartbeat
from ateam.constants import HEARTBEAT_TTL_S

AGENT = "proj/zeus"


def heartbeat(client: aioredis.Redis, keys: Keys, identity: AgentIdentity | None) -> Heartbeat:
    entry = AgentEntry(id=AGENT, name="zeus", project="proj", state="idle")
    return Heartbeat(client, keys, entry, identity=identity)


async def test_only_the_running_instances_token_proves_the_agent(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    mine = AgentIdentity(AGENT)
    assert not await proven(client, keys, AGENT, token_digest(mine.token))  # not published yet
    await heartbeat(client, keys, mine).beat()

    assert await proven(client, keys, AGENT, token_digest(mine.token))
    ttl_ms = await client.pttl(keys.identity(AGENT))
    assert 0 < ttl_ms <= HEARTBEAT_TTL_S * 1000  # a crashed instance's proof lapses
    assert mine.token not in repr(mine)
    # What a reader of Redis can learn proves nothing: the hash is hashed again.
    published = (await client.get(keys.identity(AGENT))).decode()
    assert published == mine.digest
    assert not await proven(client, keys, AGENT, token_digest(published))
    assert not await proven(client, keys, AGENT, None)
    assert not await proven(client, keys, AGENT, token_digest(AgentIdentity(AGENT).token))
    # The token proves this agent and no other.
    assert not await proven(client, keys, "proj/hera", token_digest(mine.token))


async def test_a_successor_replaces_the_proof_and_a_late_leave_keeps_it(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    old, new = AgentIdentity(AGENT), AgentIdentity(AGENT)
    old_beat = heartbeat(client, keys, old)
    await old_beat.beat()
    await heartbeat(client, keys, new).beat()
    assert not await proven(client, keys, AGENT, token_digest(old.token))
    assert await proven(client, keys, AGENT, token_digest(new.token))

    await old_beat.leave()  # the old instance, stopping late, must not erase the new proof
    assert await proven(client, keys, AGENT, token_digest(new.token))


async def test_leaving_withdraws_the_proof_and_a_beat_restores_a_lost_one(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    mine = AgentIdentity(AGENT)
    beat = heartbeat(client, keys, mine)
    await beat.beat()
    await client.delete(keys.identity(AGENT))  # a Redis that lost it (restart, flush)
    await beat.beat()
    assert await proven(client, keys, AGENT, token_digest(mine.token))

    await beat.leave()
    assert not await client.exists(keys.identity(AGENT))
    assert not await proven(client, keys, AGENT, token_digest(mine.token))


async def test_an_entry_without_identity_publishes_none(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    await heartbeat(client, keys, None).beat()
    assert not await client.exists(keys.identity(AGENT))
