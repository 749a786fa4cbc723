"""A team context item (SPEC §9) as it is stored and as every reader gets it.

The item and the words it is made of (its type, scope and urgency) are shared by the
store that keeps items in Redis (:mod:`ateam.bus.context_items`), the agent that feeds
them to its model, and the front ends that list and post them, so they live here, below
the bus. The limits an item is checked against when posted stay with the store.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ateam._json import JsonObject
from ateam.errors import BadRequest

__all__ = [
    "LOCAL_RUNTIMES",
    "URGENCY_ORDER",
    "ContextItem",
    "ContextType",
    "Scope",
    "Urgency",
]


class ContextType(StrEnum):
    """What kind of news an item is."""

    DISCOVERY = "discovery"
    DECISION = "decision"
    STATUS = "status"
    REQUEST = "request"
    ALERT = "alert"


class Scope(StrEnum):
    """Who an item is for: ``task`` and ``project`` stay in the project, ``global`` does not."""

    TASK = "task"
    PROJECT = "project"
    GLOBAL = "global"


class Urgency(StrEnum):
    """How loudly to tell: consoles show ``attention`` and ``blocking`` as banners."""

    BACKGROUND = "background"
    ATTENTION = "attention"
    BLOCKING = "blocking"


URGENCY_ORDER: dict[Urgency, int] = {
    Urgency.BACKGROUND: 0,
    Urgency.ATTENTION: 1,
    Urgency.BLOCKING: 2,
}
"""Rank of each urgency, for "at least this urgent" filters."""


LOCAL_RUNTIMES = frozenset({"ateam", "console", "cli"})
"""``source_runtime`` of what the team's own agents, consoles and verbs post; any other
name is an external runtime (``ateam mcp`` refuses these names for its clients)."""


@dataclass(frozen=True)
class ContextItem:
    """One context item, as stored and as readers get it."""

    id: str
    project: str
    """The project it was posted in; a ``global`` item is seen from every project."""
    type: ContextType
    title: str
    scope: Scope
    urgency: Urgency
    created_at: float
    """Epoch seconds on the Redis server's clock."""
    expires_at: float
    """Epoch seconds; the item's key expires then, and no reader returns it after."""
    content: str = ""
    summary: str = ""
    tags: tuple[str, ...] = ()
    """Lower-cased, so ``API`` and ``api`` are one tag."""
    source_agent: str = ""
    """The poster's agent id (``project/name``), empty for a console or script."""
    source_runtime: str = "ateam"
    """``ateam``, or the external runtime that posted through ``ateam mcp``."""

    def to_wire(self) -> JsonObject:
        return {
            "id": self.id,
            "project": self.project,
            "type": str(self.type),
            "title": self.title,
            "content": self.content,
            "summary": self.summary,
            "scope": str(self.scope),
            "tags": list(self.tags),
            "urgency": str(self.urgency),
            "source_agent": self.source_agent,
            "source_runtime": self.source_runtime,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> ContextItem:
        """Rebuild an item; unknown fields (newer writers) are ignored.

        Raises:
            BadRequest: a required field is missing or has a value this version
                does not know.
        """
        try:
            return cls(
                id=str(data["id"]),
                project=str(data.get("project", "")),
                type=ContextType(data["type"]),
                title=str(data["title"]),
                scope=Scope(data["scope"]),
                urgency=Urgency(data["urgency"]),
                created_at=float(data["created_at"]),
                expires_at=float(data["expires_at"]),
                content=str(data.get("content", "")),
                summary=str(data.get("summary", "")),
                tags=tuple(str(tag) for tag in data.get("tags", ())),
                source_agent=str(data.get("source_agent", "")),
                source_runtime=str(data.get("source_runtime", "ateam")),
            )
        except (KeyError, ValueError, TypeError) as exc:
            raise BadRequest(f"malformed context item: {type(exc).__name__}: {exc}") from exc
