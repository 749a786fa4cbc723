"""Who is on the bus (SPEC §4.1): registry entries, heartbeats and change notices.

Each project's entries live in one hash under the project's key prefix (so a Redis user
of one project sees only its agents), found through the team-wide project set; any
client lists every agent it may see in two round trips. The heartbeat times sit in a
second hash stamped with the *Redis server's* clock, so "older than the TTL" never
depends on clocks of different hosts agreeing.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import NoPermissionError, ResponseError

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
    """Read side of the registry, used by consoles and verbs.

    Each project has its own registry hash (see :mod:`ateam.bus.keys`); the projects
    are found in the team-wide project set. A project this Redis user may not read
    (an ACL of another project) is skipped: its agents are simply not there.
    """

    def __init__(self, client: aioredis.Redis, keys: Keys) -> None:
        self._client = client
        self._keys = keys

    async def projects(self) -> builtins.list[str]:
        """The names of the projects that ever registered an agent, sorted."""
        return sorted(_text(name) for name in await self._client.smembers(self._keys.projects))

    async def visible(self, projects: Iterable[str]) -> builtins.list[str]:
        """Those of ``projects`` this Redis user may read (all of them without ACLs)."""
        names = sorted(set(projects))
        pipe = self._client.pipeline(transaction=False)
        for project in names:
            pipe.exists(self._keys.registry(project))
        replies = await pipe.execute(raise_on_error=False)
        for reply in replies:
            if isinstance(reply, Exception) and not _forbidden(reply):
                raise reply
        return [name for name, reply in zip(names, replies, strict=True) if not _forbidden(reply)]

    async def list(self, projects: Iterable[str] | None = None) -> builtins.list[AgentView]:
        """Every agent of ``projects`` (default: all), connected or recently gone.

        One round trip for the project set, one for every project's entries.
        """
        names = await self.projects() if projects is None else sorted(set(projects))
        pipe = self._client.pipeline(transaction=False)
        for project in names:
            pipe.hgetall(self._keys.registry(project))
            pipe.hgetall(self._keys.heartbeats(project))
        pipe.time()
        replies = await pipe.execute(raise_on_error=False)
        clock = replies[-1]
        if isinstance(clock, Exception):
            raise clock
        sec, usec = clock
        now_ms = sec * 1000 + usec // 1000
        views: list[AgentView] = []
        expired: dict[str, list[bytes]] = {}
        for project, entries, beats in zip(names, replies[0:-1:2], replies[1:-1:2], strict=True):
            if isinstance(entries, Exception) or isinstance(beats, Exception):
                if not _forbidden(entries) and not _forbidden(beats):
                    raise entries if isinstance(entries, Exception) else beats
                continue  # another project's, by this user's ACL: invisible
            for raw_id, raw in entries.items():
                try:
                    entry = AgentEntry.from_wire(unpack(raw))
                except (BadRequest, TypeError):
                    continue
                if entry.project != project or entry.id != f"{project}/{entry.name}":
                    continue  # not this project's (a foreign writer): keys would be wrong
                age = (now_ms - int(beats.get(raw_id, 0))) / 1000
                if age > DISCONNECTED_SHOWN_S:
                    expired.setdefault(project, []).append(raw_id)
                    continue
                views.append(AgentView(entry, max(age, 0.0)))
        for project, ids in expired.items():
            await self._forget(project, ids)
        await self._mark_restarting([v for v in views if not v.connected])
        views.sort(key=lambda v: v.id)
        return views

    async def get(self, agent: str) -> AgentView | None:
        project = agent.partition("/")[0]
        for view in await self.list((project,)):
            if view.id == agent:
                return view
        return None

    async def _forget(self, project: str, ids: builtins.list[Any]) -> None:
        pipe = self._client.pipeline(transaction=False)
        pipe.hdel(self._keys.registry(project), *ids)
        pipe.hdel(self._keys.heartbeats(project), *ids)
        await pipe.execute()

    async def _mark_restarting(self, views: builtins.list[AgentView]) -> None:
        if not views:
            return
        pipe = self._client.pipeline(transaction=False)
        for view in views:
            pipe.exists(self._keys.grace(view.id))
        for view, marked in zip(views, await pipe.execute(), strict=True):
            view.restarting = bool(marked)


def _forbidden(reply: object) -> bool:
    """A reply refused by the user's ACL (NOPERM), as a pipeline returns it."""
    return isinstance(reply, NoPermissionError) or (
        isinstance(reply, ResponseError) and str(reply).startswith("NOPERM")
    )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


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
        agent, project = self.entry.id, self.entry.project
        pipe = self._client.pipeline(transaction=False)
        pipe.hset(self._keys.registry(project), agent, pack(self.entry.to_wire()))
        pipe.hset(self._keys.heartbeats(project), agent, now_ms)
        pipe.set(self._keys.alive(agent), b"1", px=int(HEARTBEAT_TTL_S * 1000))
        if not self._joined or changed:
            event = "update" if self._joined else "join"
            pipe.publish(
                self._keys.registry_channel(project),
                pack({"event": event, "agent": agent, "entry": self.entry.to_wire()}),
            )
        if not self._joined:
            # Consoles list projects from this set, and subscribe to a new one's channels
            # when it is announced (a restarted Redis lost both: re-said on every join).
            pipe.sadd(self._keys.projects, project)
            pipe.publish(self._keys.projects_channel, pack({"project": project}))
        await pipe.execute()
        self._joined = True

    async def grace(self, seconds: float) -> None:
        """Tell consoles a planned restart is coming, so they don't flash it disconnected."""
        await self._client.set(self._keys.grace(self.entry.id), b"1", px=int(seconds * 1000))

    async def leave(self) -> None:
        agent, project = self.entry.id, self.entry.project
        pipe = self._client.pipeline(transaction=False)
        pipe.hdel(self._keys.registry(project), agent)
        pipe.hdel(self._keys.heartbeats(project), agent)
        pipe.delete(self._keys.alive(agent))
        pipe.publish(
            self._keys.registry_channel(project),
            pack({"event": "leave", "agent": agent, "at": time.time()}),
        )
        await pipe.execute()
        self._joined = False
