"""Plan approval and delegate mode of one agent, on its own (issue 26).

:class:`WorkModes` over a real ``state/modes.json``; the registry entry it publishes and
the inputs it queues are read back. The whole agent is driven by the integration tests.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from ateam.agent.loop.modes import PLAN_SOURCE, WorkModes, task_key
from ateam.agent.state.modes import ModeStore, PlanStatus
from ateam.agent.state.queue_item import QueueItem
from ateam.config import AgentConfig, standalone_agent
from ateam.errors import BadRequest, Code, PlanRequired, ToolDenied
from ateam.wire.board import BoardTask, TaskStatus
from ateam.wire.results import AgentEntry


class Status:
    """What WorkModes uses of AgentStatus: the entry and touch()."""

    def __init__(self) -> None:
        self.entry = AgentEntry(id="p/a", name="a", project="p")
        self.touched = 0

    def touch(self) -> None:
        self.touched += 1


def item(n: int, *, trace: str = "t1", source: str = "cli") -> QueueItem:
    return QueueItem(id=f"q-{n}-000", text="x", source=source, enqueued_at=0.0, trace_id=trace)


def board_task(require_plan: bool) -> BoardTask:
    return BoardTask(
        id="t-1",
        project="p",
        title="x",
        status=TaskStatus.CLAIMED,
        created_by="cli",
        created=1,
        updated=1,
        require_plan=require_plan,
    )


def config(tmp_path: Path, **spec: Any) -> AgentConfig:
    base = standalone_agent("p", "a", tmp_path)
    return dataclasses.replace(base, spec=base.spec.model_copy(update=spec))


def modes(cfg: AgentConfig, *, requires: bool = False) -> tuple[WorkModes, Status, list[Any]]:
    status = Status()
    queued: list[Any] = []

    async def lookup(task_id: str) -> BoardTask | None:
        return board_task(requires)

    made = WorkModes(cfg, ModeStore(cfg.state_dir), status, lookup)  # type: ignore[arg-type]
    made.enqueue = lambda text, **kw: queued.append((text, kw))
    return made, status, queued


async def test_an_agent_that_requires_a_plan_is_read_only_until_approved(tmp_path: Path) -> None:
    cfg = config(tmp_path, require_plan=True)
    cfg.state_dir.mkdir(parents=True)
    gate, status, queued = modes(cfg)
    with pytest.raises(PlanRequired):
        await gate.check("fs.write", item(1))
    await gate.check("plan.write", item(1))  # writing the plan is what it should do
    assert status.entry.plan == "awaiting approval"

    gate.answer(False, by="lead", feedback="test first")
    assert queued[-1][1] == {"source": PLAN_SOURCE, "trace_id": "t1"}
    assert "Feedback: test first" in queued[-1][0]
    with pytest.raises(PlanRequired):
        await gate.check("fs.write", item(2))  # the rejection's input: same task, still no

    gate.answer(True, by="lead")
    assert "approved" in queued[-1][0] and status.entry.plan == "approved"
    await gate.check("fs.write", item(3))  # the approval's input continues the task
    await gate.check("os.exec", item(4, trace="t1"))

    # Durable: a new process reads the same approval for the same task ...
    again, _, _ = modes(cfg)
    await again.check("fs.write", item(5))
    assert again.plan is not None and again.plan.status is PlanStatus.APPROVED
    # ... and a new task starts unapproved.
    with pytest.raises(PlanRequired):
        await again.check("fs.write", item(6, trace="t2"))


async def test_only_board_tasks_that_ask_for_a_plan_need_one(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    cfg.state_dir.mkdir(parents=True)
    gate, _, queued = modes(cfg, requires=True)
    await gate.check("fs.write", item(1))  # a plain input: no plan needed
    on_board = item(2, source="board:t-1")
    with pytest.raises(PlanRequired):
        await gate.check("fs.write", on_board)
    assert task_key(on_board) == "board:t-1"
    assert gate.holds_back(on_board)  # ended now, the board task would stay claimed
    assert gate.holding_board_task  # and the agent takes no other board task meanwhile
    gate.answer(True, by="a person (cli)")
    assert queued[-1][1]["source"] == "board:t-1"  # the work goes on as the board task
    assert not gate.holds_back(on_board) and not gate.holding_board_task

    free, _, _ = modes(config(tmp_path / "b"), requires=False)
    await free.check("fs.write", item(3, source="board:t-1"))


def test_an_answer_needs_a_task_waiting_and_a_rejection_feedback(tmp_path: Path) -> None:
    cfg = config(tmp_path, require_plan=True)
    cfg.state_dir.mkdir(parents=True)
    gate, _, queued = modes(cfg)
    with pytest.raises(BadRequest, match="no plan awaiting approval"):
        gate.answer(True, by="x")
    assert not queued


async def test_delegate_mode_from_config_and_toggled_durably(tmp_path: Path) -> None:
    cfg = config(tmp_path, delegate=True)
    cfg.state_dir.mkdir(parents=True)
    gate, status, _ = modes(cfg)
    assert status.entry.delegate is True
    with pytest.raises(ToolDenied) as refused:
        await gate.check("os.exec", item(1))
    assert refused.value.code == Code.TOOL_DENIED
    await gate.check("team.send", item(1))
    gate.set_delegate(False)
    await gate.check("os.exec", item(1))
    again, status, _ = modes(cfg)  # the toggle outlives the process
    assert not again.delegate and status.entry.delegate is False


def test_a_damaged_state_file_reads_as_empty(tmp_path: Path) -> None:
    (tmp_path / "modes.json").write_text("{not json")
    store = ModeStore(tmp_path)
    assert store.plan is None and store.delegate is None


async def test_only_a_proven_teammate_answers_through_team_plan(agent: Any, team: Any) -> None:
    """team.plan takes no ownership, so the caller must prove it is another agent here."""
    from ateam.agent.runtime.process import Agent
    from ateam.agent.state.modes import PlanRecord
    from ateam.bus.identity import AgentIdentity
    from ateam.bus.rpc import RpcClient
    from ateam.errors import OwnershipDenied

    assert isinstance(agent, Agent)
    parts = agent.parts
    parts.modes.store.plan = PlanRecord(task="trace:x")
    lead = AgentIdentity("proj/lead")
    await parts.client.set(parts.keys.identity(lead.agent), lead.digest)
    stranger = AgentIdentity("other/lead")
    await parts.client.set(parts.keys.identity(stranger.agent), stranger.digest)
    forged = [
        ("agent:proj/lead", "a guess"),  # a name without its token
        (agent.parts.identity.caller, agent.parts.identity.token),  # itself
        (stranger.caller, stranger.token),  # another project's agent, proven
        ("console:box:1:a", lead.token),  # a person, at the wrong door
    ]
    answer = {"decision": "approve"}
    for caller, auth in forged:
        rpc = RpcClient(parts.client, parts.keys, caller=caller, auth=auth)
        with pytest.raises(OwnershipDenied):
            await rpc.call(agent.id, "team.plan", answer)
    assert parts.modes.plan is not None and not parts.modes.plan.approved
    rpc = RpcClient(parts.client, parts.keys, caller=lead.caller, auth=lead.token)
    reply = await rpc.call(agent.id, "team.plan", answer)
    assert isinstance(reply, dict) and reply["plan"] == "approved"
    # A person's answer is mutating: the owner's, or a one-call claim.
    state = await team.agent(agent.id).modes.reject("again, smaller")
    assert state.status == "rejected" and state.feedback == "again, smaller"
