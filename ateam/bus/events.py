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
# An XADD can only fail on an id at or below the stream's last id. Below or at the
# newest offset this writer ever assigned (ARGV[3]) that is a stale retry of its own
# batch: skipped. *Above* it nothing can be the agent's own (the fence rules out every
# other instance), so it is a forged entry that would make every later id look stale
# and silence the stream for good: those entries are removed, the stream's last id is
# set back to its newest genuine entry (XSETID, allowed once they are gone) and the
# write is retried. Returns {status (-1 fenced), skipped, removed, first, last removed}.
_APPEND_LUA = """
if ARGV[2] ~= '0' and redis.call('GET', KEYS[2]) ~= ARGV[2] then
  return {-1, 0, 0, '', ''}
end
local function add(i)
  return pcall(redis.call, 'XADD', KEYS[1], 'MAXLEN', '~', ARGV[1],
               ARGV[i] .. '-0', 'd', ARGV[i + 1])
end
local skipped, removed, first, last = 0, 0, '', ''
for i = 4, #ARGV, 2 do
  if not add(i) then
    local batch
    repeat
      batch = redis.call('XRANGE', KEYS[1], ARGV[3] .. '-1', '+', 'COUNT', 1000)
      for _, entry in ipairs(batch) do
        redis.call('XDEL', KEYS[1], entry[1])
        if removed == 0 then first = entry[1] end
        removed = removed + 1
        last = entry[1]
      end
    until #batch < 1000
    if removed > 0 then
      local top = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
      local id = '0-1'
      if #top > 0 then id = top[1][1] end
      pcall(redis.call, 'XSETID', KEYS[1], id)
    end
    if removed == 0 or not add(i) then skipped = skipped + 1 end
  end
end
return {0, skipped, removed, first, last}
"""
VERIFY_EVERY_S = 1.0
"""How often a tail past a doubtful entry checks whether the agent removed it."""
_OWN_SCAN_PAGES = 16
"""At start, how many pages of 64 entries are searched back for the newest genuine one."""


def own_body(agent: str, offset: int, raw: bytes) -> dict[str, Any] | None:
    """The entry's body if it is one ``agent``'s publisher wrote at ``offset``, else None.

    The publisher stamps every body with its agent and offset; an entry without them
    (or with others) was written into the stream by someone else.
    """
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
        self.removed = 0
        """Entries this agent never wrote, found above its offsets and removed."""
        self.fenced = False

    @property
    def last_offset(self) -> int:
        return self._next - 1

    async def start(self) -> None:
        """Find the next offset (never below anything published before) and start writing."""
        last = self._read_local_offset()
        with contextlib.suppress(*CONNECTION_ERRORS):
            last = max(last, await self._newest_own_offset())
        self._next = last + 1
        self._task = asyncio.create_task(self._run(), name=f"events:{self._agent}")

    async def _newest_own_offset(self) -> int:
        """The newest offset in the stream that this agent wrote (0 if none is found).

        Entries above it are someone else's: starting after a forged ``999999999999-0``
        would make every offset from then on absurd; they are removed by the first write.
        """
        end = "+"
        for _ in range(_OWN_SCAN_PAGES):
            page: Any = await self._client.xrevrange(self._stream, max=end, count=64)
            for entry_id, fields in page:
                offset = int(entry_id.split(b"-")[0])
                if own_body(self._agent, offset, fields.get(b"d", b"")) is not None:
                    return offset
            if len(page) < 64:
                break
            end = f"({page[-1][0].decode()}"
        return 0

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
            self._buffer.popleft()
            self._dropped += 1
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
            batch = [self._buffer[i] for i in range(min(len(self._buffer), PUBLISH_BATCH_MAX))]
            fence = self._fence() if self._fence else 0
            # Every offset above the newest one assigned so far is still to come.
            args: list[Any] = [self._maxlen, fence, self._next - 1]
            for offset, payload in batch:
                args.extend((offset, payload))
            try:
                reply: Any = await self._script(
                    keys=[self._stream, self._keys.fence(self._agent)], args=args
                )
            except CONNECTION_ERRORS as exc:
                await self._set_connected(False, backoff.failures + 1)
                delay = backoff.next_delay()
                log.debug("event publish failed (%s); retrying in %.2fs", exc, delay)
                await asyncio.sleep(delay)
                continue
            status, skipped, removed, first, last = reply
            if status == -1:
                # Another process holds the lock now: nothing more may be written.
                self.fenced = True
                self._buffer.clear()
                if self._on_fenced is not None:
                    self._on_fenced()
                self._idle.set()
                return
            for _ in batch:
                self._buffer.popleft()
            if skipped:
                self.skipped += int(skipped)
            if removed:
                self._report_forged(int(removed), _text(first), _text(last))
            backoff.reset()
            await self._set_connected(True, 0)
            if self._dropped:
                dropped, self._dropped = self._dropped, 0
                self.emit(
                    EventType.WARN,
                    msg=f"{dropped} events were dropped while the bus was unreachable",
                    code="events.dropped",
                )
            # Persist the offset locally whenever a batch crosses a multiple of 1000, so a
            # restart against a Redis that lost the stream never reuses many offsets.
            if (batch[0][0] - 1) // 1000 != batch[-1][0] // 1000:
                self._write_local_offset()

    def _report_forged(self, removed: int, first: str, last: str) -> None:
        self.removed += removed
        ids = first if removed == 1 else f"{first} .. {last}"
        message = (
            f"{removed} entr{'y' if removed == 1 else 'ies'} that {self._agent} never wrote "
            f"(id {ids}) sat above its offsets in its event stream, which would have "
            "silenced it; removed, and events flow again"
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
    """

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
        if cut == 0:
            self._arm(self._window)
            return
        data = bytes(self._buf[:cut])
        del self._buf[:cut]
        self._sink(encode_chunk(data))
        self._note_frame()
        if self._buf:
            self._arm(self._window)

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
    genuine: int | None = None
    """Set while following past an entry that may not be the agent's (one it did not
    write, or a jump): the newest offset known genuine, to come back to if the entries
    after it disappear (the publisher removes forged ones)."""
    verified_at: float = 0.0
    """When the stream's top was last compared with ``last`` while ``genuine`` is set."""


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
        notices = await self._resolve_starts()
        if not self._cursors:
            if wait:
                await asyncio.sleep(self.block_ms / 1000)
            return []
        streams = {self.keys.events(a): f"{c.last}-0" for a, c in self._cursors.items()}
        count = self._count or self.count
        reply: Any = await self.client.xread(
            streams,  # type: ignore[arg-type]  # redis-py's stub is narrower than its API
            count=count,
            block=self.block_ms if wait else None,
        )
        received = sum(len(f.get(b"d", b"")) for _, entries in reply or [] for _, f in entries)
        # Size the next read by what this one weighed: few big frames, many small ones.
        if received > self.max_bytes:
            self._count = max(4, count * self.max_bytes // received)
        elif count < self.count:
            self._count = min(self.count, count * 2)
        out: list[Item] = list(notices)
        for key, entries in reply or []:
            agent = self.keys.agent_from_events_key(key.decode())
            cursor = self._cursors.get(agent)
            if cursor is None:
                continue
            for entry_id, fields in entries:
                offset = int(entry_id.split(b"-")[0])
                assert cursor.last is not None
                if offset <= cursor.last:
                    continue
                out.extend(_accept(agent, cursor, offset, fields))
        return out

    async def _resolve_starts(self) -> list[Item]:
        notices: list[Item] = []
        # A snapshot: add()/remove() may run while this awaits Redis (a /tail, an
        # automatic tail), and iterating the live dict would then fail.
        for agent, cursor in list(self._cursors.items()):
            if cursor.genuine is not None:
                rewound = await self._verify(agent, cursor)
                if rewound is not None:
                    notices.append(rewound)
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

    async def _verify(self, agent: str, cursor: _Cursor) -> Rewound | None:
        """Past a doubtful entry: once the stream's top falls below it, go back."""
        now = time.monotonic()
        if now - cursor.verified_at < VERIFY_EVERY_S:
            return None
        cursor.verified_at = now
        top: Any = await self.client.xrevrange(self.keys.events(agent), count=1)
        top_offset = int(top[0][0].split(b"-")[0]) if top else 0
        assert cursor.last is not None and cursor.genuine is not None
        if top_offset >= cursor.last:
            return None  # still there (or the stream has moved on past it)
        rewound = Rewound(agent, cursor.genuine + 1, cursor.genuine, skipped_to=cursor.last)
        cursor.last, cursor.genuine = cursor.genuine, None
        return rewound

    def _set_connected(self, connected: bool, failures: int) -> None:
        changed = connected != self._connected
        self._connected = connected
        if self.on_connection_change is not None and (changed or failures):
            self.on_connection_change(connected, failures)


def _accept(agent: str, cursor: _Cursor, offset: int, fields: Any) -> list[Item]:
    """One entry past the cursor: its event (after a gap, if one), or a stranger's entry."""
    assert cursor.last is not None
    body = own_body(agent, offset, fields.get(b"d", b""))
    if body is None:
        # Not the agent's: skipped with a warning, remembering where to come back to.
        if cursor.genuine is None:
            cursor.genuine = cursor.last
        cursor.last = offset
        cursor.quiet_gap = False
        msg = f"event stream entry {offset} was not written by {agent}; ignored"
        return [Event(agent, offset, EventType.WARN, 0.0, {"msg": msg, "code": "events.forged"})]
    out: list[Item] = []
    if offset > cursor.last + 1 and not cursor.quiet_gap:
        out.append(Gap(agent, cursor.last + 1, offset - 1))
        # A jump is trimming, or an entry written by someone who copied the format:
        # that one vanishes when the agent next publishes, and is then undone.
        if cursor.genuine is None:
            cursor.genuine = cursor.last
    elif cursor.genuine is not None:
        cursor.genuine = None  # the stream goes on past the jump: it was real
    cursor.quiet_gap = False
    cursor.last = offset
    out.append(Event.from_body(agent, offset, body))
    return out
