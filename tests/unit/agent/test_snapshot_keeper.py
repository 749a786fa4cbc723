"""The agent's snapshot keeper against a real Redis (issue 12 §4): one writer per host and
home, a change in the file within 2 s, a takeover when the writer stops, and bus or disk
failures that are logged and retried, never raised into the agent."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from ateam.agent.runtime.process import Agent
from ateam.agent.runtime.snapshot_keeper import SnapshotKeeper
from ateam.bus.backoff import CONNECTION_ERRORS
from ateam.bus.board import TaskBoard
from ateam.bus.connection import RedisTarget, make_client
from ateam.bus.keys import Keys
from ateam.bus.registry import AgentEntry, Heartbeat
from ateam.bus.snapshot import Snapshot
from ateam.config import standalone_agent
from ateam.providers import EchoProvider
from tests._wait import async_wait_for

LOGGER = "ateam.agent.runtime.snapshot_keeper"


@pytest.fixture
def keys(target: RedisTarget) -> Keys:
    return Keys(target.namespace)


@pytest.fixture
async def keepers(
    client: aioredis.Redis, keys: Keys, isolated_home: Path
) -> AsyncIterator[Callable[..., SnapshotKeeper]]:
    made: list[SnapshotKeeper] = []

    def make(agent_id: str, **options: Any) -> SnapshotKeeper:
        keeper = SnapshotKeeper(
            client,
            keys,
            agent_id=agent_id,
            project=agent_id.split("/")[0],
            home=options.pop("home", isolated_home),
            bus="redis://test",
            **options,
        )
        made.append(keeper)
        return keeper

    yield make
    for keeper in made:
        await keeper.aclose()


def read(path: Path) -> dict[str, Any] | None:
    try:
        doc: dict[str, Any] = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    return doc


def task_ids(path: Path, project: str = "proj") -> set[str]:
    doc = read(path) or {"projects": {}}
    return {t["id"] for t in doc["projects"].get(project, {}).get("tasks", [])}


async def join(client: aioredis.Redis, keys: Keys, agent_id: str) -> None:
    project, name = agent_id.split("/")
    await Heartbeat(client, keys, AgentEntry(id=agent_id, name=name, project=project)).beat()


async def test_one_of_two_keepers_writes_and_a_change_shows_within_two_seconds(
    client: aioredis.Redis, keys: Keys, isolated_home: Path, keepers: Callable[..., SnapshotKeeper]
) -> None:
    await join(client, keys, "proj/zeus")
    zeus, hera = keepers("proj/zeus"), keepers("proj/hera")
    zeus.start()
    hera.start()
    path = isolated_home / "session.json"
    await async_wait_for(lambda: read(path), 5, "the first snapshot")
    # The file is renamed into place a moment before the writer counts the write.
    await async_wait_for(lambda: zeus.writes + hera.writes >= 1, 5, "the write counted")
    holders = [k for k in (zeus, hera) if k.seat.held]
    assert len(holders) == 1
    [writer] = holders
    other = hera if writer is zeus else zeus
    assert writer.writes >= 1 and other.writes == 0
    doc = read(path)
    assert doc is not None and doc["writer"]["agent"] in ("proj/zeus", "proj/hera")
    assert [a["id"] for a in doc["projects"]["proj"]["agents"]] == ["proj/zeus"]

    task = await TaskBoard(client, keys).add("proj", title="new work", created_by="cli")
    started = time.monotonic()
    await async_wait_for(lambda: task.id in task_ids(path), 2.0, "the task in the file")
    assert time.monotonic() - started <= 2.5
    assert other.writes == 0


async def test_when_the_writer_stops_another_agent_takes_over(
    client: aioredis.Redis, keys: Keys, isolated_home: Path, keepers: Callable[..., SnapshotKeeper]
) -> None:
    first = keepers("proj/zeus", interval_s=0.1)
    first.start()
    await async_wait_for(lambda: first.seat.held, 5, "the first keeper to hold the seat")
    second = keepers("proj/hera", interval_s=0.1)
    second.start()

    await first.aclose()
    assert not first.seat.held
    await async_wait_for(lambda: second.seat.held, 3, "the second keeper to take over")
    task = await TaskBoard(client, keys).add("proj", title="after", created_by="cli")
    path = isolated_home / "session.json"
    await async_wait_for(lambda: task.id in task_ids(path), 2.0, "the task in the file")
    doc = read(path)
    assert doc is not None and doc["writer"]["agent"] == "proj/hera"


async def test_a_bus_outage_is_logged_once_and_retried_never_raised(
    own_redis: Any, isolated_home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    keys = Keys("snap:")
    client = make_client(RedisTarget(own_redis.url, "test", namespace=keys.ns))
    keeper = SnapshotKeeper(
        client, keys, agent_id="proj/zeus", project="proj", home=isolated_home, bus="x"
    )
    path = isolated_home / "session.json"
    try:
        assert await keeper.tick() is True
        own_redis.stop()
        with caplog.at_level(logging.INFO, logger=LOGGER):
            for _ in range(3):
                assert await keeper.tick() is False
            own_redis.start()
            task = await async_wait_for(
                lambda: TaskBoard(client, keys).add("proj", title="back", created_by="cli"),
                10,
                "Redis to be back",
                ignore=CONNECTION_ERRORS,
            )
            assert await keeper.tick() is True
        assert task.id in task_ids(path)
        messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
        assert len([m for m in messages if "not refreshed" in m]) == 1
        assert messages[-1] == "session snapshot refreshing again"
    finally:
        await keeper.aclose()
        await client.aclose()


async def test_a_home_that_cannot_be_written_is_logged_and_retried(
    tmp_path: Path, keepers: Callable[..., SnapshotKeeper], caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    keeper = keepers("proj/zeus", home=blocker / "home")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert await keeper.tick() is False
        assert await keeper.tick() is False
    assert keeper.seat.held and keeper.writes == 0
    assert len([r for r in caplog.records if r.name == LOGGER]) == 1


async def test_a_running_agent_keeps_the_file_and_its_last_snapshot_drops_it(
    target: RedisTarget, client: aioredis.Redis, tmp_path: Path, isolated_home: Path
) -> None:
    agent = Agent(standalone_agent("proj", "zeus", tmp_path), target, EchoProvider())
    path = isolated_home / "session.json"
    await agent.start()
    running = True
    try:

        def idle() -> list[dict[str, Any]]:
            doc = read(path)
            rows = doc["projects"]["proj"]["agents"] if doc else []
            return rows if [r["state"] for r in rows] == ["idle"] else []

        [row] = await async_wait_for(idle, 5, "the agent in the file, idle")
        assert row["id"] == "proj/zeus"
        doc = read(path)
        assert doc is not None and doc["writer"]["agent"] == "proj/zeus"
        seat = agent.parts.snapshot.seat.key

        await agent.stop()
        running = False

        doc = read(path)
        assert doc is not None and doc["projects"]["proj"]["agents"] == []
        assert not await client.exists(seat)  # given up, not left to lapse
    finally:
        if running:
            await agent.stop()


async def test_a_tick_with_nothing_new_renders_nothing_and_a_replaced_file_is_put_right(
    client: aioredis.Redis,
    keys: Keys,
    isolated_home: Path,
    keepers: Callable[..., SnapshotKeeper],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rendered: list[float] = []
    real_to_json = Snapshot.to_json

    def counted(self: Snapshot) -> Any:
        rendered.append(self.generated_at)
        return real_to_json(self)

    monkeypatch.setattr(Snapshot, "to_json", counted)
    await join(client, keys, "proj/zeus")
    keeper = keepers("proj/zeus")
    assert await keeper.tick() is True and len(rendered) == 1
    # Issue 28 §4: an idle team costs a host the reading of what changed, not a document.
    assert await keeper.tick() is False and await keeper.tick() is False
    assert len(rendered) == 1

    path = isolated_home / "session.json"
    path.write_text('{"someone": "else"}')
    assert await keeper.tick() is True and len(rendered) == 2
    assert read(path) is not None and "projects" in (read(path) or {})

    await join(client, keys, "proj/hera")
    assert await keeper.tick() is True and len(rendered) == 3
