"""Teammates' notices as this agent's model sees them (issue 26).

A teammate that finishes or fails a board task, or goes idle, leaves a notice in this
agent's list on the bus (:mod:`ateam.bus.notices`) and wakes its channel. The feed reads
the list when it subscribes (so what came while the agent was stopped is found at
start-up) and on each wake-up, keeps what it has not seen in an inbox, and records each
arrival on the agent's own stream (``team.notice``), so a console on this agent prints
it. A notice is not a task: it neither queues work nor wakes an idle agent.

What the model sees: from its arrival on, every model call's context holds the notice
in a block of its own beside the team's context items. When a task begins, the notices
then waiting are the ones that task shows, and they are removed from the bus at that
moment: shown in that task, then dropped. One that arrives while a task runs is shown
in that task's later calls and once more in the next task, which consumes it. A crash
between the removal and the model call loses the notice; a notice is news, not work.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

from ateam.bus.events import EventType
from ateam.bus.keys import Keys
from ateam.bus.notices import NOTICES_MAX, NoticeBox
from ateam.bus.subscription import SOFT_ERRORS, listen_forever
from ateam.wire.notices import TeamNotice

__all__ = ["NOTICES_HEADER", "NoticeFeed"]

log = logging.getLogger(__name__)

NOTICES_HEADER = "## Team notices (teammates that finished, failed or went idle; not tasks)"
_SHOWN_MAX = 20
"""Most notices in one context: the newest; the model needs the news, not a log."""
_READ_TIMEOUT_S = 1.0
"""A task waits at most this long for the bus; then it runs with what it has."""
_CATCH_UP_TIMEOUT_S = 5.0


class NoticeFeed:
    """One agent's teammates' notices.

    Args:
        box: the notices on the bus.
        client, keys: for the agent's notice channel.
        agent_id: the receiver.
        emit: the agent's event stream (``emit(type, **fields)``).
    """

    def __init__(
        self,
        box: NoticeBox,
        client: aioredis.Redis,
        keys: Keys,
        agent_id: str,
        emit: Callable[..., Any] | None = None,
    ) -> None:
        self._box = box
        self._client = client
        self._keys = keys
        self.agent_id = agent_id
        self._emit = emit
        self.inbox: dict[str, TeamNotice] = {}
        """Notices read and not shown in a task yet, by id, oldest first."""
        self.shown: tuple[TeamNotice, ...] = ()
        """What the current (or last) task was given at its start."""
        self._seen: set[str] = set()
        """Ids this process has had: an arrival is recorded on the stream once."""
        self.listening = asyncio.Event()

    async def listen(self) -> None:
        """Subscribe to this agent's notice channel for good; reconnects and catches up."""
        await listen_forever(
            self._client,
            (self._keys.notices_channel(self.agent_id),),
            on_open=self.catch_up,
            on_message=self._on_wake,
            listening=self.listening,
            what="team notices",
        )

    async def catch_up(self, timeout_s: float = _CATCH_UP_TIMEOUT_S) -> None:
        """Read what is waiting on the bus (start-up, a reconnect, a wake-up)."""
        async with asyncio.timeout(timeout_s):
            found = await self._box.pending(self.agent_id)
        for notice in found:
            self._add(notice)
        # What the list no longer holds cannot be read again: no need to remember it.
        self._seen &= {notice.id for notice in found} | self.inbox.keys()

    async def _on_wake(self, data: bytes) -> None:
        await self.catch_up()

    def _add(self, notice: TeamNotice) -> None:
        if notice.id in self._seen:
            return
        self._seen.add(notice.id)
        self.inbox[notice.id] = notice
        while len(self.inbox) > NOTICES_MAX:  # an idle agent of a busy team: the newest
            del self.inbox[next(iter(self.inbox))]
        if self._emit is not None:
            self._emit(EventType.TEAM_NOTICE, **notice.to_wire())

    async def begin_task(self) -> None:
        """Give this task the waiting notices, and remove them from the bus."""
        try:
            await self.catch_up(_READ_TIMEOUT_S)  # a wake-up may still be on its way
        except SOFT_ERRORS as exc:
            log.warning("team notices not read: %s", exc)
        self.shown = tuple(self.inbox.values())[-_SHOWN_MAX:]
        taken, self.inbox = list(self.inbox.values()), {}
        if not taken:
            return
        try:
            async with asyncio.timeout(_READ_TIMEOUT_S):
                await self._box.consume(self.agent_id, taken)
        except SOFT_ERRORS as exc:
            # Still on the bus: read again after a restart and shown once more.
            log.warning("team notices shown but not removed: %s", exc)

    def render(self) -> str:
        """The block for the context; ``""`` when there is no news."""
        notices = [*self.shown, *self.inbox.values()][-_SHOWN_MAX:]
        if not notices:
            return ""
        return "\n".join([NOTICES_HEADER, *(f"- {notice.line()}" for notice in notices)])
