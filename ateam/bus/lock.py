"""The single-instance lock with fencing (SPEC §4.2).

Whether this process still holds its identity is decided by evidence only, never by a
failed call:

* the lock holds this process's value: still ours (refreshed);
* the lock holds another live process's value: lost, :class:`~ateam.errors.LockLost`;
* the lock is gone — a Redis restarted without persistence, a ``FLUSHALL``, an eviction,
  or a partition longer than the TTL: the *state* was lost, not the identity. It is
  taken again with ``SET NX``, which only succeeds while nobody else holds it, and with
  a fence above every fence this identity was issued before (:class:`Renewal`).

A connection that fails or times out proves nothing either way: the caller retries, and
meanwhile :meth:`InstanceLock.expired_locally` says whether the lock may have lapsed.

Fences only grow, even across a Redis that lost its counter: the highest fence issued
(the *high-water mark*) is kept in a local file (``state/fence`` for an agent), written
atomically before the fence is used, and every fence issued is above it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript

from ateam._fs import atomic_write
from ateam._json import JsonObject
from ateam._proc import pid_is_running
from ateam.bus.codec import pack, unpack
from ateam.bus.keys import Keys
from ateam.constants import LOCK_SAFETY_MARGIN_S, LOCK_TTL_S
from ateam.errors import BadRequest, DuplicateInstance, LockLost

__all__ = ["FENCE_FILE", "InstanceLock", "Renewal", "machine_identity"]

log = logging.getLogger(__name__)

FENCE_FILE = "fence"
"""In an agent's ``state/``: the highest fence its identity was ever issued."""

if hasattr(time, "CLOCK_BOOTTIME"):
    # Linux's monotonic clock stops while the machine is suspended; this one does not,
    # so a laptop or VM that slept past the TTL knows at once that its lock may be gone.
    def _elapsed() -> float:
        return time.clock_gettime(time.CLOCK_BOOTTIME)
else:  # pragma: no cover - other systems
    _elapsed = time.monotonic

# A fence above both the counter and the caller's high-water mark (ARGV[n]): a counter
# that Redis lost restarts at 1, and fences already issued must never come back.
_ISSUE = """
local function issue(high)
  local f = redis.call('INCR', KEYS[2])
  if f <= high then
    f = high + 1
    redis.call('SET', KEYS[2], f)
  end
  return f
end
"""
# SET NX and issue a fence in one step, so a fence always names one holder.
# ARGV: value, ttl ms, high-water mark.
_ACQUIRE = (
    _ISSUE
    + """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return issue(tonumber(ARGV[3]))
end
return 0
"""
)
# Replace a lock only if it still holds exactly the value we judged dead.
# ARGV: that value, ours, ttl ms, high-water mark.
_STEAL = (
    _ISSUE
    + """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return issue(tonumber(ARGV[4]))
end
return 0
"""
)
# Keep the lock: {1, fence} when it and its fence are as we left them; {2, fence} when
# it is ours but the counter is not (vanished, or restored from an older snapshot: a
# new fence above everything we issued; higher: a re-take of ours whose reply was
# lost, since nobody else issues fences while our value is in the lock); {3, fence}
# when the lock itself was gone and is ours again; {0, 0} when another process holds it.
# ARGV: value, ttl ms, our fence, high-water mark.
_KEEP = (
    _ISSUE
    + """
local held = redis.call('GET', KEYS[1])
if held == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  local mine = tonumber(ARGV[3])
  local f = tonumber(redis.call('GET', KEYS[2]) or '') or 0
  if f == mine then
    return {1, f}
  end
  if f < mine then
    f = math.max(mine, tonumber(ARGV[4])) + 1
    redis.call('SET', KEYS[2], f)
  end
  return {2, f}
end
if not held then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {3, issue(tonumber(ARGV[4]))}
end
return {0, 0}
"""
)
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class Renewal(StrEnum):
    """What a refresh found: the lock as left, or state that Redis lost and we rebuilt."""

    KEPT = "kept"
    """The lock and its fence were as this process left them."""
    REFENCED = "refenced"
    """The lock was ours but its fence counter was not: a new, higher fence was issued."""
    RETAKEN = "retaken"
    """The lock was gone (lost by Redis, or lapsed during a partition) and nobody had
    taken it: it is ours again, with a higher fence."""


def machine_identity() -> JsonObject:
    """What makes two processes' pids comparable: same boot and same pid namespace.

    A hostname alone is not enough: containers sharing the host's network share its
    hostname but cannot see each other's pids.
    """
    identity: dict[str, Any] = {"boot_id": "", "pidns": 0}
    with contextlib.suppress(OSError):
        identity["boot_id"] = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    with contextlib.suppress(OSError):
        identity["pidns"] = os.stat("/proc/self/ns/pid").st_ino
    return identity


@dataclass(eq=False)
class InstanceLock:
    """``lock:{agent}`` held by one process; refreshed and released only by its holder.

    Args:
        fence_file: Where the high-water mark of fences lives (an agent's
            ``state/fence``); ``None`` keeps it in memory only.
    """

    client: aioredis.Redis
    keys: Keys
    agent: str
    ttl_s: float = LOCK_TTL_S
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    fence: int = 0
    fence_file: Path | None = None
    warnings: list[str] = field(default_factory=list)
    _value: bytes = b""
    _last_ok: float = 0.0
    _high_water: int | None = None
    _serial: asyncio.Lock = field(default_factory=asyncio.Lock)
    _scripts: dict[str, AsyncScript] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, source in (("acquire", _ACQUIRE), ("steal", _STEAL), ("keep", _KEEP)):
            self._scripts[name] = self.client.register_script(source)
        self._scripts["release"] = self.client.register_script(_RELEASE)
        self._value = pack(
            {
                "token": secrets.token_hex(16),
                "host": self.host,
                "pid": self.pid,
                "since": time.time(),
                **machine_identity(),
            }
        )

    @property
    def value(self) -> bytes:
        """What the lock key holds while this process holds it (random: never reused)."""
        return self._value

    @property
    def _ttl_ms(self) -> int:
        return int(self.ttl_s * 1000)

    @property
    def _keys(self) -> list[str]:
        return [self.keys.lock(self.agent), self.keys.fence(self.agent)]

    @property
    def high_water(self) -> int:
        """The highest fence this identity is known to have been issued."""
        if self._high_water is None:
            self._high_water = self._read_high_water()
        return max(self._high_water, self.fence)

    async def acquire(self) -> int:
        """Take the lock or raise :class:`DuplicateInstance`; returns the fencing number."""
        async with self._serial:
            sent = _elapsed()
            keys = self._keys
            args = (self._value, self._ttl_ms, self.high_water)
            fence = int(await self._scripts["acquire"](keys=keys, args=args))
            if not fence:
                current: Any = await self.client.get(keys[0])
                if current is not None and self._holder_is_dead(current):
                    fence = await self._steal(current)
            if not fence:
                raise DuplicateInstance(
                    f"Another instance of {self.agent} is already registered on this Redis",
                    detail={"agent": self.agent},
                )
            self._holds(fence, sent)
            return fence

    async def _steal(self, judged: bytes) -> int:
        args = (judged, self._value, self._ttl_ms, self.high_water)
        return int(await self._scripts["steal"](keys=self._keys, args=args))

    def _holder_is_dead(self, value: bytes) -> bool:
        try:
            holder = unpack(value)
        except BadRequest:
            return False
        pid = holder.get("pid")
        if holder.get("host") != self.host or not isinstance(pid, int):
            return False
        mine = machine_identity()
        if any(holder.get(key) != value for key, value in mine.items()):
            return False  # another boot or pid namespace: its pid means nothing here
        if pid == self.pid or pid_is_running(pid):
            return False
        self.warnings.append(
            f"took over the lock of {self.agent} left by pid {pid}, which is no longer running"
        )
        log.warning(self.warnings[-1])
        return True

    async def refresh(self) -> Renewal:
        """Extend the lock, or take it again if Redis lost it; what was found.

        Calls are serialized, so two callers (the heartbeat, a publisher in doubt about
        its fence) never race each other's re-take.

        Raises:
            LockLost: another live process holds the lock (the only proof of a loss).
            redis.exceptions.ConnectionError, OSError: nothing was proven; retry.
        """
        async with self._serial:
            sent = _elapsed()
            args = (self._value, self._ttl_ms, self.fence, self.high_water)
            status, fence = await self._scripts["keep"](keys=self._keys, args=args)
            if not status:
                # A lock restored from an older snapshot may name a predecessor that is
                # gone; one of this host's dead processes is taken over as at start.
                current: Any = await self.client.get(self._keys[0])
                if current is not None and self._holder_is_dead(current):
                    fence = await self._steal(current)
                if not fence:
                    raise LockLost(
                        f"the instance lock of {self.agent} is held by another process",
                        detail={"agent": self.agent, "fence": self.fence},
                    )
                status = 3
            renewal = (Renewal.KEPT, Renewal.REFENCED, Renewal.RETAKEN)[int(status) - 1]
            previous = self.fence
            self._holds(int(fence), sent)
            if renewal is not Renewal.KEPT:
                log.warning(
                    "instance lock of %s %s: fence %s -> %s", self.agent, renewal, previous, fence
                )
            return renewal

    def _holds(self, fence: int, sent: float) -> None:
        """Record a fence Redis issued or confirmed; the high-water mark goes first."""
        if fence > self.high_water:
            self._write_high_water(fence)
        self.fence = fence
        # From when the call was sent, not answered: Redis ran it in between, so the
        # lock lives at least until then plus the TTL, and a slow reply can't stretch it.
        self._last_ok = sent

    def _read_high_water(self) -> int:
        if self.fence_file is None:
            return 0
        try:
            return int(self.fence_file.read_text(encoding="ascii").strip() or 0)
        except (OSError, ValueError):
            return 0  # missing or torn: Redis's counter is all there is to go by

    def _write_high_water(self, fence: int) -> None:
        self._high_water = fence
        if self.fence_file is None:
            return
        try:
            self.fence_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            atomic_write(self.fence_file, f"{fence}\n".encode("ascii"))
        except OSError as exc:
            # A full disk must not stop the agent: the mark is still kept in memory,
            # so only a Redis that loses its data *and* a restart together could reuse
            # a fence, and the lock's SET NX still keeps that to one process.
            log.warning("could not record fence %s in %s: %s", fence, self.fence_file, exc)

    def expired_locally(self) -> bool:
        """True when the lock may have lapsed: no confirmation for TTL minus margin."""
        return _elapsed() - self._last_ok > self.ttl_s - LOCK_SAFETY_MARGIN_S

    async def release(self) -> bool:
        lock = self.keys.lock(self.agent)
        return bool(await self._scripts["release"](keys=[lock], args=[self._value]))

    async def holder(self) -> JsonObject | None:
        raw: Any = await self.client.get(self.keys.lock(self.agent))
        return unpack(raw) if raw is not None else None
