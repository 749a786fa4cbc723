"""Acknowledged inputs survive kill -9; a torn queue line is repaired (SPEC §5.2, §5.3, §12)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from ateam.bus.ownership import Ownership
from ateam.bus.rpc import RpcClient
from tests._wait import wait_for

from .conftest import (
    KEYS,
    START_TIMEOUT_S,
    AgentFactory,
    Bus,
    run_ateam,
    wait_serving,
    write_project,
)

pytestmark = pytest.mark.integration


def history_turns(state_dir: Path) -> list[dict[str, object]]:
    path = state_dir / "history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def test_acknowledged_inputs_survive_kill9_mid_task(
    start_agent: AgentFactory, bus: Bus, client: aioredis.Redis, tmp_path: Path
) -> None:
    root = write_project(tmp_path / "vault", "vault", delay_ms=50)
    agent_id = "vault/zeus"
    first = start_agent(agent_id, cwd=root)
    session = "test:durability"
    owner = Ownership(client, KEYS, session)
    await owner.acquire(agent_id)
    rpc = RpcClient(client, KEYS, caller=session, auth=owner.token)
    texts = [
        " ".join(f"{tag}{i}" for i in range(12)) for tag in ("alpha", "beta", "gamma", "delta")
    ]
    acked = [await rpc.call(agent_id, "input", {"text": text}, timeout=5) for text in texts]
    ids = [str(reply["id"]) for reply in acked]

    # Kill it while the first task is streaming, with the other three still queued.
    def first_task_streaming() -> bool:
        return any(
            b.get("type") == "token" and b.get("task_id") == ids[0] for _, b in bus.events(agent_id)
        )

    wait_for(first_task_streaming, START_TIMEOUT_S, "the first task to stream tokens")
    assert not bus.task_ends(agent_id), "the agent finished a task before being killed"
    first.kill9()

    second = start_agent(agent_id, cwd=root, wait=False)
    wait_serving(bus, second)

    def all_ended() -> dict[str, dict[str, object]] | None:
        ends = bus.task_ends(agent_id)
        return ends if all(i in ends for i in ids) else None

    ends = wait_for(
        all_ended, 4 * START_TIMEOUT_S, "every acknowledged input to finish after the restart"
    )

    assert all(ends[i]["ok"] is True for i in ids), ends
    state_dir = root / ".ateam" / "agents" / "zeus" / "state"
    answers = {
        t["task_id"]: t["content"] for t in history_turns(state_dir) if t["role"] == "assistant"
    }
    for task_id, text in zip(ids, texts, strict=True):
        assert answers.get(task_id) == f"echo: {text}"
    warns = [b["msg"] for _, b in bus.events(agent_id) if b.get("type") == "warn"]
    assert any(ids[0] in w and "put back at the head" in w for w in warns), warns
    # Processed in the order they were acknowledged.
    starts = [b["task_id"] for _, b in bus.events(agent_id) if b.get("type") == "task.start"]
    assert list(dict.fromkeys(starts)) == ids


def test_torn_last_queue_line_is_repaired_and_reported(
    start_agent: AgentFactory, bus: Bus, redis_url: str, isolated_home: Path
) -> None:
    agent_id = "torn/zeus"
    agent = start_agent(agent_id)
    sent = run_ateam("send", agent_id, "before the tear", "--redis", redis_url)
    assert sent.returncode == 0, sent.stderr
    first_id = sent.stdout.strip()
    wait_for(lambda: first_id in bus.task_ends(agent_id), START_TIMEOUT_S, "the first task")
    assert agent.terminate() == 0

    queue = isolated_home / "projects" / "torn" / "agents" / "zeus" / "state" / "queue.jsonl"
    with queue.open("ab") as fh:
        fh.write(b'{"op": "add", "id": "q-9999999999999-000", "text": "half a li')

    restarted = start_agent(agent_id)

    warns = [b for _, b in bus.events(agent_id) if b.get("type") == "warn"]
    repaired = [w for w in warns if w.get("code") == "storage.damaged"]
    assert any("repaired torn last line" in w["msg"] for w in repaired), warns
    repaired_text = queue.read_text()
    assert "half a li" not in repaired_text
    for line in repaired_text.splitlines():
        json.loads(line)
    # The agent works normally afterwards, and the report is visible to a person.
    sent = run_ateam("send", agent_id, "after the repair", "--redis", redis_url)
    assert sent.returncode == 0, sent.stderr
    wait_for(
        lambda: sent.stdout.strip() in bus.task_ends(agent_id), START_TIMEOUT_S, "the new task"
    )
    tail = run_ateam("tail", agent_id, "--from", "1", "--redis", redis_url)
    assert tail.returncode == 0, tail.stderr
    assert f"[A:{agent_id}] warn: queue: repaired torn last line" in tail.stdout
    assert f"[A:{agent_id}] echo: after the repair" in tail.stdout
    assert "q-9999999999999-000" not in bus.task_ends(agent_id)
    assert restarted.running()
