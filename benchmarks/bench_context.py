"""Team context: an item posted until a subscribed agent's feed holds it, vs raw pub/sub.

Issue 12 asks for the post → visible latency beside a raw baseline. One measured post
is ``ContextStore.post`` (one MULTI: the item, its index, the trims and the notice) until
an agent's :class:`~ateam.agent.context.teamfeed.TeamFeed`, subscribed to the context channel,
has fetched the item and put it in its inbox — what the next task's context is built
from. The baseline is the bare transport underneath: raw redis-py ``PUBLISH`` of a
small message until a raw subscriber receives it. Iterations interleave the two,
alternating which goes first.

    python benchmarks/bench_context.py [--quick] [--tcp]
"""

from __future__ import annotations

import asyncio
import sys
import time

import redis.asyncio as aioredis
from _common import (
    Row,
    interleave,
    ns_to_ms,
    paired_rows,
    serve_one,
)

from ateam.agent.context.teamfeed import TeamFeed
from ateam.bus.connection import RedisTarget, make_client
from ateam.bus.context_items import ContextStore
from ateam.bus.keys import Keys
from ateam.wire.context_items import ContextItem

PROJECT = "bench"


class TimedFeed(TeamFeed):
    """A feed that says when an item reached its inbox."""

    arrived: asyncio.Queue[tuple[str, int]]

    def _add(self, item: ContextItem) -> None:
        super()._add(item)
        self.arrived.put_nowait((item.id, time.perf_counter_ns()))


async def run(url: str, iterations: int, warmup: int) -> tuple[list[Row], list[str]]:
    target = RedisTarget(url, "bench", namespace="bench:")
    client = make_client(target)
    keys = Keys(target.namespace)
    store = ContextStore(client, keys)
    feed = TimedFeed(store, client, keys, PROJECT, f"{PROJECT}/reader")
    feed.arrived = asyncio.Queue()
    listener = asyncio.create_task(feed.listen())
    raw_pub = aioredis.Redis.from_url(url)
    raw_sub = aioredis.Redis.from_url(url).pubsub(ignore_subscribe_messages=True)
    await raw_sub.subscribe("bench:raw")
    try:
        async with asyncio.timeout(10):
            await feed.listening.wait()

        async def post_one(i: int) -> int:
            t0 = time.perf_counter_ns()
            item = await store.post(
                PROJECT, type="status", title=f"item {i}", urgency="attention", ttl_s=60
            )
            while True:
                seen, t1 = await feed.arrived.get()
                if seen == item.id:
                    feed.inbox.clear()
                    return t1 - t0

        async def raw_one(i: int) -> int:
            t0 = time.perf_counter_ns()
            await raw_pub.publish("bench:raw", f"m-{i}")
            while True:
                message = await raw_sub.get_message(timeout=5)
                if message is not None:
                    return time.perf_counter_ns() - t0

        post_ns, raw_ns = await interleave(post_one, raw_one, iterations, warmup)
    finally:
        listener.cancel()
        await asyncio.gather(listener, return_exceptions=True)
        await raw_sub.aclose()
        await raw_pub.aclose()
        await client.aclose()
    p, r = ns_to_ms(post_ns), ns_to_ms(raw_ns)
    rows = paired_rows("context_visible", "context post → agent feed", p, "PUBLISH → subscriber", r)
    notes = [
        f"{iterations} interleaved posts after {warmup} warm-up; max {max(p):.2f} vs "
        f"{max(r):.2f} ms"
    ]
    return rows, notes


def main() -> int:
    title = "Team context post → visible (issue 12)"
    return serve_one("bench_context", __doc__ or "", title, run, (500, 50), (3_000, 300))


if __name__ == "__main__":
    sys.exit(main())
