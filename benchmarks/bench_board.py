"""Task board: an atomic ``TaskBoard.claim`` vs one raw Redis write round trip.

Issue 12 asks for the claim latency beside a raw baseline. One measured claim is
``await board.claim(project, id, agent=...)`` of an open task with one finished
dependency: one Lua script that reads the task, checks its status and its
dependencies, and writes it back claimed. The baseline is the cheapest single write
round trip with raw redis-py asyncio: ``HSET`` of one field. Tasks are added (not
timed) before each pair; iterations interleave the two, alternating which goes first.

Issue 28 §4: the claim p99 on a board holding 10 000 open tasks is at most twice the
p99 on a board holding 1 000 (each board filled first, untimed, on its own namespace;
claims of a task added for each claim, no dependency).

    python benchmarks/bench_board.py [--quick] [--tcp]
"""

from __future__ import annotations

import asyncio
import sys
import time

import redis.asyncio as aioredis
from _common import (
    RedisServer,
    Row,
    banner,
    interleave,
    ns_to_ms,
    paired_rows,
    parser,
    percentile,
    report,
)

from ateam.bus.board import TaskBoard
from ateam.bus.connection import RedisTarget, make_client
from ateam.bus.keys import Keys

PROJECT = "bench"


async def run(url: str, iterations: int, warmup: int) -> tuple[list[Row], list[str]]:
    target = RedisTarget(url, "bench", namespace="bench:")
    client = make_client(target)
    raw = aioredis.Redis.from_url(url)
    board = TaskBoard(client, Keys(target.namespace))
    try:
        first = await board.add(PROJECT, title="the dependency", created_by="bench/lead")
        await board.claim(PROJECT, first.id, agent="bench/a")
        await board.done(PROJECT, first.id, agent="bench/a")

        async def claim_one(i: int) -> int:
            task = await board.add(
                PROJECT, title="a task", depends_on=(first.id,), created_by="bench/lead"
            )
            t0 = time.perf_counter_ns()
            claimed = await board.claim(PROJECT, task.id, agent="bench/worker")
            t1 = time.perf_counter_ns()
            if claimed.status != "claimed" or claimed.assignee != "bench/worker":
                raise RuntimeError("the claim did not behave as expected")
            return t1 - t0

        async def raw_write(i: int) -> int:
            t0 = time.perf_counter_ns()
            await raw.hset("bench:raw-board", f"t-{i}", b"claimed")
            return time.perf_counter_ns() - t0

        claim_ns, raw_ns = await interleave(claim_one, raw_write, iterations, warmup)
        tasks = len(await board.list(PROJECT))
    finally:
        await client.aclose()
        await raw.aclose()
    c, r = ns_to_ms(claim_ns), ns_to_ms(raw_ns)
    rows = paired_rows("board_claim", "task claim", c, "HSET", r)
    notes = [
        f"{iterations} interleaved claims after {warmup} warm-up, on a board of {tasks} "
        f"tasks; max {max(c):.2f} vs {max(r):.2f} ms"
    ]
    return rows, notes


async def run_open(
    url: str, open_tasks: int, iterations: int, warmup: int
) -> tuple[list[float], list[float]]:
    """Claim p-samples (ms) on a board holding ``open_tasks`` open tasks, and HSET's."""
    target = RedisTarget(url, "bench", namespace=f"open{open_tasks}:")
    client = make_client(target)
    raw = aioredis.Redis.from_url(url)
    board = TaskBoard(client, Keys(target.namespace))
    try:
        for start in range(0, open_tasks, 200):
            await asyncio.gather(
                *(
                    board.add(PROJECT, title=f"open task {i}", created_by="bench/lead")
                    for i in range(start, min(open_tasks, start + 200))
                )
            )

        async def claim_one(i: int) -> int:
            task = await board.add(PROJECT, title="a task", created_by="bench/lead")
            t0 = time.perf_counter_ns()
            await board.claim(PROJECT, task.id, agent="bench/worker")
            return time.perf_counter_ns() - t0

        async def raw_write(i: int) -> int:
            t0 = time.perf_counter_ns()
            await raw.hset(f"open{open_tasks}:raw-board", f"t-{i}", b"claimed")
            return time.perf_counter_ns() - t0

        claim_ns, raw_ns = await interleave(claim_one, raw_write, iterations, warmup)
    finally:
        await client.aclose()
        await raw.aclose()
    return ns_to_ms(claim_ns), ns_to_ms(raw_ns)


def open_rows(small: list[float], large: list[float], raw: list[float], n: int) -> list[Row]:
    s99, l99 = percentile(small, 99), percentile(large, 99)
    return [
        Row("board_claim_open1000_p99", f"task claim p99, 1 000 open tasks ({n} claims)",
            s99, "ms", percentile(raw, 99), "HSET p99", "(info)", None),
        Row("board_claim_open10000_p99", f"task claim p99, 10 000 open tasks ({n} claims)",
            l99, "ms", s99, "claim p99 at 1 000 open", "<=2x", l99 <= 2 * s99),
    ]  # fmt: skip


def main() -> int:
    args = parser(__doc__ or "").parse_args()
    iterations, warmup = (1_000, 100) if args.quick else (5_000, 500)
    banner("bench_board", args.tcp)
    with RedisServer(tcp=args.tcp) as server:
        rows, notes = asyncio.run(run(server.url, iterations, warmup))
        claims, ahead = (400, 40) if args.quick else (3_000, 300)
        small, raw = asyncio.run(run_open(server.url, 1_000, claims, ahead))
        large, _ = asyncio.run(run_open(server.url, 10_000, claims, ahead))
        rows += open_rows(small, large, raw, claims)
        notes.append(
            f"open boards: {claims} claims each after {ahead} warm-up; p50 "
            f"{percentile(small, 50):.3f} ms at 1 000 open, {percentile(large, 50):.3f} ms "
            "at 10 000"
        )
    report("Task board claim (issues 12, 28)", rows, notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
