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
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis

from ateam.agent.context.notices import NoticeFeed
from ateam.bus.codec import unpack
from ateam.bus.context_items import ContextStore
from ateam.bus.keys import Keys
from ateam.bus.subscription import SOFT_ERRORS, listen_forever
from ateam.config.schema import ContextSubscriptionSpec
from ateam.providers.base import estimate_tokens
from ateam.wire.context_items import LOCAL_RUNTIMES, URGENCY_ORDER, ContextItem, Scope, Urgency

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
        self._fed: dict[str, float] = {}
        """Ids fed (from Redis, or by this process while Redis was out of reach), with
        their expiry: forgotten once the item is gone."""
        self._held: set[str] = set()
        """Blocking items from outside that may not wake the agent: fed, not run."""
        self._seen_at = 0.0
        """The newest creation time read from the store: what a task start tops up from."""
        self.on_blocking: Callable[[], None] | None = None
        """Wakes the worker when a blocking item arrives (set by the composition root)."""
        self.listening = asyncio.Event()
        """Set while subscribed (tests wait for it before posting)."""
        self.notices: NoticeFeed | None = None
        """Teammates' notices (issue 26), fed beside the items (set by the composition root)."""

    # -- what fits ---------------------------------------------------------------------

    def wants(self, item: ContextItem) -> bool:
        """Whether the subscription takes ``item`` (not the agent's own, live or not)."""
        if item.source_agent == self.agent_id or item.id in self._fed or item.id in self.inbox:
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
        if not isinstance(urgency, str) or urgency not in URGENCY_ORDER:
            return False
        if URGENCY_ORDER[Urgency(urgency)] < self._min_rank:
            return False
        return notice.get("source_agent") != self.agent_id

    def _add(self, item: ContextItem) -> None:
        self._seen_at = max(self._seen_at, item.created_at)
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
        for item_id in fed:
            self._fed.setdefault(item_id, float("inf"))  # pruned when Redis forgets it
        for item in reversed(found):  # oldest first, so the inbox keeps the newest
            self._add(item)

    async def _top_up(self) -> None:
        """At a task start: anything posted since the newest item read, in one page.

        Closes the race between a post and an input sent right after it: the notice may
        still be on its way when the task starts, but the item is already stored.
        """
        found = await self.store.list(
            self.project,
            scopes=self._scopes,
            tags=self._tags or None,
            min_urgency=Urgency(self.spec.min_urgency),
            limit=_CATCH_UP,
            newer_than=self._seen_at,
        )
        for item in reversed(found):
            self._add(item)

    async def listen(self) -> None:
        """Subscribe to the context channel and the notices for good; reconnects, catches up."""
        if self.notices is not None:
            await asyncio.gather(self._listen_items(), self.notices.listen())
        else:
            await self._listen_items()

    async def _listen_items(self) -> None:
        await listen_forever(
            self._client,
            (self._keys.context_channel(self.project), self._keys.context_global_channel),
            on_open=self.catch_up,
            on_message=self._on_notice,
            listening=self.listening,
            what="team context",
        )

    async def _on_notice(self, data: bytes) -> None:
        notice = unpack(data)
        if not isinstance(notice, dict) or notice.get("event") != "post":
            return
        if not self._notice_may_fit(notice):
            return
        item = await self.store.get(str(notice.get("project", "")), str(notice.get("id")))
        if item is not None:
            self._add(item)

    # -- a task starts -----------------------------------------------------------------

    async def begin_task(self, now: float) -> None:
        """Choose the items (and notices) this task is fed, mark them fed and record it."""
        if self.notices is not None:
            await self.notices.begin_task()
        try:
            async with asyncio.timeout(_READ_TIMEOUT_S):
                await self._top_up()
        except SOFT_ERRORS as exc:
            log.warning("team context not topped up: %s", exc)
        self._fed = {i: at for i, at in self._fed.items() if at > now}
        self._held &= self.inbox.keys()
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

    async def take_blocking(
        self, outsiders_allowed: Callable[[], Awaitable[bool]]
    ) -> ContextItem | None:
        """The newest blocking item that may wake an idle agent with a task of its own.

        An item posted from outside the team (an MCP client) is input like any other
        from there: it wakes the agent only if ``outsiders_allowed()`` (nobody owns the
        agent, or its owner allowed external input); otherwise it waits in the inbox
        for the next task's context like any item.
        """
        waiting = [
            i
            for i in self.inbox.values()
            if i.urgency is Urgency.BLOCKING and i.id not in self._held
        ]
        for item in sorted(waiting, key=_priority, reverse=True):
            if from_outside(item) and not await outsiders_allowed():
                self._held.add(item.id)
                continue
            del self.inbox[item.id]
            return item
        return None

    async def _mark_fed(self, items: list[ContextItem]) -> None:
        self._fed.update((item.id, item.expires_at) for item in items)
        if self._emit is not None:
            self._emit("team.context", items=[_summary(item) for item in items])
        try:
            async with asyncio.timeout(_READ_TIMEOUT_S):
                await self.store.mark_fed(self.project, self.agent_id, items)
        except SOFT_ERRORS as exc:
            # Remembered in this process; after a restart the item may come once more.
            log.warning("fed context items not recorded: %s", exc)

    async def mark_fed(self, item: ContextItem) -> None:
        await self._mark_fed([item])

    # -- the prompt --------------------------------------------------------------------

    def render(self) -> str:
        """The block for the system prompt; ``""`` when there is nothing to tell."""
        items = "\n".join([HEADER, *(_line(item) for item in self.items)]) if self.items else ""
        notices = self.notices.render() if self.notices is not None else ""
        return "\n\n".join(block for block in (items, notices) if block)


def from_outside(item: ContextItem) -> bool:
    """Posted by an external runtime (through ``ateam mcp``), not by the team or its people."""
    return not item.source_agent and item.source_runtime not in LOCAL_RUNTIMES


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
