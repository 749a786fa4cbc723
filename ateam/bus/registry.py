"""Who is on the bus (SPEC §4.1): registry entries, heartbeats and change notices.

Each project's entries live in one hash under the project's key prefix (so a Redis user
of one project sees only its agents), found through the team-wide project set; any
client lists every agent it may see in two round trips. The heartbeat times sit in a
second hash stamped with the *Redis server's* clock, so "older than the TTL" never
depends on clocks of different hosts agreeing.

What a beat costs scales with what changed: every beat stamps the heartbeat hash and
renews the liveness key, but the entry is written (and an ``update`` announced) only
when it differs from the one last written. A watcher therefore keeps its own copy of
the entries from the notices, and asks the server only which agents stopped beating
(:meth:`Registry.lapsed`), instead of reading every entry again.

Every write that changes what a listing shows (an entry written, an agent leaving or
forgotten, a final exit recorded or cleared) also notes the agent in the project's
change log (:mod:`ateam.bus.registry_log`), in the same pipeline after the write: a
reader that ticks without subscribing (the session snapshot) reads only those agents.
"""

from __future__ import annotations

import builtins
import contextlib
import gc
import hashlib
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import msgpack
import redis.asyncio as aioredis
from pydantic import ValidationError
from redis.exceptions import NoPermissionError, ResponseError

from ateam import _gc
from ateam.bus.codec import pack
from ateam.bus.identity import AgentIdentity, publish, withdraw
from ateam.bus.keys import Keys
from ateam.bus.registry_log import RESYNC_S, changes_key, log_key, note_changes
from ateam.bus.registry_rows import EntryCache, Patch, in_id_order
from ateam.constants import HEARTBEAT_TTL_S
from ateam.wire.registry import AgentEntry, AgentStatus, FinalExit


class Registry:
    """Read side of the registry, used by consoles and verbs.

    Each project has its own registry hash (see :mod:`ateam.bus.keys`); the projects
    are found in the team-wide project set. A project this Redis user may not read
    (an ACL of another project) is skipped: its agents are simply not there.
    """

    def __init__(self, client: aioredis.Redis, keys: Keys, *, resync_s: float = RESYNC_S) -> None:
        self._client = client
        self._keys = keys
        self._lapsed = client.register_script(_LAPSED_LUA)
        self._parsed = EntryCache(resync_s)
        """The entries of the last listing. An agent writes its entry only when it
        changes, so a console listing again reuses most of them instead of reading,
        decoding and validating each one anew (the most of a listing's time). A write
        the change log does not note (a foreign writer's) shows within ``resync_s``."""

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

    async def list(self, projects: Iterable[str] | None = None) -> builtins.list[AgentStatus]:
        """Every agent of ``projects`` (default: all), connected or recently gone.

        One round trip for the project set, one for every project's beats, exits,
        change-log version and the agents its log noted since this registry last read
        it, and one more for the entries (and beats again) of the projects whose version
        moved: just the noted agents' entries when the log holds every change since
        (:meth:`EntryCache.patchable`), else the whole hash (all of them, the first
        time). An agent writes its entry when it changes, not when it beats, so listing
        again mostly reads the beats (issue 28 §4: the entries of 10 000 agents are 4 MB).
        """
        _gc.lasting(self._parsed.made)  # what the last listing decoded is kept still
        self._parsed.made = 0
        names = await self.projects() if projects is None else sorted(set(projects))
        ordered = in_id_order(names)
        names = ordered or names
        pipe = self._client.pipeline(transaction=False)
        for project in names:
            log = log_key(self._keys, project)
            pipe.hmget(log, "epoch", "ver")
            pipe.hgetall(self._keys.heartbeats(project))
            pipe.hgetall(self._keys.exits(project))
            # The noted agents, then the floor: read after them, it tells whether the log
            # was trimmed past this registry's version before they were read.
            since = self._parsed.since(project)
            low = f"({since.decode()}" if since is not None else "+inf"
            pipe.zrangebyscore(changes_key(self._keys, project), low, "+inf")
            pipe.hget(log, "floor")
        pipe.time()
        replies = await pipe.execute(raise_on_error=False)
        clock = replies[-1]
        if isinstance(clock, Exception):
            raise clock
        sec, usec = clock
        now_ms = sec * 1000 + usec // 1000
        logs, beat_hashes, exits, changes, floors = (replies[k:-1:5] for k in range(5))  # queued
        shown = _readable(names, logs, beat_hashes)
        noted = dict(zip(names, zip(changes, floors, strict=True), strict=True))
        whole: list[str] = []
        patches: dict[str, list[bytes]] = {}
        for project, log, _ in shown:
            if self._parsed.holds(project, log):
                continue
            changed, floor = noted[project]
            if (
                isinstance(changed, list)
                and changed
                and self._parsed.patchable(project, log, floor)
            ):
                patches[project] = changed
            else:
                whole.append(project)
        entries = await self._entries(whole, patches)
        asked = {*whole, *patches}
        views: list[AgentStatus] = []
        expired: dict[str, list[bytes]] = {}
        with _no_cycle_collection():
            for project, log, beats in shown:
                read, beats = entries.get(project, (None, beats))
                if read is None and project in asked:
                    continue  # its ACL changed between the two round trips: invisible now
                gone: list[bytes] = []
                self._parsed.rows(project, read, log, beats, now_ms, views, gone)
                if gone:
                    expired[project] = gone
        if projects is None:
            self._parsed.keep_only(names)
        views = with_exits(views, names, exits, now_ms)
        for project, ids in expired.items():
            await self.forget(project, ids)
        await self.mark_restarting([v for v in views if not v.connected])
        if not ordered:
            views.sort(key=_BY_ID)
        return views

    async def _entries(
        self, whole: builtins.list[str], patches: dict[str, builtins.list[bytes]]
    ) -> dict[str, tuple[dict[bytes, bytes] | Patch, dict[bytes, bytes]]]:
        """The registry hashes of ``whole``, the entries of the agents ``patches`` names
        per project, and the heartbeat hashes of both, read after their versions were:
        each registry holds at least every write its version notes (a note lands after
        its write). The beats are read again, after the entries, as an agent's beat is
        written before its entry: an agent that joined since the first round trip has
        both, not an entry without a beat (which reads as gone for good)."""
        projects = [*whole, *patches]
        if not projects:
            return {}
        pipe = self._client.pipeline(transaction=False)
        for project in whole:
            pipe.hgetall(self._keys.registry(project))
            pipe.hgetall(self._keys.heartbeats(project))
        for project, ids in patches.items():
            pipe.hmget(self._keys.registry(project), ids)
            pipe.hgetall(self._keys.heartbeats(project))
        replies = await pipe.execute(raise_on_error=False)
        read: dict[str, tuple[dict[bytes, bytes] | Patch, dict[bytes, bytes]]] = {}
        for project, entries, beats in zip(projects, replies[0::2], replies[1::2], strict=True):
            if isinstance(entries, Exception) or isinstance(beats, Exception):
                if not _forbidden(entries) and not _forbidden(beats):
                    raise entries if isinstance(entries, Exception) else beats
                continue
            named = patches.get(project)
            if named is not None:
                entries = Patch(dict(zip(named, entries, strict=True)))
            read[project] = entries, beats
        return read

    async def lapsed(self, project: str) -> Lapse:
        """Which of ``project``'s agents have not beaten for longer than the TTL.

        The comparison runs in Redis, beside the beats: the answer is the few agents that
        lapsed, whatever the size of the team.
        """
        try:
            reply = await self._lapsed(keys=[self._keys.heartbeats(project)], args=[_TTL_MS])
        except ResponseError as exc:
            if not _forbidden(exc):
                raise
            return Lapse(0, 0, 0, {})  # no longer this user's to read: nobody there
        now_ms, beating, digest, *pairs = reply
        agents, beats = pairs[0::2], pairs[1::2]
        stamps = {_text(agent): int(stamp) for agent, stamp in zip(agents, beats, strict=True)}
        return Lapse(int(now_ms), int(beating), int(digest), stamps)

    async def get(self, agent: str) -> AgentStatus | None:
        project = agent.partition("/")[0]
        for view in await self.list((project,)):
            if view.id == agent:
                return view
        return None

    async def forget(self, project: str, ids: Sequence[bytes | str]) -> None:
        """Drop agents gone for longer than they are shown (their entries and beats)."""
        pipe = self._client.pipeline(transaction=False)
        pipe.hdel(self._keys.registry(project), *ids)
        pipe.hdel(self._keys.heartbeats(project), *ids)
        note_changes(pipe, self._keys, project, ids)
        await pipe.execute()

    async def record_exit(self, final: FinalExit) -> None:
        """Keep ``final`` for ``ps`` and announce it (an ``exit`` notice to consoles)."""
        project = final.agent.partition("/")[0]
        wire = final.to_wire()
        pipe = self._client.pipeline(transaction=False)
        pipe.hset(self._keys.exits(project), final.agent, pack(wire))
        # An agent that never joined leaves its project unknown to readers: make it known.
        pipe.sadd(self._keys.projects, project)
        note_changes(pipe, self._keys, project, (final.agent,))
        pipe.publish(
            self._keys.registry_channel(project),
            pack({"event": "exit", "agent": final.agent, "exit": wire}),
        )
        await pipe.execute()

    async def clear_exit(self, agent: str) -> bool:
        """Forget ``agent``'s final exit (acknowledged); whether there was one."""
        project = agent.partition("/")[0]
        pipe = self._client.pipeline(transaction=False)
        pipe.hdel(self._keys.exits(project), agent)
        note_changes(pipe, self._keys, project, (agent,))
        removed, _ = await pipe.execute()
        return bool(removed)

    async def mark_restarting(self, views: builtins.list[AgentStatus]) -> None:
        """Set ``restarting`` on those of ``views`` whose agent left a grace marker."""
        if not views:
            return
        pipe = self._client.pipeline(transaction=False)
        for view in views:
            pipe.exists(self._keys.grace(view.id))
        for view, marked in zip(views, await pipe.execute(), strict=True):
            view.restarting = bool(marked)


def with_exits(
    views: builtins.list[AgentStatus], projects: builtins.list[str], replies: Any, now_ms: int
) -> builtins.list[AgentStatus]:
    """``views`` plus the agents whose final exit is recorded and which are not running.

    A connected entry wins over a record (the agent joins again, and its join clears it).
    """
    if not any(replies):
        return views  # the usual case: nothing exited, nothing to merge (ps of 1 000)
    by_id = {view.id: view for view in views}
    for project, records in zip(projects, replies, strict=True):
        if isinstance(records, Exception):
            if _forbidden(records):
                continue
            raise records
        for raw in records.values():
            try:
                final = FinalExit.from_wire(msgpack.unpackb(raw, raw=False))
            except Exception:  # not msgpack: a foreign writer's
                continue
            if final is None or final.agent.partition("/")[0] != project:
                continue
            held = by_id.get(final.agent)
            if held is None or not held.connected:
                by_id[final.agent] = final.view(now_ms / 1000 - final.at)
    return [by_id[agent] for agent in sorted(by_id)]


@dataclass(frozen=True)
class Lapse:
    """One project's heartbeats as :meth:`Registry.lapsed` found them."""

    now_ms: int
    """The Redis server's clock when it looked."""
    beating: int
    """How many agents have a heartbeat in the project (lapsed ones included)."""
    digest: int
    """:func:`id_digest` summed over those agents, modulo 2**32: which agents they are."""
    stamps: dict[str, int]
    """The server time (ms) of the last beat of each agent older than the TTL."""


_LAPSED_LUA = """
-- KEYS[1]: a project's heartbeat hash (agent id -> server time in ms of its last beat)
-- ARGV[1]: the heartbeat TTL in ms
-- Returns the server time, the hash's length, a digest of its agent ids (the sum of
-- the first 32 bits of each id's SHA-1, modulo 2^32: a watcher compares it with its own
-- to know it holds the same agents), then id and stamp of every agent whose last beat
-- is older than the TTL: watchers learn of the few that lapsed, not of every beat, and
-- the clock that judges is the one that stamped.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cutoff = now - tonumber(ARGV[1])
local beats = redis.call('HGETALL', KEYS[1])
local digest = 0
local lapsed = {}
for i = 1, #beats, 2 do
  digest = (digest + tonumber(string.sub(redis.sha1hex(beats[i]), 1, 8), 16)) % 4294967296
  local stamp = tonumber(beats[i + 1]) or 0
  if stamp < cutoff then
    lapsed[#lapsed + 1] = beats[i]
    lapsed[#lapsed + 1] = stamp
  end
end
local out = {now, #beats / 2, digest}
for i = 1, #lapsed do out[#out + 1] = lapsed[i] end
return out
"""
_TTL_MS = int(HEARTBEAT_TTL_S * 1000)
DIGEST_MOD = 2**32


def id_digest(agent: str) -> int:
    """An agent id's share of :attr:`Lapse.digest`: the first 32 bits of its SHA-1."""
    return int.from_bytes(hashlib.sha1(agent.encode(), usedforsecurity=False).digest()[:4], "big")


_BY_ID = attrgetter("entry.id")


def entry_of(data: object, project: str) -> AgentEntry | None:
    """The entry in ``data`` (a decoded payload), if it is one of an agent of ``project``.

    Anything else — not an entry, or a foreign writer's entry that names another project
    or an id other than ``project/name`` — is None: keys built from it would be wrong.
    """
    if not isinstance(data, dict):
        return None
    try:
        entry = AgentEntry.from_wire(data)
    except ValidationError:
        return None
    if entry.project != project or entry.id != f"{project}/{entry.name}":
        return None
    return entry


@contextlib.contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """The cycle collector held off while entries are decoded (no await inside).

    A thousand entries are some five thousand new containers, none in a cycle: left
    on, the collector runs several times per listing and promotes them all, which
    brings on full collections of the whole heap every few listings (tens of ms,
    the slowest listings by far). msgpack's own advice for large unpacking.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _readable(
    names: builtins.list[str], logs: builtins.list[Any], beats: builtins.list[Any]
) -> builtins.list[tuple[str, Any, Any]]:
    """``names`` with their change-log and heartbeat replies, less the projects this
    Redis user may not read (another project's, by its ACL); any other error is raised."""
    shown = []
    for project, log, beat in zip(names, logs, beats, strict=True):
        if isinstance(log, Exception) or isinstance(beat, Exception):
            if not _forbidden(log) and not _forbidden(beat):
                raise log if isinstance(log, Exception) else beat
            continue
        shown.append((project, log, beat))
    return shown


def _forbidden(reply: object) -> bool:
    """A reply refused by the user's ACL (NOPERM), as a pipeline returns it."""
    return isinstance(reply, NoPermissionError) or (
        isinstance(reply, ResponseError) and str(reply).startswith("NOPERM")
    )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class Heartbeat:
    """Write side, owned by the agent: its entry, liveness key, identity hash and notices."""

    def __init__(
        self,
        client: aioredis.Redis,
        keys: Keys,
        entry: AgentEntry,
        *,
        identity: AgentIdentity | None = None,
    ) -> None:
        self._client = client
        self._keys = keys
        self.entry = entry
        self.identity = identity
        """The instance's proof for teammates, published with every beat; None publishes
        none (an entry written by a tool or a test proves nothing)."""
        self._joined = False
        self._written = b""
        """The entry as last written: a beat that would write the same bytes does not."""

    async def beat(self, *, changed: bool = False) -> None:
        """Renew liveness; write and announce the entry on joining and when it changed.

        ``changed`` forces an ``update`` even if the entry reads the same (the agent
        knows something moved, such as a lock taken again).
        """
        sec, usec = await self._client.time()
        now_ms = sec * 1000 + usec // 1000
        agent, project = self.entry.id, self.entry.project
        wire = self.entry.to_wire()
        packed = pack(wire)
        news = not self._joined or changed or packed != self._written
        pipe = self._client.pipeline(transaction=False)
        pipe.hset(self._keys.heartbeats(project), agent, now_ms)
        pipe.set(self._keys.alive(agent), b"1", px=int(HEARTBEAT_TTL_S * 1000))
        if self.identity is not None:
            publish(pipe, self._keys, self.identity)
        if news:
            pipe.hset(self._keys.registry(project), agent, packed)
            event = "update" if self._joined else "join"
            pipe.publish(
                self._keys.registry_channel(project),
                pack({"event": event, "agent": agent, "entry": wire}),
            )
        if not self._joined:
            # Running again: a final exit recorded for an earlier process is over.
            pipe.hdel(self._keys.exits(project), agent)
            # Consoles list projects from this set, and subscribe to a new one's channels
            # when it is announced (a restarted Redis lost both: re-said on every join).
            pipe.sadd(self._keys.projects, project)
            pipe.publish(self._keys.projects_channel, pack({"project": project}))
        if news:  # after the writes it announces (the entry, the exit cleared)
            note_changes(pipe, self._keys, project, (agent,))
        replies = await pipe.execute()
        self._joined = True
        self._written = packed
        if replies[0] and not news:
            # Our beat was not there any more (a console forgot us after a long silence,
            # or Redis lost its data): the entry may be gone too. Join again.
            self._joined = False
            await self.beat()

    async def grace(self, seconds: float) -> None:
        """Tell consoles a planned restart is coming, so they don't flash it disconnected."""
        await self._client.set(self._keys.grace(self.entry.id), b"1", px=int(seconds * 1000))

    async def leave(self) -> None:
        agent, project = self.entry.id, self.entry.project
        pipe = self._client.pipeline(transaction=False)
        pipe.hdel(self._keys.registry(project), agent)
        pipe.hdel(self._keys.heartbeats(project), agent)
        pipe.delete(self._keys.alive(agent))
        note_changes(pipe, self._keys, project, (agent,))
        if self.identity is not None:
            withdraw(pipe, self._keys, self.identity)
        pipe.publish(
            self._keys.registry_channel(project),
            pack({"event": "leave", "agent": agent, "at": time.time()}),
        )
        await pipe.execute()
        self._joined = False
        self._written = b""
