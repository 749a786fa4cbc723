"""The agent process in-process: worker supervision, status and the method catalogue."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from ateam.agent.loop.control import TaskControl
from ateam.agent.runtime.process import Agent
from ateam.agent.state.queue_item import QueueItem
from ateam.bus.connection import RedisTarget
from ateam.config import standalone_agent
from ateam.exits import EXIT_WORKER_CRASHED
from ateam.providers import EchoProvider
from tests._wait import async_wait_for


@pytest.fixture
async def agent(target: RedisTarget, tmp_path: Path) -> AsyncIterator[Agent]:
    a = Agent(standalone_agent("proj", "zeus", tmp_path), target, EchoProvider())
    await a.start()
    yield a
    await a.stop()


async def test_worker_crash_is_restarted_once_and_a_second_within_5s_exits_15(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_run = agent.parts.runner.run
    crashes: list[str] = []

    async def crash_on_boom(item: QueueItem, control: TaskControl) -> Any:
        if item.text.startswith("boom"):
            crashes.append(item.id)
            raise RuntimeError("worker bug")
        return await real_run(item, control)

    monkeypatch.setattr(agent.parts.runner, "run", crash_on_boom)
    agent.parts.worker.enqueue("boom 1", source="test")
    agent.parts.worker.enqueue("fine", source="test")
    # After the first crash the worker comes back (after 1 s) and runs the next item.
    await async_wait_for(
        lambda: any(t.get("content") == "echo: fine" for t in agent.parts.history.tail(5)), 5
    )
    assert agent.exit_code == 0 and not agent._stop.is_set()
    agent.parts.worker.enqueue("boom 2", source="test")
    agent.parts.worker.enqueue("boom 3", source="test")
    await async_wait_for(agent._stop.is_set, 5)
    assert agent.exit_code == EXIT_WORKER_CRASHED
    # The second crash came within 5 s of the first: no third chance for "boom 3".
    assert len(crashes) == 2
    # A crashed item is finished as failed, not left to crash the next start as well.
    assert [item.text for item in agent.parts.queue.pending()] == ["boom 3"]


async def test_status_reports_state_and_offsets(agent: Agent) -> None:
    from ateam.agent.runtime.service import build_methods
    from ateam.bus.rpc import Call

    methods = build_methods(agent.port)
    reply = await methods["status"].handler(Call("r", "status", {}, None, 0))
    assert reply["id"] == "proj/zeus" and reply["state"] == "idle"
    assert reply["last_offset"] == agent.parts.events.last_offset
    mutating = {name for name, m in methods.items() if m.mutating}
    assert mutating == {
        "input", "interrupt", "cancel", "queue.clear", "queue.retry", "history.clear", "shutdown",
        "alert.ack",
        "approval.answer", "prompt.append", "prompt.set", "prompt.reload",
        "model.use", "model.save", "context.summarize", "offload.propose",
        "plan.write", "plan.append", "plan.delete", "kb.ingest", "kb.import",
        "plan.approve", "plan.reject", "delegate.set",
    }  # fmt: skip


async def test_shutdown_right_after_start_does_not_hang(
    target: RedisTarget, tmp_path: Path
) -> None:
    """A stop requested with no await in between used to leave the heartbeat running."""
    for _ in range(3):
        a = Agent(standalone_agent("proj", "quick", tmp_path), target, EchoProvider())
        await a.start()
        a.request_shutdown()
        stopping = asyncio.create_task(a.stop())
        done, _ = await asyncio.wait({stopping}, timeout=10)
        assert stopping in done, "shutdown hung"
        assert a.state == "shutdown"


async def test_secrets_never_reach_events_or_history(agent: Agent) -> None:
    from ateam.bus.codec import unpack

    key = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0" * 2
    agent.parts.worker.enqueue(f"please use {key} for the build", source="test")
    await async_wait_for(
        lambda: any(t.get("role") == "assistant" for t in agent.parts.history.tail(5)), 5
    )
    await agent.parts.events.flush(5)
    history = (agent.config.state_dir / "history.jsonl").read_text()
    events = await agent.parts.client.xrange(agent.parts.keys.events(agent.id))
    bodies = [unpack(fields[b"d"]) for _, fields in events]
    assert key not in history and "****" in history
    assert not any(key in str(body) for body in bodies)
    assert any("****" in str(body.get("text", "")) for body in bodies)


async def test_an_input_is_redacted_before_it_is_queued_and_the_count_returned(
    agent: Agent,
) -> None:
    key = "sk-ant-api03-" + "Zz9Yy8Xx7Ww6" * 3
    queued = agent.parts.worker.enqueue(
        f"deploy with {key} and password=hunter2hunter2", source="test"
    )

    assert queued.redacted == 2 and queued.created
    assert key not in queued.item.text and "hunter2hunter2" not in queued.item.text
    on_disk = (agent.config.state_dir / "queue.jsonl").read_text()
    assert key not in on_disk and "hunter2hunter2" not in on_disk and "****" in on_disk


async def test_secrets_in_summaries_handoff_and_working_context_are_masked(
    agent: Agent,
) -> None:
    key = "ghp_" + "a1B2c3D4e5" * 4
    agent.parts.workctx.add_failure(f"push failed with token {key}", root_cause="token=" + key)
    agent.parts.summaries.append(f"used {key}", window=(1.0, 2.0), model="echo")
    agent.parts.keeper.refresh(status="in_progress", description=f"push with {key}")

    state = agent.config.state_dir
    written = [p for p in state.rglob("*") if p.is_file()]
    assert any(p.name == "handoff.json" for p in written)
    assert any(p.name == "summary.jsonl" for p in written)
    for path in written:
        assert key.encode() not in path.read_bytes(), path
    assert agent.parts.mirror.task is not None
    await asyncio.wait_for(agent.parts.mirror.task, 5)
    mirrored = await agent.parts.client.get(agent.parts.keys.handoff(agent.id))
    assert mirrored is not None and b"push with ****" in mirrored
    assert key.encode() not in mirrored


async def test_the_summary_log_stands_in_when_the_running_summary_is_gone(agent: Agent) -> None:
    agent.parts.summaries.append("Logged: built the parser.", window=(1.0, 2.0), model="echo")
    system = agent.parts.runner.build_context("next").messages[0].content
    assert "Logged: built the parser." in system  # the working context has no summary

    agent.parts.workctx.set_summary(
        "Running: built and tested the parser.", model="echo", tasks_covered=5
    )
    system = agent.parts.runner.build_context("next").messages[0].content
    assert "Running: built and tested the parser." in system
    assert "Logged: built the parser." not in system  # the running summary folds it in


async def test_pending_approvals_are_listed_with_their_secrets_masked(agent: Agent) -> None:
    from ateam.agent.runtime.service import AgentService
    from ateam.bus.rpc import Call

    key = "sk-proj-" + "R4t5Y6u7I8o9P0a1S2d3F4g5H6j7K8l9"
    asking = asyncio.create_task(
        agent.parts.approvals.ask(
            kind="tool",
            tool="os.exec",
            args={"cmd": f"curl -H 'Authorization: Bearer {key}' https://api"},
            task_id=None,
            trace_id=None,
            timeout_s=30,
        )
    )
    await async_wait_for(lambda: len(agent.parts.approvals) == 1, 5)
    listed = await AgentService(agent.port).approval_list(
        Call("r1", "approval.list", {}, None, 0.0)
    )
    asking.cancel()

    (request,) = listed["pending"]
    assert key not in str(request) and "****" in request["args"]["cmd"]


async def test_async_with_is_the_agents_whole_lifecycle(
    target: RedisTarget, tmp_path: Path
) -> None:
    config = standalone_agent("proj", "life", tmp_path)
    async with Agent(config, target, EchoProvider()) as a:
        assert a.state == "idle"
        a.parts.worker.enqueue("hello", source="test")
        await async_wait_for(lambda: a.parts.history.count() >= 2)
    assert a.state == "shutdown"
    # Left in order: the lock is free, so the same identity comes up again at once.
    async with Agent(config, target, EchoProvider()) as again:
        assert again.state == "idle"
        assert again.parts.history.count() >= 2
