"""Framing streamed text into events: tokens and tool output in bounded, timely frames.

Bounded means every frame, whatever arrives at once: a tool that writes a megabyte in
one read still becomes frames of at most ``max_bytes`` (8 KiB; 64 KiB while a flood
lasts), so each event stays small and the event stream's byte cap (see
:mod:`ateam.bus.publisher`) trims finely. The one exception is a private key block,
which goes whole, and masked, so that no frame holds its body without its armour.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import deque
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from ateam.bus._cuts import first_space, last_space, last_word, line_start, utf8_safe_cut
from ateam.constants import (
    COALESCE_HARD_FRAMES_PER_S,
    COALESCE_HARD_MAX_BYTES,
    COALESCE_MAX_BYTES,
    COALESCE_NEWLINE_S,
    COALESCE_WINDOW_S,
)
from ateam.redact import MASK, Redactor, may_hold_secret

log = logging.getLogger(__name__)


class _Held(StrEnum):
    """What kind of possible secret a frame waits for the rest of."""

    BLOCK = "a private key block"
    """An unterminated PEM private key block: it waits from its first line to its END."""
    LINE = "a possible secret"
    """An unfinished line naming a secret, or holding the start of one."""


class Coalescer:
    """Joins small chunks of model text or tool output into frames (SPEC §4.5).

    A frame is flushed after ``window`` seconds or ``max_bytes``, and for tool output
    also ``newline_window`` after a newline; no frame is longer than ``max_bytes`` (but
    for a private key block larger than that, which goes whole, masked to a few lines).
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

    Possible secrets wait longer, whatever flushes the frame (the timers, a full
    frame, the end of the output): an unterminated private key block from its first
    line until its END line, and an unfinished line whose end names a secret
    (``password: ``, ``Authorization: Bearer ``) or holds the start of one (``sk-pro``,
    ``ghp_``) until the line ends. Each waits up to ``SECRET_HOLD_S`` and
    ``SECRET_HOLD_BYTES``; then the redactor gives up holding it and says so in the
    output (and the log), and the held text is masked, never sent: the block's armour
    line stays, and its body is masked up to its END line, as it comes; the line's last
    word (a key's start, or the value its name announced) is masked, and the rest of the
    line as it comes. When the output ends, what is held is masked the same way, without
    the note, but for a line's last word that holds no trigger itself (the redactor
    judges the line as it is: text often ends unfinished, a model's reply above all).
    With a redactor a frame is redacted together with the end of the line the frames
    before it sent (its *tail*), so a secret whose first characters went out as a word
    of their own (``AK``, then ``IA...`` after a pause) is still masked, from where the
    frame begins.
    """

    HOLD_BYTES = 512
    HOLD_S = 1.0
    SECRET_HOLD_S = 10.0
    """How long a possible secret waits for its rest before it is masked."""
    SECRET_HOLD_BYTES = 64 * 1024
    """How large a held private key block may grow before it is masked (a key is a few
    KiB, so this is a block whose END is not coming)."""
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
        self._tail = b""
        """The end of the line the frames sent so far end in (at most ``HOLD_BYTES``)."""
        self._held: _Held | None = None
        """The possible secret the buffer begins with and waits on, if any."""
        self._held_since: float | None = None
        self._masking: _Held | None = None
        """After giving up on a held secret: its rest is masked (dropped) up to the end
        of its block or line."""

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
        if len(self._buf) >= self._max_bytes or self._masking is not None:
            # Whole frames go now; the rest waits for more, within the window, so a
            # fast stream makes full frames rather than a full one and a scrap per read.
            self._drain(whole_only=True)
            if self._buf:
                self._arm(self._window)
            return
        delay = self._window
        if self._newline_window is not None and b"\n" in data:
            delay = min(delay, self._newline_window)
        self._arm(delay)

    def flush(self) -> None:
        """Send everything that forms complete UTF-8 now (all of it if it never will),
        but for a word or a possible secret that waits for its rest."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._drain(whole_only=False):
            self._arm(self._window)

    def close(self) -> None:
        """Flush everything, including a trailing partial sequence (as bytes); a
        possible secret still held is masked."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._drain(whole_only=True)
        if self._masking is not None:
            self._take(len(self._buf))  # its block or line never ended: the rest is masked
            self._masking = None
        if not self._buf:
            return
        cut = len(self._buf)
        low = max(0, cut - self.HOLD_BYTES - 1)
        held = self._held_from(low, _word_start(self._buf, low, cut), cut)
        if held is None:
            self._send(cut)
            return
        self._held = held[1]  # what comes before it goes in the same frame
        self._give_up(note=None)
        self._masking = None  # nothing more is coming to mask

    def _drain(self, *, whole_only: bool) -> bool:
        """Send what may go now: only full frames if ``whole_only``. True when something
        waits that only time can release (a word or a held secret)."""
        while self._buf:
            if self._masking is not None:
                if not self._skip_masked():
                    return False
                continue
            if len(self._buf) >= self._max_bytes:
                cut = self._full_cut()
            elif whole_only:
                return False
            else:
                cut = utf8_safe_cut(self._buf)
                if cut == 0 and len(self._buf) >= 4:
                    cut = len(self._buf)
                cut = self._word_cut(cut)
            if cut:
                # A secret held at the buffer's start never lets a frame go: whatever
                # was held there is over, and the next hold is timed afresh.
                self._held = self._held_since = None
                self._send(cut)
            elif self._held is not None and self._past_bound():
                self._give_up(note=self._bound_reached())
            else:
                return True
        return False

    def _check(self) -> None:
        """Note whether the bytes not checked yet (with the few before them, so that no
        trigger is cut in two) may hold a secret."""
        assert self._redactor is not None
        low = max(0, self._checked - self._reach)
        end, self._checked = len(self._buf), len(self._buf)
        data = bytes(self._buf[low:])
        if low == 0 and self._tail:
            data = self._tail[-self._reach :] + data  # a trigger may begin in the last frame
        if not self._redactor.may_change(data):
            return
        begin, end = self._start + low, self._start + end
        if self._dirty and self._dirty[-1][1] >= begin:
            begin = self._dirty.pop()[0]
        self._dirty.append((begin, end))

    def _take(self, cut: int) -> bytes:
        """Remove the first ``cut`` bytes from the buffer; whether a check flagged them
        is asked before (``_dirty``)."""
        with memoryview(self._buf) as view:  # one copy, not two, of up to 64 KiB
            data = bytes(view[:cut])
        del self._buf[:cut]
        self._start += cut
        self._checked = max(0, self._checked - cut)
        while self._dirty and self._dirty[0][1] <= self._start:
            self._dirty.popleft()
        return data

    def _send(self, cut: int) -> None:
        if self._redactor is not None and self._checked < cut:
            self._check()
        # A frame is looked at again only where a check of its chunks said so.
        dirty = bool(self._dirty) and self._dirty[0][0] < self._start + cut
        data = self._take(cut)
        if dirty and self._redactor is not None:
            data = self._redacted(data)
        self._emit(data)

    def _emit(self, data: bytes) -> None:
        """Send ``data`` (redacted already, if it had to be) as a ``{"text": …}`` frame
        for UTF-8, else ``{"bin": …}``; one decode either way: an invalid byte stops it
        at once."""
        self._remember(data)
        try:
            frame: dict[str, Any] = {"text": data.decode("utf-8")}
        except UnicodeDecodeError:
            frame = {"bin": data}
        self._sink(frame)
        self._note_frame()

    def _redacted(self, data: bytes) -> bytes:
        """``data`` redacted together with the tail the frames before it left."""
        assert self._redactor is not None
        tail = self._tail
        if not tail:
            return self._redactor.redact_bytes(data)
        joined = self._redactor.redact_bytes(tail + data)
        if joined.startswith(tail):
            return joined[len(tail) :]
        # A secret began in the tail, sent before it looked like one: its rest, to the
        # first whitespace here, goes masked.
        space = first_space(data)
        return MASK.encode() + self._redactor.redact_bytes(data[space:])

    def _remember(self, sent: bytes) -> None:
        """Keep the end of the line ``sent`` ends in, as the next frame's tail."""
        low = max(0, len(sent) - self.HOLD_BYTES)
        brk = max(sent.rfind(b"\n", low), sent.rfind(b"\r", low))
        if brk >= 0:
            self._tail = sent[brk + 1 :]
        elif low:
            self._tail = sent[low:]
        else:
            self._tail = (self._tail + sent)[-self.HOLD_BYTES :]

    def _full_cut(self) -> int:
        """Where a frame ends when ``max_bytes`` or more wait: at most there, never
        inside a UTF-8 sequence or a private key block, and after a whitespace near the
        end if it is text. 0 while the buffer begins with a held key block."""
        buf = self._buf
        cut = utf8_safe_cut(buf, self._max_bytes) or self._max_bytes
        block = self._block_cut(cut)
        if block is not None:
            return block
        if not buf.isascii():  # ASCII is text: no need to decode it to know
            try:
                buf[:cut].decode()
            except UnicodeDecodeError:
                return cut  # binary: its "spaces" are no word boundaries; it goes as bin
        low = max(0, cut - self.HOLD_BYTES - 1)
        space = last_space(buf, low, cut)
        boundary = space + 1 if space >= 0 else cut
        held = self._line_held(low, boundary, boundary)
        return held or boundary  # a full frame is never empty

    def _block_cut(self, cut: int) -> int | None:
        """Where a frame near ``cut`` ends so as not to cut a private key block in two:
        before the block, or after its END line when it begins the buffer; ``None`` if
        no block is in the way."""
        begin = self._pem_begin(cut)
        if begin is None:
            return None
        line = line_start(self._buf, 0, begin)
        end = _PEM_END.search(self._buf, begin)
        if end is None:
            if not self._may_be_key(begin, cut):
                return None
            if line == 0:
                self._hold(_Held.BLOCK)
            return line
        if end.end() <= cut:
            return None
        if line:
            return line
        after = self._buf.find(b"\n", end.end(), end.end() + 2)
        return after + 1 if after >= 0 else end.end()  # one frame, masked to a few lines

    def _word_cut(self, cut: int) -> int:
        """``cut`` moved back to just after the last whitespace, while a hold is allowed,
        or to where a possible secret begins."""
        low = max(0, cut - self.HOLD_BYTES - 1)
        boundary = _word_start(self._buf, low, cut)
        held = self._held_from(low, boundary, cut)
        if held is not None:
            start, kind = held
            self._holding_since = None
            if start == 0:
                self._hold(kind)
            return start
        self._held = self._held_since = None
        now = time.monotonic()
        if self._holding_since is not None and now - self._holding_since >= self.HOLD_S:
            self._holding_since = None
            return cut  # held long enough: a prompt, not a word being streamed
        if boundary < cut and self._holding_since is None:
            self._holding_since = now
        elif boundary == cut:
            self._holding_since = None
        return boundary

    def _held_from(self, low: int, boundary: int, cut: int) -> tuple[int, _Held] | None:
        """Where in ``_buf[:cut]`` a possible secret begins that must not be cut off
        from its rest, and what it is; ``None`` if there is none.

        * An unterminated private key block waits from its first line, so that its body
          reaches the redactor after its armour.
        * The unfinished line ``cut`` falls in waits whole (if it began at most
          ``HOLD_BYTES`` back) when the stretch from ``_NAME_REACH`` bytes before its last
          word (``boundary``) to ``cut`` holds the trigger of a built-in rule
          (:func:`ateam.redact.may_hold_secret`): a name such as ``password: `` or
          ``Authorization: Bearer `` followed by a pause would otherwise go without its
          value, and ``sk-pro`` without the rest of its key. No rule spans lines; a
          trigger further back already has its value beside it, so prose that mentions
          tokens streams on.
        """
        begin = self._pem_begin(cut)
        if begin is not None and self._may_be_key(begin, cut):
            if _PEM_END.search(self._buf, begin, cut) is None:
                return line_start(self._buf, 0, begin), _Held.BLOCK
        line = self._line_held(low, boundary, cut)
        return None if line is None else (line, _Held.LINE)

    def _line_held(self, low: int, boundary: int, cut: int) -> int | None:
        """Where the unfinished line ``cut`` falls in begins, when it must wait whole
        (see :meth:`_held_from`)."""
        line = line_start(self._buf, low, cut)
        if not 0 <= line < cut:
            return None
        name = max(line, boundary - _NAME_REACH)  # a name long before is no question
        stretch = bytes(self._buf[name:cut])
        if name == 0:
            stretch = self._tail[-_NAME_REACH:] + stretch  # the line began in a frame sent
        return line if may_hold_secret(stretch) else None

    def _pem_begin(self, cut: int) -> int | None:
        """Where the last ``-----BEGIN`` before ``cut`` is: 0 if it began in the tail."""
        begin = self._buf.rfind(_PEM_BEGIN, 0, cut)
        if begin >= 0:
            return begin
        head = self._tail[1 - len(_PEM_BEGIN) :]
        if head and b"-" in head:
            joined = head + bytes(self._buf[: min(cut, len(_PEM_BEGIN) - 1)])
            if 0 <= joined.find(_PEM_BEGIN) < len(head):
                return 0
        return None

    def _may_be_key(self, begin: int, cut: int) -> bool:
        """Whether the armour line at ``begin`` is, or may still become, a private key's
        (a certificate is no secret, and need not wait for its end)."""
        end = self._buf.find(b"\n", begin, cut)
        return end < 0 or _PEM_KEY in self._buf[begin:end]

    def _hold(self, kind: _Held) -> None:
        if self._held is None or self._held_since is None:
            self._held_since = time.monotonic()
        self._held = kind

    def _past_bound(self) -> bool:
        return self._bound_reached() is not None

    def _bound_reached(self) -> str | None:
        if len(self._buf) >= self.SECRET_HOLD_BYTES:
            return f"past {self.SECRET_HOLD_BYTES // 1024} KiB"
        if self._held_since is not None:
            if time.monotonic() - self._held_since >= self.SECRET_HOLD_S:
                return f"for {self.SECRET_HOLD_S:g} s"
        return None

    def _give_up(self, *, note: str | None) -> None:
        """Stop holding the possible secret the buffer begins with: send what of it is
        no secret, mask the rest, and (with a ``note`` of how much or how long it was
        held) say so. Its rest, still to come, is masked up to the end of its block or
        line."""
        kind = self._held or _Held.LINE
        buf = self._buf
        if kind is _Held.BLOCK:
            begin = self._pem_begin(len(buf)) or 0
            line_end = buf.find(b"\n", begin)
            keep = line_end + 1 if line_end >= 0 else begin  # the armour line
            rest = "masked up to its END line"
        else:
            # Its last word may be (the start of) a secret ("sk-pro") or the value a name
            # before it announced ('"SecretAccessKey": "wJalrX'): it is masked. A name
            # ("password: ") is no word of its own yet, and stays. At the end of the
            # output the redactor judges the line as it is, but for a key's start, which
            # no rule matches before the key is whole: text that ends unfinished after
            # "the token budget" (a model's reply, often) keeps its last word.
            keep = _word_start(buf, 0, len(buf))
            word = (b"" if keep else last_word(self._tail)) + bytes(buf[keep:])
            if note is None and not may_hold_secret(word):
                keep = len(buf)
            rest = "masked to the end of its line"
        head = self._take(keep)
        if self._redactor is not None and head:
            head = self._redacted(head)
        masked = self._take(len(buf))
        if masked.strip():  # the whitespace after it stays, as the redactor leaves it
            masked = MASK.encode() + masked[len(masked.rstrip()) :]
        self._emit(head + masked)
        self._masking, self._held, self._held_since = kind, None, None
        if note is None:
            return
        what = f"[ateam: {kind.value} was held {note} without its end; {rest}]"
        log.warning("output: %s was held %s without its end; %s", kind.value, note, rest)
        if kind is _Held.BLOCK:  # a line of its own, where the END line follows
            self._emit(f"{chr(10) if self._tail else ''}{what}\n".encode())
        else:
            self._emit(f" {what}".encode())
        self._tail = b""

    def _skip_masked(self) -> bool:
        """Drop the rest of a secret given up on, up to the END line of its block or
        the end of its line; True once that came and the masking is over."""
        buf = self._buf
        if self._masking is _Held.BLOCK:
            end = buf.find(b"-----END")
            if end < 0:
                keep = min(len(buf), len(b"-----END") - 1)  # "-----EN" may be its start
                self._take(len(buf) - keep)
                return False
        else:
            breaks = [at for at in (buf.find(b"\n"), buf.find(b"\r")) if at >= 0]
            if not breaks:
                self._take(len(buf))
                return False
            end = min(breaks)
        self._take(end)
        self._masking = None
        return True

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


_PEM_BEGIN = b"-----BEGIN"
_PEM_KEY = b"PRIVATE KEY"
# The END armour of a private key block, as the redactor's pem_private_key rule ends it.
_PEM_END = re.compile(rb"-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----")


def _word_start(buf: bytearray, low: int, cut: int) -> int:
    """Where the last word of ``buf[:cut]`` begins: after its last whitespace, 0 when one
    short word is all there is, and ``cut`` for a run longer than ``HOLD_BYTES`` (no word
    to keep whole)."""
    space = last_space(buf, low, cut)
    if space >= 0:
        return space + 1
    return 0 if cut - low <= Coalescer.HOLD_BYTES else cut


_NAME_REACH = 128
"""Bytes before a frame's last word in which a secret's name (``token``, ``Bearer``)
means its value may still be on its way: the name's rest, quotes, ``=`` or ``:`` and
spaces."""
