"""Where a frame of streamed bytes may end: at a space, a line, a whole UTF-8 character.

Byte scans over the coalescer's buffer (:mod:`ateam.bus.coalesce`), kept apart because
they know nothing of frames, secrets or time.
"""

from __future__ import annotations

import re

__all__ = ["first_space", "last_space", "last_word", "line_start", "utf8_safe_cut"]


def last_space(buf: bytearray, start: int, end: int) -> int:
    """Index of the last whitespace byte (``bytes.isspace``) in ``buf[start:end]``, or -1.

    Six reverse ``memchr`` scans of a slice of at most a frame's hold: cheaper than one
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


def last_word(sent: bytes) -> bytes:
    """The word ``sent`` ends in, if it does not end in whitespace."""
    return b"" if not sent or sent[-1:].isspace() else sent.split()[-1]


_SPACE = re.compile(rb"\s")


def first_space(data: bytes) -> int:
    found = _SPACE.search(data)
    return found.start() if found is not None else len(data)


def line_start(buf: bytearray, low: int, end: int) -> int:
    """Where the line holding ``buf[end - 1]`` starts, if at ``low`` or later, else -1."""
    start = max(buf.rfind(b"\n", low, end), buf.rfind(b"\r", low, end)) + 1
    return start if start > 0 or low == 0 else -1


def utf8_safe_cut(buf: bytearray, limit: int | None = None) -> int:
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
