"""Framing streamed text into events: tokens and tool output in bounded, timely frames.

Bounded means every frame, whatever arrives at once: a tool that writes a megabyte in
one read still becomes frames of at most ``max_bytes`` (8 KiB), so each event stays small
and the event stream's byte cap (see :mod:`ateam.bus.publisher`) trims finely.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ateam.bus.events import encode_chunk
from ateam.constants import (
    COALESCE_HARD_FRAMES_PER_S,
    COALESCE_MAX_BYTES,
    COALESCE_NEWLINE_S,
    COALESCE_WINDOW_S,
)


class Coalescer:
    """Joins small chunks of model text or tool output into frames (SPEC §4.5).

    A frame is flushed after ``window`` seconds or ``max_bytes``, and for tool output
    also ``newline_window`` after a newline; no frame is longer than ``max_bytes``.
    Bytes are never split inside a UTF-8 sequence; output that is not valid UTF-8 is
    sent base64-encoded. Above ``hard_fps`` frames per second the window widens rather
    than anything being dropped.

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
            # Whole frames go now; the rest waits for more, within the window, so a
            # fast stream makes full frames rather than a full one and a scrap per read.
            while len(self._buf) >= self._max_bytes:
                self._send(self._full_cut())
            if self._buf:
                self._arm(self._window)
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
        while self._buf:
            if len(self._buf) >= self._max_bytes:
                cut = self._full_cut()
            else:
                cut = _utf8_safe_cut(self._buf)
                if cut == 0 and len(self._buf) >= 4:
                    cut = len(self._buf)
                cut = self._word_cut(cut)
                if cut == 0:
                    self._arm(self._window)
                    return
            self._send(cut)

    def _send(self, cut: int) -> None:
        data = bytes(self._buf[:cut])
        del self._buf[:cut]
        self._sink(encode_chunk(data))
        self._note_frame()

    def _full_cut(self) -> int:
        """Where a frame ends when ``max_bytes`` or more wait: at most there, never
        inside a UTF-8 sequence, and after a whitespace near the end if it is text."""
        cut = _utf8_safe_cut(self._buf, self._max_bytes) or self._max_bytes
        try:
            self._buf[:cut].decode()
        except UnicodeDecodeError:
            return cut  # binary: its "spaces" are no word boundaries, and it goes as b64
        space = _LAST_SPACE.search(self._buf, max(0, cut - self.HOLD_BYTES - 1), cut)
        return space.end() if space is not None else cut

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
        while len(self._buf) >= self._max_bytes:
            self._send(self._full_cut())
        if self._buf:
            self._send(len(self._buf))

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


_LAST_SPACE = re.compile(rb"\s(?=\S*\Z)")
"""The last whitespace byte of a (bounded) buffer slice."""


def _utf8_safe_cut(buf: bytearray, limit: int | None = None) -> int:
    """Length of the longest prefix of ``buf`` (at most ``limit``) that doesn't end
    inside a UTF-8 sequence; 0 when even the first character would be cut."""
    n = len(buf)
    if limit is not None and limit < n:
        # The next frame must not start on a continuation byte: step back to the lead.
        for back in range(4):
            if limit - back <= 0 or buf[limit - back] & 0xC0 != 0x80:
                return max(limit - back, 0)
        return limit  # not UTF-8 at all: any cut is as good as another
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
