"""How much an idle agent weighs and how soon it serves (issue 28 §2).

Measures, each beside a raw baseline taken in the same run:

* idle RSS of an ``echo`` agent (``python -m ateam agent ... --no-repl`` on the default
  echo model, serving, 1 s after its first answer) — ``VmRSS`` from ``/proc/PID/status``
  — against a bare process that loads the agent's core libraries (``redis.asyncio``,
  pydantic, PyYAML, msgpack), connects to the same Redis and idles. Target: at most
  1.25 times it. "Loads" pydantic means what any program using it pays: one model
  defined and validated. ``import pydantic`` alone loads only its lazy front (pydantic
  2 imports its model machinery, some 5 MB here, at the first ``BaseModel``); a second,
  informational row keeps that lighter process as its baseline.
* start-to-serving: ``Popen`` of a fresh agent until it answers a ``status`` RPC. The
  baseline is the bare process from ``Popen`` until it has imported those libraries and
  answered a Redis ``PING`` (the floor any agent pays: interpreter, core libraries, one
  round trip). Target: median ≤ 0.3 s.

    python benchmarks/bench_agent_weight.py [--quick] [--tcp]
"""

from __future__ import annotations

import asyncio
import compileall
import os
import subprocess
import sys
import time
from pathlib import Path

from _common import (
    ROOT,
    AgentProcess,
    RedisServer,
    Row,
    banner,
    parser,
    percentile,
    report,
    temp_dir,
    wait_serving,
)

from ateam.bus.connection import RedisTarget, make_client
from ateam.bus.keys import Keys
from ateam.bus.rpc import RpcClient

RSS_RATIO = 1.25
SERVE_S = 0.3

# The bare process: the agent's core libraries, one PING, then idle until stdin closes.
# {use} is where pydantic is put to use (or not: FACADE).
BARE = """
import asyncio, sys
import msgpack, pydantic, yaml
import redis.asyncio as aioredis
{use}

async def main():
    client = aioredis.Redis.from_url(sys.argv[1])
    await client.ping()
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await client.aclose()

asyncio.run(main())
"""
USED = """
class Ping(pydantic.BaseModel):
    ok: bool = False

assert Ping.model_validate({"ok": True}).ok
"""
FACADE = ""


def vm_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def bare_round(url: str, settle: float, use: str = USED) -> tuple[float, float]:
    """Start the bare process; returns (seconds to its PING, idle RSS in MB)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", BARE.format(use=use), url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        ready = time.perf_counter() - t0
        assert line.strip() == b"ready", line
        time.sleep(settle)
        return ready, vm_rss_mb(proc.pid)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=10)


async def run(url: str, tmp: Path, rounds: int, settle: float) -> tuple[list[Row], list[str]]:
    target = RedisTarget(url, "bench")
    client = make_client(target)
    rpc = RpcClient(client, Keys(target.namespace))
    home, work = tmp / "home", tmp / "work"
    serve_s: list[float] = []
    agent_rss: list[float] = []
    bare_s: list[float] = []
    bare_rss: list[float] = []
    facade_rss: list[float] = []
    try:
        for r in range(rounds):
            ready, rss = await asyncio.to_thread(bare_round, url, settle)
            bare_s.append(ready)
            bare_rss.append(rss)
            facade_rss.append((await asyncio.to_thread(bare_round, url, settle, FACADE))[1])
            agent = AgentProcess(url, "bench", f"light{r}", home, work)
            try:
                t0 = agent.spawn()
                t1 = await wait_serving(rpc, agent.id, proc=agent)
                serve_s.append((t1 - t0) / 1e9)
                await asyncio.sleep(settle)
                assert agent.proc is not None
                agent_rss.append(vm_rss_mb(agent.proc.pid))
            finally:
                agent.stop()
    finally:
        await client.aclose()
    rss, brss = percentile(agent_rss, 50), percentile(bare_rss, 50)
    frss = percentile(facade_rss, 50)
    serve, bserve = percentile(serve_s, 50), percentile(bare_s, 50)
    rows = [
        Row(
            "agent_idle_rss",
            "idle echo agent RSS (median)",
            rss,
            "MB",
            brss,
            "bare core-libraries process",
            f"<={RSS_RATIO}x",
            rss <= RSS_RATIO * brss,
        ),
        Row(
            "agent_idle_rss_vs_facade",
            "idle echo agent RSS vs bare imports only (median)",
            rss,
            "MB",
            frss,
            "bare process, pydantic not used",
            "(info)",
            None,
        ),
        Row(
            "agent_start_to_serving",
            "agent start to serving (median)",
            serve,
            "s",
            bserve,
            "bare imports + Redis PING",
            f"<={SERVE_S} s",
            serve <= SERVE_S,
        ),
    ]
    notes = [
        f"{rounds} rounds, RSS read {settle:.1f} s after serving",
        "agent RSS MB: " + ", ".join(f"{v:.1f}" for v in agent_rss),
        "bare RSS MB: " + ", ".join(f"{v:.1f}" for v in bare_rss),
        "bare RSS MB, pydantic not used: " + ", ".join(f"{v:.1f}" for v in facade_rss),
        "agent serve ms: " + ", ".join(f"{v * 1000:.0f}" for v in serve_s),
        "bare PING ms: " + ", ".join(f"{v * 1000:.0f}" for v in bare_s),
    ]
    return rows, notes


def main() -> int:
    args = parser(__doc__ or "").parse_args()
    rounds = 3 if args.quick else 9
    settle = 0.5 if args.quick else 1.0
    # As installed (pip compiles the bytecode): a checkout run with PYTHONDONTWRITEBYTECODE=1
    # would compile every module from source at each agent's start.
    compileall.compile_dir(ROOT / "ateam", quiet=1)
    banner("bench_agent_weight", args.tcp)
    with RedisServer(tcp=args.tcp) as server, temp_dir() as tmp:
        rows, notes = asyncio.run(run(server.url, tmp, rounds, settle))
    report("Agent weight and start-up (issue 28 §2)", rows, notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
