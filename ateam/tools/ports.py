"""What tools may use of the agent that runs them, as protocols declared here (the user's side).

:class:`~ateam.tools.registry.ToolContext` names these, not the agent's classes, so this
package imports nothing above it: the agent's working context, the team's context items
and its knowledge bases satisfy them structurally, and a test or a plugin can pass any
object that does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Protocol

__all__ = ["AgentLister", "ContextItems", "KnowledgeBases", "Memory", "SharedItem"]

AgentLister = Callable[[], Awaitable[list[dict[str, Any]]]]
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

    def decisions(self) -> list[dict[str, Any]]: ...

    def failures(self) -> list[dict[str, Any]]: ...

    def constraints(self, *, now: float | None = None) -> list[dict[str, Any]]: ...


class SharedItem(Protocol):
    """One context item the team shares (SPEC §9)."""

    @property
    def id(self) -> str: ...

    @property
    def expires_at(self) -> float: ...

    def to_wire(self) -> dict[str, Any]: ...


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

    async def search(self, scope: str, query: str, *, k: int = 8) -> list[dict[str, Any]]: ...

    async def ingest(self, scope: str, paths: Sequence[str]) -> dict[str, Any]: ...
