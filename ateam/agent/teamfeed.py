"""The team's context items as the agent's model sees them (SPEC §9).

Before each task the agent reads the live context items of its project (and the global
ones) that are urgent enough, and every model call of that task carries them in its
system prompt, after the working context, within a small token budget: the most urgent
first, then the newest. Items the agent posted itself are left out (it knows them).

Reading is bounded and never fails a task: with the bus down the agent works with
the items it read last.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from ateam.bus.backoff import CONNECTION_ERRORS
from ateam.bus.context import URGENCY_ORDER, ContextItem, ContextStore, Urgency
from ateam.errors import AteamError
from ateam.providers.base import estimate_tokens

__all__ = ["HEADER", "TeamFeed"]

log = logging.getLogger(__name__)

HEADER = "## Team context (shared by other agents and people; newest and most urgent first)"
_READ_TIMEOUT_S = 1.0
"""A task waits at most this long for the items; then it runs with the last ones read."""
_CANDIDATES = 50
_ITEM_MAX_CHARS = 600


@dataclass
class TeamFeed:
    """The context items one agent's next turns carry.

    Args:
        store: the project's context items on the bus.
        project: the agent's project.
        agent_id: the agent's own id; its own items are not fed back to it.
        min_urgency: the least urgent items it is given.
        budget_tokens: the most the block may cost in each call's context.
    """

    store: ContextStore
    project: str
    agent_id: str
    min_urgency: Urgency = Urgency.ATTENTION
    budget_tokens: int = 500
    items: tuple[ContextItem, ...] = ()
    """What the last successful read found, in the order they are shown."""

    async def refresh(self) -> None:
        """Read the items again; on a timeout or a bus error keep the previous ones."""
        try:
            async with asyncio.timeout(_READ_TIMEOUT_S):
                found = await self.store.list(
                    self.project, min_urgency=self.min_urgency, limit=_CANDIDATES
                )
        except (TimeoutError, AteamError) as exc:
            log.warning("team context not refreshed: %s", exc)
            return
        except CONNECTION_ERRORS as exc:
            log.warning("team context not refreshed: %s", exc)
            return
        mine = [item for item in found if item.source_agent != self.agent_id]
        # Newest first from the store; a stable sort by urgency keeps that within a level.
        mine.sort(key=lambda item: URGENCY_ORDER[item.urgency], reverse=True)
        self.items = tuple(mine)

    def render(self) -> str:
        """The block for the system prompt; ``""`` when there is nothing to tell."""
        lines: list[str] = []
        used = estimate_tokens(HEADER)
        for item in self.items:
            line = _line(item)
            cost = estimate_tokens(line) + 1
            if used + cost > self.budget_tokens:
                break
            lines.append(line)
            used += cost
        return "\n".join([HEADER, *lines]) if lines else ""


def _line(item: ContextItem) -> str:
    body = item.summary or item.content
    text = f"{item.title}: {body}" if body else item.title
    text = " ".join(text.split())
    if len(text) > _ITEM_MAX_CHARS:
        text = text[: _ITEM_MAX_CHARS - 1] + "…"
    who = item.source_agent or item.source_runtime
    tags = f" #{' #'.join(item.tags)}" if item.tags else ""
    return f"- [{item.urgency}/{item.type}] {text} (from {who}{tags})"
