"""Agent side of the event stream (SPEC §4.5): offsets assigned, buffered, written in batches.

The writes are fenced in Lua, so a process that lost its instance lock cannot write into
its successor's stream, and entries someone else forged into the stream are removed.

Retention is bounded twice (issue 13): by count (``maxlen``, 10 000 by default) and by
bytes (``max_bytes``, :data:`~ateam.constants.EVENT_LOG_MAX_BYTES`). The bytes are
counted as each entry's payload plus :data:`ENTRY_OVERHEAD`, kept beside the stream in
:meth:`~ateam.bus.keys.Keys.events_bytes`; past the cap the oldest entries go until the
stream holds seven eighths of it, so a burst of large tool output costs at most the cap.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from ateam._fs import atomic_write
from ateam.bus.backoff import CONNECTION_ERRORS, Backoff
from ateam.bus.codec import pack, unpack
from ateam.bus.connection import bus_error
from ateam.bus.events import own_body
from ateam.bus.keys import Keys
from ateam.bus.owner_lag import EmitLedger
from ateam.constants import (
    EVENT_BUFFER_MAX,
    EVENT_LOG_MAX_BYTES,
    EVENT_LOG_MAXLEN,
    PUBLISH_BATCH_MAX,
    PUBLISH_BATCH_MAX_BYTES,
)
from ateam.errors import AteamError, Code
from ateam.wire.event_types import EventType

log = logging.getLogger(__name__)

ENTRY_OVERHEAD = 128
"""Bytes counted per stream entry beside its payload (id, field name, node share): what
``MEMORY USAGE`` shows on Valkey 9 and Redis 6.2 for entries of a few KiB. An allocator
that rounds sizes up (jemalloc in Redis 7) can add up to a quarter on top."""
COUNT_SLACK = 100
"""Entries over ``maxlen`` tolerated before trimming by count, as ``MAXLEN ~`` would
(one stream node's worth): trimming then runs once per hundred entries, not per batch."""


# Appends a batch with explicit ids and trims the log. The fencing check makes a
# process that lost its instance lock unable to write into its successor's stream.
#
# KEYS: the stream, the fence, a scratch key, the byte count, the instance lock and the
# cost ledger, all in one slot. ARGV: MAXLEN, the fence, the newest offset this writer
# may have written (confirmed, or sent in a call whose reply was lost), the byte cap,
# the lock's value ('' to skip that check), then (offset, payload) pairs. Returns
# {status (-1 fenced), skipped, foreign, first, last foreign id}.
#
# With the lock's value the writer must hold the lock as well as the fence: after Redis
# lost everything, another host's instance could be issued a fence this one already
# holds, but never this one's random lock value.
#
# An XADD fails only on an id at or below the stream's last id, which no entry of this
# agent can explain but its own batch written before and retried after a lost reply.
# Anything else there is someone else's: one forged ``999999999999-0`` would make every
# later id look stale and silence the stream for good. So on the first failure the
# stream is rebuilt from what is the agent's own (entries up to ``written``, and
# entries identical to this batch) and the write is retried. A rebuild, not XDEL and
# XSETID: Redis 7 refuses to set the last id below a deleted one. A key of another type
# under the stream's name is someone else's too.
#
# The ledger is a list of every entry's cost, oldest first: trimming pops the costs of
# the entries it removes instead of reading those entries back, which copied each
# payload a second time and was a quarter of the server's work under a flood of output.
# A ledger whose length is not the stream's (lost, evicted, or a stream older than the
# ledger) is rebuilt from the stream, once.
_APPEND_LUA = (
    f"local OVERHEAD, SLACK = {ENTRY_OVERHEAD}, {COUNT_SLACK}\n"
    + """
if ARGV[2] ~= '0' and redis.call('GET', KEYS[2]) ~= ARGV[2] then
  return {-1, 0, 0, '', ''}
end
if ARGV[5] ~= '' and redis.call('GET', KEYS[5]) ~= ARGV[5] then
  return {-1, 0, 0, '', ''}
end
local foreign, first, last = 0, '', ''
local function note(id)
  foreign = foreign + 1
  if first == '' then first = id end
  last = id
end
-- The length is counted on below (a call less); the type is asked only on WRONGTYPE.
local found, len = pcall(redis.call, 'XLEN', KEYS[1])
if not found then
  local text = type(len) == 'table' and (len.err or '') or tostring(len)
  if not string.find(text, 'WRONGTYPE', 1, true) then error(redis.error_reply(text)) end
  note('(a ' .. redis.call('TYPE', KEYS[1])['ok'] .. ')')
  redis.call('DEL', KEYS[1])
  len = 0
end
local function cost(fields)
  local n = OVERHEAD
  for k = 1, #fields do n = n + #fields[k] end
  return n
end
local function each_entry(visit)  -- every entry of the stream, oldest first, once
  local start = '-'
  while true do
    local page = redis.call('XRANGE', KEYS[1], start, '+', 'COUNT', 512)
    for _, entry in ipairs(page) do visit(entry) end
    if #page < 512 then break end
    start = '(' .. page[#page][1]
  end
end
local total = 0
if len == 0 then  -- no stream, or an empty one: no cost to keep
  redis.call('DEL', KEYS[6])
elseif redis.call('LLEN', KEYS[6]) == len then
  total = tonumber(redis.call('GET', KEYS[4]) or '') or 0
else
  redis.call('DEL', KEYS[6])
  each_entry(function(entry)
    local n = cost(entry[2])
    total = total + n
    redis.call('RPUSH', KEYS[6], n)
  end)
end
local function add(i)
  local ok, err = pcall(redis.call, 'XADD', KEYS[1], ARGV[i] .. '-0', 'd', ARGV[i + 1])
  if ok then
    local n = OVERHEAD + 1 + #ARGV[i + 1]
    total = total + n
    len = len + 1
    redis.call('RPUSH', KEYS[6], n)
    return true
  end
  -- Only a stale id is the case handled below; anything else (an ACL without XADD, a
  -- full server) is the caller's to hear, never a batch silently dropped.
  local text = type(err) == 'table' and (err.err or '') or tostring(err)
  if not string.find(text, 'equal or smaller', 1, true) then
    error(redis.error_reply(text))
  end
  return false
end
local function at_most(a, b)  -- decimal strings without leading zeros, any length
  return #a < #b or (#a == #b and a <= b)
end
local function payload(entry)
  local f = entry[2]
  for k = 1, #f, 2 do
    if f[k] == 'd' then return f[k + 1] end
  end
  return nil
end
local function rebuild()
  local mine = {}
  for j = 6, #ARGV, 2 do mine[ARGV[j] .. '-0'] = ARGV[j + 1] end
  redis.call('DEL', KEYS[3], KEYS[6])
  total, len = 0, 0
  each_entry(function(entry)
    local id = entry[1]
    local ms, seq = string.match(id, '^(%d+)-(%d+)$')
    local body = payload(entry)
    -- The agent writes one field, d, at ids N-0: anything else is not its own.
    if body and #entry[2] == 2 and seq == '0'
        and (at_most(ms, ARGV[3]) or mine[id] == body) then
      redis.call('XADD', KEYS[3], id, 'd', body)
      local n = cost(entry[2])
      total = total + n
      len = len + 1
      redis.call('RPUSH', KEYS[6], n)
    else
      note(id)
    end
  end)
  if redis.call('EXISTS', KEYS[3]) == 1 then
    redis.call('RENAME', KEYS[3], KEYS[1])
  else
    redis.call('DEL', KEYS[1])
  end
end
local function trim()
  local maxlen, cap = tonumber(ARGV[1]), tonumber(ARGV[4])
  if len <= maxlen + SLACK and total <= cap then return end
  -- Down to 7/8 of the cap, so bytes trigger a trim once per eighth of it.
  local goal = cap - math.floor(cap / 8)
  local function over(kept)
    return kept > 1 and (kept > maxlen or total > goal)
  end
  local drop = 0
  while over(len - drop) do
    local page = redis.call('LRANGE', KEYS[6], drop, drop + 255)
    if #page == 0 then break end
    for _, n in ipairs(page) do
      if not over(len - drop) then break end
      drop = drop + 1
      total = total - tonumber(n)
    end
  end
  if drop > 0 then
    redis.call('XTRIM', KEYS[1], 'MAXLEN', len - drop)
    redis.call('LTRIM', KEYS[6], drop, -1)
  end
end
local skipped, rebuilt = 0, false
for i = 6, #ARGV, 2 do
  if not add(i) then
    if not rebuilt then
      rebuilt = true
      rebuild()
      if not add(i) then skipped = skipped + 1 end
    else
      skipped = skipped + 1
    end
  end
end
trim()
redis.call('SET', KEYS[4], math.max(total, 0))
return {0, skipped, foreign, first, last}
"""
)
GATHER_TURNS = 8
"""Turns of the loop a batch of large frames waits at most for more (``_gather``)."""
GATHER_FROM_BYTES = 8 * 1024
"""A frame this large (a full one of output) waits for others to join its batch."""
_OWN_SCAN_PAGE = 256
"""Entries per page when a starting publisher looks back for its newest own entry."""


def _newest_own(agent: str, newest_first: Any) -> int | None:
    """The offset of the first entry (of an XREVRANGE page) that ``agent`` wrote."""
    for entry_id, fields in newest_first:
        offset = int(entry_id.split(b"-")[0])
        if own_body(agent, offset, fields.get(b"d", b"")) is not None:
            return offset
    return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


_BINARY_FIELDS = ("bin", "b64")
"""Chunk fields holding bytes, already redacted by whoever emitted them."""


class _FenceDoubt(Exception):
    """The stream refused the fence and the owner was asked to check the lock."""


_FINAL_REFUSALS = frozenset({Code.REDIS_NOPERM, Code.REDIS_AUTH})


class EventPublisher:
    """Agent side: assigns offsets, buffers, and writes events in batches.

    ``emit`` never blocks and never fails: while Redis is away events wait in a bounded
    buffer (oldest dropped first, which consumers then see as a gap, plus a ``warn``
    event saying how many were dropped).
    """

    def __init__(
        self,
        client: aioredis.Redis,
        keys: Keys,
        agent: str,
        *,
        offset_file: Path | None = None,
        maxlen: int = EVENT_LOG_MAXLEN,
        max_bytes: int = EVENT_LOG_MAX_BYTES,
        buffer_max: int = EVENT_BUFFER_MAX,
        on_connection_change: Callable[[bool, int], Awaitable[None] | None] | None = None,
        fence: Callable[[], int] | None = None,
        on_fenced: Callable[[], None] | None = None,
        scrub: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        file_fence: Callable[[str], None] | None = None,
    ) -> None:
        self._client = client
        self._keys = keys
        self._agent = agent
        self._stream = keys.events(agent)
        self._offset_file = offset_file
        self._maxlen = maxlen
        self._max_bytes = max_bytes
        self._buffer: deque[tuple[int, bytes]] = deque()
        self._buffer_max = buffer_max
        self.ledger = EmitLedger(maxlen + COUNT_SLACK)  # for the owner's lag (owner_lag.py)
        self._dropped = 0
        self._next = 1
        self._local = 0
        self._written: int | None = None
        """The newest offset of ours known to be in the stream; None until looked up."""
        self._maybe_written = 0
        """The newest offset sent in a call whose reply was lost: it may be there."""
        self._in_flight = 0
        """The newest offset of the batch being written right now."""
        self._wake = asyncio.Event()
        self._fence_news = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        self._script = client.register_script(_APPEND_LUA)
        named = (keys.fence, keys.events_scratch, keys.events_bytes, keys.lock, keys.events_costs)
        self._script_keys = [self._stream, *(name(agent) for name in named)]  # named once
        self._on_connection_change = on_connection_change
        self._fence = fence
        self._on_fenced = on_fenced
        self.lock_value = b""
        """The instance lock's value this writer holds: if set, batches are written only
        while the lock holds exactly it (as well as the fence)."""
        self.on_fence_doubt: Callable[[], None] | None = None
        self.on_refused: Callable[[AteamError], None] | None = None
        """Told of a refusal that waiting will not cure (``redis.noperm``, ``redis.auth``)."""
        """If set, a refused write is a doubt to settle, not a proof: this is called (the
        owner checks the lock, then calls :meth:`fence_checked`) and the batch is
        retried then, or after a backoff. Without it, a refusal fences off for good."""
        self._scrub = scrub
        self._file_fence = file_fence
        """Asked before ``offset_file`` is written; raises (the agent's write fence,
        :class:`~ateam.errors.LockLost`) while this writer may have lost its identity."""
        self.connected = True
        self.skipped = 0
        self.foreign = 0
        """Entries (or a key) this agent never wrote, found in its stream and removed."""
        self.fenced = False

    @property
    def last_offset(self) -> int:
        return self._next - 1

    async def start(self) -> None:
        """Find the next offset (never below anything published before) and start writing."""
        self._local = self._read_local_offset()
        self._place_after(self._local)
        with contextlib.suppress(*CONNECTION_ERRORS):
            await self._find_written()
        self._task = asyncio.create_task(self._run(), name=f"events:{self._agent}")

    async def _find_written(self) -> None:
        """Learn the newest offset of ours in the stream; renumber what waits if needed.

        Only entries whose body carries this agent's id and their own offset count: one
        forged ``999999999999-0`` on top must not make every later offset absurd (it is
        removed by the first write). Until this has run against Redis, ``_written`` is
        unknown and nothing is published: a wrong boundary would make the append
        script take the agent's own entries for someone else's.
        """
        top = 0
        end = "+"
        count = 1  # the newest entry is the agent's own, but after a forgery
        while True:
            try:
                page: Any = await self._client.xrevrange(self._stream, max=end, count=count)
            except ResponseError as exc:
                if not str(exc).startswith("WRONGTYPE"):
                    raise
                break  # not a stream at all: nothing of ours; the first write replaces it
            found = _newest_own(self._agent, page)
            if found is not None:
                top = found
                break
            if len(page) < count:
                break
            end = f"({page[-1][0].decode()}"
            count = _OWN_SCAN_PAGE
        written = max(self._local, top)
        self._place_after(written)
        self._written = written

    def _place_after(self, written: int) -> None:
        """Make every waiting and future offset come after ``written``."""
        if self._buffer and self._buffer[0][0] <= written:
            self._renumber(written + 1 - self._buffer[0][0])
        self._next = max(self._next, written + 1)

    def _renumber(self, shift: int) -> None:
        """Move waiting events up by ``shift``: they were numbered before the top was known."""
        moved: deque[tuple[int, bytes]] = deque()
        for offset, payload in self._buffer:
            body = unpack(payload)
            body["offset"] = offset + shift
            moved.append((offset + shift, pack(body)))
        self._buffer = moved
        self._next += shift

    def emit(self, etype: str, **fields: object) -> int:
        """Queue one event for publishing and return its offset."""
        return self.emit_redacted(etype, {}, **fields)

    def emit_redacted(self, etype: str, redacted: Mapping[str, object], **fields: object) -> int:
        """:meth:`emit`, with ``redacted`` fields the caller has redacted already (the
        framer of a tool's output): the scrub leaves those out, as it does bytes."""
        offset = self._next
        self._next += 1
        body = {"type": etype, "ts": time.time(), "offset": offset, "agent": self._agent}
        payload = {k: v for k, v in fields.items() if v is not None}
        # Secrets are removed before anything leaves the process (SPEC §11). Frames are
        # already coalesced here, so a key split across two model chunks is whole.
        # A frame of bytes is left out: whoever emits one redacts its bytes (the task
        # runner's framer), and a base64 one would only be mangled by text patterns.
        kept = {key: payload.pop(key) for key in _BINARY_FIELDS if key in payload}
        body.update(self._scrub(payload) if self._scrub is not None else payload)
        body.update(kept)
        body.update(redacted)
        self._buffer.append((offset, packed := pack(body)))
        self.ledger.add(offset, ENTRY_OVERHEAD + 1 + len(packed))  # as the append counts it
        if len(self._buffer) > self._buffer_max:
            dropped, _ = self._buffer.popleft()
            # One being written now is not lost (it may be written twice: harmless).
            self._dropped += dropped > self._in_flight
        self._idle.clear()
        self._wake.set()
        return offset

    async def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything emitted so far is in Redis; False on timeout."""
        try:
            async with asyncio.timeout(timeout):
                await self._idle.wait()
        except TimeoutError:
            return False
        return True

    async def aclose(self, flush_timeout: float = 3.0) -> None:
        if self._task is None:
            return  # never started: nothing to flush, and no offset of ours to record
        await self.flush(flush_timeout)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._write_local_offset()

    async def _run(self) -> None:
        backoff = Backoff()
        while True:
            if not self._buffer:
                self._idle.set()
                self._wake.clear()
                await self._wake.wait()
                continue
            await self._gather()
            try:
                done = await self._publish_batch()
            except _FenceDoubt:
                await self._await_fence(backoff.next_delay())
                continue
            except CONNECTION_ERRORS as exc:
                await self._set_connected(False, backoff.failures + 1)
                delay = backoff.next_delay()
                log.debug("event publish failed (%s); retrying in %.2fs", exc, delay)
                await asyncio.sleep(delay)
                continue
            except ResponseError as exc:
                refusal = bus_error(exc)
                if refusal.code in _FINAL_REFUSALS and self.on_refused is not None:
                    # A permission the ACL does not give will not come by waiting: the
                    # agent stops with a final status (the supervisor will not loop).
                    self.on_refused(refusal)
                # Refused by the server (out of memory, a script error): the events wait
                # in the buffer, the loop lives on and tries again.
                delay = backoff.next_delay()
                log.warning("event publish refused (%s); retrying in %.2fs", exc, delay)
                await asyncio.sleep(delay)
                continue
            if not done:  # fenced off: nothing more may be written
                self._idle.set()
                return
            backoff.reset()
            if not self.connected:
                await self._set_connected(True, 0)
            if self._dropped:
                dropped, self._dropped = self._dropped, 0
                self.emit(
                    EventType.WARN,
                    msg=f"{dropped} events were dropped while the bus was unreachable",
                    code="events.dropped",
                )

    async def _gather(self) -> None:
        """Let large frames on their way join the batch: a call costs ~100 µs, and a flood
        of output left one or two frames a call (a runtime's flood: 9 calls per MiB, now
        4). Small events go at once: hundreds share a call when they come fast."""
        for _ in range(GATHER_TURNS):
            waiting = len(self._buffer)
            if waiting >= PUBLISH_BATCH_MAX or len(self._buffer[-1][1]) < GATHER_FROM_BYTES:
                return
            await asyncio.sleep(0)
            if len(self._buffer) == waiting:
                return

    async def _publish_batch(self) -> bool:
        """Write the oldest waiting events; False once this writer is fenced off."""
        if self._written is None:
            await self._find_written()
        assert self._written is not None
        batch: list[tuple[int, bytes]] = []
        size = 0
        for entry in itertools.islice(self._buffer, PUBLISH_BATCH_MAX):
            size += len(entry[1])
            if batch and size > PUBLISH_BATCH_MAX_BYTES:
                break
            batch.append(entry)
        fence = self._fence() if self._fence else 0
        written = max(self._written, self._maybe_written)
        args: list[Any] = [self._maxlen, fence, written, self._max_bytes, self.lock_value]
        for offset, payload in batch:
            args.extend((offset, memoryview(payload)))
        self._in_flight, keys = batch[-1][0], self._script_keys
        try:
            status, skipped, foreign, first, last = await self._script(keys=keys, args=args)
        except CONNECTION_ERRORS:
            # The call may have run: the retry must not take these for a stranger's.
            self._maybe_written = max(self._maybe_written, batch[-1][0])
            raise
        finally:
            self._in_flight = 0
        if status == -1 and self.on_fence_doubt is not None:
            # Not proof of a successor: Redis may have lost the lock or the fence (a
            # restart without persistence), or the lock is being taken again right now.
            # The lock decides.
            self._fence_news.clear()
            self.on_fence_doubt()
            raise _FenceDoubt(fence)
        if status == -1:
            # Another process holds the lock now: nothing more may be written.
            self.fenced = True
            self._buffer.clear()
            if self._on_fenced is not None:
                self._on_fenced()
            return False
        # By offset, not by count: emit() may have dropped some of them meanwhile.
        while self._buffer and self._buffer[0][0] <= batch[-1][0]:
            self._buffer.popleft()
        self._written = batch[-1][0]
        self.skipped += int(skipped)
        if foreign:
            self._report_forged(int(foreign), _text(first), _text(last))
        # Persist the offset locally whenever a batch crosses a multiple of 1000, so a
        # restart against a Redis that lost the stream never reuses many offsets.
        if (batch[0][0] - 1) // 1000 != batch[-1][0] // 1000:
            self._write_local_offset()
        return True

    def fence_checked(self) -> None:
        """The owner confirmed the lock (kept or taken again): a doubted batch goes now."""
        self._fence_news.set()

    async def _await_fence(self, limit: float) -> None:
        """Wait for the owner's check of the lock, at most ``limit`` seconds."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(limit):
                await self._fence_news.wait()

    def _report_forged(self, count: int, first: str, last: str) -> None:
        self.foreign += count
        ids = first if count == 1 else f"{first} .. {last}"
        message = (
            f"{count} entr{'y' if count == 1 else 'ies'} that {self._agent} never wrote "
            f"(id {ids}) sat in its event stream, where they would have silenced it; "
            "removed, and events flow again"
        )
        log.warning("event stream %s: %s", self._stream, message)
        self.emit(EventType.WARN, msg=message, code="events.forged", first=first, last=last)

    async def _set_connected(self, connected: bool, failures: int) -> None:
        changed = connected != self.connected
        self.connected = connected
        if self._on_connection_change is not None and (changed or failures):
            result = self._on_connection_change(connected, failures)
            if result is not None:
                await result

    def _read_local_offset(self) -> int:
        try:
            return int(self._offset_file.read_text().strip() or 0) if self._offset_file else 0
        except (FileNotFoundError, ValueError):
            return 0

    def _write_local_offset(self) -> None:
        if self._offset_file is None or self.fenced:
            return  # a fenced-off writer's record would only mislead its successor
        if self._file_fence is not None:
            # The record counts offsets this writer only numbered: a thawed instance whose
            # successor took over has numbered events the stream refused, and a record of
            # them would make the successor skip ahead, a gap every reader is told of.
            try:
                self._file_fence("the event offset")
            except AteamError as refused:
                log.info("event offset %s not recorded: %s", self.last_offset, refused.message)
                return
        with contextlib.suppress(OSError):
            atomic_write(self._offset_file, f"{self.last_offset}\n".encode())
