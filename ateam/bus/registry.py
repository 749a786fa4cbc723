"""Who is on the bus (SPEC §4.1): registry entries, heartbeats and change notices.

Entries live in one hash so any client lists every agent in one round trip; the
heartbeat times sit in a second hash stamped with the *Redis server's* clock, so
"older than the TTL" never depends on clocks of different hosts agreeing.
"""

from __future__ import annotations

import builtins
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import redis.asyncio as aioredis

from ateam.bus.codec import pack, unpack
from ateam.bus.keys import Keys
from ateam.constants import DISCONNECTED_SHOWN_S, HEARTBEAT_TTL_S
from ateam.errors import BadRequest


@dataclass
class AgentEntry:
    """What an agent publishes about itself."""

    id: str
    name: str
    project: str
    model: str = ""
    cwd: str = ""
    host: str = ""
    pid: int = 0
    started_at: float = 0.0
    state: str = "init"
    ctx_pct: float = 0.0
    queue_len: int = 0
    current_task: str | None = None
    last_error: str | None = None
    fence: int = 0
    owner: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    primary: str = ""
    """The model the agent returns to; ``model`` differs after a switch."""
    pinned: str | None = None
    """The model ``/use`` pinned, if any: no automatic switch while set."""
    last_switch: dict[str, Any] | None = None
    """The newest ``model.switch``: ``{from, to, reason, ts}``."""
    alert: str | None = None
    """A standing alert (a stalled worker), shown by ``ps`` until it clears."""

    def to_wire(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> AgentEntry:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


@dataclass
class AgentView:
    """An entry as a console sees it, with liveness computed from the heartbeat."""

    entry: AgentEntry
    heartbeat_age_s: float
    restarting: bool = False

    @property
    def id(self) -> str:
        return self.entry.id

    @property
    def connected(self) -> bool:
        return self.heartbeat_age_s <= HEARTBEAT_TTL_S

    @property
    def state(self) -> str:
        if self.connected:
            return self.entry.state
        return "restarting" if self.restarting else "disconnected"

    def to_json(self) -> dict[str, Any]:
        data = self.entry.to_wire()
        data["state"] = self.state
        data["heartbeat_age_s"] = round(self.heartbeat_age_s, 3)
        return data


class Registry:
    """Read side of the registry, used by consoles and verbs."""

    def __init__(self, client: aioredis.Redis, keys: Keys) -> None:
        self._client = client
        self._keys = keys

    async def list(self) -> builtins.list[AgentView]:
        """Every agent, connected or recently disconnected, in one round trip."""
        pipe = self._client.pipeline(transaction=False)
        pipe.hgetall(self._keys.registry)
        pipe.hgetall(self._keys.heartbeats)
        pipe.time()
        entries, beats, (sec, usec) = await pipe.execute()
        now_ms = sec * 1000 + usec // 1000
        views: list[AgentView] = []
        expired: list[bytes] = []
        for raw_id, raw in entries.items():
            try:
                entry = AgentEntry.from_wire(unpack(raw))
            except (BadRequest, TypeError):
                continue
            age = (now_ms - int(beats.get(raw_id, 0))) / 1000
            if age > DISCONNECTED_SHOWN_S:
                expired.append(raw_id)
                continue
            views.append(AgentView(entry, max(age, 0.0)))
        if expired:
            await self._forget(expired)
        await self._mark_restarting([v for v in views if not v.connected])
        views.sort(key=lambda v: v.id)
        return views

    async def get(self, agent: str) -> AgentView | None:
        for view in await self.list():
            if view.id == agent:
                return view
        return None

    async def _forget(self, ids: builtins.list[Any]) -> None:
        pipe = self._client.pipeline(transaction=False)
        pipe.hdel(self._keys.registry, *ids)
        pipe.hdel(self._keys.heartbeats, *ids)
        await pipe.execute()

    async def _mark_restarting(self, views: builtins.list[AgentView]) -> None:
        if not views:
            return
        pipe = self._client.pipeline(transaction=False)
        for view in views:
            pipe.exists(self._keys.grace(view.id))
        for view, marked in zip(views, await pipe.execute(), strict=True):
            view.restarting = bool(marked)


class Heartbeat:
    """Write side, owned by the agent: its entry, liveness key and notices."""

    def __init__(self, client: aioredis.Redis, keys: Keys, entry: AgentEntry) -> None:
        self._client = client
        self._keys = keys
        self.entry = entry
        self._joined = False

    async def beat(self, *, changed: bool = False) -> None:
        """Refresh the entry and liveness; announce join or update when there is news."""
        sec, usec = await self._client.time()
        now_ms = sec * 1000 + usec // 1000
        agent = self.entry.id
        pipe = self._client.pipeline(transaction=False)
        pipe.hset(self._keys.registry, agent, pack(self.entry.to_wire()))
        pipe.hset(self._keys.heartbeats, agent, now_ms)
        pipe.set(self._keys.alive(agent), b"1", px=int(HEARTBEAT_TTL_S * 1000))
        if not self._joined or changed:
            event = "update" if self._joined else "join"
            pipe.publish(
                self._keys.registry_channel,
                pack({"event": event, "agent": agent, "entry": self.entry.to_wire()}),
            )
        await pipe.execute()
        self._joined = True

    async def grace(self, seconds: float) -> None:
        """Tell consoles a planned restart is coming, so they don't flash it disconnected."""
        await self._client.set(self._keys.grace(self.entry.id), b"1", px=int(seconds * 1000))

    async def leave(self) -> None:
        agent = self.entry.id
        pipe = self._client.pipeline(transaction=False)
        pipe.hdel(self._keys.registry, agent)
        pipe.hdel(self._keys.heartbeats, agent)
        pipe.delete(self._keys.alive(agent))
        pipe.publish(
            self._keys.registry_channel,
            pack({"event": "leave", "agent": agent, "at": time.time()}),
        )
        await pipe.execute()
        self._joined = False
