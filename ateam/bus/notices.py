"""Teammates' notices on the bus (issue 26): a bounded, durable list per receiving agent.

A sender appends a notice to each receiver's list and publishes a wake-up on the
receiver's channel in one transaction, so a live receiver hears of it at once and a
stopped one finds it in the list when it starts. The list keeps the newest
:data:`NOTICES_MAX` notices and lives :data:`NOTICE_TTL_S` after its last post: a
receiver that never starts costs a bounded few kilobytes for a bounded time.

A notice whose id was posted to the same receiver lately (the newest
:data:`NOTICE_IDS_MAX` ids are remembered, for as long as the list lives) is not posted
again: a sender that replays a task's end after a crash sends the same id, and the
receiver hears of it once, even if it consumed the first one already.

Only the receiver removes a notice (:meth:`NoticeBox.consume`), once it was put into
its model's context; it removes exactly the entries it read (by value, ``LREM``), so a
notice posted meanwhile is never lost to the removal.

Key layout (see :class:`~ateam.bus.keys.Keys`)::

    p:{<project>}:notices:<name>          list of msgpack notices, oldest first
    p:{<project>}:notice-ids:<name>       sorted set: ids posted lately, by time
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

__all__ = ["NOTICES_MAX", "NOTICE_IDS_MAX", "NOTICE_TTL_S", "NoticeBox"]

log = logging.getLogger(__name__)

NOTICES_MAX = 50
"""Most notices kept for one receiver; the oldest go first."""
NOTICE_TTL_S = 7 * 24 * 3600
"""How long a receiver's notices wait after the last one was posted."""
NOTICE_IDS_MAX = 500
"""Most ids remembered per receiver to refuse a repeat; a replay comes soon after."""

# KEYS: the list, the ids; ARGV: id, when, notice, channel, wake-up, max, ids max, ttl.
# The check and the push in one script: two replays at once still post once.
_POST = """
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -tonumber(ARGV[7]) - 1)
redis.call('EXPIRE', KEYS[2], ARGV[8])
redis.call('RPUSH', KEYS[1], ARGV[3])
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[6]), -1)
redis.call('EXPIRE', KEYS[1], ARGV[8])
redis.call('PUBLISH', ARGV[4], ARGV[5])
return 1
"""


class NoticeBox:
    """The notices waiting for each agent of a team."""

    def __init__(self, client: aioredis.Redis, keys: Keys) -> None:
        self._client = client
        self._keys = keys
        self._post = client.register_script(_POST)

    async def post(self, to: str, notice: TeamNotice) -> bool:
        """Append ``notice`` to agent ``to``'s list and wake it; one round trip.

        Returns whether it was posted: ``False`` for an id posted to ``to`` lately.
        """
        keys = [self._keys.notices(to), self._keys.notice_ids(to)]
        args: list[bytes | str | float | int] = [
            notice.id,
            notice.at,
            pack(notice.to_wire()),
            self._keys.notices_channel(to),
            pack({"id": notice.id}),
            NOTICES_MAX,
            NOTICE_IDS_MAX,
            NOTICE_TTL_S,
        ]
        return bool(await self._post(keys=keys, args=args))

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
