"""A copy of the registry kept from its change log (issue 28 §4), for readers that tick.

:meth:`Registry.list` reads every entry of every project: right for ``ps``, once. The
session snapshot lists the team every second on every host, and at 10 000 agents that
is megabytes a second to learn that nothing changed. A :class:`RegistryMirror` reads a
project whole once, then at each :meth:`~RegistryMirror.list` only:

* the agents noted in the change log since it last looked
  (:mod:`ateam.bus.registry_log`), their entry, beat and exit record;
* the agents whose heartbeat is older than the TTL, judged in Redis beside the beats
  (the few that lapsed come back, not the thousands that beat).

It reads the project whole again when its copy may be void: the log's epoch changed (a
Redis that restarted empty or was flushed), the version went back (a restore), changes
it had not seen were trimmed, or :data:`RESYNC_S` passed (a bound on any drift nobody
foresaw, such as one key lost to eviction). A host that died leaves its agents' beats
to age: they turn ``disconnected`` through the lapse check, and are forgotten (a noted
change) once gone longer than they are shown.

:attr:`RegistryMirror.generation` moves whenever what :meth:`list` shows moved (an entry,
an exit, an agent lapsing or coming back), so a caller can skip rebuilding what it made
from the last listing; ``relevant`` narrows that to the fields the caller shows (an
agent's usage moves all the time, the snapshot does not show it). A changed entry of a
listed agent is swapped into the last listing's view; only agents coming or going, an
exit or a lapse rebuild the listing. A connected agent's ``heartbeat_age_s`` is 0: its last beat is
within the TTL, and reading every beat to say how far within is the cost avoided.
"""

from __future__ import annotations

import builtins
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgpack
import redis.asyncio as aioredis

from ateam import _gc
from ateam.bus.keys import Keys
from ateam.bus.registry import Registry, _forbidden, entry_of, with_exits
from ateam.bus.registry_log import RESYNC_S, changes_key, log_key
from ateam.bus.registry_rows import ENTRY_CONTAINERS
from ateam.constants import DISCONNECTED_SHOWN_S, HEARTBEAT_TTL_S
from ateam.wire.registry import AgentEntry, AgentStatus

__all__ = ["RESYNC_S", "RegistryMirror"]


# KEYS[1] a project's heartbeat hash; ARGV[1] the TTL in ms. The server time, then id and
# stamp of each agent whose last beat is older than the TTL. Unlike Registry.lapsed, no
# digest of every id: the change log already says which agents came and went.
_STALE_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cutoff = now - tonumber(ARGV[1])
local beats = redis.call('HGETALL', KEYS[1])
local out = {now}
for i = 1, #beats, 2 do
  local stamp = tonumber(beats[i + 1]) or 0
  if stamp < cutoff then
    out[#out + 1] = beats[i]
    out[#out + 1] = stamp
  end
end
return out
"""
_TTL_MS = int(HEARTBEAT_TTL_S * 1000)
_SHOWN_MS = int(DISCONNECTED_SHOWN_S * 1000)

_Aging = list[tuple[AgentStatus, int]]
"""Views whose age moves with the clock, each with the stamp it counts from (ms)."""


@dataclass(eq=False)
class _Copy:
    """One project as the mirror holds it."""

    epoch: bytes | None = None
    seen: int = 0
    """The log version up to which every noted change was read."""
    read_at: float = -1e18
    entries: dict[str, AgentEntry] = field(default_factory=dict)
    beats: dict[str, int] = field(default_factory=dict)
    """Each agent's beat stamp (ms) when its record was last read: a missing one is gone."""
    exits: dict[str, bytes] = field(default_factory=dict)
    stale: dict[str, int] = field(default_factory=dict)
    """The agents whose beat is older than the TTL, with its stamp, at the last tick."""


class RegistryMirror:
    """Lists the registry like :meth:`Registry.list`, reading only what changed.

    Args:
        client: the bus.
        keys: its key names.
        resync_s: how often a project is read whole regardless.
        relevant: what of an entry the caller shows (default: all of it); a change
            elsewhere does not move :attr:`generation`.
    """

    def __init__(
        self,
        client: aioredis.Redis,
        keys: Keys,
        *,
        resync_s: float = RESYNC_S,
        relevant: Callable[[AgentEntry], object] | None = None,
    ) -> None:
        self._client = client
        self._relevant = relevant
        self._keys = keys
        self._registry = Registry(client, keys)
        self._resync_s = resync_s
        self._copies: dict[str, _Copy] = {}
        self.generation = 0
        """Moves whenever a listing differs from the one before (beyond beat ages and
        fields outside ``relevant``)."""
        self._layout = 0
        """Moves when the last listing cannot be patched: agents came or went, an exit,
        a lapse."""
        self._patches: builtins.list[AgentEntry] = []
        self.full_reads = 0
        """How many times a project was read whole (for tests and benchmarks)."""
        self._made = 0
        """Containers decoded since the last listing reported them (:func:`_gc.lasting`)."""
        self._shown: tuple[int, float, builtins.list[AgentStatus], _Aging]
        self._shown = (-1, 0.0, [], [])
        self._grouped: tuple[object, dict[str, tuple[AgentStatus, ...]]] = (None, {})
        """The last listing: its layout, until when it holds (the first lapsed agent
        to be forgotten), its views, and those whose age moves with the clock."""

    async def grouped(self) -> dict[str, tuple[AgentStatus, ...]]:
        """:meth:`list` by project, grouped once per listing built (not per call: at
        10 000 agents, grouping each second costs more than reading the changes)."""
        await self.list()
        if self._grouped[0] is not self._shown:
            groups: dict[str, builtins.list[AgentStatus]] = {}
            for view in self._shown[2]:
                groups.setdefault(view.entry.project, []).append(view)
            self._grouped = (self._shown, {p: tuple(vs) for p, vs in groups.items()})
        return self._grouped[1]

    def silent(self) -> builtins.list[AgentStatus]:
        """The agents of the last listing that are not connected (lapsed or exited)."""
        return [view for view, _ in self._shown[3]]

    async def list(self) -> builtins.list[AgentStatus]:
        """Every agent of every project, connected or recently gone, as of now."""
        _gc.lasting(self._made)  # what the last listing decoded is kept in the copies
        self._made = 0
        names = await self._registry.projects()
        pipe = self._client.pipeline(transaction=False)
        for name in names:
            copy = self._copies.get(name) or _Copy()
            pipe.hmget(log_key(self._keys, name), "ver", "epoch", "floor")
            pipe.zrangebyscore(
                changes_key(self._keys, name), f"({copy.seen}", "+inf", withscores=True
            )
            # EVAL in a pipeline: see registry_log.note_changes.
            pipe.eval(_STALE_LUA, 1, self._keys.heartbeats(name), _TTL_MS)
        replies = await pipe.execute(raise_on_error=False)
        moved = set(self._copies) - set(names)
        for name in moved:  # a project no longer in the set (a flushed Redis)
            del self._copies[name]
            self._moved()
        now_ms = int(time.time() * 1000)
        for i, name in enumerate(names):
            log, changed, stale = replies[3 * i : 3 * i + 3]
            if any(isinstance(r, Exception) for r in (log, changed, stale)):
                if all(_forbidden(r) for r in (log, changed, stale) if isinstance(r, Exception)):
                    self._copies.pop(name, None)  # another project's, by this user's ACL
                    continue
                raise next(r for r in (log, changed, stale) if isinstance(r, Exception))
            now_ms = int(stale[0])
            await self._refresh(name, log, changed)
            copy = self._copies[name]
            found = {_text(a): int(s) for a, s in zip(stale[1::2], stale[2::2], strict=True)}
            if found != copy.stale:
                self._moved()
                copy.stale = found
        layout, until_ms, views, aging = self._shown
        patches, self._patches = self._patches, []
        if layout == self._layout and now_ms < until_ms:
            by_id = {view.id: view for view in views} if patches else {}
            for entry in patches:
                view = by_id.get(entry.id)
                if view is None or view.final is not None:
                    self._layout += 1  # not a plain swap: build the listing anew
                    break
                view.entry = entry
        if layout != self._layout or now_ms >= until_ms:
            views, aging = await self._views(names, now_ms)
            until_ms = min((stamp + _SHOWN_MS + 1 for _, stamp in aging), default=math.inf)
            self._shown = (self._layout, until_ms, views, aging)
        else:  # the same agents: only the ages of the silent ones moved
            for view, stamp in aging:
                view.heartbeat_age_s = max(now_ms - stamp, 0) / 1000
            await self._registry.mark_restarting([v for v, _ in aging if v.final is None])
        return list(views)

    def _moved(self) -> None:
        self.generation += 1
        self._layout += 1

    async def _refresh(
        self, name: str, log: builtins.list[Any], changed: builtins.list[Any]
    ) -> None:
        """Bring one project's copy up to date, telling what moved."""
        raw_ver, epoch, raw_floor = log
        ver, floor = int(raw_ver or 0), int(raw_floor or 0)
        copy = self._copies.get(name)
        void = (
            copy is None
            or epoch != copy.epoch
            or ver < copy.seen
            or floor > copy.seen
            or time.monotonic() - copy.read_at >= self._resync_s
        )
        if void:
            fresh = _Copy(epoch=epoch, seen=ver, read_at=time.monotonic())
            fresh.stale = copy.stale if copy is not None else {}
            await self._read_whole(name, fresh)
            self._copies[name] = fresh
            self.full_reads += 1
            if copy is None or _shown(copy) != _shown(fresh):
                self._layout += 1  # new entry objects: the views are built anew
                if copy is None or self._seen_as(copy) != self._seen_as(fresh):
                    self.generation += 1
            return
        assert copy is not None
        if not changed:
            return
        agents = [_text(agent) for agent, _ in changed]
        pipe = self._client.pipeline(transaction=False)
        pipe.hmget(self._keys.registry(name), agents)
        pipe.hmget(self._keys.heartbeats(name), agents)
        pipe.hmget(self._keys.exits(name), agents)
        entries, beats, exits = await pipe.execute()
        self._made += len(agents) * ENTRY_CONTAINERS
        for agent, raw, beat, final in zip(agents, entries, beats, exits, strict=True):
            before, had_exit = copy.entries.get(agent), copy.exits.get(agent)
            _put(copy, name, agent, raw, beat, final)
            after = copy.entries.get(agent)
            if before is None or after is None or had_exit != copy.exits.get(agent):
                self._moved()  # came, went, or its exit changed
            elif after is not before:
                self._patches.append(after)
                if self._show(before) != self._show(after):
                    self.generation += 1
        # Up to the last note listed, not beyond: a note that landed since (even of an
        # agent just read) is read again next tick, which is harmless.
        copy.seen = max(copy.seen, *(int(version) for _, version in changed))

    def _seen_as(self, copy: _Copy) -> tuple[dict[str, object], dict[str, bytes]]:
        return {a: self._show(e) for a, e in copy.entries.items()}, copy.exits

    def _show(self, entry: AgentEntry) -> object:
        return entry if self._relevant is None else self._relevant(entry)

    async def _read_whole(self, name: str, copy: _Copy) -> None:
        pipe = self._client.pipeline(transaction=False)
        pipe.hgetall(self._keys.registry(name))
        pipe.hgetall(self._keys.heartbeats(name))
        pipe.hgetall(self._keys.exits(name))
        entries, beats, exits = await pipe.execute()
        for raw_id, raw in entries.items():
            agent = _text(raw_id)
            _put(copy, name, agent, raw, beats.get(raw_id), None)
        self._made += len(entries) * ENTRY_CONTAINERS
        copy.exits = {_text(agent): raw for agent, raw in exits.items()}

    async def _views(
        self, names: builtins.list[str], now_ms: int
    ) -> tuple[builtins.list[AgentStatus], _Aging]:
        views: builtins.list[AgentStatus] = []
        gone: dict[str, builtins.list[str]] = {}
        for name in names:
            copy = self._copies.get(name)
            if copy is None:
                continue
            for agent, entry in copy.entries.items():
                stamp = copy.stale.get(agent, copy.beats.get(agent))
                if stamp is None:  # no beat at all: left, or forgotten meanwhile
                    gone.setdefault(name, []).append(agent)
                    continue
                age_ms = now_ms - stamp if agent in copy.stale else 0
                if age_ms > _SHOWN_MS:
                    gone.setdefault(name, []).append(agent)
                    continue
                views.append(AgentStatus(entry, age_ms / 1000))
        exits = [self._copies[n].exits if n in self._copies else {} for n in names]
        views = with_exits(views, names, exits, now_ms)
        for name, agents in gone.items():
            # As Registry.list does; the removal is noted, and read back next tick.
            await self._registry.forget(name, agents)
        await self._registry.mark_restarting([v for v in views if not v.connected])
        views.sort(key=lambda view: view.entry.id)
        aging = [(v, _stamp(v, now_ms)) for v in views if not v.connected]
        return views, aging


def _stamp(view: AgentStatus, now_ms: int) -> int:
    """When a silent agent was last heard of (ms): its last beat, or its exit."""
    if view.final is not None:
        return int(view.final.at * 1000)
    return now_ms - int(view.heartbeat_age_s * 1000)


def _put(copy: _Copy, project: str, agent: str, raw: Any, beat: Any, final: Any) -> None:
    """One agent's records as just read into ``copy`` (absent ones removed)."""
    entry = None
    if raw is not None:
        try:
            entry = entry_of(msgpack.unpackb(raw, raw=False), project)
        except Exception:  # not msgpack: a foreign writer's, skipped as a listing does
            entry = None
    if entry is None or entry.id != agent:
        copy.entries.pop(agent, None)
        copy.beats.pop(agent, None)
    else:
        copy.entries[agent] = entry
        if beat is None:
            copy.beats.pop(agent, None)
        else:
            copy.beats[agent] = int(beat)
    if final is None:
        copy.exits.pop(agent, None)
    else:
        copy.exits[agent] = final


def _shown(copy: _Copy) -> tuple[dict[str, AgentEntry], dict[str, bytes]]:
    return copy.entries, copy.exits


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
