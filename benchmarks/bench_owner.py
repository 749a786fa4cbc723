"""No byte lost to the owning console (issue 28 §3): a flood against its owner.

The owner is this process, holding the agent through the client API the console uses
(``team.agent(ID).attach()``, then ``handle.tail()``, which reports its read mark to the
agent after each batch it has handled). A real ``python -m ateam agent`` on the
``scripted`` model runs ``os.exec`` of ``yes '<88-byte build line>' | head -c N`` (``--mb``,
default 50).

(a) Bytes received by a slow owner. The owner takes what it reads at ``--owner-mbs``
(default 10 MB/s: it sleeps as a terminal that draws that fast would make it wait), far
below what the agent publishes. Value: the share of the flood's bytes it received, in
order and unchanged (target 100 %). Baseline, same run: the same owner against a second
agent whose backpressure is off (``exec.owner_lag_bytes: 0``), which loses what the
stream trims before the owner reads it (the 24 to 45 MB of 50 the issue saw).

(b) Throughput with the owner keeping up. The owner reads as fast as it can; the window is
``tool.start`` received → ``tool.end`` received, as in ``bench_pty.py``. Baseline: a raw
``os.read`` loop on a PTY running the same command (``bench_pty.raw_read``), rounds
alternating which goes first (target at least 0.5x). Medians over ``--rounds``.

(c) Keystroke echo p99 during the flood, the owner being the real panes console
(``bench_console.flood``: the headless Textual app attached to the agent, keys posted
every 40 ms and timed until drawn) — the console a flood now waits for (≤ 100 ms).

    python benchmarks/bench_owner.py [--quick] [--tcp] [--mb N] [--rounds N]
        [--owner-mbs N] [--lag BYTES] [--only slow,fast,echo]
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from _common import (
    AgentProcess,
    HostCpu,
    RedisServer,
    Row,
    banner,
    parser,
    report,
    temp_dir,
)
from bench_pty import LINE, exec_turns, expected_text_digest, raw_read

from ateam.agent.context.working import RESUMMARIZE_EVERY
from ateam.bus.connection import RedisTarget, make_client
from ateam.bus.events import Event, EventType, Gap, decode_chunk
from ateam.bus.keys import Keys
from ateam.client import Team

MB = 1_000_000
OWNED = "owned/zeus"
"""The agent with backpressure (the default bound)."""
FREE = "free/hera"
"""The same agent with backpressure off (``exec.owner_lag_bytes: 0``): the baseline of (a)."""
ROUND_TIMEOUT_S = 300.0
CLIENT: list[Any] = []
"""A plain client of the benchmark's server, to look at the top of a stream."""


def flood_command(nbytes: int) -> str:
    return f"yes '{LINE}' | head -c {nbytes}"


def write_agent(root: Path, agent_id: str, tasks: int, cmd: str, lag: int | None) -> None:
    """A project whose one agent runs ``cmd`` in each of ``tasks`` tasks (after a warm-up)."""
    project, name = agent_id.split("/")
    ateam_dir = root / ".ateam"
    (ateam_dir / "agents" / name).mkdir(parents=True)
    (ateam_dir / "project.yaml").write_text(f"name: {project}\n")
    (ateam_dir / "models.yaml").write_text(
        "models:\n  - id: script\n    provider: scripted\n    script: script.yaml\n"
        "    context_window: 1000000\n"
    )
    turns = exec_turns("echo warm-up")
    for done in range(2, tasks + 2):
        turns += exec_turns(cmd)
        if done % RESUMMARIZE_EVERY == 0:  # the working-context summary's model turn
            turns.append({"text": "Summary: printed benchmark output."})
    (ateam_dir / "script.yaml").write_text(yaml.safe_dump({"turns": turns}))
    spec: dict[str, Any] = {"model": "script", "tools": {"allow": ["os.exec"]}}
    if lag is not None:
        spec["exec"] = {"owner_lag_bytes": lag}
    (ateam_dir / "agents" / name / "agent.yaml").write_text(yaml.safe_dump(spec))


@dataclass
class OwnedRun:
    nbytes: int = 0
    gaps: int = 0
    """Events the owner was told it missed (trimmed before it read them)."""
    seconds: float = float("nan")
    """``tool.start`` received → ``tool.end`` received."""
    digest: str = ""
    end: dict[str, Any] = field(default_factory=dict)


async def stream_top(agent: str) -> int:
    """The newest offset in ``agent``'s stream (0 when empty)."""
    top: Any = await CLIENT[0].xrevrange(Keys().events(agent), count=1)
    return int(top[0][0].split(b"-")[0]) if top else 0


async def owned_flood(team: Team, agent: str, text: str, pace_mbs: float | None) -> OwnedRun:
    """Hold ``agent``, send ``text`` and read its events as its owner until the task ends.

    With ``pace_mbs`` each frame is taken at that speed (a slow terminal): the reader
    sleeps until the bytes so far would have been drawn.
    """
    handle = team.agent(agent)
    run = OwnedRun()
    chunks: list[bytes] = []  # hashed once the window is closed, as bench_pty.py does
    async with handle.attach() as held:
        # From the stream's top, read before the task is sent: nothing of it is missed.
        events = handle.tail(from_offset=await stream_top(agent) + 1)
        await held.send(text, claim=False)
        t_start: float | None = None
        async with asyncio.timeout(ROUND_TIMEOUT_S):
            async for item in events:
                if isinstance(item, Gap):
                    run.gaps += item.last - item.first + 1
                    continue
                assert isinstance(item, Event)
                if item.type == EventType.TOOL_START and item.data.get("name") == "os.exec":
                    t_start = time.perf_counter()
                elif item.type == EventType.TOOL_OUTPUT and t_start is not None:
                    chunk = decode_chunk(item.data)
                    run.nbytes += len(chunk)
                    chunks.append(chunk)
                    if pace_mbs:
                        owed = run.nbytes / (pace_mbs * MB) - (time.perf_counter() - t_start)
                        if owed > 0:
                            await asyncio.sleep(owed)
                elif item.type == EventType.TOOL_END and t_start is not None:
                    run.seconds = time.perf_counter() - t_start
                    run.end = dict(item.data)
                elif item.type == EventType.TASK_END and run.end:
                    break
    sha = hashlib.sha256()
    for chunk in chunks:
        sha.update(chunk)
    run.digest = sha.hexdigest()
    return run


@dataclass
class Results:
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


async def slow_and_fast(
    url: str,
    tmp: Path,
    nbytes: int,
    rounds: int,
    pace: float,
    only: set[str],
    out: Results,
    lag: int | None,
) -> None:
    cmd = flood_command(nbytes)
    want = expected_text_digest(nbytes)
    home = tmp / "home"
    fast_rounds = rounds if "fast" in only else 0
    slow = 1 if "slow" in only else 0
    write_agent(tmp / "owned", OWNED, fast_rounds + slow, cmd, lag)
    write_agent(tmp / "free", FREE, slow, cmd, 0)
    agents = [AgentProcess(url, *OWNED.split("/"), home, tmp / "owned")]
    if slow:
        agents.append(AgentProcess(url, *FREE.split("/"), home, tmp / "free"))
    for agent in agents:
        agent.spawn()
    team = await Team.connect(RedisTarget(url, "bench"), session=f"console:bench:{os.getpid()}")
    CLIENT[:] = [make_client(RedisTarget(url, "bench"))]
    try:
        for agent in agents:
            await _serving(team, agent)
            await owned_flood(team, agent.id, "warm up", None)
        if fast_rounds:
            raw_read("echo warm-up", tmp)
            fast: list[float] = []
            raw: list[float] = []
            lost: list[str] = []
            for i in range(fast_rounds):
                for which in ("raw", "ateam") if i % 2 == 0 else ("ateam", "raw"):
                    if which == "raw":
                        r = raw_read(cmd, tmp)
                        raw.append(r.nbytes / MB / r.seconds)
                        continue
                    a = await owned_flood(team, OWNED, f"flood {i}", None)
                    fast.append(a.nbytes / MB / a.seconds)
                    if a.nbytes != nbytes or a.gaps or a.digest != want:
                        lost.append(f"round {i + 1}: {a.nbytes} bytes, {a.gaps} events lost")
                print(f"  fast round {i + 1}: owner {fast[-1]:.1f} MB/s, raw {raw[-1]:.1f} MB/s")
            ateam_med, raw_med = statistics.median(fast), statistics.median(raw)
            ratio = ateam_med / raw_med if raw_med else float("nan")
            out.rows.append(
                Row(
                    "owner_flood_throughput",
                    f"{nbytes // MB} MB flood, owner keeping up",
                    ateam_med,
                    "MB/s",
                    raw_med,
                    "raw PTY os.read",
                    ">=0.5x",
                    ratio >= 0.5 and not lost,
                    higher_is_better=True,
                )
            )
            out.notes.append(
                f"owner keeping up: MB/s [{', '.join(f'{x:.1f}' for x in fast)}], raw "
                f"[{', '.join(f'{x:.1f}' for x in raw)}]; "
                + ("every byte received, in order" if not lost else "LOST: " + "; ".join(lost))
            )
        if slow:
            held = await owned_flood(team, OWNED, "slow owner", pace)
            free = await owned_flood(team, FREE, "slow owner, no backpressure", pace)
            share = 100 * held.nbytes / nbytes if held.digest == want else 0.0
            out.rows.append(
                Row(
                    "owner_flood_received",
                    f"{nbytes // MB} MB flood, bytes a slow owner received",
                    share,
                    "%",
                    100 * free.nbytes / nbytes,
                    "no backpressure",
                    ">=100 %",
                    share >= 100 and not held.gaps,
                    higher_is_better=True,
                )
            )
            out.notes.append(
                f"slow owner ({pace:g} MB/s): {held.nbytes / MB:.1f} of {nbytes / MB:.0f} MB "
                f"received in {held.seconds:.1f} s, {held.gaps} events lost"
                + (", content identical" if held.digest == want else ", CONTENT DIFFERS")
                + f"; without backpressure {free.nbytes / MB:.1f} MB in {free.seconds:.1f} s, "
                f"{free.gaps} events lost to the stream's byte cap"
            )
    finally:
        for agent in agents:
            agent.stop()
        await team.aclose()
        await CLIENT.pop().aclose()


async def _serving(team: Team, agent: AgentProcess) -> None:
    deadline = time.monotonic() + 30
    while await team.agent(agent.id).status() is None:
        if agent.proc is not None and agent.proc.poll() is not None:
            raise RuntimeError(f"{agent.id} exited:\n{agent.log_text()[-2000:]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{agent.id} did not register")
        await asyncio.sleep(0.05)


async def echo(url: str, tmp: Path, nbytes: int, quick: bool, out: Results) -> None:
    from bench_console import DEFAULT_SCROLLBACK, flood

    rows, notes = await flood(url, tmp, nbytes, DEFAULT_SCROLLBACK, quick)
    for row in rows:
        if row.name == "flood_echo_p99":
            row.name, row.label = "owner_flood_echo_p99", f"{row.label}, console owning"
            out.rows.append(row)
    out.notes += [f"panes owner: {note}" for note in notes if note.startswith("flood:")]


def main() -> int:
    p = parser(__doc__ or "")
    p.add_argument("--mb", type=float, default=None, help="flood size in MB (default 50)")
    p.add_argument("--rounds", type=int, default=None, help="rounds of (b) (default 3)")
    p.add_argument("--owner-mbs", type=float, default=10.0, help="the slow owner's MB/s")
    p.add_argument("--only", default="slow,fast,echo", help="slow, fast and/or echo")
    p.add_argument(
        "--lag", type=int, default=None, help="exec.owner_lag_bytes of the agent (its default)"
    )
    args = p.parse_args()
    mb = args.mb if args.mb is not None else (20 if args.quick else 50)
    rounds = args.rounds if args.rounds is not None else (1 if args.quick else 3)
    only = set(args.only.split(","))
    nbytes = int(mb * MB)
    banner("bench_owner", args.tcp)
    print(f"  {mb:g} MB per flood, {rounds} rounds; {', '.join(sorted(only))}", flush=True)
    out = Results()
    meter = HostCpu().start()
    with RedisServer(tcp=args.tcp) as server:
        if only & {"slow", "fast"}:
            with temp_dir() as tmp:
                asyncio.run(
                    slow_and_fast(
                        server.url, tmp, nbytes, rounds, args.owner_mbs, only, out, args.lag
                    )
                )
        if "echo" in only:
            with temp_dir() as tmp:
                asyncio.run(echo(server.url, tmp, nbytes, args.quick, out))
    busy = meter.stop()
    out.notes.append(
        f"host CPU busy over the run (all processes, {os.cpu_count()} cores): {busy:.0%}"
    )
    report("No byte lost to the owning console (issue 28 §3)", out.rows, out.notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
