"""No byte lost to the owning console, for an ACP runtime's commands too (issue 28 §3).

A coding agent over ACP (the scriptable test agent, ``tests/acp_agent.py``) asks ateam to
run its command (``terminal/create``); ateam runs it in its own PTY, as it runs a native
agent's ``os.exec``. The owner (this process, holding the agent through the client API)
stops reading in the middle of a flood larger than the event stream's byte cap: the agent
must stop reading the command's terminal, and once the owner reads on, every line must
arrive, in order, with no gap. Nothing here measures time.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from ateam.bus.events import Event, EventType, Gap, decode_chunk

from .conftest import AgentFactory, write_acp_project
from .test_owner_backpressure import (
    AGENT,
    LAG,
    LINES,
    Stream,
    flood_command,
    held_still,
    owning,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

FLOOD_SCRIPT: dict[str, Any] = {
    "agent": {"name": "test-acp", "version": "1.2.3"},
    "prompts": [
        {
            "steps": [
                {
                    "tool": {
                        "id": "flood",
                        "title": "Print the flood",
                        "kind": "execute",
                        "terminal": {"command": flood_command()},
                    }
                },
                {"text": "Printed."},
            ]
        }
    ],
}
LINE = re.compile(rb"(\d{8}) x+\r?\n")


@pytest.fixture
async def stream(redis_url: str) -> AsyncIterator[Stream]:
    seen = Stream(redis_url)
    yield seen
    await seen.aclose()


async def test_an_acp_runtimes_command_is_held_for_a_lagging_owner_who_then_gets_every_line(
    start_agent: AgentFactory, redis_url: str, tmp_path: Path, stream: Stream
) -> None:
    project = write_acp_project(
        tmp_path / "proj",
        "proj",
        FLOOD_SCRIPT,
        agent_yaml={
            "tools": {"approval": {"os.exec": "allow"}},
            "exec": {"owner_lag_bytes": LAG},
        },
    )
    start_agent(AGENT, cwd=project.root)
    received = bytearray()
    async with owning(redis_url, stream, "print the flood") as owner:
        events = owner.events
        while not received:  # read into the flood, then stop (a user scrolled up)
            item = await anext(events)
            if isinstance(item, Event) and item.type == EventType.TOOL_OUTPUT:
                received += decode_chunk(item.data)

        # Held: the stream stops growing near the owner's mark, the command unfinished.
        await held_still(stream)

        # The owner reads on: everything, in order, never a gap.
        async for item in events:
            assert not isinstance(item, Gap), f"the owner was left behind: {item}"
            if not isinstance(item, Event):
                continue
            if item.type == EventType.TOOL_OUTPUT:
                received += decode_chunk(item.data)
            elif item.type == EventType.TASK_END:
                assert item.data["ok"], item.data
                break
    numbers = [int(found) for found in LINE.findall(bytes(received))]
    streamed, reported = numbers[:LINES], numbers[LINES:]
    assert streamed == list(range(1, LINES + 1)), (
        f"{len(streamed)} of {LINES} lines; first missing "
        f"{next((i for i, n in enumerate(streamed, 1) if n != i), None)}"
    )
    # After the stream, the runtime's own report of the call: the last lines of the
    # terminal's output it fetched (``terminal/output``, bounded), shown as its content.
    assert reported == list(range(LINES - len(reported) + 1, LINES + 1))
