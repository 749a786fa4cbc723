"""The event stream (SPEC §4.5): publishing, coalescing and tailing with offsets.

Each agent owns one Redis stream. The agent is the only writer (the single-instance lock
guarantees it), so it assigns offsets itself and uses them as stream entry ids
(``<offset>-0``): offsets are dense, never reset (the agent starts from the highest of
the stream's last id and its local record), and a consumer that resumes "after offset
N" is an ``XREAD`` from ``N-0``. A jump in the offsets a consumer receives can only mean
trimmed or dropped events, which is exactly the gap it must report.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from ateam._fs import atomic_write
from ateam.bus.backoff import CONNECTION_ERRORS, Backoff
from ateam.bus.codec import pack, unpack
from ateam.bus.keys import Keys
from ateam.constants import (
    COALESCE_HARD_FRAMES_PER_S,
    COALESCE_MAX_BYTES,
    COALESCE_NEWLINE_S,
    COALESCE_WINDOW_S,
    EVENT_BUFFER_MAX,
    EVENT_LOG_MAXLEN,
    PUBLISH_BATCH_MAX,
)
from ateam.errors import BadRequest

log = logging.getLogger(__name__)


class EventType(StrEnum):
    TOKEN = "token"
    TOOL_START = "tool.start"
    TOOL_OUTPUT = "tool.output"
    TOOL_END = "tool.end"
    TASK_START = "task.start"
    TASK_END = "task.end"
    WARN = "warn"
    ERROR = "error"
    STATE = "state"
    MODEL_SWITCH = "model.switch"
    HANDOFF = "handoff"
    DIFF_PROPOSED = "diff.proposed"
    APPROVAL_REQUEST = "approval.request"
    APPROVAL_RESOLVED = "approval.resolved"
    PROMPT = "prompt"
    OWNERSHIP = "ownership"
    CONTEXT = "context"
    KB_PROGRESS = "kb.progress"


@dataclass(frozen=True)
class Event:
    """One event as a consumer sees it."""

    agent: str
    offset: int
    type: str
    ts: float
    data: dict[str, Any]

    @property
    def task_id(self) -> str | None:
        value = self.data.get("task_id")
        return str(value) if value is not None else None

    @property
    def trace_id(self) -> str | None:
        value = self.data.get("trace_id")
        return str(value) if value is not None else None

    @classmethod
    def decode(cls, agent: str, offset: int, raw: bytes) -> Event:
        return cls.from_body(agent, offset, unpack(raw))

    @classmethod
    def from_body(cls, agent: str, offset: int, body: dict[str, Any]) -> Event:
        etype = str(body.pop("type", "unknown"))
        ts = float(body.pop("ts", 0.0))
        for meta in ("v", "offset", "agent"):
            body.pop(meta, None)
        return cls(agent, offset, etype, ts, body)


@dataclass(frozen=True)
class Gap:
    """Events ``first..last`` of ``agent`` are no longer available."""

    agent: str
    first: int
    last: int

    def message(self) -> str:
        return f"tail gap: events {self.first}..{self.last} are no longer available"


@dataclass(frozen=True)
class Reset(Gap):
    """The saved position ``saved`` lies beyond the stream's top ``last``.

    Seen when offsets saved for one bus meet a stream that restarted lower (a Redis that
    lost its data together with the agent's local record). Following continues from the
    top instead of waiting, silently, for offsets that may never come.
    """

    saved: int = 0

    def message(self) -> str:
        return (
            f"tail reset: the stream is at event {self.last}, behind the remembered "
            f"{self.saved}; following from there"
        )


@dataclass(frozen=True)
class Rewound(Gap):
    """Entries followed after offset ``last`` were not the agent's and are gone.

    Someone wrote entries into the stream above the agent's offsets; the agent removed
    them when it next published. Following resumes after ``last``, the newest genuine
    event delivered, so nothing it wrote since is missed.
    """

    skipped_to: int = 0

    def message(self) -> str:
        return (
            f"tail rewind: entries up to {self.skipped_to} were not written by the agent "
            f"and were removed; following again from event {self.last + 1}"
        )


# Appends a batch with explicit ids and trims the log. The fencing check makes a
# process that lost its instance lock unable to write into its successor's stream.
#
# KEYS: the stream, the fence, a scratch key in the same slot. ARGV: MAXLEN, the fence,
# the newest offset this writer may have written (confirmed, or sent in a call whose
# reply was lost), then (offset, payload) pairs. Returns {status (-1 fenced), skipped,
# foreign, first, last foreign id}.
#
# An XADD fails only on an id at or below the stream's last id, which no entry of this
# agent can explain but its own batch written before and retried after a lost reply.
# Anything else there is someone else's: one forged ``999999999999-0`` would make every
# later id look stale and silence the stream for good. So on the first failure the
# stream is rebuilt from what is the agent's own (entries up to ``written``, and
# entries identical to this batch) and the write is retried. A rebuild, not XDEL and
# XSETID: Redis 7 refuses to set the last id below a deleted one. A key of another type
# under the stream's name is someone else's too.
_APPEND_LUA = """
if ARGV[2] ~= '0' and redis.call('GET', KEYS[2]) ~= ARGV[2] then
  return {-1, 0, 0, '', ''}
end
local foreign, first, last = 0, '', ''
local function note(id)
  foreign = foreign + 1
  if first == '' then first = id end
  last = id
end
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'stream' and kind ~= 'none' then
  redis.call('DEL', KEYS[1])
  note('(a ' .. kind .. ')')
end
local function add(i)
  return pcall(redis.call, 'XADD', KEYS[1], 'MAXLEN', '~', ARGV[1],
               ARGV[i] .. '-0', 'd', ARGV[i + 1])
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
  for j = 4, #ARGV, 2 do mine[ARGV[j] .. '-0'] = ARGV[j + 1] end
  redis.call('DEL', KEYS[3])
  local start = '-'
  while true do
    local page = redis.call('XRANGE', KEYS[1], start, '+', 'COUNT', 512)
    for _, entry in ipairs(page) do
      local id = entry[1]
      local ms, seq = string.match(id, '^(%d+)-(%d+)$')
      local body = payload(entry)
      -- The agent writes one field, d, at ids N-0: anything else is not its own.
      if body and #entry[2] == 2 and seq == '0'
          and (at_most(ms, ARGV[3]) or mine[id] == body) then
        redis.call('XADD', KEYS[3], id, 'd', body)
      else
        note(id)
      end
    end
    if #page < 512 then break end
    start = '(' .. page[#page][1]
  end
  if redis.call('EXISTS', KEYS[3]) == 1 then
    redis.call('RENAME', KEYS[3], KEYS[1])
  else
    redis.call('DEL', KEYS[1])
  end
end
local skipped, rebuilt = 0, false
for i = 4, #ARGV, 2 do
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
return {0, skipped, foreign, first, last}
"""
MAX_OFFSET = 2**53
"""No agent reaches this (10 000 events/s for 28 000 years); an entry claiming it is
forged, and taking it as the top would make every later offset absurd."""
_LAST_SEQ = "18446744073709551615"
"""Reads start after ``<offset>-<this>``: an entry ``<offset>-5`` was not written by an
agent (its ids are ``<offset>-0``), and starting at ``<offset>-0`` would return it on
every read."""
_OWN_SCAN_PAGE = 256
"""Entries per page when a starting publisher looks back for its newest own entry."""


def _newest_own(agent: str, newest_first: Any) -> int | None:
    """The offset of the first entry (of an XREVRANGE page) that ``agent`` wrote."""
    for entry_id, fields in newest_first:
        offset = int(entry_id.split(b"-")[0])
        if own_body(agent, offset, fields.get(b"d", b"")) is not None:
            return offset
    return None


def own_body(agent: str, offset: int, raw: bytes) -> dict[str, Any] | None:
    """The entry's body if it is one ``agent``'s publisher wrote at ``offset``, else None.

    The publisher stamps every body with its agent and offset; an entry without them
    (or with others) was written into the stream by someone else.
    """
    if offset >= MAX_OFFSET:
        return None  # beyond any real count: only a forger's entry claims it
    try:
        body = unpack(raw)
    except BadRequest:
        return None
    if body.get("agent") != agent or body.get("offset") != offset:
        return None
    return body


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
        buffer_max: int = EVENT_BUFFER_MAX,
        on_connection_change: Callable[[bool, int], Awaitable[None] | None] | None = None,
        fence: Callable[[], int] | None = None,
        on_fenced: Callable[[], None] | None = None,
        scrub: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        self._client = client
        self._keys = keys
        self._agent = agent
        self._stream = keys.events(agent)
        self._offset_file = offset_file
        self._maxlen = maxlen
        self._buffer: deque[tuple[int, bytes]] = deque()
        self._buffer_max = buffer_max
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
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        self._script = client.register_script(_APPEND_LUA)
        self._on_connection_change = on_connection_change
        self._fence = fence
        self._on_fenced = on_fenced
        self._scrub = scrub
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

    def emit(self, etype: str, **fields: Any) -> int:
        """Queue one event for publishing and return its offset."""
        offset = self._next
        self._next += 1
        body = {"type": etype, "ts": time.time(), "offset": offset, "agent": self._agent}
        payload = {k: v for k, v in fields.items() if v is not None}
        # Secrets are removed before anything leaves the process (SPEC §11). Frames are
        # already coalesced here, so a key split across two model chunks is whole.
        # A base64 frame is left out: text patterns would only mangle its encoding, so
        # whoever emits one redacts the bytes before encoding them (the task runner).
        binary = payload.pop("b64", None)
        body.update(self._scrub(payload) if self._scrub is not None else payload)
        if binary is not None:
            body["b64"] = binary
        self._buffer.append((offset, pack(body)))
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
            try:
                done = await self._publish_batch()
            except CONNECTION_ERRORS as exc:
                await self._set_connected(False, backoff.failures + 1)
                delay = backoff.next_delay()
                log.debug("event publish failed (%s); retrying in %.2fs", exc, delay)
                await asyncio.sleep(delay)
                continue
            except ResponseError as exc:
                # Refused by the server (out of memory, a permission, a script error):
                # the events wait in the buffer, the loop lives on and tries again.
                delay = backoff.next_delay()
                log.warning("event publish refused (%s); retrying in %.2fs", exc, delay)
                await asyncio.sleep(delay)
                continue
            if not done:  # fenced off: nothing more may be written
                self._idle.set()
                return
            backoff.reset()
            await self._set_connected(True, 0)
            if self._dropped:
                dropped, self._dropped = self._dropped, 0
                self.emit(
                    EventType.WARN,
                    msg=f"{dropped} events were dropped while the bus was unreachable",
                    code="events.dropped",
                )

    async def _publish_batch(self) -> bool:
        """Write the oldest waiting events; False once this writer is fenced off."""
        if self._written is None:
            await self._find_written()
        assert self._written is not None
        batch = [self._buffer[i] for i in range(min(len(self._buffer), PUBLISH_BATCH_MAX))]
        fence = self._fence() if self._fence else 0
        args: list[Any] = [self._maxlen, fence, max(self._written, self._maybe_written)]
        for offset, payload in batch:
            args.extend((offset, payload))
        keys = [self._stream, self._keys.fence(self._agent), self._keys.events_scratch(self._agent)]
        self._in_flight = batch[-1][0]
        try:
            status, skipped, foreign, first, last = await self._script(keys=keys, args=args)
        except CONNECTION_ERRORS:
            # The call may have run: the retry must not take these for a stranger's.
            self._maybe_written = max(self._maybe_written, batch[-1][0])
            raise
        finally:
            self._in_flight = 0
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
        if self._offset_file is None:
            return 0
        try:
            return int(self._offset_file.read_text().strip() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def _write_local_offset(self) -> None:
        if self._offset_file is None or self.fenced:
            return  # a fenced-off writer's record would only mislead its successor
        with contextlib.suppress(OSError):
            atomic_write(self._offset_file, f"{self.last_offset}\n".encode())


class Coalescer:
    """Joins small chunks of model text or tool output into frames (SPEC §4.5).

    A frame is flushed after ``window`` seconds or ``max_bytes``, and for tool output
    also ``newline_window`` after a newline. Bytes are never split inside a UTF-8
    sequence; output that is not valid UTF-8 is sent base64-encoded. Above
    ``hard_fps`` frames per second the window widens rather than anything being dropped.

    Frames end at whitespace where they can: a trailing run of up to ``HOLD_BYTES``
    non-space bytes waits for the next frame (at most ``HOLD_S``), so a key streamed a
    few characters at a time reaches the redactor, which sees one frame at a time, in
    one piece. A longer run, or one held that long (a prompt waiting for input), goes.
    """

    HOLD_BYTES = 512
    HOLD_S = 1.0

    def __init__(
        self,
        sink: Callable[[dict[str, Any]], None],
        *,
        window: float = COALESCE_WINDOW_S,
        max_bytes: int = COALESCE_MAX_BYTES,
        newline_window: float | None = None,
        hard_fps: int = COALESCE_HARD_FRAMES_PER_S,
    ) -> None:
        self._sink = sink
        self._base_window = window
        self._window = window
        self._max_bytes = max_bytes
        self._newline_window = newline_window
        self._hard_fps = hard_fps
        self._buf = bytearray()
        self._timer: asyncio.TimerHandle | None = None
        self._frames: deque[float] = deque()
        self._holding_since: float | None = None

    @classmethod
    def for_output(cls, sink: Callable[[dict[str, Any]], None]) -> Coalescer:
        return cls(sink, newline_window=COALESCE_NEWLINE_S)

    def feed(self, chunk: bytes | str) -> None:
        data = chunk.encode() if isinstance(chunk, str) else chunk
        if not data:
            return
        self._buf += data
        if len(self._buf) >= self._max_bytes:
            self.flush()
            return
        delay = self._window
        if self._newline_window is not None and b"\n" in data:
            delay = min(delay, self._newline_window)
        self._arm(delay)

    def flush(self) -> None:
        """Send everything that forms complete UTF-8 now (all of it if it never will)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._buf:
            return
        cut = _utf8_safe_cut(self._buf)
        if cut == 0 and len(self._buf) >= 4:
            cut = len(self._buf)
        cut = self._word_cut(cut)
        if cut == 0:
            self._arm(self._window)
            return
        data = bytes(self._buf[:cut])
        del self._buf[:cut]
        self._sink(encode_chunk(data))
        self._note_frame()
        if self._buf:
            self._arm(self._window)

    def _word_cut(self, cut: int) -> int:
        """``cut`` moved back to just after the last whitespace, while a hold is allowed."""
        now = time.monotonic()
        if self._holding_since is not None and now - self._holding_since >= self.HOLD_S:
            self._holding_since = None
            return cut  # held long enough: a prompt, not a word being streamed
        low = max(0, cut - self.HOLD_BYTES - 1)
        space = _LAST_SPACE.search(self._buf, low, cut)
        if space is not None:
            boundary = space.end()
        elif cut - low <= self.HOLD_BYTES:
            boundary = 0  # one short word so far: all of it waits
        else:
            return cut  # a long run without a space is no word to keep whole
        if boundary < cut and self._holding_since is None:
            self._holding_since = now
        elif boundary == cut:
            self._holding_since = None
        return boundary

    def close(self) -> None:
        """Flush everything, including a trailing partial sequence (as base64)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._buf:
            data = bytes(self._buf)
            self._buf.clear()
            self._sink(encode_chunk(data))

    def _arm(self, delay: float) -> None:
        if self._timer is not None:
            return
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self.flush()

    def _note_frame(self) -> None:
        now = time.monotonic()
        self._frames.append(now)
        while self._frames and now - self._frames[0] > 1.0:
            self._frames.popleft()
        if len(self._frames) > self._hard_fps:
            self._window = min(self._window * 2, 1.0)
        elif len(self._frames) < self._hard_fps // 2:
            self._window = self._base_window


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


_LAST_SPACE = re.compile(rb"\s(?=\S*\Z)")
"""The last whitespace byte of a (bounded) buffer slice."""


def _utf8_safe_cut(buf: bytearray) -> int:
    """Length of the longest prefix of ``buf`` that doesn't end inside a UTF-8 sequence."""
    n = len(buf)
    # Look back at most 3 bytes for the lead byte of an unfinished sequence.
    for back in range(1, min(4, n + 1)):
        byte = buf[n - back]
        if byte & 0xC0 == 0x80:  # continuation byte: keep looking for the lead
            continue
        if byte & 0x80 == 0:  # ASCII: nothing unfinished
            return n
        need = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4
        return n if back >= need else n - back
    return n


def encode_chunk(data: bytes) -> dict[str, Any]:
    """``{"text": …}`` for valid UTF-8, else ``{"b64": …}`` so binary survives intact."""
    try:
        return {"text": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"b64": base64.b64encode(data).decode("ascii")}


def decode_chunk(data: dict[str, Any]) -> bytes:
    """Inverse of :func:`encode_chunk`; malformed base64 becomes a visible marker."""
    if "b64" in data:
        try:
            return base64.b64decode(str(data["b64"]), validate=True)
        except ValueError:
            return b"<undecodable binary chunk>"
    return str(data.get("text", "")).encode()


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
        count = self._count or self.count
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
        # Size the next read by what this one weighed: few big frames, many small ones.
        if received > self.max_bytes:
            self._count = max(4, count * self.max_bytes // received)
        elif count < self.count:
            self._count = min(self.count, count * 2)
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
        return {self.keys.events(a): f"{c.last}-{_LAST_SEQ}" for a, c in cursors.items()}

    async def _read(self, cursors: dict[str, _Cursor], count: int, block: int | None) -> Any:
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
        """
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
            cursor.checked = True
            cursor.quiet_gap = True
            recent: Any = await self.client.xrevrange(
                self.keys.events(agent), count=cursor.backlog + 1
            )
            if len(recent) > cursor.backlog:
                cursor.last = int(recent[-1][0].split(b"-")[0])
            elif recent:
                cursor.last = int(recent[-1][0].split(b"-")[0]) - 1
            else:
                # Nothing published yet: everything from now on is new. Offsets start at
                # 1, so "after 0" covers the very first event without a false gap.
                cursor.last = 0
        return notices

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
