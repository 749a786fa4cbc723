"""Console ownership: one writer per agent (SPEC §4.3).

``owner:{agent}`` is a hash (session, since, host, user) with a TTL the owning console
refreshes. Consoles claim and release it here; the *agent* reads it on every mutating
call and refuses callers that are not the owner, so a buggy or stale console can never
write by mistake.
"""

from __future__ import annotations

import asyncio
import getpass
import socket
import time
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from ateam.bus.codec import pack
from ateam.bus.keys import Keys
from ateam.constants import OWNER_TTL_S, TAKEOVER_GRACE_S
from ateam.errors import OwnershipDenied

# Claim when free or already ours; otherwise report who holds it.
_CLAIM = """
local cur = redis.call('HGET', KEYS[1], 'session')
if cur and cur ~= ARGV[1] and ARGV[5] ~= cur then
  return cur
end
redis.call('HSET', KEYS[1], 'session', ARGV[1], 'since', ARGV[2], 'host', ARGV[3],
           'user', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return false
"""
_REFRESH = """
if redis.call('HGET', KEYS[1], 'session') == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('HGET', KEYS[1], 'session') == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


@dataclass(frozen=True)
class OwnerInfo:
    session: str
    since: float
    host: str
    user: str

    @classmethod
    def from_hash(cls, data: dict[bytes, bytes]) -> OwnerInfo | None:
        if b"session" not in data:
            return None
        return cls(
            data[b"session"].decode(),
            float(data.get(b"since", b"0")),
            data.get(b"host", b"").decode(),
            data.get(b"user", b"").decode(),
        )

    def describe(self) -> str:
        return f"{self.session} ({self.user}@{self.host})"


class Ownership:
    """Ownership operations on behalf of one console session."""

    def __init__(
        self,
        client: aioredis.Redis,
        keys: Keys,
        session: str,
        *,
        ttl_s: float = OWNER_TTL_S,
        grace_s: float = TAKEOVER_GRACE_S,
    ) -> None:
        self._client = client
        self._keys = keys
        self.session = session
        self._ttl_ms = int(ttl_s * 1000)
        self._grace_s = grace_s
        self._claim = client.register_script(_CLAIM)
        self._refresh = client.register_script(_REFRESH)
        self._release = client.register_script(_RELEASE)
        self._host = socket.gethostname()
        try:
            self._user = getpass.getuser()
        except (KeyError, OSError):
            self._user = "unknown"

    async def current(self, agent: str) -> OwnerInfo | None:
        data: Any = await self._client.hgetall(self._keys.owner(agent))
        return OwnerInfo.from_hash(data)

    async def acquire(self, agent: str, *, takeover: bool = False) -> OwnerInfo | None:
        """Become the owner of ``agent``; returns the previous owner on a takeover.

        Without ``takeover`` a claim held by another session raises
        :class:`OwnershipDenied`. With it, the holder is told at once, given the grace
        period to finish what it is doing, and then replaced.
        """
        held = await self._try(agent, replace="")
        if held is None:
            return None
        previous = await self.current(agent)
        if not takeover:
            who = previous.describe() if previous else held
            raise OwnershipDenied(
                f"{agent} is already attached by console {who}",
                detail={"owner": held, "since": previous.since if previous else None},
            )
        await self.notify(held, {"event": "takeover", "agent": agent, "by": self.session})
        await asyncio.sleep(self._grace_s)
        still = await self._try(agent, replace=held)
        if still is not None:
            raise OwnershipDenied(
                f"{agent} was claimed by console {still} during the takeover",
                detail={"owner": still},
            )
        await self.notify(held, {"event": "lost", "agent": agent, "by": self.session})
        return previous

    async def _try(self, agent: str, *, replace: str) -> str | None:
        held = await self._claim(
            keys=[self._keys.owner(agent)],
            args=[self.session, time.time(), self._host, self._user, replace, self._ttl_ms],
        )
        return held.decode() if isinstance(held, bytes) else None

    async def refresh(self, agent: str) -> bool:
        """Extend our claim; False means another console owns the agent now."""
        return bool(
            await self._refresh(keys=[self._keys.owner(agent)], args=[self.session, self._ttl_ms])
        )

    async def release(self, agent: str) -> bool:
        return bool(await self._release(keys=[self._keys.owner(agent)], args=[self.session]))

    async def notify(self, session: str, message: dict[str, Any]) -> None:
        await self._client.publish(self._keys.console_channel(session), pack(message))
