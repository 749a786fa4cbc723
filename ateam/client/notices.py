"""What the bus announces to a session: agents joining and leaving, takeovers, context items.

One pub/sub subscription covers the channels of every project the session may see (its
registry, context and board notices), the global context channel and the session's own.
It is made before :meth:`Team.subscribe
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
from redis.exceptions import NoPermissionError, ResponseError

from ateam.bus.backoff import CONNECTION_ERRORS, Backoff
from ateam.bus.codec import unpack
from ateam.bus.keys import Keys
from ateam.bus.registry import Registry
from ateam.constants import RPC_DEFAULT_DEADLINE_S
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
    project: str = ""
    """The project whose channel carried it; empty on a team-wide or session channel."""


class Notices:
    """The session's subscription; ``async for notice in notices``, then :meth:`aclose`.

    Every project has its own channels (see :mod:`ateam.bus.keys`): the session
    subscribes to those of each project this Redis user may read (an ACL of one project
    keeps the others out of sight), to the global context channel, to its own console
    channel, and to the announcement of new projects, on which it subscribes to the new
    project's channels too (and reports its first agent's join).

    Anyone who can reach Redis can publish on these channels: a notice is news to act
    on carefully (a takeover is confirmed against the ownership record), never proof.
    """

    def __init__(self, client: aioredis.Redis, keys: Keys, session: str) -> None:
        self._client = client
        self._keys = keys
        self._registry = Registry(client, keys)
        self._kinds: dict[str, NoticeKind] = {
            keys.console_channel(session): NoticeKind.SESSION,
            keys.context_global_channel: NoticeKind.CONTEXT,
        }
        self._pubsub: PubSub | None = None
        self._all_projects = False
        """Subscribed to every project's channels by pattern (no channel ACL)."""
        self.projects: set[str] = set()
        """With a channel ACL: the projects whose channels this session hears."""

    def _project_kinds(self, project: str) -> dict[str, NoticeKind]:
        keys = self._keys
        return {
            keys.registry_channel(project): NoticeKind.REGISTRY,
            keys.context_channel(project): NoticeKind.CONTEXT,
            keys.board_channel(project): NoticeKind.BOARD,
        }

    async def open(self) -> None:
        """Subscribe; Redis errors reach the caller.

        Every project's channels at once with one pattern when this Redis user may (no
        channel ACL), which also hears projects that do not exist yet; otherwise each
        project the user may read, one by one, and new ones as they are announced.
        """
        pubsub = self._client.pubsub()
        try:
            if await _pattern_allowed(pubsub, self._keys.ns):
                self._all_projects = True
                await pubsub.subscribe(*self._kinds)
            else:
                await _close(pubsub)
                pubsub = self._client.pubsub()
                visible = await self._registry.visible(await self._registry.projects())
                for project in visible:
                    self._kinds.update(self._project_kinds(project))
                self.projects = set(visible)
                await pubsub.subscribe(self._keys.projects_channel, *self._kinds)
        except BaseException:
            await _close(pubsub)
            raise
        self._pubsub = pubsub

    async def _new_project(self, data: bytes) -> Notice | None:
        """A project's first agent joined: hear the project too, if this user may."""
        try:
            body = unpack(data)
            project = str(body["project"])
        except (BadRequest, KeyError, TypeError):
            return None
        if project in self.projects or not await self._registry.visible((project,)):
            return None
        kinds = self._project_kinds(project)
        assert self._pubsub is not None
        await self._pubsub.subscribe(*kinds)
        self._kinds.update(kinds)
        self.projects.add(project)
        # Its first join was published before we listened: have the registry read again.
        return Notice(NoticeKind.REGISTRY, "update", "", body)

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
                    if message is None or message.get("type") not in ("message", "pmessage"):
                        continue
                    channel = message["channel"].decode()
                    if channel == self._keys.projects_channel:
                        notice = await self._new_project(message["data"])
                    else:
                        notice = self._decode(channel, message["data"])
                    if notice is not None:
                        yield notice
            except CONNECTION_ERRORS:
                await self._drop()
                await asyncio.sleep(backoff.next_delay())

    def _decode(self, channel: str, data: bytes) -> Notice | None:
        kind = self._kinds.get(channel)
        if kind is None and self._all_projects:
            kind = _PATTERN_KINDS.get(channel.rpartition(":events:")[2])
        if kind is None:
            return None
        try:
            body = unpack(data)
        except BadRequest:
            return None  # someone else's bytes on our channel: nothing to act on
        event, agent = str(body.get("event", "")), str(body.get("agent", ""))
        return Notice(kind, event, agent, body, self._project_of(channel))

    def _project_of(self, channel: str) -> str:
        """``<project>`` of a project channel ``{ns}p:{<project>}:events:<word>``, else ""."""
        head = f"{self._keys.ns}p:{{"
        if not channel.startswith(head):
            return ""
        return channel[len(head) :].partition("}:events:")[0]

    async def _drop(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            await _close(pubsub)

    async def aclose(self) -> None:
        await self._drop()


_PATTERN_KINDS = {
    "registry": NoticeKind.REGISTRY,
    "context": NoticeKind.CONTEXT,
    "board": NoticeKind.BOARD,
}
"""The last word of a project channel (``{ns}p:{<project>}:events:<word>``) → its kind."""


async def _pattern_allowed(pubsub: PubSub, ns: str) -> bool:
    """PSUBSCRIBE to every project's channels; False if the user's ACL refuses it."""
    await pubsub.psubscribe(f"{ns}p:*:events:*")
    try:
        while True:
            reply = await pubsub.get_message(timeout=RPC_DEFAULT_DEADLINE_S)
            if reply is None:
                raise TimeoutError("no answer to PSUBSCRIBE")
            if reply.get("type") == "psubscribe":
                return True
    except ResponseError as exc:
        if isinstance(exc, NoPermissionError) or str(exc).startswith("NOPERM"):
            return False
        raise


async def _close(pubsub: PubSub) -> None:
    with contextlib.suppress(Exception):  # closing a dead link must not mask why it died
        await pubsub.aclose()
