"""The team task board (issue 12) as the client sees it: ``team.tasks``.

A thin face on :class:`~ateam.bus.board.TaskBoard`, so front ends (verbs, consoles,
MCP) never import the bus. Texts are masked with the session's redactor before they
are stored.

A claim lasts as long as its holder's registry heartbeat: :meth:`TasksApi.ls` first puts
back to ``open`` the claims of agents that are gone (see
:meth:`~ateam.bus.board.TaskBoard.reconcile`), so a listing is true even when no agent
runs. A claim made for an id that never heartbeats (a script, an external runtime that
is not an ateam agent) is therefore reopened once it is older than the heartbeat TTL.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ateam.bus.board import TaskBoard
from ateam.client.redaction import Masked, same_fields
from ateam.redact import Redactor, Scrubbed
from ateam.wire.board import BoardTask, TaskStatus

if TYPE_CHECKING:
    from ateam.client.gates import TaskGate


async def _project_gate(project: str, event: Mapping[str, Any]) -> str | None:
    """The project's ``task_created`` hook (:func:`~ateam.client.gates.project_task_gate`).

    Its module (the hooks, the tools' registry, the project loader) is imported at the
    first add, not by every verb that connects.
    """
    from ateam.client.gates import project_task_gate

    return await project_task_gate(project, event)


__all__ = ["AddedTask", "TasksApi"]


@dataclass(frozen=True, eq=False)
class AddedTask(BoardTask):
    """A task as :meth:`TasksApi.add` put it on the board, and the secrets masked in it.

    Equal to the task as read back: the count is about the adding, not part of the task.
    """

    redacted: int = 0
    """Secrets replaced by ``****`` in its title and detail."""
    hook_failure: str | None = None
    """The ``task_created`` hook could not judge (it was added anyway): why."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BoardTask) and same_fields(self, other, BoardTask)

    __hash__ = BoardTask.__hash__

    def notice(self) -> str | None:
        """The line telling whoever added it that secrets were masked, if any were."""
        lines = [Scrubbed("", self.redacted).notice(), self.hook_failure]
        return "\n".join(line for line in lines if line) or None


class TasksApi:
    """A project's task board: add, list, claim (atomic), finish, reopen or retry."""

    def __init__(
        self, board: TaskBoard, redactor: Redactor | None = None, gate: TaskGate | None = None
    ) -> None:
        self._board = board
        self.gate: TaskGate = gate or _project_gate
        """Asked before every add: the ``task_created`` hook (refuses with ``hook.refused``)."""
        self._redactor = redactor or Redactor()
        """The board's own: masking here first counts what the board would mask."""

    async def ls(self, project: str, *, status: TaskStatus | str | None = None) -> list[BoardTask]:
        """The project's tasks, highest priority first, then oldest first.

        Claims whose holders are gone are reopened first (:meth:`reconcile`).
        """
        await self._board.reconcile(project)
        return await self._board.list(project, status=status)

    async def get(self, project: str, task_id: str) -> BoardTask | None:
        return await self._board.get(project, task_id)

    async def add(
        self,
        project: str,
        *,
        title: str,
        detail: str = "",
        priority: int = 0,
        depends_on: Iterable[str] = (),
        created_by: str,
        require_plan: bool = False,
    ) -> AddedTask:
        """Put an open task on the board.

        Returns:
            The task, with how many secrets were masked in it (:attr:`AddedTask.redacted`).

        Raises:
            BadRequest: an argument is invalid or a dependency is unknown; nothing is stored.
            GateRefused: the ``task_created`` hook refused it; nothing is stored.
        """
        masked = Masked(self._redactor)
        after = list(depends_on)
        wanted = {
            "title": title,
            "detail": detail,
            "priority": priority,
            "depends_on": after,
            "created_by": created_by,
            "require_plan": require_plan,
        }
        failure = await self.gate(project, self._redactor.redact_obj(wanted))
        task = await self._board.add(
            project,
            title=masked(title),
            detail=masked(detail),
            priority=priority,
            depends_on=after,
            created_by=created_by,
            require_plan=require_plan,
        )
        return AddedTask(**masked.fields_of(task), redacted=masked.replaced, hook_failure=failure)

    async def claim(self, project: str, task_id: str, *, agent: str) -> BoardTask:
        """Make ``agent`` the one assignee; of any number of racing claims, one wins.

        Raises:
            TaskNotFound, TaskClaimed (naming the assignee), TaskBlocked (naming the
            dependencies not done).
        """
        return await self._board.claim(project, task_id, agent=agent)

    async def done(self, project: str, task_id: str, *, agent: str, result: str = "") -> BoardTask:
        """Mark the task done; only its assignee may (else TaskClaimed)."""
        return await self._board.done(project, task_id, agent=agent, result=result)

    async def fail(self, project: str, task_id: str, *, agent: str, reason: str) -> BoardTask:
        """Mark the task failed with a reason; only its assignee may (else TaskClaimed)."""
        return await self._board.fail(project, task_id, agent=agent, reason=reason)

    async def reopen(self, project: str, task_id: str, *, by: str) -> BoardTask:
        """Put a failed task back to open for anyone; its failure stays as ``last_error``.

        Raises:
            TaskNotFound; TaskClaimed when the task is not failed (its status in the detail).
        """
        return await self._board.reopen(project, task_id, by=by)

    async def retry(self, project: str, task_id: str, *, by: str) -> BoardTask:
        """Put a failed task back to open, offered first to the agent that failed it while
        that agent runs (``offered_to``; others may claim it once the offer lapses).

        Raises:
            TaskNotFound; TaskClaimed when the task is not failed (its status in the detail).
        """
        return await self._board.retry(project, task_id, by=by)

    async def rework(self, project: str, task_id: str, *, by: str, why: str) -> BoardTask:
        """Put a done or failed task back to open because its work was thrown away
        (``ateam discard --reopen``); its result and work record are cleared.

        Raises:
            TaskNotFound; TaskClaimed when the task is open or claimed.
        """
        return await self._board.rework(project, task_id, by=by, why=why)

    async def reconcile(self, project: str) -> list[BoardTask]:
        """Reopen the claims whose holders' heartbeats are lost; returns the tasks reopened."""
        return await self._board.reconcile(project)

    async def reopen_orphans(self, project: str, alive: Collection[str]) -> list[BoardTask]:
        """Reopen every claimed task whose assignee is not in ``alive``; returns them."""
        return await self._board.reopen_orphans(project, alive)
