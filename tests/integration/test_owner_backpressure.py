"""No byte lost to the owning console (issue 28 §3).

A real ``ateam agent`` on the scripted model runs ``os.exec`` of a flood larger than its
event stream's byte cap (numbered lines, so every one can be checked). Its owner — a
line-mode ``ateam console --no-ui`` whose stdout this test reads slowly, or this
process holding the agent through the client API — falls behind, and the agent stops
reading the command's terminal until it catches up, lets go or is gone. Tails are never
waited for: they get a gap notice. Nothing here measures time: each check is about what
was received, or what the agent did (or had not yet done) at a point.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ateam.bus.codec import unpack
from ateam.bus.connection import RedisTarget, make_client
from ateam.bus.events import Event, EventType, Gap
from ateam.bus.owner_lag import READ_FIELD
from ateam.client import AgentHandle, Team
from ateam.constants import EVENT_LOG_MAX_BYTES, OWNER_TTL_S
from tests._wait import async_wait_for

from .conftest import KEYS, AgentFactory, ateam_cmd, subprocess_env, write_scripted_project

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

AGENT = "proj/zeus"
LAG = 1 << 20
"""The agent's ``exec.owner_lag_bytes`` here: a quarter of the default, so holds come soon."""
WIDTH = 200
LINES = EVENT_LOG_MAX_BYTES * 3 // 2 // WIDTH
"""Numbered lines of ``WIDTH`` bytes: half as much again as the stream may hold."""
FLOOD = LINES * WIDTH
NUMBERED = re.compile(rb"^\[A:proj/zeus\] (\d{8}) x+$")
STILL_S = 1.5
"""How long a held agent is watched to stay held (not a timing check: without the hold
the whole flood is published in well under this)."""


def flood_command(lines: int = LINES) -> str:
    pad = "x" * (WIDTH - 10)
    return f"awk 'BEGIN {{ for (i = 1; i <= {lines}; i++) printf \"%08d {pad}\\n\", i }}'"


def flood_project(tmp_path: Path, *, then: str = "Done.") -> Path:
    root = write_scripted_project(
        tmp_path / "proj",
        "proj",
        [{"tool_calls": [{"name": "os.exec", "args": {"cmd": flood_command()}}]}, {"text": then}],
        agent_yaml={"exec": {"owner_lag_bytes": LAG}},
    )
    # A window far beyond the output kept in context: no summary turn mid-task.
    (root / ".ateam" / "models.yaml").write_text(
        "models:\n  - id: script\n    provider: scripted\n    script: script.yaml\n"
        "    context_window: 1000000\n"
    )
    return root


class Stream:
    """The agent's stream as seen from outside, a few entries at a time."""

    def __init__(self, redis_url: str) -> None:
        self._client: Any = make_client(RedisTarget(redis_url, "test"))
        self._key = KEYS.events(AGENT)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def newest(self, count: int = 50) -> list[tuple[int, dict[str, Any]]]:
        entries = await self._client.xrevrange(self._key, count=count)
        return [(int(i.split(b"-")[0]), unpack(f[b"d"])) for i, f in entries]

    async def top(self) -> int:
        newest = await self.newest(1)
        return newest[0][0] if newest else 0

    async def tool_end(self) -> dict[str, Any] | None:
        for _, body in await self.newest():
            if body.get("type") == EventType.TOOL_END:
                return body
        return None

    async def task_end(self) -> dict[str, Any] | None:
        for _, body in await self.newest():
            if body.get("type") == EventType.TASK_END:
                return body
        return None

    async def mark(self) -> int | None:
        read = await self._client.hget(KEYS.owner(AGENT), READ_FIELD)
        return None if read is None else int(read)

    async def behind(self, mark: int) -> int:
        """Payload bytes published after offset ``mark``."""
        entries = await self._client.xrange(self._key, min=f"{mark + 1}-0")
        return sum(len(fields[b"d"]) for _, fields in entries)


@pytest.fixture
async def stream(redis_url: str) -> AsyncIterator[Stream]:
    seen = Stream(redis_url)
    yield seen
    await seen.aclose()


@contextlib.asynccontextmanager
async def team_on(redis_url: str, session: str) -> AsyncIterator[Team]:
    team = await Team.connect(RedisTarget(redis_url, "test"), session=session)
    try:
        yield team
    finally:
        await team.aclose()


@dataclass
class Owner:
    """This process holding the agent through the client API, following its events."""

    handle: AgentHandle
    held: Any
    events: AsyncIterator[Any]
    first: Any
    """The input sent as it attached."""


@contextlib.asynccontextmanager
async def owning(redis_url: str, stream: Stream, text: str) -> AsyncIterator[Owner]:
    """Attach to the agent, say nothing is read yet, follow from the start, send ``text``.

    Nothing read yet is what the console says as it attaches, before its first read.
    Leaving detaches (the owner lets go).
    """
    async with team_on(redis_url, "console:test:api") as team:
        handle = team.agent(AGENT)
        async with handle.attach() as held:
            assert await handle.mark_read(await stream.top())
            events = aiter(handle.tail(from_offset=1))
            first = await held.send(text, claim=False)
            yield Owner(handle, held, events, first)


async def held_still(stream: Stream) -> None:
    """Check the agent holds the flood: no ``tool.end``, a stream that has stopped
    growing, and not far past the owner's mark (what was published before the owner's
    first report, plus the bound)."""
    await asyncio.sleep(STILL_S)
    top = await stream.top()
    await asyncio.sleep(STILL_S / 3)
    assert await stream.tool_end() is None, "the flood ended while its owner was behind"
    assert await stream.top() - top <= 2, "the agent went on publishing"
    mark = await stream.mark()
    assert mark is not None, "the owner never reported a read mark"
    assert await stream.behind(mark) < EVENT_LOG_MAX_BYTES // 2 < FLOOD


async def read_into_the_flood(events: AsyncIterator[Any]) -> None:
    """Read until the first frame of output, then stop (a user who scrolled up)."""
    while True:
        item = await anext(events)
        if isinstance(item, Event) and item.type == EventType.TOOL_OUTPUT:
            return


class LineConsole:
    """``ateam console --no-ui`` whose stdout this test reads only when it wants."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.buffer = bytearray()

    @classmethod
    async def start(cls, redis_url: str, cwd: Path) -> LineConsole:
        proc = await asyncio.create_subprocess_exec(
            *ateam_cmd("console", "--no-ui", "--redis", redis_url),
            cwd=cwd,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env=subprocess_env(),
            limit=1 << 20,
        )
        return cls(proc)

    async def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        await self.proc.stdin.drain()

    async def read_until(self, text: bytes, *, pause_s: float = 0.0, timeout: float = 120) -> None:
        """Read (in 64 KiB pieces, ``pause_s`` apart: a slow terminal) until ``text``."""
        assert self.proc.stdout is not None
        async with asyncio.timeout(timeout):
            while text not in self.buffer:
                piece = await self.proc.stdout.read(1 << 16)
                if not piece:
                    raise AssertionError(f"console ended; last output: {self.buffer[-2000:]!r}")
                self.buffer += piece
                if pause_s:
                    await asyncio.sleep(pause_s)

    def lines(self) -> list[bytes]:
        return bytes(self.buffer).split(b"\n")

    async def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGKILL)
        # What it printed and nobody read is drained: asyncio's wait() waits for the end
        # of its pipes too.
        assert self.proc.stdout is not None
        while await self.proc.stdout.read(1 << 20):
            pass
        await self.proc.wait()


@pytest.fixture
async def consoles() -> AsyncIterator[list[LineConsole]]:
    started: list[LineConsole] = []
    yield started
    for console in started:
        await console.kill()


async def slow_tail(team: Team, seen: list[Any], caught_up: asyncio.Event) -> None:
    """A read-only watcher far slower than the owner: one event per 250 ms."""
    async for item in team.agent(AGENT).tail(from_offset=1):
        seen.append(item)
        if isinstance(item, Event) and item.type == EventType.TOOL_END:
            return
        if not caught_up.is_set():
            await asyncio.sleep(0.25)


async def test_a_slow_owning_console_receives_every_line_and_a_slow_tail_gets_a_gap(
    start_agent: AgentFactory,
    redis_url: str,
    tmp_path: Path,
    consoles: list[LineConsole],
    stream: Stream,
) -> None:
    root = flood_project(tmp_path)
    agent = start_agent(AGENT, cwd=root)
    console = await LineConsole.start(redis_url, tmp_path)
    consoles.append(console)
    async with team_on(redis_url, "watcher:test") as team:
        await console.send(f"/attach {AGENT}")
        await console.read_until(f"attached to {AGENT}".encode())
        seen: list[Any] = []
        caught_up = asyncio.Event()
        tail = asyncio.create_task(slow_tail(team, seen, caught_up))
        await console.send("print the flood")

        # A terminal that takes what it is shown at a few MB/s: far slower than the agent
        # publishes, so the stream would trim lines before this console read them.
        last = f"{LINES:08d}".encode()
        await console.read_until(last + b" ", pause_s=0.005)
        await console.read_until(b"os.exec exit 0")
        assert agent.running()

        numbers = [int(m.group(1)) for line in console.lines() if (m := NUMBERED.match(line))]
        assert numbers == list(range(1, LINES + 1)), (
            f"{len(numbers)} of {LINES} lines; first missing "
            f"{next((i for i, n in enumerate(numbers, 1) if n != i), None)}"
        )
        assert b"tail gap" not in console.buffer
        end = await stream.tool_end()
        assert end is not None and end["total_bytes"] == FLOOD

        # The tail was left behind (the agent never waited for it) and is told of the
        # lines it missed, then catches up with the end.
        assert not any(isinstance(i, Event) and i.type == EventType.TOOL_END for i in seen)
        caught_up.set()
        await asyncio.wait_for(tail, 60)
        assert any(isinstance(item, Gap) for item in seen), "the slow tail saw no gap"


async def test_the_agent_reads_on_once_its_owner_lets_go(
    start_agent: AgentFactory, redis_url: str, tmp_path: Path, stream: Stream
) -> None:
    root = flood_project(tmp_path)
    start_agent(AGENT, cwd=root)
    async with owning(redis_url, stream, "print the flood") as owner:
        await read_into_the_flood(owner.events)  # then stop reading there
        await held_still(stream)
    # Let go (detached): the agent reads on at once, owner or not.
    await async_wait_for(stream.task_end, 60, "the flood to end after the owner let go")
    end = await stream.tool_end()
    assert end is not None and end["ok"] and end["total_bytes"] == FLOOD


async def test_a_killed_owner_releases_the_agent_once_its_lease_lapses(
    start_agent: AgentFactory,
    redis_url: str,
    tmp_path: Path,
    consoles: list[LineConsole],
    stream: Stream,
) -> None:
    root = flood_project(tmp_path)
    start_agent(AGENT, cwd=root)
    console = await LineConsole.start(redis_url, tmp_path)
    consoles.append(console)
    await console.send(f"/attach {AGENT}")
    await console.read_until(f"attached to {AGENT}".encode())
    await console.send("print the flood")
    # Never read again: the console blocks on its full stdout, its reads stop.
    await held_still(stream)

    await console.kill()
    end = await async_wait_for(
        stream.task_end, OWNER_TTL_S + 30, "the flood to end after the owner's lease"
    )
    assert end["ok"]
    tool_end = await stream.tool_end()
    assert tool_end is not None and tool_end["total_bytes"] == FLOOD


async def test_interrupt_and_input_work_while_the_agent_is_held(
    start_agent: AgentFactory, redis_url: str, tmp_path: Path, stream: Stream
) -> None:
    root = flood_project(tmp_path)
    start_agent(AGENT, cwd=root)
    async with owning(redis_url, stream, "print the flood") as owner:
        await read_into_the_flood(owner.events)
        await held_still(stream)

        # The agent still answers: input is queued, and the interrupt stops the
        # command it is holding (no need for the owner to read on).
        queued = await owner.held.send("and then this", claim=False)
        assert queued.id != owner.first.id
        assert await owner.handle.interrupt(claim=False) == owner.first.id
        end = await async_wait_for(stream.tool_end, 30, "the held command to stop")
        assert end["reason"] == "interrupted"
        assert end["total_bytes"] < FLOOD
