"""The eviction guard: ateam refuses a Redis that may evict its keys (SPEC §4).

The single-instance lock, the fence, console ownership and the heartbeat are keys with
a TTL, and the registry and event streams are keys too. A server with a memory limit
(``maxmemory``) and any eviction policy but ``noeviction`` deletes keys under memory
pressure: the ``allkeys-*`` policies any key, the ``volatile-*`` ones exactly the keys
that have a TTL. A lock evicted behind an agent's back lets a second instance of it run.

So every process that starts on a bus — an agent, a console, a verb, ``ateam up`` —
first reads the policy from ``INFO memory`` (managed services often forbid ``CONFIG``)
and refuses a server that may evict, with :class:`~ateam.errors.EvictionPolicyRefused`.
Safe is ``maxmemory-policy noeviction`` (a full server then refuses writes with OOM,
which ateam reports) or ``maxmemory 0`` (no limit, so nothing is ever evicted). A server
that does not report its policy cannot be told safe and is refused too.

Those who accept the risk opt out with ``ATEAM_ALLOW_EVICTION=1`` or ``tools.yaml``
``transport.allow_eviction: true``; the process then starts with a warning, at every start.
The check is made once, at start: a policy changed later is not noticed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import NoPermissionError, RedisError

from ateam.bus.connection import ALLOW_EVICTION_ENV, RedisTarget, bus_error
from ateam.errors import Code, EvictionPolicyRefused, RedisPermissionDenied

__all__ = [
    "ALLOW_EVICTION_ENV",
    "SAFE_POLICY",
    "MemoryPolicy",
    "check_eviction",
    "eviction_allowed",
    "read_policy",
]

log = logging.getLogger(__name__)

SAFE_POLICY = "noeviction"
"""The one ``maxmemory-policy`` under which a server with a memory limit evicts nothing."""
_TRUE = frozenset({"1", "true", "yes", "on"})


@dataclass(frozen=True)
class MemoryPolicy:
    """What a server says about eviction in ``INFO memory``."""

    policy: str | None
    """``maxmemory_policy``; ``None`` when the server does not report it."""
    maxmemory: int | None
    """``maxmemory`` in bytes, 0 for no limit; ``None`` when not reported."""

    @property
    def safe(self) -> bool:
        """Whether no key of ateam's can be evicted."""
        return self.policy == SAFE_POLICY or self.maxmemory == 0

    def describe(self) -> str:
        policy = self.policy if self.policy is not None else "not reported"
        limit = "not reported" if self.maxmemory is None else f"{self.maxmemory} bytes"
        return f"maxmemory-policy {policy}, maxmemory {limit}"


def _policy_of(info: Mapping[str, Any]) -> MemoryPolicy:
    policy = info.get("maxmemory_policy")
    try:
        maxmemory: int | None = int(info["maxmemory"])
    except (KeyError, TypeError, ValueError):
        maxmemory = None
    return MemoryPolicy(str(policy) if policy is not None else None, maxmemory)


async def read_policy(client: aioredis.Redis) -> MemoryPolicy:
    """The server's eviction settings, from ``INFO memory``.

    A client that speaks to several servers (a Cluster client answers per node) gets
    the least safe of their answers.
    """
    info: Mapping[str, Any] = await client.info("memory")
    nodes = list(info.values())
    if "maxmemory_policy" not in info and nodes and all(isinstance(v, Mapping) for v in nodes):
        found = [_policy_of(node) for node in nodes]
        return next((p for p in found if not p.safe), found[0])
    return _policy_of(info)


def eviction_allowed(target: RedisTarget) -> str | None:
    """Who allowed a server that may evict (for the warning), or ``None``: nobody."""
    if os.environ.get(ALLOW_EVICTION_ENV, "").strip().lower() in _TRUE:
        return f"{ALLOW_EVICTION_ENV} is set"
    if target.allow_eviction:
        return "tools.yaml sets transport.allow_eviction"
    return None


async def check_eviction(client: aioredis.Redis, target: RedisTarget) -> str | None:
    """Refuse a server that may evict ateam's keys, unless that risk was accepted.

    Returns ``None`` for a safe server, or the warning (already logged) when the server
    may evict but the opt-out is set; the caller shows it where people look (an agent
    emits it as a ``warn`` event).

    Raises:
        EvictionPolicyRefused: the server may evict (or does not say) and nobody opted out.
        RedisPermissionDenied: the ACL user may not run ``INFO`` (and nobody opted out).
        BusError: any other failure of the ``INFO`` call.
    """
    allowed = eviction_allowed(target)
    where = f"Redis at {target.describe()}"
    try:
        found = await read_policy(client)
    except NoPermissionError as exc:
        if allowed is None:
            raise RedisPermissionDenied(
                f"{where} refused INFO ({exc}); ateam reads `INFO memory` at start to check "
                "that the server never evicts its keys: grant the ACL user +info",
                detail={"command": "info"},
            ) from exc
        found = MemoryPolicy(None, None)
    except RedisError as exc:
        raise bus_error(exc) from exc
    if found.safe:
        return None
    risk = (
        f"{where} may evict ateam's keys ({found.describe()}); an evicted lock or fence "
        "could let a second instance of an agent run"
    )
    if allowed is None:
        raise EvictionPolicyRefused(
            f"{risk}; only maxmemory-policy {SAFE_POLICY} (or maxmemory 0) is safe",
            detail={"policy": found.policy, "maxmemory": found.maxmemory},
        )
    warning = f"{risk}; going on because {allowed}"
    log.warning("warning [%s]: %s", Code.REDIS_EVICTION_POLICY, warning)
    return warning
