"""Console ownership: ``Ownership.acquire`` + ``Ownership.release`` vs raw SET NX PX + DEL.

SPEC §13: ownership acquire/release p99 ≤ 2 ms.

One measured iteration is a full claim cycle of a free agent — ``await
own.acquire(agent)`` then ``await own.release(agent)`` (two Lua scripts: the
compare-and-claim of the owner hash with its TTL, and the compare-and-delete) — as
``ateam send`` does around its call. The baseline is the cheapest possible lock cycle
with raw redis-py asyncio: ``SET key token NX PX 15000`` then ``DEL key``, also two round
trips. Iterations interleave the two, alternating which goes first.

    python benchmarks/bench_ownership.py [--quick] [--tcp]
"""

from __future__ import annotations

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

from ateam.bus.connection import RedisTarget, make_client
from ateam.bus.keys import Keys
from ateam.bus.ownership import Ownership

AGENT = "bench/zeus"


async def run(url: str, iterations: int, warmup: int) -> tuple[list[Row], list[str]]:
    target = RedisTarget(url, "bench", namespace="bench:")
    keys = Keys(target.namespace)
    client = make_client(target)
    raw = aioredis.Redis.from_url(url)
    own = Ownership(client, keys, "console-bench")
    raw_key = keys.owner("bench/raw")
    try:

        async def claim_cycle(i: int) -> int:
            t0 = time.perf_counter_ns()
            previous = await own.acquire(AGENT)
            released = await own.release(AGENT)
            t1 = time.perf_counter_ns()
            if previous is not None or not released:
                raise RuntimeError("ownership claim cycle did not behave as expected")
            return t1 - t0

        async def raw_cycle(i: int) -> int:
            t0 = time.perf_counter_ns()
            ok = await raw.set(raw_key, b"console-bench", nx=True, px=15_000)
            deleted = await raw.delete(raw_key)
            t1 = time.perf_counter_ns()
            if not ok or deleted != 1:
                raise RuntimeError("raw lock cycle did not behave as expected")
            return t1 - t0

        own_ns, raw_ns = await interleave(claim_cycle, raw_cycle, iterations, warmup)
    finally:
        await client.aclose()
        await raw.aclose()
    o, r = ns_to_ms(own_ns), ns_to_ms(raw_ns)
    rows = paired_rows(
        "ownership", "ownership acquire+release", o, "SET NX PX+DEL", r, p99_at_most_ms=2.0
    )
    notes = [
        f"{iterations} interleaved cycles after {warmup} warm-up; "
        f"max {max(o):.2f} vs {max(r):.2f} ms"
    ]
    return rows, notes


def main() -> int:
    title = "Ownership acquire/release (SPEC §13)"
    return serve_one("bench_ownership", __doc__ or "", title, run, (2_000, 200), (10_000, 1_000))


if __name__ == "__main__":
    sys.exit(main())
