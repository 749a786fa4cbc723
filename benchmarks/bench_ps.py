"""``ateam ps`` of 200, 1 000 and 10 000 agents: ``Registry.list()`` vs raw HGETALLs.

SPEC §13: ``ateam ps`` of 200 registered agents (in-process listing) ≤ 20 ms; issue 14:
the same p99 ≤ 20 ms with 1 000 agents; issue 28 §4: p99 ≤ 50 ms with 10 000.

The agents are registered the way agents register themselves, with
``Heartbeat(client, keys, AgentEntry(...)).beat()`` (realistic entries: model, cwd,
host, pid, usage, current task...). The measure is one ``Registry.list()`` — the call
``ateam ps`` and the console make: the project set (SMEMBERS), then one pipelined round
trip (each project's registry and heartbeat hashes, TIME), msgpack decoding and liveness
for every agent. The same ``Registry`` lists again and again, as a console or a script
polling ``ateam.client`` does: entries whose bytes did not change are not decoded anew.
The agents are spread over 7 projects, each with its own registry
(issue 13). The baseline is the same registry hashes read raw with redis-py asyncio, one
pipelined ``HGETALL`` each (no decoding). Heartbeats are renewed between timed listings
every beat interval (by a server-side script: the agents beat from their own processes,
whose objects are not the lister's to carry), so every agent stays connected, as in
real life: a run checks that none lapsed.

At 10 000 agents two informational rows follow: the first listing of a fresh
``Registry``, every entry decoded and validated (what one ``ateam ps`` process pays
beyond its start), and listings while agents keep changing: before each one, 100 agents
(1 %) write a new entry through their own ``Heartbeat``, as a busy team's do.

The teams are listed in turn, each on a fresh namespace of the same server, by a
process whose collector runs as in ateam's own (``ateam/_gc.py``).

    python benchmarks/bench_ps.py [--quick] [--tcp]
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis
from _common import (
    RENEW_BEATS_LUA,
    RedisServer,
    Row,
    banner,
    ns_to_ms,
    parser,
    percentile,
    report,
)

from ateam import _gc
from ateam.bus.connection import RedisTarget, make_client
from ateam.bus.keys import Keys
from ateam.bus.registry import AgentEntry, Heartbeat, Registry
from ateam.constants import HEARTBEAT_INTERVAL_S

AGENTS = 200
MANY_AGENTS = 1_000
HUGE_AGENTS = 10_000
"""Issue 28 §4: ``ps`` of 10 000 agents p99 <= 50 ms."""
TARGET_MS = {AGENTS: 20.0, MANY_AGENTS: 20.0, HUGE_AGENTS: 50.0}
COLD_LISTINGS = 15
"""First listings of a fresh ``Registry`` timed at 10 000 agents (each ~0.1 s)."""
CHURN_AGENTS = 100
"""Agents that write a new entry before each listing of the churn row."""


def entry(i: int) -> AgentEntry:
    return AgentEntry(
        id=f"proj{i % 7}/agent{i:04d}",
        name=f"agent{i:04d}",
        project=f"proj{i % 7}",
        model="claude-sonnet-4" if i % 2 else "gpt-5-codex",
        cwd=f"/home/dev/src/proj{i % 7}/worktrees/agent{i:03d}",
        host=f"build-{i % 5}.example.internal",
        pid=10_000 + i,
        started_at=time.time() - i * 60,
        state=("idle", "busy", "waiting")[i % 3],
        ctx_pct=round((i * 37) % 100 + 0.5, 1),
        queue_len=i % 4,
        current_task=f"q-{1700000000000 + i}-000" if i % 3 == 1 else None,
        last_error=None if i % 10 else "model.rate_limited: 429 from provider, retry in 20 s",
        fence=i + 1,
        owner=f"console-{i % 3:04x}" if i % 2 else None,
        usage={"input_tokens": 1000 * i, "output_tokens": 100 * i, "cost_usd": round(i * 0.013, 3)},
    )


async def run(url: str, agents: int, iterations: int, warmup: int) -> tuple[list[Row], list[str]]:
    target = RedisTarget(url, "bench", namespace=f"bench{agents}:")
    keys = Keys(target.namespace)
    client = make_client(target)
    raw = aioredis.Redis.from_url(url)
    projects = sorted({entry(i).project for i in range(agents)})
    renew_keys = [keys.heartbeats(project) for project in projects]

    renewed = [0.0]

    async def beat_all() -> None:
        """Every agent beats if its last beat is older than an agent's beat interval."""
        if time.monotonic() - renewed[0] >= HEARTBEAT_INTERVAL_S:
            await raw.eval(RENEW_BEATS_LUA, len(renew_keys), *renew_keys)
            renewed[0] = time.monotonic()

    registry = Registry(client, keys)
    list_ns: list[int] = []
    raw_ns: list[int] = []
    cold_ns: list[int] = []
    churn_ns: list[int] = []
    try:
        for start in range(0, agents, 100):  # joins, a hundred agents at a time
            beats = [Heartbeat(client, keys, entry(i)) for i in range(start, start + 100)]
            await asyncio.gather(*(hb.beat() for hb in beats))
        del beats
        views = await registry.list()
        assert len(views) == agents and all(v.connected for v in views), "agents not all listed"
        assert [v.id for v in views] == sorted(entry(i).id for i in range(agents))
        if agents == HUGE_AGENTS:
            for _ in range(COLD_LISTINGS):
                t0 = time.perf_counter_ns()
                fresh = await Registry(client, keys).list()
                cold_ns.append(time.perf_counter_ns() - t0)
                assert len(fresh) == agents
            del fresh

        async def raw_read() -> list[Any]:
            # The same data read raw: every project's registry hash, one pipelined trip.
            pipe = raw.pipeline(transaction=False)
            for project in projects:
                pipe.hgetall(keys.registry(project))
            return list(await pipe.execute())

        hash_bytes = sum(len(v) for data in await raw_read() for v in data.values())
        for done in range(warmup + iterations):
            await beat_all()
            # Interleaved, alternating which goes first.
            if done % 2:
                t0 = time.perf_counter_ns()
                views = await registry.list()
                t1 = time.perf_counter_ns()
                data = await raw_read()
                t2 = time.perf_counter_ns()
                a, b = t1 - t0, t2 - t1
            else:
                t0 = time.perf_counter_ns()
                data = await raw_read()
                t1 = time.perf_counter_ns()
                views = await registry.list()
                t2 = time.perf_counter_ns()
                a, b = t2 - t1, t1 - t0
            if done >= warmup:
                list_ns.append(a)
                raw_ns.append(b)
            # Every listing timed is of a team beating: a lapsed agent costs a listing a
            # round trip more (its grace marker is looked up), which is not the measure.
            assert all(v.connected for v in views), "agents lapsed during the listings"
        assert len(views) == agents and sum(len(d) for d in data) == agents
        if agents == HUGE_AGENTS:
            churn_ns = await churn(
                registry, client, keys, agents, beat_all, max(iterations // 2, 20)
            )
    finally:
        await client.aclose()
        await raw.aclose()
    lst, rw = ns_to_ms(list_ns), ns_to_ms(raw_ns)
    l50, l99 = percentile(lst, 50), percentile(lst, 99)
    r50, r99 = percentile(rw, 50), percentile(rw, 99)
    prefix = "ps" if agents == AGENTS else f"ps{agents}"
    target = TARGET_MS[agents]
    rows = [
        Row(
            f"{prefix}_list_p{q}",
            f"ps (Registry.list) {agents} agents p{q} ({iterations} listings)",
            value,
            "ms",
            base,
            f"raw HGETALLs p{q}",
            f"<={target:g} ms",
            value <= target,
        )
        for q, value, base in ((50, l50, r50), (99, l99, r99))
    ]
    rows += info_rows(prefix, agents, cold_ns, churn_ns, r50, r99)
    notes = [
        f"{agents} agents: {iterations} interleaved listings after {warmup} warm-up; "
        f"registry hash {hash_bytes} bytes of msgpack entries ({hash_bytes // agents} per "
        f"agent); ps mean {sum(lst) / len(lst):.2f} ms, max {max(lst):.2f} ms",
    ]
    return rows, notes


def info_rows(
    prefix: str, agents: int, cold_ns: list[int], churn_ns: list[int], r50: float, r99: float
) -> list[Row]:
    """The informational rows of the 10 000-agent team: its cold and churning listings."""
    measures = (
        ("cold_p50", "first listing (fresh Registry) median", cold_ns, 50, r50),
        ("churn_p99", f"p99, {CHURN_AGENTS} entries new each time", churn_ns, 99, r99),
    )
    return [
        Row(
            f"{prefix}_{name}",
            f"ps {agents} agents, {what}",
            percentile(ns_to_ms(timed), q),
            "ms",
            base,
            f"raw HGETALLs p{q}",
            "(info)",
            None,
        )
        for name, what, timed, q, base in measures
        if timed
    ]


async def churn(
    registry: Registry,
    client: Any,
    keys: Keys,
    agents: int,
    beat_all: Callable[[], Awaitable[None]],
    listings: int,
) -> list[int]:
    """Listings while the team changes: before each, the next ``CHURN_AGENTS`` agents
    write a new entry (their queue length moves) through a heartbeat of their own.

    The movers' objects are made for their write and dropped: agents beat from their own
    processes, and a team of them kept here would be the lister's to carry (each full
    collection would walk it).
    """
    timed: list[int] = []
    for n in range(listings):
        await beat_all()
        first = n * CHURN_AGENTS % agents
        movers = [entry(i) for i in range(first, min(first + CHURN_AGENTS, agents))]
        for moved in movers:
            moved.queue_len = n + 10  # unlike any entry written before
        await asyncio.gather(*(Heartbeat(client, keys, moved).beat() for moved in movers))
        del movers
        t0 = time.perf_counter_ns()
        views = await registry.list()
        timed.append(time.perf_counter_ns() - t0)
        assert len(views) == agents and all(v.connected for v in views)
    return timed


def main() -> int:
    # The lister runs as ateam runs its own processes (ateam/_gc.py): what the start made
    # frozen, and the entries a listing keeps frozen once enough pile up.
    _gc.hold()
    _gc.settle()
    args = parser(__doc__ or "").parse_args()
    banner("bench_ps", args.tcp)
    rows: list[Row] = []
    notes: list[str] = []
    with RedisServer(tcp=args.tcp) as server:
        for agents in (AGENTS, MANY_AGENTS, HUGE_AGENTS):
            # Fewer listings of the larger teams (each lists 5 or 50 times as many agents).
            scale = {AGENTS: 1.0, MANY_AGENTS: 0.4, HUGE_AGENTS: 0.08}[agents]
            iterations, warmup = (500, 50) if args.quick else (3_000, 200)
            r, n = asyncio.run(
                run(server.url, agents, int(iterations * scale), int(warmup * scale))
            )
            rows += r
            notes += n
    report("ateam ps of 200, 1 000 and 10 000 agents (SPEC §13, issues 14, 28)", rows, notes)
    return 0


if __name__ == "__main__":
    os.environ.pop("ATEAM_REDIS_URL", None)
    sys.exit(main())
