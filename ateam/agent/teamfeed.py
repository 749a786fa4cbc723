"""The team's context items as the agent's model sees them (SPEC §9, issue 12).

Each agent subscribes (``agent.yaml`` ``context: {scopes, tags, min_urgency}``) and is
pushed the matching items: a listener on the bus's context channel fetches each new
item that fits and keeps it in an inbox. Nothing polls: the inbox is filled once at
start-up and after every reconnect (what was posted while the agent could not hear),
and by notices in between.

When a task starts, the inbox's items go into that task's context, after the working
context and within the subscription's token budget, the most urgent first and then the
newest. An item that made it in is marked fed for this agent in Redis, so the agent is
never fed the same item twice, not even after a restart; one that did not fit waits for
the next task. The agent's event stream records what was fed (``team.context``), so a
console that reconnects sees it.

A ``blocking`` item does not wait for the next task: an idle agent is woken and given
the item as a task of its own (source ``context:<id>``).

Reading never fails a task: with the bus down the agent works with what it has.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

from ateam.bus.backoff import CONNECTION_ERRORS, Backoff
from ateam.bus.codec import unpack
from ateam.bus.context import URGENCY_ORDER, ContextItem, ContextStore, Scope, Urgency
from ateam.bus.keys import Keys
from ateam.config.schema import ContextSubscriptionSpec
from ateam.errors import AteamError
from ateam.providers.base import estimate_tokens

__all__ = ["HEADER", "TeamFeed"]

log = logging.getLogger(__name__)

HEADER = "## Team context (shared by other agents and people; newest and most urgent first)"
_READ_TIMEOUT_S = 1.0
"""A task waits at most this long for the bus; then it runs with what it has."""
_CATCH_UP = 100
"""Items read at start-up and after a reconnect."""
_INBOX_MAX = 200
"""Most items waiting for a task; the oldest of the least urgent go first."""
_ITEM_MAX_CHARS = 600

Emit = Callable[..., Any]

_SOFT: tuple[type[BaseException], ...] = (*CONNECTION_ERRORS, TimeoutError, AteamError)
"""Failures that cost the feed a moment, never the agent."""


class TeamFeed:
    """One agent's subscription to the team's context items.

    Args:
        store: the team's context items on the bus.
        client, keys: for the subscription to the context channel.
        project: the agent's project.
        agent_id: the agent's own id; its own items are not fed back to it.
        spec: the subscription (``agent.yaml`` ``context``).
        emit: the agent's event stream (``emit(type, **fields)``).
    """

    def __init__(
        self,
        store: ContextStore,
        client: aioredis.Redis,
        keys: Keys,
        project: str,
        agent_id: str,
        spec: ContextSubscriptionSpec | None = None,
        emit: Emit | None = None,
    ) -> None:
        self.store = store
        self._client = client
        self._keys = keys
        self.project = project
        self.agent_id = agent_id
        self.spec = spec or ContextSubscriptionSpec()
        self._emit = emit
        self._scopes = frozenset(Scope(scope) for scope in self.spec.scopes)
        self._tags = frozenset(self.spec.tags)
        self._min_rank = URGENCY_ORDER[Urgency(self.spec.min_urgency)]
        self.inbox: dict[str, ContextItem] = {}
        """Matching items not fed yet, by id."""
        self.items: tuple[ContextItem, ...] = ()
        """What the current (or last) task was fed, in the order shown."""
        self._fed: set[str] = set()
        """Ids fed by this process: the Redis record may be out of reach for a moment."""
        self.on_blocking: Callable[[], None] | None = None
        """Wakes the worker when a blocking item arrives (set by the composition root)."""
        self.listening = asyncio.Event()
        """Set while subscribed (tests wait for it before posting)."""

    # -- what fits ---------------------------------------------------------------------

    def wants(self, item: ContextItem) -> bool:
        """Whether the subscription takes ``item`` (not the agent's own, live or not)."""
        if item.source_agent == self.agent_id or item.id in self._fed:
            return False
        if item.scope is not Scope.GLOBAL and item.project != self.project:
            return False
        if item.scope not in self._scopes or URGENCY_ORDER[item.urgency] < self._min_rank:
            return False
        return not self._tags or bool(self._tags.intersection(item.tags))

    def _notice_may_fit(self, notice: dict[str, Any]) -> bool:
        """A cheap look at a notice, so items of other projects are never fetched."""
        scope = notice.get("scope")
        if scope != Scope.GLOBAL and notice.get("project") != self.project:
            return False
        urgency = notice.get("urgency")
        if urgency not in URGENCY_ORDER or URGENCY_ORDER[Urgency(urgency)] < self._min_rank:
            return False
        return notice.get("source_agent") != self.agent_id

    def _add(self, item: ContextItem) -> None:
        if not self.wants(item):
            return
        self.inbox[item.id] = item
        if len(self.inbox) > _INBOX_MAX:
            worst = min(self.inbox.values(), key=_priority)
            del self.inbox[worst.id]
        if item.urgency is Urgency.BLOCKING and self.on_blocking is not None:
            self.on_blocking()

    # -- being pushed ------------------------------------------------------------------

    async def catch_up(self) -> None:
        """Read what was posted while the agent could not hear (start-up, reconnect)."""
        async with asyncio.timeout(_READ_TIMEOUT_S * 5):
            found = await self.store.list(
                self.project,
                scopes=self._scopes,
                tags=self._tags or None,
                min_urgency=Urgency(self.spec.min_urgency),
                limit=_CATCH_UP,
            )
            fed = await self.store.fed(self.project, self.agent_id)
        self._fed |= fed
        for item in reversed(found):  # oldest first, so the inbox keeps the newest
            self._add(item)

    async def listen(self) -> None:
        """Subscribe to the context channel for good; reconnects and catches up."""
        backoff = Backoff()
        while True:
            pubsub = self._client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self._keys.context_channel)
                await self.catch_up()
                self.listening.set()
                backoff.reset()
                async for message in pubsub.listen():
                    await self._on_message(message)
            except asyncio.CancelledError:
                raise
            except _SOFT as exc:
                log.warning("team context subscription lost: %s", exc)
            finally:
                self.listening.clear()
                with contextlib.suppress(*CONNECTION_ERRORS, RuntimeError):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]
            await asyncio.sleep(backoff.next_delay())

    async def _on_message(self, message: dict[str, Any]) -> None:
        if message.get("type") != "message":
            return
        try:
            notice = unpack(message["data"])
        except Exception:  # anyone may publish here: a bad notice is dropped, not fatal
            log.warning("undecodable context notice dropped")
            return
        if not isinstance(notice, dict) or notice.get("event") != "post":
            return
        if not self._notice_may_fit(notice):
            return
        try:
            item = await self.store.get(str(notice.get("project", "")), str(notice.get("id")))
        except AteamError as exc:
            log.warning("context notice with a bad id dropped: %s", exc)
            return
        if item is not None:
            self._add(item)

    # -- a task starts -----------------------------------------------------------------

    async def begin_task(self, now: float) -> None:
        """Choose the items this task is fed, mark them fed and record it."""
        live = [item for item in self.inbox.values() if item.expires_at > now]
        live.sort(key=_priority, reverse=True)
        chosen: list[ContextItem] = []
        used = estimate_tokens(HEADER)
        for item in live:
            cost = estimate_tokens(_line(item)) + 1
            if used + cost > self.spec.budget_tokens:
                continue  # a smaller one further down may fit; this one waits
            chosen.append(item)
            used += cost
        self.inbox = {i.id: i for i in live if i not in chosen}
        self.items = tuple(chosen)
        if chosen:
            await self._mark_fed(chosen)

    def take_blocking(self) -> ContextItem | None:
        """The most urgent blocking item waiting, for an idle agent's own task."""
        blocking = [i for i in self.inbox.values() if i.urgency is Urgency.BLOCKING]
        if not blocking:
            return None
        item = max(blocking, key=_priority)
        del self.inbox[item.id]
        return item

    async def _mark_fed(self, items: list[ContextItem]) -> None:
        self._fed.update(item.id for item in items)
        if self._emit is not None:
            self._emit("team.context", items=[_summary(item) for item in items])
        try:
            async with asyncio.timeout(_READ_TIMEOUT_S):
                await self.store.mark_fed(self.project, self.agent_id, items)
        except _SOFT as exc:
            # Remembered in this process; after a restart the item may come once more.
            log.warning("fed context items not recorded: %s", exc)

    async def mark_fed(self, item: ContextItem) -> None:
        await self._mark_fed([item])

    # -- the prompt --------------------------------------------------------------------

    def render(self) -> str:
        """The block for the system prompt; ``""`` when there is nothing to tell."""
        if not self.items:
            return ""
        return "\n".join([HEADER, *(_line(item) for item in self.items)])


def _priority(item: ContextItem) -> tuple[int, float]:
    return URGENCY_ORDER[item.urgency], item.created_at


def _summary(item: ContextItem) -> dict[str, Any]:
    return {
        "id": item.id,
        "type": str(item.type),
        "urgency": str(item.urgency),
        "scope": str(item.scope),
        "title": item.title,
        "source": item.source_agent or item.source_runtime,
    }


def _line(item: ContextItem) -> str:
    body = item.summary or item.content
    text = f"{item.title}: {body}" if body else item.title
    text = " ".join(text.split())
    if len(text) > _ITEM_MAX_CHARS:
        text = text[: _ITEM_MAX_CHARS - 1] + "…"
    who = item.source_agent or item.source_runtime
    tags = f" #{' #'.join(item.tags)}" if item.tags else ""
    return f"- [{item.urgency}/{item.type}] {text} (from {who}{tags})"


def blocking_task_text(item: ContextItem) -> str:
    """The task an idle agent is given for a blocking item."""
    who = item.source_agent or item.source_runtime
    body = item.content or item.summary
    parts = [f"[blocking team context item {item.id} from {who}, {item.type}]", item.title]
    if body:
        parts += ["", body]
    parts += ["", "It was marked blocking: deal with it (or say why you cannot) first."]
    return "\n".join(parts)
