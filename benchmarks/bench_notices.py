"""Team notices: a teammate finishes a board task until the lead's next context holds it.

Issue 26 asks for the notice latency beside a raw baseline, p99 over 100 runs. One
measured run starts when the teammate's board puller records the end of a task it holds
(:meth:`BoardPuller.finished`: the board's finish script, then the notifier's one
``MULTI`` that appends the notice to the lead's list and publishes the wake-up) and ends
when the lead's :class:`~ateam.agent.context.notices.NoticeFeed`, subscribed to its
channel, has read the notice and the block its next model call would carry names the
task. The claim before each run is not timed. The baseline is the bare transport a
notice could use: raw redis-py ``RPUSH`` of a small message until a ``BLPOP`` waiting on
another connection returns it. Runs interleave the two, alternating which goes first.

    python benchmarks/bench_notices.py [--quick] [--tcp]
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
    save_samples,
    serve_one,
)

from ateam.agent.context.notices import NoticeFeed
from ateam.agent.loop.board_puller import BoardPuller
from ateam.agent.loop.notices import Notifier
from ateam.bus.board import TaskBoard
from ateam.bus.connection import RedisTarget, make_client
from ateam.bus.keys import Keys
from ateam.bus.notices import NoticeBox
from ateam.wire.notices import TeamNotice

PROJECT = "bench"
LEAD = f"{PROJECT}/lead"
MATE = f"{PROJECT}/mate"


class TimedFeed(NoticeFeed):
    """A lead's feed that says when a notice reached its inbox."""

    arrived: asyncio.Queue[tuple[str, int]]

    def _add(self, notice: TeamNotice) -> None:
        super()._add(notice)
        self.arrived.put_nowait((notice.board_task, time.perf_counter_ns()))


async def run(url: str, iterations: int, warmup: int) -> tuple[list[Row], list[str]]:
    target = RedisTarget(url, "bench", namespace="bench:")
    client = make_client(target)
    keys = Keys(target.namespace)
    board = TaskBoard(client, keys)
    box = NoticeBox(client, keys)
    feed = TimedFeed(box, client, keys, LEAD)
    feed.arrived = asyncio.Queue()
    puller = BoardPuller(board, client, keys, PROJECT, MATE, enabled=True)
    puller.on_finished = Notifier(box, MATE, ("lead",), lambda *a, **k: 0, str).finished
    listener = asyncio.create_task(feed.listen())
    raw_push = aioredis.Redis.from_url(url)
    raw_pop = aioredis.Redis.from_url(url)
    try:
        async with asyncio.timeout(10):
            await feed.listening.wait()

        async def notice_one(i: int) -> int:
            task = await board.add(PROJECT, title=f"task {i}", created_by="cli")
            await board.claim(PROJECT, task.id, agent=MATE)
            t0 = time.perf_counter_ns()
            await puller.finished(task.id, ok=True, text=f"done {i}", error=None)
            while True:
                seen, _ = await feed.arrived.get()
                if seen == task.id and task.id in feed.render():
                    t1 = time.perf_counter_ns()
                    await feed.begin_task()  # shown: consumed, as the lead's next task does
                    return t1 - t0

        async def raw_one(i: int) -> int:
            popped = asyncio.create_task(raw_pop.blpop(["bench:raw"], timeout=5))
            await asyncio.sleep(0)  # the BLPOP is sent before the push
            t0 = time.perf_counter_ns()
            await raw_push.rpush("bench:raw", f"m-{i}")
            await popped
            return time.perf_counter_ns() - t0

        notice_ns, raw_ns = await interleave(notice_one, raw_one, iterations, warmup)
    finally:
        listener.cancel()
        await asyncio.gather(listener, return_exceptions=True)
        await raw_push.aclose()
        await raw_pop.aclose()
        await client.aclose()
    n, r = ns_to_ms(notice_ns), ns_to_ms(raw_ns)
    save_samples("notice_latency", n)
    rows = paired_rows("notice_latency", "task finished → lead context", n, "RPUSH → BLPOP", r)
    notes = [
        f"{iterations} interleaved runs after {warmup} warm-up; max {max(n):.2f} vs {max(r):.2f} ms"
    ]
    return rows, notes


def main() -> int:
    title = "Team notice: teammate finishes → lead's next context (issue 26)"
    return serve_one("bench_notices", __doc__ or "", title, run, (100, 10), (100, 20))


if __name__ == "__main__":
    sys.exit(main())
