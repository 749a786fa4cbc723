"""Backpressure from the owning console (issue 28 §3): the mark, the ledger, the hold.

A real server throughout: the owner's mark lives in its ownership hash, written by the
owner's token only, and the agent's side reads it back.
"""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from ateam.bus.keys import Keys
from ateam.bus.owner_lag import READ_FIELD, EmitLedger, OwnerLag, check_bound, owner_lag
from ateam.bus.ownership import Ownership
from ateam.bus.publisher import COUNT_SLACK, ENTRY_OVERHEAD, EventPublisher
from ateam.client.readmark import ReadReports
from ateam.constants import EVENT_LOG_MAX_BYTES, EVENT_LOG_MAXLEN, OWNER_LAG_BYTES
from tests._wait import async_wait_for
from tests.servers.proxy import TcpProxy
from tests.servers.redis import RedisProcess

pytestmark = pytest.mark.timeout(30)

AGENT = "proj/zeus"
BOUND = 10_000


def test_the_ledger_counts_bytes_and_entries_after_a_mark() -> None:
    ledger = EmitLedger(100)
    assert ledger.since(0) == (0, 0)
    for offset in range(1, 11):
        ledger.add(offset, 100)
    assert ledger.since(10) == (0, 0)
    assert ledger.since(7) == (300, 3)
    assert ledger.since(0) == (1000, 10)
    assert ledger.since(99) == (0, 0)  # a mark past the end (a forged one): no lag


def test_the_ledger_forgets_what_the_stream_cannot_hold() -> None:
    ledger = EmitLedger(10)
    for offset in range(1, 101):
        ledger.add(offset, 1)
    # Marks older than the ring: every entry counted, and at least the ring's bytes.
    size, count = ledger.since(5)
    assert count == 95 and 9 <= size <= 95
    assert ledger.since(95) == (5, 5)


def test_a_new_run_of_offsets_counts_from_its_start() -> None:
    ledger = EmitLedger(100)
    for offset in (1, 2, 3):
        ledger.add(offset, 10)
    for offset in (50, 51):  # renumbered at start: a jump
        ledger.add(offset, 10)
    assert ledger.since(50) == (10, 1)
    assert ledger.since(3) == (20, 48)  # before the run: all of the run


def test_the_publisher_counts_as_its_byte_cap_does() -> None:
    publisher = EventPublisher(aioredis.Redis(), Keys("x:"), AGENT)
    first = publisher.emit("tool.output", text="a" * 1000)
    size, count = publisher.ledger.since(first - 1)
    assert count == 1 and ENTRY_OVERHEAD + 1000 < size < ENTRY_OVERHEAD + 1200
    assert publisher.ledger.since(first) == (0, 0)


def test_the_bound_stays_within_the_stream() -> None:
    check_bound(OWNER_LAG_BYTES, EVENT_LOG_MAX_BYTES)
    with pytest.raises(ValueError, match="half the event stream"):
        check_bound(EVENT_LOG_MAX_BYTES, EVENT_LOG_MAX_BYTES)
    room = owner_lag(aioredis.Redis(), Keys("x:"), AGENT, EmitLedger(10), OWNER_LAG_BYTES)
    assert room is not None and room.bound_entries == EVENT_LOG_MAXLEN // 2
    assert owner_lag(aioredis.Redis(), Keys("x:"), AGENT, EmitLedger(10), 0) is None
    assert EVENT_LOG_MAXLEN + COUNT_SLACK > EVENT_LOG_MAXLEN // 2


def _lag(client: aioredis.Redis, namespace: str, ledger: EmitLedger) -> OwnerLag:
    return OwnerLag(
        client, Keys(namespace), AGENT, ledger, bound_bytes=BOUND, bound_entries=1000, poll_s=0.01
    )


def _publish(ledger: EmitLedger, size: int, cost: int = 100) -> None:
    for _ in range(size // cost):
        ledger.add(ledger.last + 1, cost)


async def test_no_owner_means_no_hold(client: aioredis.Redis, namespace: str) -> None:
    ledger = EmitLedger(1000)
    room = _lag(client, namespace, ledger)
    for _ in range(10):
        _publish(ledger, 3 * BOUND)
        if not room.ready():
            await asyncio.wait_for(room.wait(), 5)  # looks, finds nobody, lets go
        assert room.ready()


async def test_an_owner_behind_holds_until_it_reads_on(
    client: aioredis.Redis, namespace: str
) -> None:
    keys = Keys(namespace)
    owner = Ownership(client, keys, "console:a")
    await owner.acquire(AGENT)
    assert await owner.mark_read(AGENT, 0)
    ledger = EmitLedger(1000)
    room = _lag(client, namespace, ledger)
    _publish(ledger, 2 * BOUND)
    assert not room.ready()
    waiting = asyncio.create_task(room.wait())
    await asyncio.sleep(0.2)
    assert not waiting.done()  # held while the owner stays behind

    # A stranger (a tail, a stale owner) cannot move the mark.
    stranger = Ownership(client, keys, "console:b")
    assert not await stranger.mark_read(AGENT, ledger.last)
    await asyncio.sleep(0.1)
    assert not waiting.done()

    assert await owner.mark_read(AGENT, ledger.last - 5)
    await asyncio.wait_for(waiting, 5)
    assert room.ready()


@pytest.mark.parametrize("how", ["release", "lapse", "takeover"])
async def test_an_owner_that_goes_lets_the_agent_go(
    client: aioredis.Redis, namespace: str, how: str
) -> None:
    keys = Keys(namespace)
    owner = Ownership(client, keys, "console:a", ttl_s=0.5, grace_s=0.0)
    await owner.acquire(AGENT)
    await owner.mark_read(AGENT, 0)
    ledger = EmitLedger(1000)
    room = _lag(client, namespace, ledger)
    _publish(ledger, 2 * BOUND)
    waiting = asyncio.create_task(room.wait())
    await asyncio.sleep(0.1)
    assert not waiting.done()
    if how == "release":
        await owner.release(AGENT)
    elif how == "takeover":
        # The new holder has read nothing it could be behind on: its mark starts empty.
        await Ownership(client, keys, "console:b", grace_s=0.0).acquire(AGENT, takeover=True)
        assert await client.hget(keys.owner(AGENT), READ_FIELD) is None
    await asyncio.wait_for(waiting, 5)  # "lapse": the lease ends on its own


async def test_reports_are_throttled_and_the_newest_is_written_last(
    client: aioredis.Redis, namespace: str
) -> None:
    keys = Keys(namespace)
    owner = Ownership(client, keys, "console:a")
    await owner.acquire(AGENT)
    reports = ReadReports(owner.mark_read, every_s=0.05)
    for offset in range(1, 201):
        reports.note(AGENT, offset)
        await asyncio.sleep(0)
    reports.note(AGENT, None)  # nothing read yet: ignored

    async def newest() -> bool:
        return await client.hget(keys.owner(AGENT), READ_FIELD) == b"200"

    await async_wait_for(newest, 5, "the newest mark to be written")
    assert reports.written < 20  # hundreds of notes, a few writes
    await reports.aclose()


async def test_an_owner_record_that_cannot_be_read_holds_nothing(
    client: aioredis.Redis, namespace: str
) -> None:
    keys = Keys(namespace)
    await client.set(keys.owner(AGENT), "not a hash")  # WRONGTYPE for every read of it
    ledger = EmitLedger(1000)
    room = _lag(client, namespace, ledger)
    _publish(ledger, 3 * BOUND)
    await asyncio.wait_for(room.wait(), 5)
    assert room.ready()


def test_the_ledger_grows_as_it_fills_and_keeps_its_sums() -> None:
    ledger = EmitLedger(1000)
    for offset in range(1, 3001):
        ledger.add(offset, offset)  # each entry costs its offset: sums are checkable
    assert ledger.since(2990) == (sum(range(2991, 3001)), 10)
    assert ledger.since(2001) == (sum(range(2002, 3001)), 999)
    size, count = ledger.since(1500)  # older than the ring: at least what it holds
    assert count == 1500 and size >= sum(range(2002, 3001))


async def test_a_server_that_stops_answering_holds_nothing_for_long(
    redis_server: RedisProcess, namespace: str
) -> None:
    # A silent partition: the connection stays open, no reply ever comes. Without a
    # bound on the read of the mark, wait() (and the command) would hang for good.
    keys = Keys(namespace)
    with TcpProxy("127.0.0.1", redis_server.port) as proxy:
        client = aioredis.Redis.from_url(proxy.url, socket_timeout=None)  # as ateam's is
        try:
            owner = Ownership(client, keys, "console:a")
            await owner.acquire(AGENT)
            await owner.mark_read(AGENT, 0)
            ledger = EmitLedger(1000)
            room = _lag(client, namespace, ledger)
            _publish(ledger, 2 * BOUND)
            proxy.pause()
            await asyncio.wait_for(room.wait(), 10)
            assert room.ready()
            proxy.resume()
        finally:
            await client.aclose()


async def test_a_mark_past_the_newest_offset_does_not_end_backpressure(
    client: aioredis.Redis, namespace: str
) -> None:
    keys = Keys(namespace)
    owner = Ownership(client, keys, "console:a")
    await owner.acquire(AGENT)
    ledger = EmitLedger(1000)
    room = _lag(client, namespace, ledger)
    _publish(ledger, BOUND // 2)
    # A forged entry's offset, or offsets that restarted lower: far past this run's end.
    assert await owner.mark_read(AGENT, 10**9)
    _publish(ledger, 2 * BOUND)
    if not room.ready():
        await asyncio.wait_for(room.wait(), 5)
    assert await owner.mark_read(AGENT, ledger.last - 1)  # the owner reads on from here
    _publish(ledger, 2 * BOUND)
    await asyncio.sleep(0.05)
    assert await owner.mark_read(AGENT, 0)  # ...and falls behind
    _publish(ledger, 2 * BOUND)
    if room.ready():
        await asyncio.sleep(0.05)  # the background read of the mark lands
    assert not room.ready()  # behind, and seen to be: the stale high mark is gone


async def test_the_mark_is_not_asked_for_on_every_read_of_a_flood(
    client: aioredis.Redis, namespace: str
) -> None:
    keys = Keys(namespace)
    owner = Ownership(client, keys, "console:a")
    await owner.acquire(AGENT)
    assert await owner.mark_read(AGENT, 0)  # reporting, and behind by over half the bound
    ledger = EmitLedger(100_000)
    room = OwnerLag(client, keys, AGENT, ledger, bound_bytes=10**9, bound_entries=10**6, poll_s=0.5)
    _publish(ledger, 10**9 // 2 + 10**6, cost=10**5)  # past half the bound: reads start
    before = await client.info("commandstats")
    for _ in range(500):  # a flood: hundreds of terminal reads within one poll period
        room.ready()
        await asyncio.sleep(0)
    after = await client.info("commandstats")

    def hmgets(stats: dict[str, dict[str, int]]) -> int:
        return int(stats.get("cmdstat_hmget", {}).get("calls", 0))

    assert hmgets(after) - hmgets(before) <= 2
