"""RPC round trip: ``status`` on a real agent process vs a raw redis-py asyncio PING.

SPEC §13: RPC round trip (``status``) over local Redis, p50 ≤ 4x and p99 ≤ 10x a raw
redis-py asyncio PING round trip.

The agent is a real ``python -m ateam agent`` process (echo model, ``ATEAM_HOME`` in a
temp dir); the caller is :class:`ateam.bus.rpc.RpcClient` on a client made by
:func:`ateam.bus.connection.make_client`, exactly as the console and ``ateam`` verbs call
it. PING and ``status`` calls are interleaved one for one (alternating which goes first)
so both see the same machine state. The Redis commands one ``status`` call costs are
counted from INFO commandstats.

    python benchmarks/bench_rpc.py [--quick] [--tcp]
"""

from __future__ import annotations

import asyncio
import sys
from time import perf_counter_ns

import redis
import redis.asyncio as aioredis
from _common import (
    AgentProcess,
    RedisServer,
    Row,
    banner,
    diff_stats,
    info_commandstats,
    interleave,
    ns_to_ms,
    parser,
    percentile,
    report,
    save_samples,
    temp_dir,
    wait_serving,
)

from ateam.bus.connection import RedisTarget, make_client
from ateam.bus.keys import Keys
from ateam.bus.rpc import RpcClient


async def run(
    url: str, agent: AgentProcess, iterations: int, warmup: int
) -> tuple[list[Row], list[str]]:
    target = RedisTarget(url, "bench")
    client = make_client(target)
    rpc = RpcClient(client, Keys(target.namespace), caller="bench-console")
    raw = aioredis.Redis.from_url(url)
    sync = redis.Redis.from_url(url)
    notes: list[str] = []
    try:
        await wait_serving(rpc, agent.id, proc=agent)
        for _ in range(warmup):
            await raw.ping()
            await rpc.call(agent.id, "status")

        # What one call costs on the server: commands per status call.
        probe = 500
        before = info_commandstats(sync)
        for _ in range(probe):
            await rpc.call(agent.id, "status")
        after = info_commandstats(sync)
        per_call = {k: v / probe for k, v in diff_stats(before, after).items() if k != "info"}
        notes.append(
            "redis commands per status call: "
            + ", ".join(f"{k}={v:.2f}" for k, v in sorted(per_call.items()))
        )

        async def ping(i: int) -> int:
            t0 = perf_counter_ns()
            await raw.ping()
            return perf_counter_ns() - t0

        async def status(i: int) -> int:
            t0 = perf_counter_ns()
            await rpc.call(agent.id, "status")
            return perf_counter_ns() - t0

        status_ns, ping_ns = await interleave(status, ping, iterations)
    finally:
        await raw.aclose()
        await client.aclose()
        sync.close()

    ping = ns_to_ms(ping_ns)
    status = ns_to_ms(status_ns)
    # The whole distributions, for run_all.py's chart.
    save_samples("rpc_status", status)
    save_samples("rpc_ping", ping)
    p50, p99 = percentile(status, 50), percentile(status, 99)
    b50, b99 = percentile(ping, 50), percentile(ping, 99)
    rows = [
        Row("rpc_status_p50", "rpc status p50", p50, "ms", b50, "PING p50", "<=4x", p50 <= 4 * b50),
        Row(
            "rpc_status_p99", "rpc status p99", p99, "ms", b99, "PING p99", "<=10x", p99 <= 10 * b99
        ),
    ]
    notes.append(
        f"{iterations} interleaved calls each after {warmup} warm-up; "
        f"status mean {sum(status) / len(status):.3f} ms, "
        f"PING mean {sum(ping) / len(ping):.3f} ms, "
        f"status max {max(status):.2f} ms"
    )
    return rows, notes


def main() -> int:
    args = parser(__doc__ or "").parse_args()
    iterations, warmup = (2_000, 200) if args.quick else (10_000, 1_000)
    banner("bench_rpc", args.tcp)
    with RedisServer(tcp=args.tcp) as server, temp_dir() as tmp:
        agent = AgentProcess(server.url, "bench", "a", tmp / "home", tmp / "work")
        agent.spawn()
        try:
            rows, notes = asyncio.run(run(server.url, agent, iterations, warmup))
        finally:
            code = agent.stop()
        if code not in (0, None):
            notes.append(f"agent exited with {code} on SIGTERM:\n{agent.log_text()[-1500:]}")
    report("RPC round trip (SPEC §13)", rows, notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
