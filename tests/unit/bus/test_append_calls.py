"""What one batch of events costs the server (issue 28 §4: 10 000 events/s).

At that rate a batch is often a single event, and every command the append script runs
is a good part of its cost: the stream's length is read once (the trim counts on from
it) and its type is asked only when the key is not a stream. The guarantees stay: a key
of another type is still replaced and reported (tests/unit/bus/test_events.py).
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from ateam.bus.connection import RedisTarget
from ateam.bus.keys import Keys
from ateam.bus.publisher import EventPublisher

AGENT = "proj/zeus"


async def calls(client: aioredis.Redis) -> dict[str, int]:
    stats: dict[str, Any] = await client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(row["calls"]) for name, row in stats.items()}


async def test_a_batch_reads_the_stream_length_once_and_never_its_type(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    publisher = EventPublisher(client, keys, AGENT)
    await publisher.start()
    try:
        for batch in range(3):  # a missing stream, then one with entries and a ledger
            before = await calls(client)
            publisher.emit("token", text=f"t{batch}")
            assert await publisher.flush(5)
            after = await calls(client)
            ran = {name: after.get(name, 0) - before.get(name, 0) for name in after}
            assert ran.get("xadd") == 1 and ran.get("xlen") == 1, ran
            assert not ran.get("type"), ran
        assert await client.xlen(keys.events(AGENT)) == 3
    finally:
        await publisher.aclose()
