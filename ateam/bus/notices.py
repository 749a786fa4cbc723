"""Teammates' notices on the bus (issue 26): a bounded, durable list per receiving agent.

A sender appends a notice to each receiver's list and publishes a wake-up on the
receiver's channel in one transaction, so a live receiver hears of it at once and a
stopped one finds it in the list when it starts. The list keeps the newest
:data:`NOTICES_MAX` notices and lives :data:`NOTICE_TTL_S` after its last post: a
receiver that never starts costs a bounded few kilobytes for a bounded time.

Only the receiver removes a notice (:meth:`NoticeBox.consume`), once it was put into
its model's context; it removes exactly the entries it read (by value, ``LREM``), so a
notice posted meanwhile is never lost to the removal.

Key layout (see :class:`~ateam.bus.keys.Keys`)::

    p:{<project>}:notices:<name>          list of msgpack notices, oldest first
    p:{<project>}:events-notices:<name>   channel: {"id"} of each notice added
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import redis.asyncio as aioredis

from ateam.bus.codec import pack, unpack
from ateam.bus.keys import Keys
from ateam.errors import BadRequest
from ateam.wire.notices import TeamNotice

__all__ = ["NOTICES_MAX", "NOTICE_TTL_S", "NoticeBox"]

log = logging.getLogger(__name__)

NOTICES_MAX = 50
"""Most notices kept for one receiver; the oldest go first."""
NOTICE_TTL_S = 7 * 24 * 3600
"""How long a receiver's notices wait after the last one was posted."""


class NoticeBox:
    """The notices waiting for each agent of a team."""

    def __init__(self, client: aioredis.Redis, keys: Keys) -> None:
        self._client = client
        self._keys = keys

    async def post(self, to: str, notice: TeamNotice) -> None:
        """Append ``notice`` to agent ``to``'s list and wake it; one round trip."""
        key = self._keys.notices(to)
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.rpush(key, pack(notice.to_wire()))
            pipe.ltrim(key, -NOTICES_MAX, -1)
            pipe.expire(key, NOTICE_TTL_S)
            pipe.publish(self._keys.notices_channel(to), pack({"id": notice.id}))
            await pipe.execute()

    async def pending(self, agent: str) -> list[TeamNotice]:
        """The notices waiting for ``agent``, oldest first; an unreadable one is skipped."""
        raws: list[bytes] = await self._client.lrange(self._keys.notices(agent), 0, -1)  # type: ignore[assignment]
        found = []
        for raw in raws:
            try:
                found.append(TeamNotice.from_wire(unpack(raw), raw=raw))
            except BadRequest as exc:  # anyone may write to the bus: skipped, not fatal
                log.warning("team notice for %s skipped: %s", agent, exc.message)
        return found

    async def consume(self, agent: str, notices: Iterable[TeamNotice]) -> None:
        """Remove these notices (as read by :meth:`pending`) from ``agent``'s list."""
        key = self._keys.notices(agent)
        raws = [notice.raw for notice in notices if notice.raw]
        if not raws:
            return
        async with self._client.pipeline(transaction=False) as pipe:
            for raw in raws:
                pipe.lrem(key, 1, raw)  # type: ignore[arg-type]  # bytes, as stored
            await pipe.execute()
