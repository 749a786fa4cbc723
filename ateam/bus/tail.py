"""Consumer side of the event stream (SPEC §4.5): following agents by offset, gaps told."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from ateam.bus.backoff import CONNECTION_ERRORS, Backoff
from ateam.bus.cluster import group_by_slot, is_cluster
from ateam.bus.events import LAST_SEQ, Event, Gap, Reset, Rewound, own_body
from ateam.bus.keys import Keys
from ateam.wire.event_types import EventType

log = logging.getLogger(__name__)


@dataclass
class _Cursor:
    last: int | None
    """Offset of the last event delivered; ``None`` = start with recent history."""
    backlog: int = 100
    quiet_gap: bool = False
    """Set when the start point was chosen by backlog: a jump there is not a loss."""
    checked: bool = False
    """Whether an explicit start point has been compared with the stream's top."""
    doubts: list[_Doubt] = field(default_factory=list)
    """Entries followed that may not be the agent's (not written by it, or the target of
    a jump), oldest first. The agent removes a stranger's entries when it next publishes;
    until the stream goes on past the newest of them, each read checks they are still
    there."""

    @property
    def trusted(self) -> int | None:
        """Where following would resume if every doubtful entry went away."""
        return self.doubts[0].before if self.doubts else self.last


@dataclass(frozen=True)
class _Doubt:
    entry_id: bytes
    """The entry's full stream id (a stranger's may not end in ``-0``)."""
    fields: tuple[tuple[bytes, bytes], ...]
    """Its fields: an entry the agent writes later at the same id is another entry."""
    before: int
    """The cursor's position before it: where following resumes if it goes away."""


_MAX_DOUBTS = 32
"""A flood of stranger's entries keeps the first doubts and the newest one, no more."""


Item = Event | Gap


@dataclass
class EventTail:
    """Consumer side: follows the streams of several agents, each from an offset.

    Delivers every event exactly once and in order per agent across reconnects and
    Redis restarts, and reports trimmed ranges as :class:`Gap`. Streams can be added
    and removed while iterating.
    """

    client: aioredis.Redis
    keys: Keys
    block_ms: int = 100
    count: int = 1000
    """Most events per read when events are small."""
    max_bytes: int = 1 << 18
    """Aim for reads of at most this many bytes (~256 KiB): with 64 KiB frames, 1000
    events would be 64 MiB decoded in one go by a console that fell behind."""
    first_count: int = 64
    """Events per read until reads show they are small: a read takes COUNT, not bytes,
    so a console caught up on small events must not meet a flood of 64 KiB frames with
    a read of ``count`` (the whole retained stream, 16 MiB, decoded at once)."""
    on_connection_change: Callable[[bool, int], None] | None = None
    _count: int = 0
    _cursors: dict[str, _Cursor] = field(default_factory=dict)
    _connected: bool = True

    def add(self, agent: str, after: int | None = None, *, backlog: int = 100) -> None:
        """Follow ``agent`` from the event after offset ``after``.

        ``after=None`` starts with the newest ``backlog`` events (like a terminal
        showing its recent screen); ``after=0`` replays everything retained.
        """
        self._cursors[agent] = _Cursor(after, backlog)

    def remove(self, agent: str) -> None:
        self._cursors.pop(agent, None)

    def position(self, agent: str) -> int | None:
        cursor = self._cursors.get(agent)
        return cursor.last if cursor else None

    @property
    def agents(self) -> list[str]:
        return list(self._cursors)

    async def __aiter__(self) -> AsyncIterator[Item]:
        async for batch in self.batches():
            for item in batch:
                yield item

    async def batches(self) -> AsyncIterator[list[Item]]:
        """Non-empty batches of items, reconnecting with backoff whenever Redis is away."""
        backoff = Backoff()
        while True:
            try:
                items = await self.poll()
            except ResponseError as exc:
                # e.g. WRONGTYPE on a stream key someone overwrote: not a reason to stop
                # following every other agent; say so and keep retrying slowly.
                log.warning("event tail: %s", exc)
                self._set_connected(False, backoff.failures + 1)
                await asyncio.sleep(backoff.next_delay())
                continue
            except CONNECTION_ERRORS:
                self._set_connected(False, backoff.failures + 1)
                await asyncio.sleep(backoff.next_delay())
                continue
            if backoff.failures:
                backoff.reset()
            self._set_connected(True, 0)
            if items:
                yield items

    async def poll(self, *, wait: bool = True) -> list[Item]:
        """One read across all followed streams, blocking up to ``block_ms`` if ``wait``."""
        out: list[Item] = await self._resolve_starts()
        if not self._cursors:
            if wait:
                await asyncio.sleep(self.block_ms / 1000)
            return out
        count = self._count or self.first_count
        doubting = {a: c for a, c in self._cursors.items() if c.doubts}
        sure = {a: c for a, c in self._cursors.items() if not c.doubts}
        reply: list[Any] = []
        if doubting:
            checked, rewound = await self._read_checked(doubting, count)
            reply.extend(checked)
            out.extend(rewound)
        if sure:
            # Block only when the checked read brought nothing: it cannot block itself.
            block = self.block_ms if wait and not reply and not out else None
            reply.extend(await self._read(sure, count, block) or [])
        elif wait and not reply and not out:
            await asyncio.sleep(self.block_ms / 1000)
        received = sum(len(f.get(b"d", b"")) for _, entries in reply for _, f in entries)
        most = max((len(entries) for _, entries in reply), default=0)
        # Size the next read by what this one weighed: few big frames, many small ones.
        # It grows only after a full, light read (more is waiting, and it is small); a
        # reader that is caught up falls back near ``first_count``, which the next flood
        # cannot make heavy.
        if received > self.max_bytes:
            self._count = max(4, count * self.max_bytes // received)
        elif most >= count:
            self._count = min(self.count, count * 2)
        else:
            self._count = min(count, max(self.first_count, 2 * most))
        for key, entries in reply:
            agent = self.keys.agent_from_events_key(key.decode())
            cursor = self._cursors.get(agent)
            if cursor is None:
                continue
            for entry_id, fields in entries:
                offset = int(entry_id.split(b"-")[0])
                assert cursor.last is not None
                if offset <= cursor.last:
                    continue
                out.extend(_accept(agent, cursor, entry_id, fields))
        return out

    def trusted(self, agent: str) -> int | None:
        """The newest offset of ``agent`` delivered and known to be its own.

        What a console saves as its position: an entry followed in doubt may turn out
        to be a stranger's, and a restart must resume before it, not after it.
        """
        cursor = self._cursors.get(agent)
        return cursor.trusted if cursor else None

    def _streams(self, cursors: dict[str, _Cursor]) -> dict[str, str]:
        return {self.keys.events(a): f"{c.last}-{LAST_SEQ}" for a, c in cursors.items()}

    def _by_slot(self, cursors: dict[str, _Cursor]) -> list[dict[str, _Cursor]]:
        """The cursors in groups that one command may read: one group on a single server;
        on a Cluster, one per slot (each project's streams share one), since a command
        over keys of several slots is refused."""
        if not is_cluster(self.client):
            return [cursors]
        groups = group_by_slot(cursors.items(), lambda pair: self.keys.events(pair[0]))
        return [dict(group) for group in groups]

    async def _read(self, cursors: dict[str, _Cursor], count: int, block: int | None) -> Any:
        groups = self._by_slot(cursors)
        if len(groups) == 1:  # one server: no task to schedule, the reply is handled at once
            return await self._read_one(groups[0], count, block) or []
        # On a Cluster the groups' reads run side by side, each blocking on its own
        # connection; an event in one group waits at most ``block`` for the others.
        replies = await asyncio.gather(*(self._read_one(g, count, block) for g in groups))
        return [stream for reply in replies for stream in reply or []]

    async def _read_one(self, cursors: dict[str, _Cursor], count: int, block: int | None) -> Any:
        return await self.client.xread(
            self._streams(cursors),  # type: ignore[arg-type]  # stub narrower than the API
            count=count,
            block=block,
        )

    async def _read_checked(
        self, doubting: dict[str, _Cursor], count: int
    ) -> tuple[list[Any], list[Item]]:
        """Read streams followed in doubt, checking their doubtful entries are still there.

        The check and the read are one transaction: the agent may remove a stranger's
        entry and write past it at any moment, and a read seen after that without the
        check would look like the stream simply went on. (No BLOCK inside MULTI.) When
        one is gone or changed, that cursor goes back to where it was before it, and what
        this read brought for that stream is dropped (it is read again from there).
        On a Cluster there is one transaction per slot.
        """
        reply: list[Any] = []
        rewound: list[Item] = []
        for group in self._by_slot(doubting):
            checked, undone = await self._read_checked_one(group, count)
            reply.extend(checked)
            rewound.extend(undone)
        return reply, rewound

    async def _read_checked_one(
        self, doubting: dict[str, _Cursor], count: int
    ) -> tuple[list[Any], list[Item]]:
        pipe = self.client.pipeline(transaction=True)
        for agent, cursor in doubting.items():
            for doubt in cursor.doubts:
                pipe.xrange(self.keys.events(agent), doubt.entry_id, doubt.entry_id)
        pipe.xread(self._streams(doubting), count=count)  # type: ignore[arg-type]
        *checks, reply = await pipe.execute()
        found = iter(checks)
        rewound: list[Item] = []
        gone: set[str] = set()
        for agent, cursor in doubting.items():
            still = [_same(doubt, next(found)) for doubt in cursor.doubts]
            if all(still):
                continue
            first_gone = still.index(False)
            doubt = cursor.doubts[first_gone]
            assert cursor.last is not None
            rewound.append(Rewound(agent, doubt.before + 1, doubt.before, skipped_to=cursor.last))
            cursor.last = doubt.before
            del cursor.doubts[first_gone:]
            gone.add(self.keys.events(agent))
        return [(k, entries) for k, entries in reply or [] if k.decode() not in gone], rewound

    async def _resolve_starts(self) -> list[Item]:
        notices: list[Item] = []
        # A snapshot: add()/remove() may run while this awaits Redis (a /tail, an
        # automatic tail), and iterating the live dict would then fail.
        for agent, cursor in list(self._cursors.items()):
            if cursor.last is not None:
                if not cursor.checked:
                    cursor.checked = True
                    top: Any = await self.client.xrevrange(self.keys.events(agent), count=1)
                    top_offset = int(top[0][0].split(b"-")[0]) if top else None
                    if top_offset is not None and top_offset < cursor.last:
                        notices.append(Reset(agent, top_offset + 1, top_offset, cursor.last))
                        cursor.last = top_offset
                continue
            await self._start_by_backlog(agent, cursor)
        return notices

    async def pin(self, agent: str) -> int | None:
        """Fix where ``agent``'s reading starts now, not at the next read.

        A start chosen by backlog is otherwise found at the first read after :meth:`add`:
        whatever the agent publishes in between (a console attached, then a command that
        floods at once) would fall before the newest ``backlog`` events and be skipped.
        Returns the offset reading goes on after (None: the agent is not followed).
        """
        cursor = self._cursors.get(agent)
        if cursor is not None and cursor.last is None:
            await self._start_by_backlog(agent, cursor)
        return cursor.last if cursor is not None else None

    async def _start_by_backlog(self, agent: str, cursor: _Cursor) -> None:
        recent: Any = await self.client.xrevrange(self.keys.events(agent), count=cursor.backlog + 1)
        if cursor.last is not None:  # pinned meanwhile: the earlier start stands
            return
        cursor.checked = True
        cursor.quiet_gap = True
        if len(recent) > cursor.backlog:
            cursor.last = int(recent[-1][0].split(b"-")[0])
        elif recent:
            cursor.last = int(recent[-1][0].split(b"-")[0]) - 1
        else:
            # Nothing published yet: everything from now on is new. Offsets start at
            # 1, so "after 0" covers the very first event without a false gap.
            cursor.last = 0

    def _set_connected(self, connected: bool, failures: int) -> None:
        changed = connected != self._connected
        self._connected = connected
        if self.on_connection_change is not None and (changed or failures):
            self.on_connection_change(connected, failures)


def _accept(agent: str, cursor: _Cursor, entry_id: bytes, fields: Any) -> list[Item]:
    """One entry past the cursor: its event (after a gap, if one), or a stranger's entry."""
    assert cursor.last is not None
    offset = int(entry_id.split(b"-")[0])
    body = own_body(agent, offset, fields.get(b"d", b"")) if entry_id.endswith(b"-0") else None
    if body is None:
        # Not the agent's: skipped with a warning, in doubt until the agent removes it.
        _doubt(cursor, entry_id, fields)
        cursor.last = offset
        cursor.quiet_gap = False
        msg = f"event stream entry {entry_id.decode()} was not written by {agent}; ignored"
        return [Event(agent, offset, EventType.WARN, 0.0, {"msg": msg, "code": "events.forged"})]
    out: list[Item] = []
    if offset > cursor.last + 1 and not cursor.quiet_gap:
        out.append(Gap(agent, cursor.last + 1, offset - 1))
        # Trimming, or an entry written by someone who copied the format: that one goes
        # away when the agent next publishes, and the jump is then undone.
        _doubt(cursor, entry_id, fields)
    elif cursor.doubts:
        # The stream goes on past the newest doubtful entry in one consistent read: the
        # agent never writes after a stranger's entry (it removes it first), so they
        # were real.
        cursor.doubts.clear()
    cursor.quiet_gap = False
    cursor.last = offset
    out.append(Event.from_body(agent, offset, body))
    return out


def _doubt(cursor: _Cursor, entry_id: bytes, fields: Any) -> None:
    assert cursor.last is not None
    doubt = _Doubt(entry_id, tuple(sorted(fields.items())), cursor.last)
    if len(cursor.doubts) >= _MAX_DOUBTS:
        cursor.doubts[-1] = doubt  # keep the oldest (the way back) and the newest
    else:
        cursor.doubts.append(doubt)


def _same(doubt: _Doubt, found: Any) -> bool:
    """Whether an XRANGE of the doubtful entry's id still returns that very entry."""
    return bool(found) and tuple(sorted(found[0][1].items())) == doubt.fields
