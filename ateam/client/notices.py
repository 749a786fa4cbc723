"""What the bus announces to a session: agents joining and leaving, takeovers, context items.

One pub/sub subscription covers three channels (the registry's, this session's own, and
the team context's). It is made before :meth:`Team.subscribe
<ateam.client.Team.subscribe>` returns, so nothing announced after that is missed, and
it is made again, with backoff, whenever the link drops.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.client import PubSub

from ateam.bus.backoff import CONNECTION_ERRORS, Backoff
from ateam.bus.codec import unpack
from ateam.bus.keys import Keys
from ateam.errors import BadRequest

__all__ = ["RESUMED", "Notice", "NoticeKind", "Notices"]


RESUMED = "resumed"
"""The event of the notice yielded after a reconnect: notices may have been missed."""


class NoticeKind(StrEnum):
    """Which channel a notice came on."""

    REGISTRY = "registry"
    """An agent joined (``join``), changed (``update``) or left (``leave``)."""
    SESSION = "session"
    """Addressed to this session: ``takeover`` (you have the grace period) or ``lost``."""
    CONTEXT = "context"
    """A team context item was posted (``post``)."""
    BOARD = "board"
    """A task board changed (``data``: ``project``, ``id``, ``status``)."""


@dataclass(frozen=True)
class Notice:
    """One announcement, decoded."""

    kind: NoticeKind
    event: str
    """``join``/``update``/``leave``, ``takeover``/``lost``, or ``post``; ``resumed``
    (kind ``context``) after a reconnect, when notices may have been missed."""
    agent: str
    """The agent concerned; empty for a context item posted by a console."""
    data: dict[str, Any] = field(default_factory=dict)
    """The whole notice as published (``by``, ``urgency``, ``title``, ``entry``…)."""


class Notices:
    """The session's subscription; ``async for notice in notices``, then :meth:`aclose`.

    Anyone who can reach Redis can publish on these channels: a notice is news to act
    on carefully (a takeover is confirmed against the ownership record), never proof.
    """

    def __init__(self, client: aioredis.Redis, keys: Keys, session: str) -> None:
        self._client = client
        self._kinds = {
            keys.registry_channel: NoticeKind.REGISTRY,
            keys.console_channel(session): NoticeKind.SESSION,
            keys.context_channel: NoticeKind.CONTEXT,
            keys.board_channel: NoticeKind.BOARD,
        }
        self._pubsub: PubSub | None = None

    async def open(self) -> None:
        """Subscribe; Redis errors reach the caller."""
        pubsub = self._client.pubsub()
        try:
            await pubsub.subscribe(*self._kinds)
        except BaseException:
            await _close(pubsub)
            raise
        self._pubsub = pubsub

    async def __aiter__(self) -> AsyncIterator[Notice]:
        backoff = Backoff()
        opened = self._pubsub is not None
        while True:
            try:
                if self._pubsub is None:
                    await self.open()
                    if opened:
                        # Pub/sub keeps nothing for the absent: say so, so a reader can
                        # read what it missed (the console re-lists context items).
                        yield Notice(NoticeKind.CONTEXT, RESUMED, "")
                    opened = True
                backoff.reset()
                assert self._pubsub is not None
                while True:
                    message = await self._pubsub.get_message(
                        ignore_subscribe_messages=True, timeout=1.0
                    )
                    if message is None:
                        continue
                    notice = self._decode(message["channel"], message["data"])
                    if notice is not None:
                        yield notice
            except CONNECTION_ERRORS:
                await self._drop()
                await asyncio.sleep(backoff.next_delay())

    def _decode(self, channel: bytes, data: bytes) -> Notice | None:
        kind = self._kinds.get(channel.decode())
        if kind is None:
            return None
        try:
            body = unpack(data)
        except BadRequest:
            return None  # someone else's bytes on our channel: nothing to act on
        return Notice(kind, str(body.get("event", "")), str(body.get("agent", "")), body)

    async def _drop(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            await _close(pubsub)

    async def aclose(self) -> None:
        await self._drop()


async def _close(pubsub: PubSub) -> None:
    with contextlib.suppress(Exception):  # closing a dead link must not mask why it died
        await pubsub.aclose()  # type: ignore[no-untyped-call]
