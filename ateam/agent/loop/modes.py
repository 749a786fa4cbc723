"""The agent's working modes at run time: plan approval and delegate mode (issue 26).

**Plan approval.** A task needs an approved plan when the agent says so
(``agent.yaml`` ``require_plan: true``: every task) or its board task does
(``tasks add --require-plan``). Until the plan is approved the agent is read-only
(:mod:`ateam.tools.mode`): it writes its plan with ``plan.write`` and waits. A task is
known by its key: ``board:<id>`` for a board task, else ``trace:<trace id>`` — the
thread, so the inputs that continue it (the answer to the plan, a teammate's reply) stay
in the task, while a new input from a person or a teammate is a new task and starts
unapproved. The approval of the newest such task is kept in ``state/modes.json``
(:class:`~ateam.agent.state.modes.ModeStore`), so it outlives a restart.

An answer (:meth:`WorkModes.answer`) comes from a person (``/plan approve``, ``ateam
plan approve``) or a lead agent (the ``plan.approve`` tool) and is queued as the agent's
next input in the task's thread: an approval tells the model to go ahead, a rejection
carries the feedback. A board task whose item ends before its plan is approved stays
claimed (:meth:`WorkModes.holds_back`), and the answer's input is queued as that board
task again, so the task is marked done only once its work is.

**Delegate mode.** Coordination tools only. ``agent.yaml`` ``delegate`` sets the
default; ``/delegate on|off`` overrides it at run time, kept in ``state/modes.json``
across restarts until toggled again.

Both are shown in the registry entry (``plan``, ``delegate``), so ``ps`` shows them.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from ateam.agent.loop.board_puller import SOURCE_PREFIX as BOARD_SOURCE
from ateam.agent.loop.status import AgentStatus
from ateam.agent.state.modes import ModeStore, PlanRecord, PlanStatus
from ateam.agent.state.queue_item import QueueItem
from ateam.config import AgentConfig
from ateam.errors import BadRequest
from ateam.tools.mode import WorkMode, mode_refusal
from ateam.wire.board import BoardTask
from ateam.wire.modes import PLAN_APPROVED, PLAN_AWAITING, ModesResult

__all__ = ["PLAN_SOURCE", "WorkModes", "task_key"]

PLAN_SOURCE = "plan"
"""The source of the input that carries an answer to a plan (a board task's keeps its own)."""

BoardLookup = Callable[[str], Awaitable[BoardTask | None]]
"""A board task of the agent's project by id; ``None`` if there is none."""
Enqueue = Callable[..., Any]
"""The worker's ``enqueue(text, *, source, trace_id)``."""


def task_key(item: QueueItem) -> str:
    """The task ``item`` belongs to, as plan approval counts tasks."""
    if item.source.startswith(BOARD_SOURCE):
        return item.source
    return f"trace:{item.trace_id or item.id}"


_ANSWERS: dict[PlanStatus, str] = {
    PlanStatus.APPROVED: (
        "[plan approved by {by}]\nYour plan is approved: carry it out now (plan.read shows "
        "it); edits and commands are allowed again.{note}"
    ),
    PlanStatus.REJECTED: (
        "[plan rejected by {by}]\nFeedback: {note}\nRevise the plan with plan.write, then "
        "wait for approval; edits and commands stay refused until then."
    ),
}
"""The input an answer queues, by answer."""


class WorkModes:
    """Plan approval and delegate mode of one agent.

    Args:
        config: the agent (``require_plan``, ``delegate``).
        store: ``state/modes.json``.
        status: where the registry entry is published.
        board_task: reads a board task (its ``require_plan``).
    """

    def __init__(
        self,
        config: AgentConfig,
        store: ModeStore,
        status: AgentStatus,
        board_task: BoardLookup,
    ) -> None:
        self._config = config
        self.store = store
        """``state/modes.json``, as loaded and kept."""
        self._status = status
        self._board_task = board_task
        self.enqueue: Enqueue | None = None
        """How an answer reaches the model (the worker's enqueue; wired by the root)."""
        self._needs: tuple[str, bool] | None = None
        """(item id, whether it needs a plan): one board read per item, not per call."""
        self._publish()

    # reading -------------------------------------------------------------------------

    @property
    def delegate(self) -> bool:
        toggled = self.store.delegate
        return self._config.spec.delegate if toggled is None else toggled

    @property
    def plan(self) -> PlanRecord | None:
        return self.store.plan

    def view(self) -> ModesResult:
        record = self.store.plan
        return ModesResult(
            require_plan=self._config.spec.require_plan,
            plan=_shown(record),
            task=None if record is None else record.task,
            status=None if record is None else record.status.value,
            feedback="" if record is None else record.feedback,
            by="" if record is None else record.by,
            at=0.0 if record is None else record.at,
            delegate=self.delegate,
        )

    # the gate ------------------------------------------------------------------------

    async def check(self, tool: str, item: QueueItem) -> None:
        """Raise the refusal of ``tool`` for ``item`` under the current modes, if any."""
        refusal = mode_refusal(tool, await self.mode_for(item))
        if refusal is not None:
            raise refusal

    async def mode_for(self, item: QueueItem) -> WorkMode:
        """The limits on ``item``'s tool calls; a task that needs a plan is noted here."""
        needs = await self._needs_plan(item)
        pending = False
        if needs:
            key = task_key(item)
            record = self.store.plan
            if record is None or record.task != key:
                # A new task: whatever was approved before was another task's plan.
                record = PlanRecord(task=key, trace_id=item.trace_id)
                self.store.plan = record
                self._save()
            pending = not record.approved
        return WorkMode(delegate=self.delegate, plan_pending=pending)

    async def _needs_plan(self, item: QueueItem) -> bool:
        if self._config.spec.require_plan:
            return True
        if not item.source.startswith(BOARD_SOURCE):
            return False
        if self._needs is not None and self._needs[0] == item.id:
            return self._needs[1]
        task = await self._board_task(item.source.removeprefix(BOARD_SOURCE))
        needs = task is not None and task.require_plan
        self._needs = (item.id, needs)
        return needs

    def holds_back(self, item: QueueItem) -> bool:
        """Whether ``item``, a board task's, ended before its plan was approved: the task
        stays claimed, and the answer's input carries it on."""
        record = self.store.plan
        return (
            item.source.startswith(BOARD_SOURCE)
            and record is not None
            and record.task == task_key(item)
            and not record.approved
        )

    @property
    def holding_board_task(self) -> bool:
        """A board task of this agent waits for its plan's approval: it takes no other
        (one plan waits at a time; the answer carries that task on)."""
        record = self.store.plan
        return record is not None and record.task.startswith(BOARD_SOURCE) and not record.approved

    # changing ------------------------------------------------------------------------

    def answer(self, approve: bool, *, by: str, feedback: str = "") -> ModesResult:
        """Approve (or reject, with ``feedback``) the plan of the task that waits for one,
        and queue the answer as the agent's next input in that task.

        Raises:
            BadRequest: no task of this agent has needed a plan yet, or a rejection
                without feedback.
        """
        record = self.store.plan
        if record is None:
            raise BadRequest(
                f"{self._config.id} has no plan awaiting approval (no task of it has needed one)"
            )
        if not approve and not feedback.strip():
            raise BadRequest("a rejection needs feedback: what should change in the plan")
        status = PlanStatus.APPROVED if approve else PlanStatus.REJECTED
        if approve and record.approved:
            return self.view()  # said twice: the first answer stands, nothing is re-queued
        record.status, record.feedback, record.by = status, feedback, by
        record.at = time.time()
        self._save()
        if self.enqueue is not None:
            note = feedback if not approve else (f"\nNote: {feedback}" if feedback else "")
            source = record.task if record.task.startswith(BOARD_SOURCE) else PLAN_SOURCE
            self.enqueue(
                _ANSWERS[status].format(by=by, note=note), source=source, trace_id=record.trace_id
            )
        return self.view()

    def set_delegate(self, on: bool) -> ModesResult:
        """Delegate mode on or off for this agent, from now on and across restarts."""
        self.store.delegate = on
        self._save()
        return self.view()

    def _save(self) -> None:
        self.store.save()
        self._publish()

    def _publish(self) -> None:
        entry = self._status.entry
        shown, delegate = _shown(self.store.plan), self.delegate
        if (entry.plan, entry.delegate) != (shown, delegate):
            entry.plan, entry.delegate = shown, delegate
            self._status.touch()


def _shown(record: PlanRecord | None) -> str | None:
    if record is None:
        return None
    return PLAN_APPROVED if record.approved else PLAN_AWAITING
