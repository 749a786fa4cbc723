"""Console ownership: one writer per agent (SPEC §4.3).

``owner:{agent}`` is a hash (session, since, host, user, kind, token_sha256, and ``read``:
the offset its owner has read up to, issue 28 §3) with a TTL
the owning console refreshes. Consoles claim and release it here; the *agent* reads it
on every mutating call and refuses callers that are not the owner, so a buggy or stale
console can never write by mistake.

The session id is a name, not a credential: anyone who can read Redis can read it. What
proves ownership is a random token that lives only in the memory of the process that
claimed (:attr:`Ownership.token`). Redis holds its SHA-256, every request of the owner
carries the token (the RPC ``auth`` field), and the agent compares the hashes. Copying
the hash does not help either: the agent hashes what it is given.
"""

from __future__ import annotations

import asyncio
import getpass
import hashlib
import random
import secrets
import socket
import time
from typing import Any

import redis.asyncio as aioredis

from ateam.bus.codec import pack
from ateam.bus.keys import Keys
from ateam.constants import OWNER_CALL_WAIT_S, OWNER_TTL_S, TAKEOVER_GRACE_S
from ateam.errors import OwnershipDenied
from ateam.wire.ownership import OwnerInfo, OwnerKind

# Claim when free or already ours (same session *and* token: a copied session id is
# somebody else), or when replacing ``ARGV[5]`` on a takeover. Otherwise report the
# holder and its kind, so a waiting caller needs no second round trip to learn them.
# Every field is written on each claim, so nothing of a previous holder survives (the
# holder's own "allow external input" choice survives its re-claims).
_CLAIM = """
local cur = redis.call('HMGET', KEYS[1], 'session', 'token_sha256', 'kind')
if cur[1] and not (cur[1] == ARGV[1] and cur[2] == ARGV[7]) and cur[1] ~= ARGV[5] then
  return {cur[1], cur[3] or ''}
end
local external = '0'
if cur[1] == ARGV[1] and cur[2] == ARGV[7] then
  external = redis.call('HGET', KEYS[1], 'external') or '0'
else
  redis.call('HDEL', KEYS[1], 'read')  -- a new holder has read nothing yet
end
redis.call('HSET', KEYS[1], 'session', ARGV[1], 'since', ARGV[2], 'host', ARGV[3],
           'user', ARGV[4], 'token_sha256', ARGV[7], 'kind', ARGV[8], 'external', external)
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return false
"""
# Refresh and release are the owner's alone: same session and same token hash.
_REFRESH = """
local cur = redis.call('HMGET', KEYS[1], 'session', 'token_sha256')
if cur[1] == ARGV[1] and cur[2] == ARGV[2] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return 0
"""
_RELEASE = """
local cur = redis.call('HMGET', KEYS[1], 'session', 'token_sha256')
if cur[1] == ARGV[1] and cur[2] == ARGV[2] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

# Only the owner decides whether external runtimes (MCP clients) may queue input.
_ALLOW_EXTERNAL = """
local cur = redis.call('HMGET', KEYS[1], 'session', 'token_sha256')
if cur[1] == ARGV[1] and cur[2] == ARGV[2] then
  redis.call('HSET', KEYS[1], 'external', ARGV[3])
  return 1
end
return 0
"""

# The owner's read mark (issue 28 §3, :mod:`ateam.bus.owner_lag`): only the holder moves
# it, so a stale owner or a tail cannot hold the agent back, nor let it run ahead.
_MARK_READ = """
local cur = redis.call('HMGET', KEYS[1], 'session', 'token_sha256')
if cur[1] == ARGV[1] and cur[2] == ARGV[2] then
  redis.call('HSET', KEYS[1], 'read', ARGV[3])
  return 1
end
return 0
"""

_WAIT_FIRST_S = 0.005
_WAIT_MAX_S = 0.1


def token_digest(token: str) -> str:
    """What the owner hash stores of a token (hex SHA-256); the agent compares these."""
    return hashlib.sha256(token.encode()).hexdigest()


class Ownership:
    """Ownership operations on behalf of one console session.

    ``token`` is this session's secret: made here, kept in memory, never written or
    logged. Pass it to :class:`~ateam.bus.rpc.RpcClient` as ``auth``; without it the
    agent refuses the session's mutating calls.
    """

    def __init__(
        self,
        client: aioredis.Redis,
        keys: Keys,
        session: str,
        *,
        ttl_s: float = OWNER_TTL_S,
        grace_s: float = TAKEOVER_GRACE_S,
        call_wait_s: float = OWNER_CALL_WAIT_S,
    ) -> None:
        self._client = client
        self._keys = keys
        self.session = session
        self.token = secrets.token_hex(32)
        self._digest = token_digest(self.token)
        self._ttl_ms = int(ttl_s * 1000)
        self._grace_s = grace_s
        self._call_wait_s = call_wait_s
        self._claim = client.register_script(_CLAIM)
        self._refresh = client.register_script(_REFRESH)
        self._release = client.register_script(_RELEASE)
        self._allow_external = client.register_script(_ALLOW_EXTERNAL)
        self._mark_read = client.register_script(_MARK_READ)
        self._host = socket.gethostname()
        try:
            self._user = getpass.getuser()
        except (KeyError, OSError):
            self._user = "unknown"

    def __repr__(self) -> str:  # the token stays out of logs and tracebacks
        return f"Ownership(session={self.session!r})"

    async def current(self, agent: str) -> OwnerInfo | None:
        data: Any = await self._client.hgetall(self._keys.owner(agent))
        return OwnerInfo.from_hash(data)

    async def acquire(
        self, agent: str, *, takeover: bool = False, kind: OwnerKind = OwnerKind.CONSOLE
    ) -> OwnerInfo | None:
        """Become the owner of ``agent``; returns the previous owner on a takeover.

        A one-call claim (``OwnerKind.CALL``) in the way is waited for, up to
        ``call_wait_s``: it ends within milliseconds, and two scripts that ``ateam
        send`` to one agent at once should both succeed, not race. A console's claim
        raises :class:`OwnershipDenied` at once, naming that console. With ``takeover``
        the holder is told at once, given the grace period to finish what it is doing,
        and then replaced.
        """
        held = await self._wait_for_call_claims(agent, kind)
        if held is None:
            return None
        previous = await self.current(agent)
        if not takeover:
            raise self._denied(agent, held, previous)
        await self.notify(held, {"event": "takeover", "agent": agent, "by": self.session})
        await asyncio.sleep(self._grace_s)
        still = await self._try(agent, replace=held, kind=kind)
        if still is not None:
            raise OwnershipDenied(
                f"{agent} was claimed by {still[0]} during the takeover",
                detail={"owner": still[0], "kind": still[1]},
            )
        await self.notify(held, {"event": "lost", "agent": agent, "by": self.session})
        return previous

    async def _wait_for_call_claims(self, agent: str, kind: OwnerKind) -> str | None:
        """Claim, retrying while the holder is a one-call claim; the holder, or None."""
        # Polled with full jitter rather than woken by the release: the callers are
        # short-lived processes for which a subscription costs more than the few
        # claim attempts, and the jitter keeps racing scripts from retrying in step.
        deadline = time.monotonic() + self._call_wait_s
        delay = _WAIT_FIRST_S
        while True:
            held = await self._try(agent, replace="", kind=kind)
            if held is None:
                return None
            session, held_kind = held
            if held_kind != OwnerKind.CALL or time.monotonic() >= deadline:
                return session
            await asyncio.sleep(random.uniform(0, delay))
            delay = min(delay * 2, _WAIT_MAX_S)

    def _denied(self, agent: str, held: str, previous: OwnerInfo | None) -> OwnershipDenied:
        who = previous.describe() if previous else held
        since = previous.since if previous else None
        detail = {"owner": held, "since": since, "kind": previous.kind.value if previous else None}
        if previous is not None and previous.kind == OwnerKind.CALL:
            return OwnershipDenied(
                f"{agent} is still held by {who} for one call (an `ateam send` or `stop`, "
                f"or a console's one-off write) after waiting {self._call_wait_s:g}s; "
                "the agent may be slow to answer — try again",
                detail=detail,
            )
        return OwnershipDenied(f"{agent} is already attached by console {who}", detail=detail)

    async def _try(self, agent: str, *, replace: str, kind: OwnerKind) -> tuple[str, str] | None:
        held = await self._claim(
            keys=[self._keys.owner(agent)],
            args=[
                self.session,
                time.time(),
                self._host,
                self._user,
                replace,
                self._ttl_ms,
                self._digest,
                kind.value,
            ],
        )
        if not held:
            return None
        session, held_kind = held
        return session.decode(), held_kind.decode()

    async def refresh(self, agent: str) -> bool:
        """Extend our claim; False means another console owns the agent now."""
        return bool(
            await self._refresh(
                keys=[self._keys.owner(agent)], args=[self.session, self._digest, self._ttl_ms]
            )
        )

    async def release(self, agent: str) -> bool:
        return bool(
            await self._release(keys=[self._keys.owner(agent)], args=[self.session, self._digest])
        )

    async def allow_external(self, agent: str, allowed: bool) -> bool:
        """Let external runtimes queue input to ``agent`` (or stop them); owner only.

        Returns False when this session does not own the agent (nothing changes).
        """
        args = [self.session, self._digest, "1" if allowed else "0"]
        return bool(await self._allow_external(keys=[self._keys.owner(agent)], args=args))

    async def mark_read(self, agent: str, offset: int) -> bool:
        """As the owner, say ``agent``'s events are read up to ``offset``; False (nothing
        changes) when this session does not hold it."""
        args: list[str | int] = [self.session, self._digest, offset]
        return bool(await self._mark_read(keys=[self._keys.owner(agent)], args=args))

    async def notify(self, session: str, message: dict[str, Any]) -> None:
        await self._client.publish(self._keys.console_channel(session), pack(message))
