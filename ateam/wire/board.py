"""A task of a project's team board (issue 12), as it is stored and as readers get it.

The board itself, its scripts and the limits a task is checked against are in
:mod:`ateam.bus.board`; the record is here, below the bus, because the agent that
claims tasks and the front ends that list them read the same shape.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ateam.errors import BadRequest
from ateam.wire.work import WorkRecord

__all__ = ["BoardTask", "TaskStatus", "blocked_by", "blocked_note"]


class TaskStatus(StrEnum):
    """Where a task is: ``open`` to anyone, ``claimed`` by one agent, or finished."""

    OPEN = "open"
    CLAIMED = "claimed"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True)
class BoardTask:
    """One task of a project's board, as stored."""

    id: str
    project: str
    title: str
    status: TaskStatus
    created_by: str
    """Who added it: an agent id, or ``cli`` / a session for a person."""
    created: int
    """Redis server time of the ``add``, µs since the epoch."""
    updated: int
    """Redis server time of the last change, µs since the epoch."""
    detail: str = ""
    assignee: str = ""
    """The agent id holding the claim; empty when nobody does."""
    priority: int = 0
    """Higher first."""
    depends_on: tuple[str, ...] = ()
    result: str = ""
    reason: str = ""
    """Why it failed, or why it was reopened."""
    require_plan: bool = False
    """The agent that takes it must have its plan approved before it edits or runs anything."""
    last_error: str = ""
    """Why its last attempt failed, kept through a reopen or retry (and the claims after
    it) so whoever takes it next can see what went wrong."""
    reopened: int = 0
    """How many times it went from ``failed`` back to ``open`` (reopen or retry)."""
    offered_to: str = ""
    """After a retry: the agent that failed it, whom the board lets claim it first."""
    offer_until: int = 0
    """Redis server time (µs) when that offer lapses and anyone may claim the task."""
    work: WorkRecord | None = None
    """The branch its agent works (worked) in, with ``worktree: task|agent`` (issue 27)."""

    def to_wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "project": self.project,
            "title": self.title,
            "detail": self.detail,
            "status": str(self.status),
            "assignee": self.assignee,
            "priority": self.priority,
            "depends_on": list(self.depends_on),
            "created_by": self.created_by,
            "created": self.created,
            "updated": self.updated,
            "result": self.result,
            "reason": self.reason,
            "require_plan": self.require_plan,
            "last_error": self.last_error,
            "reopened": self.reopened,
            "offered_to": self.offered_to,
            "offer_until": self.offer_until,
            "work": None if self.work is None else self.work.to_wire(),
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> BoardTask:
        """Rebuild a task; unknown fields (newer writers) are ignored.

        Raises:
            BadRequest: a required field is missing or malformed.
        """
        try:
            return cls(
                id=str(data["id"]),
                project=str(data["project"]),
                title=str(data["title"]),
                status=TaskStatus(data["status"]),
                created_by=str(data.get("created_by") or ""),
                created=int(data["created"]),
                updated=int(data.get("updated") or data["created"]),
                detail=str(data.get("detail") or ""),
                assignee=str(data.get("assignee") or ""),
                priority=int(data.get("priority") or 0),
                # cmsgpack may write an empty list back as an empty map: both are "none".
                depends_on=tuple(str(d) for d in (data.get("depends_on") or ())),
                result=str(data.get("result") or ""),
                reason=str(data.get("reason") or ""),
                require_plan=data.get("require_plan") is True,
                last_error=str(data.get("last_error") or ""),
                reopened=int(data.get("reopened") or 0),
                offered_to=str(data.get("offered_to") or ""),
                offer_until=int(data.get("offer_until") or 0),
                work=WorkRecord.from_wire(data["work"]) if data.get("work") else None,
            )
        except (KeyError, ValueError, TypeError) as exc:
            raise BadRequest(f"malformed board task: {type(exc).__name__}: {exc}") from exc


def blocked_by(tasks: Iterable[BoardTask]) -> dict[str, tuple[tuple[str, bool], ...]]:
    """Why each open task of a board cannot be claimed yet: its dependencies not done.

    Maps the id of every open task waiting for something to ``(dependency, failed)``
    pairs, in the order the task names them; ``failed`` marks a dependency that failed
    (it waits for a reopen or a retry, not for time). A dependency missing from
    ``tasks`` counts as not done and not failed. Tasks not open are left out: a claim
    already got past its dependencies.
    """
    listed = list(tasks)
    status = {task.id: task.status for task in listed}
    waits: dict[str, tuple[tuple[str, bool], ...]] = {}
    for task in listed:
        if task.status is not TaskStatus.OPEN:
            continue
        pending = tuple(
            (dep, status.get(dep) is TaskStatus.FAILED)
            for dep in task.depends_on
            if status.get(dep) is not TaskStatus.DONE
        )
        if pending:
            waits[task.id] = pending
    return waits


def blocked_note(pending: Iterable[tuple[str, bool]]) -> str:
    """``blocked by t-1 (failed), t-2``: the line a listing shows for a waiting task."""
    named = [f"{dep} (failed)" if failed else dep for dep, failed in pending]
    return f"blocked by {', '.join(named)}" if named else ""
