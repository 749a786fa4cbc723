"""Plan approval and delegate mode of one agent, on its own (issue 26).

:class:`WorkModes` over a real ``state/modes.json``; the registry entry it publishes and
the inputs it queues are read back. The whole agent is driven by the integration tests.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from ateam.agent.loop.modes import PLAN_SOURCE, WorkModes, task_key
from ateam.agent.state.modes import KEPT_PLANS, ModeStore, PlanRecord, PlanStatus
from ateam.agent.state.queue import DurableQueue
from ateam.agent.state.queue_item import QueueItem
from ateam.config import AgentConfig, standalone_agent
from ateam.errors import BadRequest, Code, LockLost, PlanRequired, ToolDenied
from ateam.redact import Redactor
from ateam.wire.board import BoardTask, TaskStatus
from ateam.wire.modes import (
    MAX_FEEDBACK,
    PlanAnswerParams,
    PlanRejectParams,
    PlanReviewParams,
)
from ateam.wire.results import AgentEntry

SECRET = "ghp_" + "a1B2c3D4e5F6" * 3


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
    assert queued[-1][1] | {"rid": None} == {
        "source": PLAN_SOURCE,
        "trace_id": "t1",
        "reply_to": None,
        "rid": None,
    }
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
    assert not gate.holding_board_task
    # The item that ran while the plan waited stays held though the answer came before it
    # ended (its reply is the plan, not the work); the answer's input is not held.
    assert gate.holds_back(on_board)
    answer = item(3, source="board:t-1")
    await gate.check("fs.write", answer)
    assert not gate.holds_back(answer)

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
    parts.modes.store.put(PlanRecord(task="trace:x"))
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


# Review findings (issue 26) --------------------------------------------------------------


async def test_an_answer_while_the_plan_turn_runs_keeps_that_item_held(tmp_path: Path) -> None:
    """Approved before the item that wrote the plan ended: that item's reply is the plan,
    so its board task must stay claimed and unjudged; the approval's input does the work."""
    cfg = config(tmp_path)
    cfg.state_dir.mkdir(parents=True)
    gate, _, queued = modes(cfg, requires=True)
    writing = item(1, source="board:t-1")
    with pytest.raises(PlanRequired):
        await gate.check("fs.write", writing)
    gate.answer(True, by="lead")  # the model is still writing its last reply
    assert gate.holds_back(writing) and gate.held(writing)
    assert queued[-1][1]["source"] == "board:t-1"
    work = item(2, source="board:t-1")
    await gate.check("fs.write", work)
    assert not gate.holds_back(work)


async def test_a_new_input_keeps_the_held_board_tasks_plan(tmp_path: Path) -> None:
    cfg = config(tmp_path, require_plan=True)
    cfg.state_dir.mkdir(parents=True)
    gate, _, queued = modes(cfg)
    on_board = item(1, source="board:t-1")
    with pytest.raises(PlanRequired):
        await gate.check("fs.write", on_board)
    # A person's message, then the agent_idle hook's feedback: new tasks, new records.
    with pytest.raises(PlanRequired):
        await gate.check("fs.write", item(2, trace="t2"))
    with pytest.raises(PlanRequired):
        await gate.check("fs.write", item(3, trace="t3", source="hook:agent_idle"))

    again, _, queued = modes(cfg)  # and across a restart
    assert again.held_board_tasks == {"t-1"} and again.holding_board_task
    assert again.view().task == "board:t-1"  # the answer goes to the held board task
    again.answer(True, by="lead")
    assert queued[-1][1]["source"] == "board:t-1"
    assert not again.holding_board_task
    assert again.view().task == "trace:t3"  # then the newest that waits
    again.answer(False, by="lead", feedback="smaller")
    assert (queued[-1][1]["source"], queued[-1][1]["trace_id"]) == (PLAN_SOURCE, "t3")
    assert {r.task: r.status for r in again.store.plans.values()} == {
        "board:t-1": PlanStatus.APPROVED,
        "trace:t2": PlanStatus.PENDING,
        "trace:t3": PlanStatus.REJECTED,
    }


async def test_the_answer_of_a_plan_asked_with_reply_goes_back_to_the_asker(
    tmp_path: Path,
) -> None:
    cfg = config(tmp_path, require_plan=True)
    cfg.state_dir.mkdir(parents=True)
    gate, _, queued = modes(cfg)
    asked = dataclasses.replace(item(1, source="agent:p/lead"), reply_to="p/lead")
    await gate.check("plan.write", asked)
    assert gate.held(asked)  # the worker sends no answer back for it: it is the plan
    gate.answer(False, by="lead", feedback="more tests")
    assert queued[-1][1]["reply_to"] == "p/lead"
    again, _, queued = modes(cfg)  # kept in the record, across a restart
    again.answer(True, by="lead")
    assert queued[-1][1]["reply_to"] == "p/lead"


def queue_enqueue(queue: DurableQueue) -> Any:
    """The worker's enqueue, as far as answers use it: a known request id is not re-added."""

    def enqueue(text: str, *, source: str, rid: str | None = None, **kw: Any) -> None:
        if rid is None or queue.find_rid(rid) is None:
            queue.append(text, source=source, rid=rid, **kw)

    return enqueue


async def test_an_approval_killed_before_it_was_saved_is_not_lost_nor_doubled(
    tmp_path: Path,
) -> None:
    cfg = config(tmp_path, require_plan=True)
    cfg.state_dir.mkdir(parents=True)
    queue = DurableQueue(cfg.state_dir)
    queue.open()
    gate, _, _ = modes(cfg)
    await gate.check("plan.write", item(1))

    def killed(what: str) -> None:
        raise LockLost("killed here")

    dying = WorkModes(cfg, ModeStore(cfg.state_dir, fence=killed), Status(), gate._board_task)  # type: ignore[arg-type]
    dying.enqueue = queue_enqueue(queue)
    with pytest.raises(LockLost):
        dying.answer(True, by="lead")
    assert len(queue) == 1  # queued before the save that did not happen

    restarted, _, _ = modes(cfg)
    assert restarted.plan is not None and not restarted.plan.approved
    restarted.enqueue = queue_enqueue(queue)
    restarted.answer(True, by="lead")  # answered again: the same request id
    restarted.answer(True, by="lead")  # and said twice
    assert len(queue) == 1
    assert modes(cfg)[0].view().plan == "approved"


async def test_plan_feedback_is_redacted_and_bounded(tmp_path: Path) -> None:
    cfg = config(tmp_path, require_plan=True)
    cfg.state_dir.mkdir(parents=True)
    status = Status()

    async def lookup(task_id: str) -> BoardTask | None:
        return None

    gate = WorkModes(cfg, ModeStore(cfg.state_dir), status, lookup, redact=Redactor().redact)  # type: ignore[arg-type]
    await gate.check("plan.write", item(1))
    gate.answer(False, by="lead", feedback=f"use the token {SECRET}")
    gate.answer(True, by="lead", feedback=f"note {SECRET}")
    gate2 = modes(cfg)[0]
    await gate2.check("plan.write", item(2, trace="t2"))
    gate3 = WorkModes(cfg, ModeStore(cfg.state_dir), status, lookup, redact=Redactor().redact)  # type: ignore[arg-type]
    state = gate3.answer(False, by="lead", feedback=f"again {SECRET}")
    assert SECRET not in state.feedback and "****" in state.feedback
    assert SECRET not in (cfg.state_dir / "modes.json").read_text()
    for params, field in [
        (PlanRejectParams, "feedback"),
        (PlanAnswerParams, "note"),
        (PlanReviewParams, "feedback"),
    ]:
        with pytest.raises(ValidationError):
            params.model_validate({"decision": "reject", field: "x" * (MAX_FEEDBACK + 1)})


def test_old_records_make_room_but_a_waiting_board_tasks_stays(tmp_path: Path) -> None:
    store = ModeStore(tmp_path)
    store.put(PlanRecord(task="board:t-1"))
    for n in range(KEPT_PLANS + 4):
        store.put(PlanRecord(task=f"trace:{n}", status=PlanStatus.APPROVED))
    store.save()
    kept = list(ModeStore(tmp_path).plans)
    assert kept[0] == "board:t-1" and len(kept) == KEPT_PLANS + 1
    assert kept[-1] == f"trace:{KEPT_PLANS + 3}" and "trace:0" not in kept
