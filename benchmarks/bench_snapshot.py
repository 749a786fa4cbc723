"""Session snapshot upkeep with 10 000 registered agents (issue 28 §4): CPU per host.

Target: the upkeep of ``~/.ateam/session.json`` costs at most 1 % of a core per host.
One host's writer is measured (every host runs one, each doing the same): a real
:class:`~ateam.agent.runtime.snapshot_keeper.SnapshotKeeper` holding the writer seat,
ticking every second, over windows of a few seconds; the figure is the process's CPU
time over the window's wall time (``time.process_time``), in % of one core.

The agents (spread over 10 projects and 50 simulated hosts) are registered the way
agents register, ``Heartbeat.beat()``; their heartbeats are then renewed by one
server-side script every 2 s (the agents' own processes are not the host's upkeep; the
script's client share, one call per 2 s, is in every figure alike).

Rows, each the median of the windows:

* ``snapshot_upkeep_cpu``: the keeper, team idle (entries unchanged, beats renewed).
  Baseline: a bare redis-py loop doing the minimal read each second — per project the
  change-log marks, the changes since the last look and the lapse check (the same
  commands, no decoding, no document).
* ``snapshot_upkeep_churn_cpu`` (info): the keeper while 10 agents a second change state
  (each change rewrites the document of every agent: rendering it is the cost).
* ``snapshot_wholeread_cpu`` (info): the upkeep as it was before issue 28, each second
  ``Registry.list()`` of every agent and the document rendered and fingerprinted.
* ``snapshot_redis_cpu`` (info): the redis-server's CPU during the keeper's idle windows
  (the lapse check scans the heartbeat hashes server-side).

    python benchmarks/bench_snapshot.py [--quick] [--tcp]
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import redis.asyncio as aioredis
from _common import RENEW_BEATS_LUA, RedisServer, Row, banner, parser, report, temp_dir

from ateam.agent.runtime.snapshot_keeper import SnapshotKeeper
from ateam.bus.codec import pack
from ateam.bus.connection import RedisTarget, make_client
from ateam.bus.keys import Keys
from ateam.bus.registry import AgentEntry, Heartbeat, Registry
from ateam.bus.registry_log import changes_key, log_key, note_changes
from ateam.bus.snapshot import ProjectSnapshot, Snapshot, fingerprint
from ateam.wire.board import TaskStatus

AGENTS, QUICK_AGENTS = 10_000, 2_000
PROJECTS, HOSTS = 10, 50
CHURN_PER_S = 10

_STALE_PROBE = """
local t = redis.call('TIME')
local cutoff = tonumber(t[1]) * 1000 - tonumber(ARGV[1])
local beats = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #beats, 2 do
  if (tonumber(beats[i + 1]) or 0) < cutoff then out[#out + 1] = beats[i] end
end
return out
"""


def entry(i: int, state: str = "idle") -> AgentEntry:
    project, name = f"proj{i % PROJECTS}", f"agent{i:05d}"
    return AgentEntry(
        id=f"{project}/{name}",
        name=name,
        project=project,
        model="claude-sonnet-4" if i % 2 else "gpt-5-codex",
        cwd=f"/home/dev/src/{project}/worktrees/{name}",
        host=f"build-{i % HOSTS}.example.internal",
        pid=10_000 + i,
        started_at=1.7e9 + i,
        state=state,
        queue_len=i % 4,
        usage={"input_tokens": 1000 * i, "output_tokens": 100 * i},
    )


async def register(client: aioredis.Redis, keys: Keys, agents: int) -> None:
    for start in range(0, agents, 200):
        beats = [Heartbeat(client, keys, entry(i)) for i in range(start, min(agents, start + 200))]
        await asyncio.gather(*(beat.beat() for beat in beats))


async def renew_forever(raw: aioredis.Redis, keys: Keys) -> None:
    hashes = [keys.heartbeats(f"proj{p}") for p in range(PROJECTS)]
    while True:
        await raw.eval(RENEW_BEATS_LUA, len(hashes), *hashes)
        await asyncio.sleep(2.0)


async def churn_forever(raw: aioredis.Redis, keys: Keys, agents: int) -> None:
    """``CHURN_PER_S`` agents a second change state (pre-packed entries, one pipeline)."""
    packed = {
        (i, state): pack(entry(i, state).to_wire())
        for i in range(0, agents, max(1, agents // 100))
        for state in ("idle", "busy")
    }
    chosen = sorted({i for i, _ in packed})
    turn = 0
    while True:
        i = chosen[turn % len(chosen)]
        state = ("busy", "idle")[(turn // len(chosen)) % 2]
        project, agent = f"proj{i % PROJECTS}", entry(i).id
        pipe = raw.pipeline(transaction=False)
        pipe.hset(keys.registry(project), agent, packed[(i, state)])
        note_changes(pipe, keys, project, (agent,))
        await pipe.execute()
        turn += 1
        await asyncio.sleep(1 / CHURN_PER_S)


async def cpu_share(window_s: float) -> float:
    """% of a core this process used over ``window_s`` seconds of whatever runs."""
    cpu0, wall0 = time.process_time(), time.perf_counter()
    await asyncio.sleep(window_s)
    return 100 * (time.process_time() - cpu0) / (time.perf_counter() - wall0)


async def redis_cpu(raw: aioredis.Redis) -> float:
    info = await raw.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def loop_share(tick: Callable[[], Awaitable[None]], window_s: float) -> float:
    """% of a core while ``tick`` runs once a second (after a 1.5 s settling)."""

    async def loop() -> None:
        while True:
            await tick()
            await asyncio.sleep(1.0)

    task = asyncio.create_task(loop())
    await asyncio.sleep(1.5)
    share = await cpu_share(window_s)
    task.cancel()
    return share


@dataclass
class Bench:
    client: aioredis.Redis
    raw: aioredis.Redis
    keys: Keys
    agents: int
    window_s: float
    server: list[float] = field(default_factory=list)
    projects: list[str] = field(default_factory=lambda: [f"proj{p}" for p in range(PROJECTS)])

    async def keeper(self, home: Path, churn: bool) -> float:
        kept = SnapshotKeeper(
            self.client, self.keys, agent_id="proj0/agent00000", project="proj0", home=home,
            bus="b",
        )  # fmt: skip
        await kept.tick()  # the first tick reads the team whole and writes
        kept.start()
        changes = None
        if churn:
            changes = asyncio.create_task(churn_forever(self.raw, self.keys, self.agents))
        await asyncio.sleep(1.5)
        before = await redis_cpu(self.raw)
        share = await cpu_share(self.window_s)
        if not churn:
            self.server.append(100 * (await redis_cpu(self.raw) - before) / self.window_s)
        if changes is not None:
            changes.cancel()
        await kept.aclose()
        return share

    async def minimal(self) -> float:
        """The baseline: per project, the marks, the changes since, the lapse check."""
        seen = dict.fromkeys(self.projects, 0)
        keys = self.keys

        async def tick() -> None:
            pipe = self.raw.pipeline(transaction=False)
            for project in self.projects:
                pipe.hmget(log_key(keys, project), "ver", "epoch", "floor")
                pipe.zrangebyscore(changes_key(keys, project), f"({seen[project]}", "+inf")
                pipe.eval(_STALE_PROBE, 1, keys.heartbeats(project), 10_000)
            replies = await pipe.execute()
            for n, project in enumerate(self.projects):
                seen[project] = int(replies[3 * n][0] or 0)

        return await loop_share(tick, self.window_s)

    async def whole_read(self) -> float:
        """Before issue 28: every agent read and the document rendered, each second."""
        registry = Registry(self.client, self.keys)
        counts = {str(s): 0 for s in TaskStatus}

        async def tick() -> None:
            views = await registry.list()
            sec, usec = await self.client.time()
            shown = tuple(
                ProjectSnapshot(p, tuple(v for v in views if v.entry.project == p), (), counts, ())
                for p in self.projects
            )
            now_s = int(sec) + int(usec) / 1e6
            fingerprint(Snapshot(now_s, "b", self.keys.ns, shown).to_json())

        return await loop_share(tick, self.window_s)


async def run(url: str, agents: int, window_s: float, repeats: int) -> tuple[list[Row], list[str]]:
    target = RedisTarget(url, "bench", namespace="snap:")
    keys = Keys(target.namespace)
    client = make_client(target)
    raw = aioredis.Redis.from_url(url)
    bench = Bench(client, raw, keys, agents, window_s)
    samples: dict[str, list[float]] = {}
    try:
        t0 = time.perf_counter()
        await register(client, keys, agents)
        registered_s = time.perf_counter() - t0
        renewer = asyncio.create_task(renew_forever(raw, keys))
        with temp_dir() as home:
            modes: dict[str, Callable[[], Awaitable[float]]] = {
                "idle": lambda: bench.keeper(home / "idle", False),
                "minimal": bench.minimal,
                "churn": lambda: bench.keeper(home / "churn", True),
                "whole": bench.whole_read,
            }
            for _ in range(repeats):
                for name, measure in modes.items():  # interleaved: the machine's noise alike
                    samples.setdefault(name, []).append(await measure())
            size = (home / "idle" / "session.json").stat().st_size
        renewer.cancel()
    finally:
        await client.aclose()
        await raw.aclose()
    return rows_of(samples, bench.server, agents), [
        f"{agents} agents in {PROJECTS} projects on {HOSTS} simulated hosts, registered in "
        f"{registered_s:.1f} s; {repeats} interleaved windows of {window_s:g} s per mode "
        f"(medians); session.json {size // 1024} KiB",
        "windows (% core): "
        + "; ".join(f"{n} {', '.join(f'{v:.2f}' for v in vs)}" for n, vs in samples.items()),
    ]


def rows_of(samples: dict[str, list[float]], server: list[float], agents: int) -> list[Row]:
    med = {name: statistics.median(values) for name, values in samples.items()}
    label = f"{agents} agents" + ("" if agents == AGENTS else " (quick; full runs 10 000)")
    base, base_label = med["minimal"], "bare minimal-read loop"
    return [
        Row("snapshot_upkeep_cpu", f"snapshot upkeep per host, {label}, idle team",
            med["idle"], "% core", base, base_label, "<=1 % core", med["idle"] <= 1.0),
        Row("snapshot_upkeep_churn_cpu",
            f"snapshot upkeep per host, {label}, {CHURN_PER_S} changes/s",
            med["churn"], "% core", base, base_label, "(info)", None),
        Row("snapshot_wholeread_cpu", f"whole-read upkeep (before issue 28), {label}",
            med["whole"], "% core", base, base_label, "(info)", None),
        Row("snapshot_redis_cpu", f"redis-server CPU during idle upkeep, {label}",
            statistics.median(server), "% core", None, "", "(info)", None),
    ]  # fmt: skip


def main() -> int:
    args = parser(__doc__ or "").parse_args()
    agents, window_s, repeats = (QUICK_AGENTS, 3.0, 1) if args.quick else (AGENTS, 10.0, 3)
    banner("bench_snapshot", args.tcp)
    with RedisServer(tcp=args.tcp) as server:
        rows, notes = asyncio.run(run(server.url, agents, window_s, repeats))
    report("Session snapshot upkeep at 10 000 agents (issue 28 §4)", rows, notes)
    return 0


if __name__ == "__main__":
    os.environ.pop("ATEAM_REDIS_URL", None)
    sys.exit(main())
