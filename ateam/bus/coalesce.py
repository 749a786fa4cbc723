"""Framing streamed text into events: tokens and tool output in bounded, timely frames.

Bounded means every frame, whatever arrives at once: a tool that writes a megabyte in
one read still becomes frames of at most ``max_bytes`` (8 KiB; 64 KiB while a flood
lasts), so each event stays small and the event stream's byte cap (see
:mod:`ateam.bus.publisher`) trims finely.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ateam.constants import (
    COALESCE_HARD_FRAMES_PER_S,
    COALESCE_HARD_MAX_BYTES,
    COALESCE_MAX_BYTES,
    COALESCE_NEWLINE_S,
    COALESCE_WINDOW_S,
)
from ateam.redact import Redactor, may_hold_secret


class Coalescer:
    """Joins small chunks of model text or tool output into frames (SPEC §4.5).

    A frame is flushed after ``window`` seconds or ``max_bytes``, and for tool output
    also ``newline_window`` after a newline; no frame is longer than ``max_bytes``.
    Bytes are never split inside a UTF-8 sequence; output that is not valid UTF-8 is
    sent as bytes (``bin``, a msgpack binary), text as ``text``.

    With a ``redactor`` every frame comes out redacted, text and bytes alike, and its
    sink emits it as such (the publisher's scrub only reads text, and would redact the
    same text again). Each chunk is checked as it is fed (:meth:`Redactor.may_change
    <ateam.redact.Redactor.may_change>`, with the bytes before it), so a frame none of
    whose chunks can hold a secret goes out without another look: under a flood the
    checking happens between reads of the terminal, while the command writes on,
    instead of all at once per frame while it waits. Without one, text frames are left
    for the publisher to redact, and bytes are sent as they are.

    Above ``hard_fps``
    frames per second the stream is coalesced harder rather than anything dropped: the
    window widens and frames grow, up to ``hard_max_bytes``; both fall back once the
    rate is below half of it. A flood of output then costs a frame per 64 KiB instead of
    per 8 KiB, and each frame's fixed cost (packing, an entry in Redis, a console's
    decoding) is paid an eighth as often.

    Frames end at whitespace where they can: a trailing run of up to ``HOLD_BYTES``
    non-space bytes waits for the next frame (at most ``HOLD_S``), so a key streamed a
    few characters at a time reaches the redactor, which sees one frame at a time, in
    one piece. A longer run, or one held that long (a prompt waiting for input), goes.
    Secrets that span a space are kept together too (see :meth:`_keep_together`): an
    unfinished line that names one (``password: ``, ``Authorization: Bearer ``) waits
    whole for its value, and an unterminated PEM block for its end.
    """

    HOLD_BYTES = 512
    HOLD_S = 1.0
    CHECK_BYTES = 16 * 1024
    """Bytes checked for secrets at a time: each check has a fixed cost, and each keeps
    the terminal's reader from reading, so a few KiB, about what a PTY buffers."""

    def __init__(
        self,
        sink: Callable[[dict[str, Any]], None],
        *,
        window: float = COALESCE_WINDOW_S,
        max_bytes: int = COALESCE_MAX_BYTES,
        newline_window: float | None = None,
        hard_fps: int = COALESCE_HARD_FRAMES_PER_S,
        hard_max_bytes: int = COALESCE_HARD_MAX_BYTES,
        redactor: Redactor | None = None,
    ) -> None:
        self._sink = sink
        self._redactor = redactor
        self._reach = redactor.reach if redactor is not None else 0
        self._start = 0
        """Where in the stream ``_buf`` begins."""
        self._checked = 0
        """How much of ``_buf`` has been checked for secrets."""
        self._dirty: deque[tuple[int, int]] = deque()
        """Stretches of the stream (start, end) whose check said a secret may be there."""
        self._base_window = window
        self._window = window
        self._base_max_bytes = max_bytes
        self._max_bytes = max_bytes
        self._hard_max_bytes = max(hard_max_bytes, max_bytes)
        self._newline_window = newline_window
        self._hard_fps = hard_fps
        self._buf = bytearray()
        self._timer: asyncio.TimerHandle | None = None
        self._frames: deque[float] = deque()
        self._holding_since: float | None = None

    @classmethod
    def for_output(
        cls,
        sink: Callable[[dict[str, Any]], None],
        *,
        redactor: Redactor | None = None,
    ) -> Coalescer:
        """Framing for a tool's output: also flushed soon after a newline."""
        return cls(sink, newline_window=COALESCE_NEWLINE_S, redactor=redactor)

    def feed(self, chunk: bytes | str) -> None:
        data = chunk.encode() if isinstance(chunk, str) else chunk
        if not data:
            return
        if self._max_bytes > self._base_max_bytes and self._quiet():
            self._soften()
        self._buf += data
        if self._redactor is not None and len(self._buf) - self._checked >= self.CHECK_BYTES:
            self._check()
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

    def _check(self) -> None:
        """Note whether the bytes not checked yet (with the few before them, so that no
        trigger is cut in two) may hold a secret."""
        assert self._redactor is not None
        low = max(0, self._checked - self._reach)
        end, self._checked = len(self._buf), len(self._buf)
        if not self._redactor.may_change(bytes(self._buf[low:])):
            return
        begin, end = self._start + low, self._start + end
        if self._dirty and self._dirty[-1][1] >= begin:
            begin = self._dirty.pop()[0]
        self._dirty.append((begin, end))

    def _send(self, cut: int) -> None:
        if self._redactor is not None and self._checked < cut:
            self._check()
        with memoryview(self._buf) as view:  # one copy, not two, of up to 64 KiB
            data = bytes(view[:cut])
        del self._buf[:cut]
        self._start += cut
        self._checked = max(0, self._checked - cut)
        # A frame is looked at again only where a check of its chunks said so.
        dirty = bool(self._dirty) and self._dirty[0][0] < self._start
        while self._dirty and self._dirty[0][1] <= self._start:
            self._dirty.popleft()
        self._sink(self._frame(data, dirty))
        self._note_frame()

    def _frame(self, data: bytes, dirty: bool) -> dict[str, Any]:
        """``{"text": …}`` for UTF-8, else ``{"bin": …}``, redacted if there is a
        redactor and a check said so (one decode either way: an invalid byte stops it
        at once)."""
        redactor = self._redactor if dirty else None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return {"bin": redactor.redact_bytes(data) if redactor is not None else data}
        return {"text": redactor.redact(text) if redactor is not None else text}

    def _full_cut(self) -> int:
        """Where a frame ends when ``max_bytes`` or more wait: at most there, never
        inside a UTF-8 sequence, and after a whitespace near the end if it is text."""
        buf = self._buf
        cut = _utf8_safe_cut(buf, self._max_bytes) or self._max_bytes
        if not buf.isascii():  # ASCII is text: no need to decode it to know
            try:
                buf[:cut].decode()
            except UnicodeDecodeError:
                return cut  # binary: its "spaces" are no word boundaries; it goes as bin
        low = max(0, cut - self.HOLD_BYTES - 1)
        space = _last_space(buf, low, cut)
        boundary = space + 1 if space >= 0 else cut
        return self._keep_together(low, boundary) or boundary  # a full frame is never empty

    def _word_cut(self, cut: int) -> int:
        """``cut`` moved back to just after the last whitespace, while a hold is allowed."""
        now = time.monotonic()
        if self._holding_since is not None and now - self._holding_since >= self.HOLD_S:
            self._holding_since = None
            return cut  # held long enough: a prompt, not a word being streamed
        low = max(0, cut - self.HOLD_BYTES - 1)
        space = _last_space(self._buf, low, cut)
        if space >= 0:
            boundary = space + 1
        elif cut - low <= self.HOLD_BYTES:
            boundary = 0  # one short word so far: all of it waits
        else:
            return cut  # a long run without a space is no word to keep whole
        boundary = self._keep_together(low, boundary)
        if boundary < cut and self._holding_since is None:
            self._holding_since = now
        elif boundary == cut:
            self._holding_since = None
        return boundary

    def _keep_together(self, low: int, boundary: int) -> int:
        """``boundary``, or earlier, so that what may be one secret is not cut in two.

        * An unterminated PEM block waits from its first line, so that its body reaches
          the redactor after its armour (a private key is a few KiB: less than a frame).
        * The line ``boundary`` falls in waits whole (if it began at most ``HOLD_BYTES``
          back, after a ``\n`` or ``\r``) when its last ``_NAME_REACH`` bytes before
          ``boundary`` hold the trigger of a built-in rule
          (:func:`ateam.redact.may_hold_secret`): a name such as ``password: `` or
          ``Authorization: Bearer `` followed by a pause or a frame's end would otherwise
          go without its value. No rule spans lines; a trigger further back already has
          its value beside it, so prose that mentions tokens streams on.
        """
        buf = self._buf
        begin = buf.rfind(b"-----BEGIN", 0, boundary)
        if begin > 0 and buf.find(b"-----END", begin, boundary) < 0:
            line = _line_start(buf, 0, begin)
            if line > 0:
                return line
        line = _line_start(buf, low, boundary)
        if 0 <= line < boundary:
            name = max(line, boundary - _NAME_REACH)  # a name long before is no question
            if may_hold_secret(bytes(buf[name:boundary])):
                return line
        return boundary

    def close(self) -> None:
        """Flush everything, including a trailing partial sequence (as bytes)."""
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
            self._max_bytes = min(self._max_bytes * 2, self._hard_max_bytes)
        elif len(self._frames) < self._hard_fps // 2:
            self._soften()

    def _quiet(self) -> bool:
        """No frame for a second: what comes now is no longer part of a flood."""
        return not self._frames or time.monotonic() - self._frames[-1] > 1.0

    def _soften(self) -> None:
        self._window = self._base_window
        self._max_bytes = self._base_max_bytes


def _last_space(buf: bytearray, start: int, end: int) -> int:
    """Index of the last whitespace byte (``bytes.isspace``) in ``buf[start:end]``, or -1.

    Six reverse ``memchr`` scans of a slice of at most ``HOLD_BYTES``: cheaper than one
    regex pass, and it runs once per frame.
    """
    return max(
        buf.rfind(b" ", start, end),
        buf.rfind(b"\n", start, end),
        buf.rfind(b"\t", start, end),
        buf.rfind(b"\r", start, end),
        buf.rfind(b"\x0b", start, end),
        buf.rfind(b"\x0c", start, end),
    )


_NAME_REACH = 128
"""Bytes before a frame's end in which a secret's name (``token``, ``Bearer``) means its
value may still be on its way: the name's rest, quotes, ``=`` or ``:`` and spaces."""


def _line_start(buf: bytearray, low: int, end: int) -> int:
    """Where the line holding ``buf[end - 1]`` starts, if at ``low`` or later, else -1."""
    start = max(buf.rfind(b"\n", low, end), buf.rfind(b"\r", low, end)) + 1
    return start if start > 0 or low == 0 else -1


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
