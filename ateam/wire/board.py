"""A task of a project's team board (issue 12), as it is stored and as readers get it.

The board itself, its scripts and the limits a task is checked against are in
:mod:`ateam.bus.board`; the record is here, below the bus, because the agent that
claims tasks and the front ends that list them read the same shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ateam.errors import BadRequest

__all__ = ["BoardTask", "TaskStatus"]


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
            )
        except (KeyError, ValueError, TypeError) as exc:
            raise BadRequest(f"malformed board task: {type(exc).__name__}: {exc}") from exc
