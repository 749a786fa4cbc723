"""The event stream is bounded in bytes as well as in count (issue 13 point 5).

Measured the way an operator would: ``MEMORY USAGE`` of the stream key on a real server.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from ateam.bus.coalesce import Coalescer
from ateam.bus.codec import unpack
from ateam.bus.connection import RedisTarget, make_client
from ateam.bus.events import Gap
from ateam.bus.keys import Keys
from ateam.bus.publisher import COUNT_SLACK, ENTRY_OVERHEAD, EventPublisher
from ateam.bus.tail import EventTail
from ateam.constants import COALESCE_MAX_BYTES, EVENT_LOG_MAX_BYTES, EVENT_LOG_MAXLEN

AGENT = "proj/zeus"
ALLOCATOR_SLACK = 1.3
"""``MEMORY USAGE`` over the counted bytes: a few percent on Valkey 9 and Redis 6.2, up
to a quarter on Redis 7, whose jemalloc rounds an 8-16 KiB entry up to its size class."""


@pytest.fixture(params=["session", "redis-6.2"])
async def any_client(
    request: pytest.FixtureRequest, namespace: str
) -> AsyncIterator[tuple[aioredis.Redis, Keys]]:
    """The session's server (Valkey 9 by default) and Redis 6.2 (libc malloc)."""
    name = "redis_server" if request.param == "session" else "redis6_server"
    server = request.getfixturevalue(name)
    c = make_client(RedisTarget(server.url, "test", namespace=namespace))
    yield c, Keys(namespace)
    await c.aclose()


async def counted_bytes(client: aioredis.Redis, keys: Keys) -> int:
    return int(await client.get(keys.events_bytes(AGENT)) or 0)


async def real_cost(client: aioredis.Redis, keys: Keys) -> int:
    """What the count should be: each entry's payload, field name and overhead."""
    entries = await client.xrange(keys.events(AGENT))
    return sum(ENTRY_OVERHEAD + sum(len(k) + len(v) for k, v in f.items()) for _, f in entries)


async def test_ten_thousand_large_events_stay_under_the_byte_cap(
    any_client: tuple[aioredis.Redis, Keys],
) -> None:
    client, keys = any_client
    pub = EventPublisher(client, keys, AGENT)
    await pub.start()
    chunk = "x" * (16 * 1024)  # ~170 MB in all: what the issue saw 10 000 events hold
    for i in range(10_000):
        pub.emit("tool.output", text=chunk, task_id=f"t{i}")
    assert await pub.flush(60)
    await pub.aclose()

    stream = keys.events(AGENT)
    usage = await client.memory_usage(stream, samples=0)
    assert usage is not None and usage <= EVENT_LOG_MAX_BYTES * ALLOCATOR_SLACK, usage
    assert await counted_bytes(client, keys) <= EVENT_LOG_MAX_BYTES
    # The newest events are the ones kept: about seven eighths of the cap's worth.
    assert await counted_bytes(client, keys) == await real_cost(client, keys)
    length = await client.xlen(stream)
    assert EVENT_LOG_MAX_BYTES * 7 // 8 // (16 * 1024 + 400) <= length < 10_000 // 10
    (newest_id, newest), *_ = await client.xrevrange(stream, count=1)
    assert unpack(newest[b"d"])["task_id"] == "t9999"
    assert newest_id == f"{pub.last_offset}-0".encode()

    # A console that asks for everything is told what was trimmed, then reads the rest.
    tail = EventTail(client, keys, block_ms=50)
    tail.add(AGENT, after=0)
    first = await asyncio.wait_for(anext(aiter(tail)), 5)
    assert isinstance(first, Gap) and first.first == 1
    assert first.last == int(newest_id.split(b"-")[0]) - length


async def test_small_events_are_bounded_by_count_and_the_byte_count_stays_exact(
    any_client: tuple[aioredis.Redis, Keys],
) -> None:
    client, keys = any_client
    maxlen = 100
    pub = EventPublisher(client, keys, AGENT, maxlen=maxlen)
    await pub.start()
    for i in range(1000):
        pub.emit("token", text=f"word {i}")
    assert await pub.flush(10)
    await pub.aclose()
    assert maxlen <= await client.xlen(keys.events(AGENT)) <= maxlen + COUNT_SLACK
    assert await counted_bytes(client, keys) == await real_cost(client, keys)

    # A publisher started later (the agent restarted) goes on from the same count.
    again = EventPublisher(client, keys, AGENT, maxlen=maxlen, max_bytes=20_000)
    await again.start()
    for i in range(300):
        again.emit("token", text=f"more {i:03d} " + "y" * 200)
    assert await again.flush(10)
    await again.aclose()
    assert await counted_bytes(client, keys) == await real_cost(client, keys) <= 20_000


async def test_a_stream_lost_with_its_count_starts_counting_afresh(
    any_client: tuple[aioredis.Redis, Keys],
) -> None:
    client, keys = any_client
    pub = EventPublisher(client, keys, AGENT)
    await pub.start()
    pub.emit("token", text="before")
    assert await pub.flush(5)
    # A stream gone while its count stayed (deleted by hand): the count follows the stream.
    await client.delete(keys.events(AGENT))
    pub.emit("token", text="after")
    assert await pub.flush(5)
    await pub.aclose()
    assert await counted_bytes(client, keys) == await real_cost(client, keys)


async def ledger(client: aioredis.Redis, keys: Keys) -> list[int]:
    return [int(n) for n in await client.lrange(keys.events_costs(AGENT), 0, -1)]


async def test_trimming_pops_costs_and_never_reads_the_trimmed_entries_back(
    own_redis: Any, namespace: str
) -> None:
    # A server of its own: its command counts are this test's alone.
    client = make_client(RedisTarget(own_redis.url, "test", namespace=namespace))
    keys = Keys(namespace)
    pub = EventPublisher(client, keys, AGENT, max_bytes=1 << 20)
    await pub.start()
    await client.config_resetstat()
    for i in range(600):  # ~10 MB through a 1 MiB cap: trimmed about 70 times
        pub.emit("tool.output", text=f"{i:04d}" + "x" * (16 * 1024), task_id="t")
    assert await pub.flush(30)
    await pub.aclose()
    stats = await client.info("commandstats")
    assert stats["cmdstat_xtrim"]["calls"] > 10  # it trimmed again and again
    assert "cmdstat_xrange" not in stats  # ...without reading a trimmed payload again

    costs = await ledger(client, keys)
    assert len(costs) == await client.xlen(keys.events(AGENT))
    assert sum(costs) == await counted_bytes(client, keys) == await real_cost(client, keys)
    assert await counted_bytes(client, keys) <= 1 << 20
    await client.aclose()


async def test_a_ledger_lost_or_from_before_it_existed_is_rebuilt_from_the_stream(
    any_client: tuple[aioredis.Redis, Keys],
) -> None:
    client, keys = any_client
    pub = EventPublisher(client, keys, AGENT, max_bytes=200_000)
    await pub.start()
    for i in range(40):
        pub.emit("tool.output", text=f"{i} " + "y" * 3000)
    assert await pub.flush(10)
    # A stream written before the ledger (an upgrade), or a ledger evicted: the next
    # append rebuilds it from the entries, and trimming by bytes stays exact.
    await client.delete(keys.events_costs(AGENT))
    for i in range(100):
        pub.emit("tool.output", text=f"{i} " + "z" * 3000)
    assert await pub.flush(10)
    await pub.aclose()
    costs = await ledger(client, keys)
    assert len(costs) == await client.xlen(keys.events(AGENT))
    assert sum(costs) == await counted_bytes(client, keys) == await real_cost(client, keys)
    assert await counted_bytes(client, keys) <= 200_000


async def test_one_large_read_becomes_bounded_frames() -> None:
    frames: list[dict[str, str]] = []
    co = Coalescer.for_output(frames.append)
    text = "é" * (300 * 1024) + " tail"  # 600 KiB of two-byte characters in one read
    co.feed(text.encode())
    co.close()
    assert len(frames) > 70
    assert all("text" in f for f in frames)  # never cut inside a character
    assert max(len(f["text"].encode()) for f in frames) <= COALESCE_MAX_BYTES
    assert "".join(f["text"] for f in frames) == text


async def test_binary_output_is_bounded_too() -> None:
    frames: list[dict[str, str]] = []
    co = Coalescer(frames.append)
    co.feed(bytes(range(256)) * 1024)  # 256 KiB, not UTF-8
    co.close()
    sizes = [len(f.get("bin") or f.get("text", "")) for f in frames]
    assert len(sizes) >= 32 and max(sizes) <= COALESCE_MAX_BYTES


def test_the_defaults_documented_in_the_protocol() -> None:
    assert EVENT_LOG_MAXLEN == 10_000
    assert EVENT_LOG_MAX_BYTES == 16 * 1024 * 1024
