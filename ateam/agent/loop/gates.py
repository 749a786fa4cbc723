"""The agent's quality gates (issue 26): its hooks at the steps they judge.

:class:`~ateam.tools.hooks.HookRunner` runs a command and reads its verdict; this is where
the agent asks it and acts on the answer:

==============  ===========================================================================
``before_tool``  a refusal is the tool call's result (``hook.refused`` with the feedback),
                 the tool not run (:meth:`Gates.before_tool`, asked by the native tool call)
``task_done``    a board task's answer is judged before the board hears it is done; a
                 refusal keeps the task claimed and hands the feedback to the model as a new
                 input of the same task (:class:`GatedTasks`). After
                 :data:`MAX_TASK_DONE_REFUSALS` refusals the task fails with hook.refused:
                 a gate the model cannot satisfy must not keep the task forever
``agent_idle``   asked once after each finished task, when there is nothing else to do; a
                 refusal is queued as the agent's next input (source ``hook:agent_idle``).
                 The answer to that input does not arm it again, so a hook that always
                 refuses gets one say per real task, not an endless loop
``task_created`` the ``tasks.add`` tool's board refuses the add (:class:`GatedBoard`);
                 nothing is written. The same board asks ``task_done`` before the
                 ``tasks.done`` tool marks a task done: a refusal is the tool's result
==============  ===========================================================================

Every run is a ``hook.run`` event and a ``system`` turn of the history; a hook that could
not judge (exit other than 0 or 2, a timeout) is also a ``warn`` with code
``hook.failed``, and the step goes on as if it had accepted.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from redis.exceptions import RedisError

from ateam.agent.loop.board_puller import SOURCE_PREFIX as BOARD_SOURCE
from ateam.agent.loop.control import TaskControl
from ateam.agent.loop.task import TaskOutcome, TaskRunner
from ateam.agent.state.history import History
from ateam.agent.state.queue_item import QueueItem, TaskIds
from ateam.bus.backoff import CONNECTION_ERRORS
from ateam.bus.board import TaskBoard
from ateam.bus.events import EventType
from ateam.bus.publisher import EventPublisher
from ateam.errors import Code, StorageError
from ateam.redact import Redactor
from ateam.tools.hooks import Hook, HookRun, HookRunner
from ateam.tools.services import BoardTaskItem
from ateam.wire.board import TaskStatus
from ateam.wire.turns import Turn

__all__ = ["IDLE_SOURCE", "MAX_TASK_DONE_REFUSALS", "GatedBoard", "GatedTasks", "Gates"]

log = logging.getLogger(__name__)

_BUS_ERRORS: tuple[type[BaseException], ...] = (*CONNECTION_ERRORS, RedisError)

MAX_TASK_DONE_REFUSALS: Final = 3
"""Refusals of one board task's ``task_done`` hook before the task fails with hook.refused."""
IDLE_SOURCE: Final = f"hook:{Hook.AGENT_IDLE}"
"""The source of an input queued by an ``agent_idle`` refusal."""


class Gates:
    """The agent's hooks, run at its steps, each run published and recorded.

    Args:
        runner: Runs the configured commands.
        agent_id: Who is asking (it goes into every event's JSON).
        events: Where ``hook.run`` and ``warn`` go.
        history: Where each run is kept as a ``system`` turn.
        redactor: Masks secrets in what a hook is given and in what it says.
        fence: The fencing token every recorded turn carries.
    """

    def __init__(
        self,
        runner: HookRunner,
        *,
        agent_id: str,
        events: EventPublisher,
        history: History,
        redactor: Redactor,
        fence: Callable[[], int],
    ) -> None:
        self.runner = runner
        self._agent_id = agent_id
        self._events = events
        self._history = history
        self._redactor = redactor
        self._fence = fence
        self.idle_armed = False
        """A task finished since ``agent_idle`` was last asked."""
        self.task_cwd: Callable[[str], Path | None] = lambda task_id: None
        """Where ``task_done`` judges a board task, when not in the agent's cwd: the
        task's worktree (``worktree: task``), so the gate sees the change that would land."""

    async def judge(
        self,
        hook: Hook,
        event: Mapping[str, Any],
        ids: TaskIds,
        *,
        cwd: Path | None = None,
        **extra: Any,
    ) -> HookRun | None:
        """Run ``hook`` on ``event`` and report the run; ``None`` when it is not configured."""
        if self.runner.command(hook) is None:
            return None  # asked before every tool call: no hook must cost nothing
        given = self._redactor.redact_obj({"agent": self._agent_id, **ids, **event})
        run = await self.runner.run(hook, given, cwd=cwd)
        if run is None:
            return None
        run = dataclasses.replace(run, feedback=self._redactor.redact(run.feedback))
        self._events.emit(EventType.HOOK_RUN, **run.to_wire(), **extra, **ids)
        if run.failed:
            failure = run.failure()
            self.warn(failure.message, failure.code, ids)
        self._record(run, ids)
        return run

    def warn(self, message: str, code: str, ids: TaskIds) -> None:
        """A ``warn`` event about a gate (and the log line)."""
        log.warning("%s", message)
        self._events.emit(EventType.WARN, msg=message, code=code, **ids)

    def _record(self, run: HookRun, ids: TaskIds) -> None:
        verdict = f"{run.hook} hook {run.verdict} (exit {run.exit_code}, {run.ms} ms)"
        self._note(run.hook, f"{verdict}: {run.feedback}" if run.feedback else verdict, ids)

    def _note(self, hook: Hook, content: str, ids: TaskIds) -> None:
        """A ``system`` turn about ``hook``: kept for people, never shown to the model."""
        turn = Turn(
            ts=time.time(),
            role="system",
            source=f"hook:{hook}",
            content=content,
            task_id=ids.get("task_id"),
            trace_id=ids.get("trace_id"),
            fence=self._fence(),
        )
        try:
            self._history.append(turn)
        except StorageError as exc:  # the event told it; the work is not held up for it
            log.warning("hook run not kept in the history: %s", exc.one_line())

    # the steps ---------------------------------------------------------------------------

    async def before_tool(
        self, name: str, args: Mapping[str, Any], ids: TaskIds, cwd: Path | None = None
    ) -> None:
        """Raise ``GateRefused`` when ``before_tool`` refuses the call of ``name``; run in
        ``cwd``, where the call will run (a board task's worktree), if given."""
        event = {"tool": name, "args": dict(args)}
        run = await self.judge(Hook.BEFORE_TOOL, event, ids, cwd=cwd, tool=name)
        if run is not None and run.refused:
            raise run.refusal()

    async def task_done(self, item: QueueItem, task_id: str, answer: str) -> HookRun | None:
        """Ask ``task_done`` about the answer to board task ``task_id``."""
        if self.runner.command(Hook.TASK_DONE) is None:
            return None
        # Noted before it runs: the answer is then no longer the task's newest turn, so
        # an agent killed while the hook runs does not settle the task with an answer
        # nobody judged when it starts again (the worker's replay); it runs it again.
        self._note(Hook.TASK_DONE, "task_done hook asked about the answer", item.ids())
        event = {"task": task_id, "answer": answer}
        return await self.judge(Hook.TASK_DONE, event, item.ids(), cwd=self.task_cwd(task_id))

    async def on_idle(self, enqueue: Callable[..., object]) -> bool:
        """Ask ``agent_idle`` once after a finished task; a refusal queued, and ``True``."""
        if not self.idle_armed:
            return False
        self.idle_armed = False
        if self.runner.command(Hook.AGENT_IDLE) is None:
            return False
        try:
            run = await self.judge(Hook.AGENT_IDLE, {}, {})
        except StorageError as exc:
            log.warning("agent_idle hook not asked: %s", exc.one_line())
            return False
        if run is None or not run.refused:
            return False
        try:
            enqueue(idle_text(run.feedback), source=IDLE_SOURCE)
        except StorageError as exc:  # refused for room: the worker waits for room itself
            log.warning("agent_idle feedback not queued: %s", exc.one_line())
            return False
        return True

    def record_input(self, item: QueueItem, text: str) -> None:
        """A ``task_done`` refusal as a new ``user`` turn of ``item``: the model's next input."""
        turn = Turn(
            ts=time.time(),
            role="user",
            source=f"hook:{Hook.TASK_DONE}",
            content=self._redactor.redact(text),
            task_id=item.id,
            trace_id=item.trace_id,
            fence=self._fence(),
        )
        self._history.append(turn)

    def task_finished(self, item: QueueItem) -> None:
        """Arm ``agent_idle``, unless ``item`` was its own feedback (see the module doc)."""
        if item.source != IDLE_SOURCE:
            self.idle_armed = True


def done_refused_text(feedback: str, refusals: int) -> str:
    """The input a ``task_done`` refusal gives the model."""
    left = MAX_TASK_DONE_REFUSALS - refusals
    return (
        "The task_done quality gate refused your answer; the task is not done yet. "
        f"Fix what it reports and answer again ({left} more refusal(s) fail the task):\n"
        f"{feedback}"
    )


def idle_text(feedback: str) -> str:
    """The input an ``agent_idle`` refusal gives the model."""
    return f"The agent_idle quality gate says there is more to do before you stop:\n{feedback}"


class GatedTasks:
    """A task runner whose board tasks are judged by ``task_done`` before they end.

    Wraps whatever runs tasks (the native loop or a coding agent's), so both get the
    gate: a refused answer goes back as a new ``user`` turn of the same task, and the
    runner goes on with it (``control.continuing``: no second ``task.start``).
    """

    def __init__(
        self,
        inner: TaskRunner,
        gates: Gates,
        *,
        held: Callable[[QueueItem], bool] = lambda item: False,
        holds: Callable[[str], Awaitable[str | None]] | None = None,
    ) -> None:
        self.inner = inner
        self._gates = gates
        self._held = held
        """Whether a board task's run ended without finishing it (its plan not approved
        yet): no answer to judge, the task is not being marked done."""
        self._holds = holds
        """The board puller's ``holds``: ``None`` while this agent still holds a task."""

    async def run(self, item: QueueItem, control: TaskControl) -> TaskOutcome:
        outcome = await self.inner.run(item, control)
        if item.source.startswith(BOARD_SOURCE) and not self._held(item):
            outcome = await self._judged(item, control, outcome)
        self._gates.task_finished(item)
        return outcome

    async def _judged(
        self, item: QueueItem, control: TaskControl, outcome: TaskOutcome
    ) -> TaskOutcome:
        task_id = item.source.removeprefix(BOARD_SOURCE)
        refusals = 0
        while outcome.ok and not control.interrupted.is_set():
            if not await self._still_held(task_id):
                return outcome
            run = await self._gates.task_done(item, task_id, outcome.text)
            if run is None or not run.refused:
                return outcome
            refusals += 1
            if refusals >= MAX_TASK_DONE_REFUSALS:
                failed = _refused_for_good(outcome, run, refusals)
                self._gates.warn(failed.error or "", Code.HOOK_REFUSED, item.ids())
                return failed
            text = done_refused_text(run.feedback, refusals)
            self._gates.record_input(item, text)
            control.continuing = True
            again = await self.inner.run(dataclasses.replace(item, text=text), control)
            outcome = _added(outcome, again)
        return outcome

    async def _still_held(self, task_id: str) -> bool:
        """Whether the task is still this agent's to finish. The model may have ended it
        itself with ``tasks.done`` (judged then) or ``tasks.fail``: judging the final
        answer too would ask twice, and a refusal would send the model back to a task
        the board says is over."""
        if self._holds is None:
            return True
        try:
            return await self._holds(task_id) is None
        except _BUS_ERRORS as exc:
            # Unknown: judge, as a gate would without the check (no unjudged done).
            log.warning("board task %s not checked before task_done: %s", task_id, exc)
            return True


def _refused_for_good(outcome: TaskOutcome, run: HookRun, refusals: int) -> TaskOutcome:
    error = run.refusal()
    message = f"{error.message} ({refusals} times; the task fails)"
    return dataclasses.replace(
        outcome, ok=False, error=f"error [{error.code}]: {message}", code=Code.HOOK_REFUSED
    )


def _added(before: TaskOutcome, after: TaskOutcome) -> TaskOutcome:
    """``after``, with the tokens and model calls of the rounds before it counted in."""
    return dataclasses.replace(
        after,
        tokens_in=before.tokens_in + after.tokens_in,
        tokens_out=before.tokens_out + after.tokens_out,
        iterations=before.iterations + after.iterations,
    )


class GatedBoard:
    """The board the ``tasks.*`` tools use: ``task_created`` asked before an add,
    ``task_done`` before a done. Everything else is the board's own.
    """

    def __init__(self, board: TaskBoard, gates: Gates) -> None:
        self._board = board
        self._gates = gates

    def __getattr__(self, name: str) -> Any:
        return getattr(self._board, name)

    async def add(
        self,
        project: str,
        *,
        title: str,
        detail: str = "",
        priority: int = 0,
        depends_on: Iterable[str] = (),
        created_by: str,
        **more: Any,
    ) -> BoardTaskItem:
        # ``more``: the board's other settings of a task (``require_plan``), passed on.
        after = list(depends_on)
        event = {
            "project": project,
            "title": title,
            "detail": detail,
            "priority": priority,
            "depends_on": after,
            "created_by": created_by,
            **more,
        }
        run = await self._gates.judge(Hook.TASK_CREATED, event, {})
        if run is not None and run.refused:
            raise run.refusal()
        return await self._board.add(
            project,
            title=title,
            detail=detail,
            priority=priority,
            depends_on=after,
            created_by=created_by,
            **more,
        )

    async def done(
        self, project: str, task_id: str, *, agent: str, result: str = ""
    ) -> BoardTaskItem:
        # A task done already stays done (only a failed one is reopened): the board
        # refuses this done whatever a hook would say, so it is not asked again.
        task = await self._board.get(project, task_id)
        if task is not None and task.status is TaskStatus.DONE:
            return await self._board.done(project, task_id, agent=agent, result=result)
        event = {"project": project, "task": task_id, "answer": result}
        run = await self._gates.judge(Hook.TASK_DONE, event, {}, cwd=self._gates.task_cwd(task_id))
        if run is not None and run.refused:
            raise run.refusal()
        return await self._board.done(project, task_id, agent=agent, result=result)
