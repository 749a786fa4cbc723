"""How a task a front end queued ended, learned from the agent's event stream.

An ``input`` is acknowledged once it is queued; how its task ends is told later, by the
``task.end`` event that carries its id. :class:`Outcomes` keeps those ends for the
tasks a front end queued (a console reading a script feeds it every event it shows),
and :class:`TaskWatch` follows one agent's stream for them (``ateam send --wait``),
collecting each task's answer as it streams. A failed task becomes one
:class:`~ateam.errors.TaskFailed` (exit status 5) through :meth:`TaskResult.failure`.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import OrderedDict
from dataclasses import dataclass

from ateam.bus.events import Event, EventType, Gap
from ateam.bus.tail import EventTail
from ateam.client._session import Session
from ateam.client.tail import Tail
from ateam.errors import Code, TaskFailed
from ateam.wire.events import Chunk, TaskEnd

__all__ = ["Outcomes", "TaskResult", "TaskWatch"]

ENDS_KEPT = 1000
"""Ends of tasks nobody has claimed yet that :class:`Outcomes` remembers: a fast agent's
``task.end`` may arrive before the reply that names its task."""
LIVENESS_CHECK_S = 2.0
"""How often a wait looks whether the agent is still registered."""

_ONE_LINE_HEAD = re.compile(r"^error \[[^\]]*\]: ")


@dataclass(frozen=True)
class TaskResult:
    """How one task ended."""

    agent: str
    task_id: str
    ok: bool
    error: str | None = None
    """The agent's one-line error, when it failed."""
    code: str | None = None
    """The error's stable code (``provider.auth``, ``task.interrupted`` ...)."""
    answer: str = ""
    """The text of the task's last model reply (what ``send --wait`` prints)."""

    @classmethod
    def of(cls, agent: str, event: Event, answer: str = "") -> TaskResult:
        """The result a ``task.end`` event tells."""
        end = event.payload
        if not isinstance(end, TaskEnd):  # a payload that fits nothing: not a success
            return cls(agent, event.task_id or "?", False, "unreadable task.end", Code.INTERNAL)
        code = end.code or (None if end.ok else _code_in(end.error))
        return cls(agent, event.task_id or "?", end.ok, end.error, code, answer)

    def failure(self) -> TaskFailed | None:
        """The error a front end reports for this task; ``None`` if it succeeded."""
        if self.ok:
            return None
        message = _ONE_LINE_HEAD.sub("", self.error or "failed")
        # No code: the task was not seen ending (its agent went away first).
        how = f"failed [{self.code}]" if self.code else "did not end"
        return TaskFailed(
            f"task {self.task_id} of {self.agent} {how}: {message}; "
            f"its events: `ateam tail {self.agent}`",
            agent=self.agent,
            task=self.task_id,
            task_code=self.code,
        )


def _code_in(error: str | None) -> str:
    """The code an older agent's one-line error names (``error [code]: ...``)."""
    found = re.match(r"^error \[([^\]]+)\]", error or "")
    return found.group(1) if found else Code.INTERNAL


class Outcomes:
    """The ends of the tasks a front end queued, as their ``task.end`` events come by."""

    def __init__(self) -> None:
        self._queued: dict[str, str] = {}
        """Task id → agent, for tasks queued and not ended yet."""
        self._ended: OrderedDict[str, Event] = OrderedDict()
        """``task.end`` events of tasks not (yet) known as queued here, newest last."""
        self.results: list[TaskResult] = []
        """Every queued task that ended, in the order they ended."""
        self.changed = asyncio.Event()
        """Set whenever a queued task ends (a waiter clears it before waiting)."""

    def queued(self, agent: str, task_id: str) -> None:
        """``task_id`` was queued on ``agent`` by this front end."""
        early = self._ended.pop(task_id, None)
        if early is not None:
            self._record(agent, early)
        else:
            self._queued[task_id] = agent

    def seen(self, event: Event) -> None:
        """Any event a front end read; the ``task.end`` of a queued task is recorded."""
        if event.type != EventType.TASK_END or not event.task_id:
            return
        agent = self._queued.pop(event.task_id, None)
        if agent is not None:
            self._record(agent, event)
            return
        self._ended[event.task_id] = event
        while len(self._ended) > ENDS_KEPT:
            self._ended.popitem(last=False)

    def _record(self, agent: str, event: Event) -> None:
        self.results.append(TaskResult.of(agent, event))
        self.changed.set()

    def pending(self, agent: str | None = None) -> list[str]:
        """Queued tasks (of ``agent``, or of every agent) that have not ended."""
        return [task for task, on in self._queued.items() if agent in (None, on)]

    def agent_of(self, task_id: str) -> str:
        """The agent a pending task was queued on."""
        return self._queued[task_id]

    def give_up(self, agent: str, why: str) -> None:
        """``agent``'s pending tasks will not be seen ending (it stopped): each is a failure."""
        for task in self.pending(agent):
            del self._queued[task]
            self.results.append(TaskResult(agent, task, False, why, None))
        self.changed.set()

    def failures(self) -> list[TaskResult]:
        return [result for result in self.results if not result.ok]


class TaskWatch:
    """Follows one agent's stream from where it is now, for the end of tasks queued after.

    Start it before sending (:meth:`start`), so no event of the task can be missed; then
    :meth:`result` waits for the task's end and returns it with its answer.
    """

    def __init__(self, session: Session, agent: str) -> None:
        self._session = session
        self.agent = agent
        self._tail = Tail(EventTail(session.client, session.keys))
        self._answers: dict[str, list[str]] = {}

    async def start(self, *, from_start: bool = False) -> None:
        """Fix the point the watch reads from: the stream's end now, or (``from_start``,
        for a resend whose task may have ended already) its oldest retained event."""
        self._tail.add(self.agent, 0 if from_start else None, backlog=0)
        if not from_start:
            await self._tail.poll(wait=False)

    async def result(self, task_id: str) -> TaskResult:
        """Wait for ``task_id`` to end.

        Raises:
            TaskFailed: the agent left the registry (stopped) before the task ended; the
                task stays queued there and runs when the agent starts again.
        """
        check_at = time.monotonic() + LIVENESS_CHECK_S
        while True:
            for item in await self._tail.poll():
                if isinstance(item, Gap):
                    continue
                if item.task_id == task_id and item.type == EventType.TASK_END:
                    answer = "".join(self._answers.pop(task_id, []))
                    return TaskResult.of(self.agent, item, answer)
                self._collect(task_id, item)
            if time.monotonic() >= check_at:
                check_at = time.monotonic() + LIVENESS_CHECK_S
                if await self._session.registry.get(self.agent) is None:
                    raise TaskFailed(
                        f"{self.agent} stopped before task {task_id} ended; the task stays "
                        f"in its queue and runs when it starts again (`ateam tail {self.agent}`)",
                        agent=self.agent,
                        task=task_id,
                        task_code=None,
                    )

    def _collect(self, task_id: str, event: Event) -> None:
        """Keep the text of ``task_id``'s current model reply (a tool call starts anew)."""
        if event.task_id != task_id:
            return
        if event.type == EventType.TOOL_START:
            self._answers[task_id] = []
        elif event.type == EventType.TOKEN:
            chunk = event.payload
            if isinstance(chunk, Chunk) and chunk.text and not chunk.thinking:
                self._answers.setdefault(task_id, []).append(chunk.text)
