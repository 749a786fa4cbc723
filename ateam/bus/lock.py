"""The single-instance lock with fencing (SPEC §4.2)."""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from ateam._proc import pid_is_running
from ateam.bus.codec import pack, unpack
from ateam.bus.keys import Keys
from ateam.constants import LOCK_SAFETY_MARGIN_S, LOCK_TTL_S
from ateam.errors import BadRequest, DuplicateInstance, LockLost

log = logging.getLogger(__name__)

if hasattr(time, "CLOCK_BOOTTIME"):
    # Linux's monotonic clock stops while the machine is suspended; this one does not,
    # so a laptop or VM that slept past the TTL knows at once that its lock may be gone.
    def _elapsed() -> float:
        return time.clock_gettime(time.CLOCK_BOOTTIME)
else:  # pragma: no cover - other systems
    _elapsed = time.monotonic

# SET NX and bump the fencing counter in one step, so a fence always names one holder.
_ACQUIRE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0
"""
# Replace a lock only if it still holds exactly the value we judged dead.
_STEAL = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return redis.call('INCR', KEYS[2])
end
return 0
"""
_REFRESH = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


def machine_identity() -> dict[str, Any]:
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


@dataclass
class InstanceLock:
    """``lock:{agent}`` held by one process; refreshed and released only by its holder."""

    client: aioredis.Redis
    keys: Keys
    agent: str
    ttl_s: float = LOCK_TTL_S
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    fence: int = 0
    warnings: list[str] = field(default_factory=list)
    _value: bytes = b""
    _last_ok: float = 0.0

    def __post_init__(self) -> None:
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
    def _ttl_ms(self) -> int:
        return int(self.ttl_s * 1000)

    async def acquire(self) -> int:
        """Take the lock or raise :class:`DuplicateInstance`; returns the fencing number."""
        keys = [self.keys.lock(self.agent), self.keys.fence(self.agent)]
        fence = int(await self.client.eval(_ACQUIRE, 2, *keys, self._value, self._ttl_ms))
        if not fence:
            current: Any = await self.client.get(keys[0])
            if current is not None and self._holder_is_dead(current):
                fence = int(
                    await self.client.eval(_STEAL, 2, *keys, current, self._value, self._ttl_ms)
                )
        if not fence:
            raise DuplicateInstance(
                f"Another instance of {self.agent} is already registered on this Redis",
                detail={"agent": self.agent},
            )
        self.fence = fence
        self._last_ok = _elapsed()
        return fence

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

    async def refresh(self) -> None:
        """Extend the lock; raise :class:`LockLost` if another process holds it now.

        If the key vanished (a Redis that lost its data), it is taken again with SET NX:
        that can only succeed when nobody else holds it, so it never runs two copies.
        """
        lock_key = self.keys.lock(self.agent)
        if int(await self.client.eval(_REFRESH, 1, lock_key, self._value, self._ttl_ms)):
            self._last_ok = _elapsed()
            return
        keys = [lock_key, self.keys.fence(self.agent)]
        fence = int(await self.client.eval(_ACQUIRE, 2, *keys, self._value, self._ttl_ms))
        if not fence:
            raise LockLost(f"the instance lock of {self.agent} is held by another process")
        self.fence = fence
        self._last_ok = _elapsed()
        self.warnings.append(f"re-acquired the instance lock of {self.agent} (fence {fence})")

    def expired_locally(self) -> bool:
        """True when the lock may have lapsed: no successful refresh for TTL minus margin."""
        return _elapsed() - self._last_ok > self.ttl_s - LOCK_SAFETY_MARGIN_S

    async def release(self) -> bool:
        return bool(await self.client.eval(_RELEASE, 1, self.keys.lock(self.agent), self._value))

    async def holder(self) -> dict[str, Any] | None:
        raw: Any = await self.client.get(self.keys.lock(self.agent))
        return unpack(raw) if raw is not None else None
