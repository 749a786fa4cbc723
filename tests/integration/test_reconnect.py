"""A Redis restart mid-stream: everyone reconnects, nothing is lost or repeated (SPEC §4.6)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from ateam.bus.connection import RedisTarget
from ateam.bus.events import Event, Gap, decode_chunk
from ateam.console.controller import ConsoleController
from tests._wait import async_wait_for

from .conftest import (
    START_TIMEOUT_S,
    AgentFactory,
    ConsoleFactory,
    write_project,
)

pytestmark = pytest.mark.integration


class RecordingView:
    """A ConsoleView that keeps everything the controller hands it."""

    def __init__(self) -> None:
        self.items: list[Event | Gap] = []
        self.banners: list[str] = []
        self.infos: list[str] = []

    def event(self, event: Event) -> None:
        self.items.append(event)

    def unsettled(self, agent: str) -> int | None:
        return None

    def gap(self, gap: Gap) -> None:
        self.items.append(gap)

    def info(self, text: str, agent: str | None = None) -> None:
        self.infos.append(text)

    def banner(self, text: str, *, level: str = "info") -> None:
        self.banners.append(text)

    def table(self, rows: list[dict[str, Any]], columns: list[str]) -> None:
        pass

    async def ask(self, question: str) -> str:
        return ""

    def events(self) -> list[Event]:
        return [item for item in self.items if isinstance(item, Event)]

    def task_events(self, task_id: str, etype: str) -> list[Event]:
        return [e for e in self.events() if e.type == etype and e.task_id == task_id]


async def test_agent_and_consoles_ride_out_a_redis_restart(
    own_redis: Any,
    start_agent: AgentFactory,
    start_console: ConsoleFactory,
    tmp_path: Path,
) -> None:
    agent_id = "relay/zeus"
    root = write_project(tmp_path / "relay", "relay", delay_ms=40)
    agent = start_agent(agent_id, cwd=root)
    # A plain console process watching read-only, and a controller in-process as writer.
    watcher = start_console()
    watcher.send(f"/tail {agent_id}")
    await asyncio.to_thread(watcher.wait_line, f"tailing {agent_id}")
    view = RecordingView()
    console = ConsoleController(RedisTarget(own_redis.url, "test"), view)
    await console.start()
    try:
        await console.execute(f"/attach {agent_id}")
        text = " ".join(f"word{i:02d}" for i in range(60))
        await console.execute(text)
        (task_id,) = console.pending_tasks

        await async_wait_for(
            lambda: len(view.task_events(task_id, "token")) >= 3,
            START_TIMEOUT_S,
            "the answer to start streaming",
        )
        await asyncio.to_thread(own_redis.restart)
        assert not view.task_events(task_id, "task.end"), "the restart came too late"

        await async_wait_for(
            lambda: view.task_events(task_id, "task.end"),
            3 * START_TIMEOUT_S,
            "the task to end after the Redis restart",
        )
        status = await console.rpc.call(agent_id, "status", timeout=10)
    finally:
        await console.aclose()

    assert agent.running()
    assert status["pid"] == agent.pid
    assert status["bus_connected"] is True
    assert "reconnected to Redis" in view.banners, view.banners
    # Every event exactly once and in order: dense offsets, no gaps.
    assert not [item for item in view.items if isinstance(item, Gap)]
    offsets = [e.offset for e in view.events()]
    assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), offsets
    (end,) = view.task_events(task_id, "task.end")
    assert end.data["ok"] is True
    streamed = b"".join(decode_chunk(e.data) for e in view.task_events(task_id, "token"))
    assert streamed.decode() == f"echo: {text}"

    # The plain console shows the whole answer once, and the task once.
    await asyncio.to_thread(watcher.wait_line, f"--- task {task_id} done")
    lines = watcher.output().splitlines()
    assert lines.count(f"[A:{agent_id}] echo: {text}") == 1, lines
    assert sum(f"--- task {task_id}:" in line for line in lines) == 1, lines
    assert not [line for line in lines if "tail gap" in line], lines
