"""A coding agent over ACP, through ateam vs driven directly by a bare SDK client (issue 24).

The runtime is the scriptable ACP test agent (``tests/acp_agent.py``, the SDK's agent
side): the same program, the same script, in both arms.

The two arms take turns, prompt by prompt, so a shared machine that gets busier or
quieter meanwhile weighs on both alike.

* **First token.** ateam: an ``input`` RPC to a serving agent (its runtime already
  started and its session open, after one warm-up task) until the first ``token``
  event is read from the agent's stream, as a console reads it. Baseline: a bare
  ``acp`` client with its own process of the same runtime, session open, from
  ``session/prompt`` sent until the first ``agent_message_chunk`` arrives. The runtime
  answers after :data:`MODEL_FIRST_TOKEN_S` in both arms (a model's time to first
  token). Target: the median at most 1.2 times the baseline's; ateam's own share (the
  difference of the medians) is a row of its own.
* **Tool output throughput.** The runtime streams a flood of tool output (10 MiB;
  ``--quick`` 2 MiB) as ``tool_call_update`` pieces of 64 KiB. ateam: bytes of
  ``tool.output`` read from the stream over the time from the first to the last.
  Baseline: the bare client's bytes of update content over the same span. After one
  warm-up flood in each arm, :data:`FLOODS` floods each, taking turns; each pair gives a
  ratio, and the target (at least half the baseline) is on the median ratio.

    python benchmarks/bench_acp.py [--quick] [--tcp]
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import acp
import yaml
from _common import (
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
from acp import schema

from ateam.bus.connection import RedisTarget, make_client
from ateam.bus.events import EventType, Gap, decode_chunk
from ateam.bus.keys import Keys
from ateam.bus.ownership import Ownership
from ateam.bus.rpc import RpcClient
from ateam.bus.tail import EventTail

ROOT = Path(__file__).resolve().parent.parent
ACP_AGENT = ROOT / "tests" / "acp_agent.py"
PROJECT, NAME = "bench", "coder"
AGENT_ID = f"{PROJECT}/{NAME}"
FIRST_TEXT = "first token from the runtime"
PIECE = 64 * 1024
FLOODS = 7
"""Floods per arm, after a warm-up flood: a 10 MiB flood lasts 30-100 ms, a few time slices
of a busy machine, so the arms take turns and the ratio is the median of the pairs'."""
MODEL_FIRST_TOKEN_S = 0.3
"""How long the runtime "thinks" before its first word, in both arms: a fast model's time
to first token (real coding agents take 1-3 s). ateam's own share is the difference,
reported on its own row."""


def script(rounds: int, flood: int) -> dict[str, Any]:
    """One warm-up answer, ``rounds`` first-token answers, then floods (a warm-up and
    :data:`FLOODS`), in that order: both arms send the same prompts in the same order."""
    prompts: list[dict[str, Any]] = [{"steps": [{"text": "warm"}]}]
    think = {"sleep": MODEL_FIRST_TOKEN_S}
    prompts += [{"steps": [think, {"text": FIRST_TEXT}]} for _ in range(rounds)]
    flooding = {"steps": [{"flood": {"bytes": flood, "chunk": PIECE}}, {"text": "done"}]}
    prompts += [flooding] * (FLOODS + 1)
    return {"agent": {"name": "bench-acp", "version": "1"}, "prompts": prompts}


def write_project(work: Path, runtime_dir: Path, body: dict[str, Any]) -> None:
    runtime_dir.mkdir(parents=True, exist_ok=True)
    (runtime_dir / "script.yaml").write_text(yaml.safe_dump(body))
    ateam_dir = work / ".ateam"
    (ateam_dir / "agents" / NAME).mkdir(parents=True)
    (ateam_dir / "project.yaml").write_text(f"name: {PROJECT}\n")
    command = [
        sys.executable, str(ACP_AGENT), str(runtime_dir / "script.yaml"),
        "--state", str(runtime_dir / "state.json"),
    ]  # fmt: skip
    models = {"models": [{"id": "runtime", "provider": "acp", "command": command}]}
    (ateam_dir / "models.yaml").write_text(yaml.safe_dump(models))
    spec = {"model": "runtime", "tools": {"allow": ["os.exec", "fs.*"]}}
    (ateam_dir / "agents" / NAME / "agent.yaml").write_text(yaml.safe_dump(spec))


Answer = tuple[float, float | None, int, float]
"""One prompt to its end: (sent, first token, output bytes, output span s)."""


# --- through ateam ----------------------------------------------------------------------


class Console:
    """Sends input and reads the agent's events back, as a console does."""

    def __init__(self, url: str) -> None:
        self.keys = Keys()
        self.client = make_client(RedisTarget(url, "bench"))
        self.session = "bench:acp"
        self.ownership = Ownership(self.client, self.keys, self.session)
        self.rpc = RpcClient(self.client, self.keys, caller=self.session, auth=self.ownership.token)

    async def top(self) -> int:
        top: Any = await self.client.xrevrange(self.keys.events(AGENT_ID), count=1)
        return int(top[0][0].split(b"-")[0]) if top else 0

    async def task(self, text: str) -> Answer:
        """One input to its ``task.end``."""
        # A console keeps its claim alive (it lapses OWNER_TTL_S after the last renewal):
        # renewed before each input, untimed, or a run slower than the TTL (a stalled
        # host) had its input refused with "no console is attached".
        if not await self.ownership.refresh(AGENT_ID):
            await self.ownership.acquire(AGENT_ID)
        tail = EventTail(self.client, self.keys)
        tail.add(AGENT_ID, after=await self.top())
        sent = time.perf_counter()
        await self.rpc.call(AGENT_ID, "input", {"text": text, "source": "bench"})
        first: float | None = None
        nbytes, out_first, out_last = 0, 0.0, 0.0
        async for batch in tail.batches():
            now = time.perf_counter()
            for item in batch:
                if isinstance(item, Gap):
                    raise RuntimeError(f"events lost: {item}")
                if item.type == EventType.TOKEN and first is None:
                    first = now
                elif item.type == EventType.TOOL_OUTPUT:
                    nbytes += len(decode_chunk(item.data))
                    out_first = out_first or now
                    out_last = now
                elif item.type == EventType.TASK_END:
                    if not item.data.get("ok"):
                        raise RuntimeError(f"task failed: {item.data}")
                    return sent, first, nbytes, out_last - out_first
        raise RuntimeError("the stream ended")

    async def aclose(self) -> None:
        await self.client.aclose()


@contextlib.asynccontextmanager
async def through_ateam(
    url: str, tmp: Path, rounds: int, flood: int
) -> AsyncIterator[Callable[[str], Awaitable[Answer]]]:
    """An agent serving, its runtime started and its session open: yields its prompt."""
    home, work = tmp / "home", tmp / "work"
    write_project(work, tmp / "runtime-ateam", script(rounds, flood))
    agent = AgentProcess(url, PROJECT, NAME, home, work)
    console = Console(url)
    try:
        agent.spawn()
        await wait_serving(console.rpc, AGENT_ID, proc=agent)
        await console.ownership.acquire(AGENT_ID)
        await console.task("warm up")  # starts the runtime and opens its session
        yield console.task
    finally:
        with contextlib.suppress(Exception):
            await console.ownership.release(AGENT_ID)
        await console.aclose()
        agent.stop()


# --- the bare SDK client -------------------------------------------------------------------


class BareClient:
    """The least an ACP client does: take updates, count what matters."""

    def __init__(self) -> None:
        self.first_at: float | None = None
        self.nbytes = 0
        self.out_first = 0.0
        self.out_last = 0.0

    def on_connect(self, conn: Any) -> None:
        pass

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        kind = getattr(update, "session_update", None)
        if kind == "agent_message_chunk" and self.first_at is None:
            self.first_at = time.perf_counter()
        elif kind == "tool_call_update":
            for part in update.content or ():
                text = getattr(getattr(part, "content", None), "text", None)
                if isinstance(text, str):
                    now = time.perf_counter()
                    self.nbytes += len(text.encode())
                    self.out_first = self.out_first or now
                    self.out_last = now

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        return schema.RequestPermissionResponse(outcome=schema.DeniedOutcome(outcome="cancelled"))


@contextlib.asynccontextmanager
async def bare(
    tmp: Path, rounds: int, flood: int
) -> AsyncIterator[Callable[[str], Awaitable[Answer]]]:
    """The same runtime driven by a bare SDK client, session open: yields its prompt."""
    runtime_dir = tmp / "runtime-bare"
    runtime_dir.mkdir(parents=True)
    (runtime_dir / "script.yaml").write_text(yaml.safe_dump(script(rounds, flood)))
    client = BareClient()
    args = [str(ACP_AGENT), str(runtime_dir / "script.yaml"), "--state", str(runtime_dir / "s")]
    async with acp.spawn_agent_process(client, sys.executable, *args, cwd=tmp) as (conn, _):  # type: ignore[arg-type]
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        session = await conn.new_session(cwd=str(tmp), mcp_servers=[])

        async def prompt(text: str) -> Answer:
            client.first_at, client.nbytes, client.out_first, client.out_last = None, 0, 0.0, 0.0
            sent = time.perf_counter()
            await conn.prompt(session_id=session.session_id, prompt=[acp.text_block(text)])
            return sent, client.first_at, client.nbytes, client.out_last - client.out_first

        await prompt("warm up")
        yield prompt


def rate(answer: Answer) -> float:
    """A flood's bytes over its span, in MiB/s."""
    return answer[2] / (1024 * 1024) / max(answer[3], 1e-9)


async def run(url: str, tmp: Path, rounds: int, flood: int) -> tuple[list[Row], list[str]]:
    # The arms take turns, prompt by prompt: a machine that gets busier or quieter
    # meanwhile (a shared host) weighs on both alike.
    async with bare(tmp, rounds, flood) as base, through_ateam(url, tmp, rounds, flood) as ours:
        firsts: dict[str, list[float]] = {"ours": [], "base": []}
        for _ in range(rounds):
            for arm, prompt in (("ours", ours), ("base", base)):
                sent, first, _, _ = await prompt("say it")
                assert first is not None
                firsts[arm].append((first - sent) * 1000)
        await ours("flood")  # a first flood warms up each runtime's and reader's buffers
        await base("flood")
        floods: dict[str, list[Answer]] = {"ours": [], "base": []}
        for _ in range(FLOODS):
            floods["ours"].append(await ours("flood"))
            floods["base"].append(await base("flood"))
    p50, b50 = percentile(firsts["ours"], 50), percentile(firsts["base"], 50)
    rates = {arm: [rate(answer) for answer in answers] for arm, answers in floods.items()}
    ratios = [ours_ / base_ for ours_, base_ in zip(rates["ours"], rates["base"], strict=True)]
    ratio = percentile(ratios, 50)
    complete = all(a[2] == flood for answers in floods.values() for a in answers)
    rows = [
        Row(
            "acp_first_token_p50",
            "ACP first token through ateam (median)",
            p50,
            "ms",
            b50,
            "bare SDK client",
            "<=1.2x",
            p50 <= 1.2 * b50,
        ),
        Row(
            "acp_first_token_overhead",
            "ateam's share of the first token (median)",
            p50 - b50,
            "ms",
            None,
            "",
            "(info)",
            None,
        ),
        Row(
            "acp_output_throughput",
            "ACP tool output through ateam (median)",
            percentile(rates["ours"], 50),
            "MiB/s",
            percentile(rates["base"], 50),
            "bare SDK client",
            "(info)",
            None,
        ),
        Row(
            "acp_output_ratio",
            "ACP tool output, median of paired floods",
            ratio,
            "x",
            None,
            "",
            ">=0.5x",
            ratio >= 0.5 and complete,
        ),
    ]
    notes = [
        f"{rounds} prompts each, taking turns; first-token ms through ateam: "
        f"{', '.join(f'{v:.1f}' for v in firsts['ours'])}; bare: "
        f"{', '.join(f'{v:.1f}' for v in firsts['base'])}",
        f"{FLOODS} floods of {flood} bytes each, taking turns after one warm-up flood each; "
        f"every byte arrived: {complete}; MiB/s through ateam: "
        f"{', '.join(f'{v:.0f}' for v in rates['ours'])}; bare: "
        f"{', '.join(f'{v:.0f}' for v in rates['base'])}; ratios of the pairs: "
        f"{', '.join(f'{v:.2f}' for v in ratios)}",
    ]
    return rows, notes


def main() -> int:
    args = parser(__doc__ or "").parse_args()
    rounds = 5 if args.quick else 20
    flood = (2 if args.quick else 10) * 1024 * 1024
    banner("bench_acp", args.tcp)
    with RedisServer(tcp=args.tcp) as server, temp_dir() as tmp:
        rows, notes = asyncio.run(run(server.url, tmp, rounds, flood))
    report("A coding agent over ACP (issue 24)", rows, notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
