"""The wall time of one ``ateam`` command, from ``exec`` to exit, beside what it cannot beat.

Issue 28: ``ateam ps`` and ``ateam send`` ≤ 1.5x a bare redis-py script that connects the
same way and reads the same keys; ``ateam --help``, ``ateam VERB --help`` and the
completion script ≤ 4x ``python -c pass`` (they must import neither redis-py nor
pydantic).

Every command is a fresh ``python -m ateam …`` process, as a shell runs it; the rows are
medians of N runs, each command and its baseline taken in turn so that a load spike
hits both. ateam's bytecode is compiled first, as ``pip install`` does: in a checkout
run with PYTHONDONTWRITEBYTECODE=1 every start would otherwise compile every module it
imports from source (30-40 % of a verb's time). ``ps`` and ``send`` talk to a running
``echo`` agent on a private redis-server. The bare scripts import ``redis.asyncio``,
connect with ``from_url`` and the same URL, and issue the commands ateam's verb issues
(seen with MONITOR):

- ps: PING, INFO memory, SMEMBERS of the projects, one pipelined HGETALL of the registry,
  heartbeat and exit hashes, TIME, and print the rows;
- send: the same reads twice (the name is resolved, then the agent checked), then an
  RPUSH of the request and a BLPOP of its reply; its reply is pushed by the script
  itself, so the agent's own work (~ms for echo, plus taking and leaving ownership) is
  in ateam's figure only;
- the completion script's live names (``ateam __complete agents``, run at a TAB after
  ``ateam send``): the ps script's reads.

    python benchmarks/bench_cli.py [--quick] [--tcp]
"""

from __future__ import annotations

import asyncio
import compileall
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from _common import (
    ROOT,
    AgentProcess,
    RedisServer,
    Row,
    environment,
    parser,
    report,
    temp_dir,
    wait_serving,
)

from ateam.bus.connection import RedisTarget, make_client
from ateam.bus.keys import Keys
from ateam.bus.rpc import RpcClient

PROJECT = "bench"
AGENT = "echo"

_CONNECT = """
import asyncio, sys
import redis.asyncio as aioredis

async def connect():
    client = aioredis.Redis.from_url(sys.argv[1], socket_connect_timeout=3.0,
                                     socket_timeout=None, max_connections=1000)
    await client.ping()
    await client.info("memory")
    return client

async def registry(client):
    projects = sorted(p.decode() for p in await client.smembers("ateam:projects"))
    pipe = client.pipeline(transaction=False)
    for p in projects:
        for suffix in ("registry", "registry:hb", "registry:exits"):
            pipe.hgetall(f"ateam:p:{{{p}}}:{suffix}")
    pipe.time()
    return await pipe.execute()
"""

BARE_PS = (
    _CONNECT
    + """
async def main():
    client = await connect()
    for reply in await registry(client):
        print(len(reply))
    await client.aclose()

asyncio.run(main())
"""
)
"""What ``ateam ps`` reads, read raw, printed as one number a row."""

BARE_SEND = (
    _CONNECT
    + """
async def main():
    client = await connect()
    await registry(client)
    await registry(client)
    key = "bench:bare-send"
    await client.rpush(key, "hello")
    print((await client.blpop([key], 1.0))[1].decode())
    await client.aclose()

asyncio.run(main())
"""
)
"""What ``ateam send`` writes and waits for, without the agent's work."""


def wall_ms(cmd: Sequence[str], *, cwd: Path, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    elapsed = (time.perf_counter() - t0) * 1000
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr[-2000:]}")
    return elapsed


def paired(
    measure: Sequence[str], baseline: Sequence[str], runs: int, *, cwd: Path, env: dict[str, str]
) -> tuple[float, float]:
    """Medians of ``runs`` alternated runs of ``measure`` and ``baseline`` (one warm-up)."""
    wall_ms(measure, cwd=cwd, env=env)
    wall_ms(baseline, cwd=cwd, env=env)
    ours: list[float] = []
    bare: list[float] = []
    for i in range(runs):
        pair = [(measure, ours), (baseline, bare)]
        for cmd, into in pair if i % 2 == 0 else pair[::-1]:
            into.append(wall_ms(cmd, cwd=cwd, env=env))
    return statistics.median(ours), statistics.median(bare)


async def serving(url: str, agent: AgentProcess) -> None:
    target = RedisTarget(url, "bench")
    client = make_client(target)
    try:
        await wait_serving(RpcClient(client, Keys(target.namespace)), agent.id, proc=agent)
    finally:
        await client.aclose()


def row(name: str, label: str, value: float, base: float, base_label: str, limit: float) -> Row:
    return Row(
        name=name,
        label=label,
        value=value,
        unit="ms",
        baseline=base,
        baseline_label=base_label,
        target=f"<={limit:g}x",
        ok=value <= limit * base,
    )


def main() -> None:
    args = parser(__doc__ or "").parse_args()
    runs = 5 if args.quick else 21
    compileall.compile_dir(ROOT / "ateam", quiet=1)  # as installed: see the docstring
    py = sys.executable
    ateam = [py, "-m", "ateam"]
    rows: list[Row] = []
    with RedisServer(tcp=args.tcp) as server, temp_dir() as tmp:
        agent = AgentProcess(server.url, PROJECT, AGENT, tmp / "home", tmp / "work")
        agent.spawn()
        try:
            asyncio.run(serving(server.url, agent))
            env, cwd = agent.env(), agent.work
            named = {**env, "ATEAM_REDIS_URL": server.url}  # how a shell's TAB finds the bus
            bare_ps = tmp / "bare_ps.py"
            bare_ps.write_text(BARE_PS)
            bare_send = tmp / "bare_send.py"
            bare_send.write_text(BARE_SEND)
            nothing = [py, "-c", "pass"]
            light = [
                ("cli_help", "ateam --help", [*ateam, "--help"]),
                ("cli_ps_help", "ateam ps --help", [*ateam, "ps", "--help"]),
                ("cli_send_help", "ateam send --help", [*ateam, "send", "--help"]),
                ("cli_completion", "ateam completion bash", [*ateam, "completion", "bash"]),
            ]
            for name, label, cmd in light:
                ours, bare = paired(cmd, nothing, runs, cwd=cwd, env=env)
                rows.append(row(name, label, ours, bare, "python -c pass", 4))
            ps = [*ateam, "ps", "--redis", server.url]
            ours, bare = paired(ps, [py, str(bare_ps), server.url], runs, cwd=cwd, env=env)
            rows.append(row("cli_ps", "ateam ps (1 agent)", ours, bare, "bare redis-py", 1.5))
            names = [*ateam, "__complete", "agents"]
            ours, bare = paired(names, [py, str(bare_ps), server.url], runs, cwd=cwd, env=named)
            label = "TAB: agent names"
            rows.append(row("cli_complete_names", label, ours, bare, "bare redis-py", 1.5))
            send = [*ateam, "send", agent.id, "hello", "--redis", server.url]
            ours, bare = paired(send, [py, str(bare_send), server.url], runs, cwd=cwd, env=env)
            rows.append(row("cli_send", "ateam send (echo)", ours, bare, "bare redis-py", 1.5))
        finally:
            agent.stop()
    report(
        "ateam verbs: process wall time",
        rows,
        [
            environment(),
            f"median of {runs} runs of each command, alternated with its baseline",
        ],
    )


if __name__ == "__main__":
    main()
