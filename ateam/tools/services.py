"""What tools may use of the agent that runs them, as protocols declared here (the user's side).

:class:`~ateam.tools.registry.ToolContext` names these, not the agent's classes, so this
package imports nothing above it: the agent's working context, the team's context items
and its knowledge bases satisfy them structurally, and a test or a plugin can pass any
object that does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Protocol

from ateam._json import JsonObject

__all__ = [
    "AgentLister",
    "BoardTaskItem",
    "ContextItems",
    "KnowledgeBases",
    "Memory",
    "PlanReviews",
    "SharedItem",
    "TaskBoardPort",
    "Teammates",
]

AgentLister = Callable[[], Awaitable[list[JsonObject]]]
"""The live registry as ``agents.list`` reports it: one dict per running agent."""


class Memory(Protocol):
    """The agent's working context (SPEC §8), as the ``memory.*`` tools write it."""

    def add_decision(
        self, decision: str, *, rationale: str = "", impact: str = "", task: str | None = None
    ) -> None: ...

    def add_failure(
        self,
        description: str,
        *,
        root_cause: str = "",
        resolution: str = "",
        prevention: str = "",
        severity: str = "medium",
        task: str | None = None,
    ) -> None: ...

    def add_constraint(self, text: str, *, expires: float | None = None) -> None: ...

    def decisions(self) -> list[JsonObject]: ...

    def failures(self) -> list[JsonObject]: ...

    def constraints(self, *, now: float | None = None) -> list[JsonObject]: ...


class SharedItem(Protocol):
    """One context item the team shares (SPEC §9)."""

    @property
    def id(self) -> str: ...

    @property
    def expires_at(self) -> float: ...

    def to_wire(self) -> JsonObject: ...


class ContextItems(Protocol):
    """The team's context items (SPEC §9), as the ``context.*`` tools post and read them."""

    async def post(
        self,
        project: str,
        *,
        type: str,
        title: str,
        content: str = "",
        scope: str = "project",
        tags: Iterable[str] = (),
        urgency: str = "background",
        source_agent: str = "",
    ) -> SharedItem: ...

    async def list(self, project: str, *, limit: int = 50) -> Sequence[SharedItem]: ...

    async def search(
        self, project: str, query: str, *, limit: int = 20
    ) -> Sequence[SharedItem]: ...


class KnowledgeBases(Protocol):
    """The agent's knowledge bases, one per scope (SPEC §10), as the ``kb.*`` tools use them."""

    async def search(self, scope: str, query: str, *, k: int = 8) -> list[JsonObject]: ...

    async def ingest(self, scope: str, paths: Sequence[str]) -> JsonObject: ...


class BoardTaskItem(Protocol):
    """One task of the team's board (issue 12)."""

    @property
    def id(self) -> str: ...

    def to_wire(self) -> JsonObject: ...


class TaskBoardPort(Protocol):
    """The team's task board (issue 12), as the ``tasks.*`` tools use it.

    Claims are atomic and only the holder finishes a task; refusals are raised as the
    board's errors (``task.claimed``, ``task.blocked``, ``task.not_found``).
    """

    async def list(self, project: str, *, status: str | None = None) -> Sequence[BoardTaskItem]: ...

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
    ) -> BoardTaskItem: ...

    async def claim(self, project: str, task_id: str, *, agent: str) -> BoardTaskItem: ...

    async def done(
        self, project: str, task_id: str, *, agent: str, result: str = ""
    ) -> BoardTaskItem: ...

    async def fail(
        self, project: str, task_id: str, *, agent: str, reason: str
    ) -> BoardTaskItem: ...

    async def reopen(self, project: str, task_id: str, *, by: str) -> BoardTaskItem: ...

    async def retry(self, project: str, task_id: str, *, by: str) -> BoardTaskItem: ...


class Teammates(Protocol):
    """The agent's teammates, as ``team.send`` queues work for them (SPEC §9)."""

    async def send(
        self, to: str, text: str, *, hops: int, trace_id: str | None, reply: bool = False
    ) -> JsonObject: ...

    async def broadcast(self, text: str, *, hops: int, trace_id: str | None) -> JsonObject: ...


class PlanReviews(Protocol):
    """A lead's answers to its teammates' plans (``plan.approve``, ``plan.reject``)."""

    async def answer(self, to: str, *, approve: bool, feedback: str) -> JsonObject: ...
