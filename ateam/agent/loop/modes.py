"""The agent's working modes at run time: plan approval and delegate mode (issue 26).

**Plan approval.** A task needs an approved plan when the agent says so
(``agent.yaml`` ``require_plan: true``: every task) or its board task does
(``tasks add --require-plan``). Until the plan is approved the agent is read-only
(:mod:`ateam.tools.mode`): it writes its plan with ``plan.write`` and waits. A task is
known by its key: ``board:<id>`` for a board task, else ``trace:<trace id>`` — the
thread, so the inputs that continue it (the answer to the plan, a teammate's reply) stay
in the task, while a new input from a person or a teammate is a new task and starts
unapproved. Each such task's approval is kept in ``state/modes.json``
(:class:`~ateam.agent.state.modes.ModeStore`), one record per task, so a new input does
not erase a waiting one and the approval outlives a restart.

An answer (:meth:`WorkModes.answer`) comes from a person (``/plan approve``, ``ateam
plan approve``) or a lead agent (the ``plan.approve`` tool) and is queued as the agent's
next input in the task's thread: an approval tells the model to go ahead, a rejection
carries the feedback. A board task whose item ends before its plan is approved stays
claimed (:meth:`WorkModes.holds_back`) — also when the answer came while that item was
still running — and the answer's input is queued as that board task again, so the task is
marked done only once its work is. Likewise a teammate that asked for an answer gets the
work's, not the plan's: the answer's input carries its ``reply_to``.

**Delegate mode.** Coordination tools only. ``agent.yaml`` ``delegate`` sets the
default; ``/delegate on|off`` overrides it at run time, kept in ``state/modes.json``
across restarts until toggled again.

Both are shown in the registry entry (``plan``, ``delegate``), so ``ps`` shows them.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ateam.agent.loop.board_puller import SOURCE_PREFIX as BOARD_SOURCE
from ateam.agent.loop.status import AgentStatus
from ateam.agent.state.modes import ModeStore, PlanRecord, PlanStatus
from ateam.agent.state.queue_item import QueueItem
from ateam.bus.subscription import SOFT_ERRORS
from ateam.config import AgentConfig
from ateam.errors import BadRequest
from ateam.tools.mode import WorkMode, mode_refusal
from ateam.wire.board import BoardTask
from ateam.wire.modes import PLAN_APPROVED, PLAN_AWAITING, ModesResult

__all__ = ["PLAN_SOURCE", "WorkModes", "task_key"]

PLAN_SOURCE = "plan"
"""The source of the input that carries an answer to a plan (a board task's keeps its own)."""

HELD_REMEMBERED = 64
"""Items remembered as run while their plan waited (only the one that just ended counts)."""

BoardLookup = Callable[[str], Awaitable[BoardTask | None]]
"""A board task of the agent's project by id; ``None`` if there is none."""
Enqueue = Callable[..., Any]
"""The worker's ``enqueue(text, *, source, trace_id, reply_to, rid)``."""


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
        *,
        redact: Callable[[str], str] = lambda text: text,
    ) -> None:
        self._config = config
        self.store = store
        """``state/modes.json``, as loaded and kept."""
        self._status = status
        self._board_task = board_task
        self._redact = redact
        """Masks secrets in an answer's words before they are kept or shown."""
        self.enqueue: Enqueue | None = None
        """How an answer reaches the model (the worker's enqueue; wired by the root)."""
        self._needs: tuple[str, bool] | None = None
        """(item id, whether it needs a plan): one board read per item, not per call."""
        self._held: dict[str, None] = {}
        """Ids of the items a tool call of which found their plan waiting (newest last):
        such an item ended without its task's work, even if the answer came meanwhile."""
        self._publish()

    # reading -------------------------------------------------------------------------

    @property
    def delegate(self) -> bool:
        toggled = self.store.delegate
        return self._config.spec.delegate if toggled is None else toggled

    @property
    def plan(self) -> PlanRecord | None:
        """The plan an answer applies to: a held board task's first (it keeps its claim
        and the board waiting), else the newest that waits, else the newest."""
        plans = list(self.store.plans.values())
        waiting = [r for r in plans if not r.approved]
        board = [r for r in waiting if r.task.startswith(BOARD_SOURCE)]
        return next(iter(board or waiting[::-1] or plans[::-1]), None)

    def view(self) -> ModesResult:
        record = self.plan
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
            record = self.store.plans.get(key)
            if record is None:
                # A new task: whatever was approved before was another task's plan.
                record = PlanRecord(task=key, trace_id=item.trace_id, reply_to=item.reply_to)
                self.store.put(record)
                self._save()
            pending = not record.approved
        if pending:
            self._held[item.id] = None
            while len(self._held) > HELD_REMEMBERED:
                del self._held[next(iter(self._held))]
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

    def held(self, item: QueueItem) -> bool:
        """Whether ``item`` ended without its task's work: it ran while the plan waited
        (a tool call found it so, though the answer may have come since) or the plan
        waits still. Its answer is not the task's: the answer's input carries it on."""
        if item.id in self._held:
            return True
        record = self.store.plans.get(task_key(item))
        return record is not None and not record.approved

    def holds_back(self, item: QueueItem) -> bool:
        """Whether ``item``, a board task's, ended before its plan was approved: the task
        stays claimed, and the answer's input carries it on."""
        return item.source.startswith(BOARD_SOURCE) and self.held(item)

    @property
    def held_board_tasks(self) -> set[str]:
        """The ids of this agent's board tasks that wait for their plan's approval: held
        on purpose, not strays (kept claimed across a restart)."""
        keys = [r.task for r in self.store.plans.values() if not r.approved]
        return {k.removeprefix(BOARD_SOURCE) for k in keys if k.startswith(BOARD_SOURCE)}

    async def forget_unheld(self, holds: Callable[[str], Awaitable[str | None]]) -> None:
        """Forget the plans of board tasks the board no longer gives this agent (failed,
        finished or reopened by someone else, while it waited or was down): nothing is
        held for them any more, and the agent takes board tasks again.

        ``holds`` is :meth:`BoardPuller.holds`: ``None`` while the claim stands, else
        why not. A board out of reach forgets nothing (asked again when next idle).
        """
        gone = []
        for task_id in sorted(self.held_board_tasks):
            try:
                why = await holds(task_id)
            except SOFT_ERRORS:
                return
            if why is not None:
                gone.append(f"{BOARD_SOURCE}{task_id}")
        if gone:
            for key in gone:
                del self.store.plans[key]
            self._save()

    @property
    def holding_board_task(self) -> bool:
        """A board task of this agent waits for its plan's approval: it takes no other
        (one plan waits at a time; the answer carries that task on)."""
        return bool(self.held_board_tasks)

    # changing ------------------------------------------------------------------------

    def answer(self, approve: bool, *, by: str, feedback: str = "") -> ModesResult:
        """Approve (or reject, with ``feedback``) the plan of the task that waits for one,
        and queue the answer as the agent's next input in that task.

        The input is queued before the answer is saved, under a request id made of the
        task, the answer and the time the record last changed: killed in between, the plan
        still waits, and answering it again derives the same id; a repeated approval
        queues its input again under the id it kept. The queue recognises a known id, so
        nothing runs twice and nothing is lost.

        Raises:
            BadRequest: no task of this agent has needed a plan yet, or a rejection
                without feedback.
        """
        record = self.plan
        if record is None:
            raise BadRequest(
                f"{self._config.id} has no plan awaiting approval (no task of it has needed one)"
            )
        feedback = self._redact(feedback)
        if not approve and not feedback.strip():
            raise BadRequest("a rejection needs feedback: what should change in the plan")
        status = PlanStatus.APPROVED if approve else PlanStatus.REJECTED
        if approve and record.approved:
            # Said twice: the first answer stands; its input is queued again under its
            # own request id, a no-op unless a kill lost it.
            self._queue_answer(record)
            return self.view()
        rid = f"plan:{record.task}:{status.value}:{record.at!r}"
        answered = dataclasses.replace(
            record, status=status, feedback=feedback, by=by, at=time.time(), rid=rid
        )
        self._queue_answer(answered)
        self.store.plans[record.task] = answered
        self._save()
        return self.view()

    def _queue_answer(self, record: PlanRecord) -> None:
        if self.enqueue is None:
            return
        note = record.feedback
        if record.approved:
            note = f"\nNote: {note}" if note else ""
        source = record.task if record.task.startswith(BOARD_SOURCE) else PLAN_SOURCE
        self.enqueue(
            _ANSWERS[record.status].format(by=record.by, note=note),
            source=source,
            trace_id=record.trace_id,
            reply_to=record.reply_to,
            rid=record.rid,
        )

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
        shown, delegate = _shown(self.plan), self.delegate
        if (entry.plan, entry.delegate) != (shown, delegate):
            entry.plan, entry.delegate = shown, delegate
            self._status.touch()


def _shown(record: PlanRecord | None) -> str | None:
    if record is None:
        return None
    return PLAN_APPROVED if record.approved else PLAN_AWAITING
