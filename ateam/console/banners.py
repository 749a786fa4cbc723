"""Team context items as console banners (SPEC §9): each shown once, none lost to a reconnect.

``attention`` and ``blocking`` items are banners (``blocking`` rings). Pub/sub keeps
nothing for the absent, so after a reconnect the console reads from Redis the urgent
items posted while it could not hear — they are kept there with their TTL — and shows
those it has not shown yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable
from typing import Any

from ateam.client import CONNECTION_ERRORS, ContextApi
from ateam.errors import AteamError

__all__ = ["ALERT_URGENCIES", "ContextBanners"]

ALERT_URGENCIES = {"attention": "warn", "blocking": "alert"}
"""Context items consoles announce, and the banner level of each (``alert`` rings)."""
_SHOWN_MAX = 1000

Show = Callable[..., None]
"""``show(text, level=...)``: the view's banner."""


class ContextBanners:
    """Which items this console showed, and the catch-up after a reconnect."""

    def __init__(self, context: ContextApi, show: Show) -> None:
        self._context = context
        self._show = show
        self._shown: dict[str, None] = {}
        """Ids shown, oldest first; the newest :data:`_SHOWN_MAX` are remembered."""
        self._started_at = time.time()
        self.catch_up: asyncio.Task[None] | None = None

    def show(self, data: dict[str, Any]) -> None:
        """A banner for an item (a notice's fields or an item's), once per item."""
        level = ALERT_URGENCIES.get(str(data.get("urgency")))
        item_id = str(data.get("id", ""))
        if level is None or item_id in self._shown:
            return
        self._shown[item_id] = None
        if len(self._shown) > _SHOWN_MAX:
            del self._shown[next(iter(self._shown))]  # the oldest
        source = data.get("source_agent") or data.get("source_runtime") or "a console"
        self._show(
            f"{str(data.get('urgency')).upper()} {data.get('type')} from {source}: "
            f"{data.get('title')} (/context ls)",
            level=level,
        )

    def missed(self, projects: Iterable[str]) -> None:
        """Read, in the background, what ``projects`` posted while we could not hear."""
        if self.catch_up is None or self.catch_up.done():
            self.catch_up = asyncio.create_task(
                self._read_missed(sorted(set(projects))), name="console:context-missed"
            )

    async def _read_missed(self, projects: list[str]) -> None:
        with contextlib.suppress(*CONNECTION_ERRORS, AteamError):
            for project in projects:
                items = await self._context.ls(project, min_urgency="attention", limit=20)
                for item in reversed(items):  # oldest first, as they were posted
                    if item.created_at >= self._started_at:
                        self.show(item.to_wire())
