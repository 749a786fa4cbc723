"""Text as the panes keep it before drawing: blocks of lines, cut to a bounded length.

A frame of output stays one string (:class:`Lines`) until it is drawn, and what a
terminal would not show (control characters, text overwritten after a carriage
return) is removed only then (:func:`visible`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

LINE_MAX = 4096
"""Longest line kept: a newline-free flood is cut into lines of this many characters."""

# C0 controls other than tab and ESC would reach the terminal raw (a BEL, a backspace)
# and corrupt the screen; ESC sequences are turned into styles by the ANSI decoder, and
# carriage returns are applied before this table removes the rest.
_CONTROLS = {c: None for c in (*range(0x00, 0x09), *range(0x0B, 0x1B), *range(0x1C, 0x20), 0x7F)}


class Kind(StrEnum):
    """How a buffered line becomes styled text when it is drawn."""

    STYLED = "styled"
    """Text written by the console itself, drawn in the line's style."""
    MODEL = "model"
    """Model text: escape sequences are interpreted, nothing carries over between lines."""
    OUTPUT = "output"
    """Tool output: colours carry over from line to line, as in the terminal it ran in."""


class Lines(NamedTuple):
    """Consecutive lines from one source, drawn the same way, kept as one string.

    A frame of tool output stays one string until it is drawn: a flood then costs a few
    slices and a newline count per event, not a Python object per line, and lines that
    are dropped before they are drawn are never split at all.
    """

    agent: str | None
    offset: int | None
    """Offset of the first event whose text is in these lines (None for console lines)."""
    text: str
    """The lines, joined by newlines."""
    nlines: int
    style: str = ""
    kind: Kind = Kind.STYLED


def lines_of(
    agent: str | None, offset: int | None, text: str, style: str = "", kind: Kind = Kind.STYLED
) -> Lines:
    return Lines(agent, offset, text, text.count("\n") + 1, style, kind)


def visible(line: str) -> str:
    """What a terminal would leave of ``line``: text after a carriage return overwrites."""
    line = line.rstrip("\r")
    if "\r" in line:
        line = line.rsplit("\r", 1)[-1]
    return line.translate(_CONTROLS)


def chop(text: str) -> list[str]:
    """``text`` in pieces of at most :data:`LINE_MAX` characters (at least one piece)."""
    if len(text) <= LINE_MAX:
        return [text]
    return [text[i : i + LINE_MAX] for i in range(0, len(text), LINE_MAX)]


def fit(texts: list[str]) -> list[str]:
    """Lines longer than :data:`LINE_MAX` cut into pieces (drawn as several rows)."""
    if not texts or max(map(len, texts)) <= LINE_MAX:
        return texts
    return [piece for text in texts for piece in chop(text)]


def cut(text: str, count: int) -> int:
    """Index of the newline that ends the first ``count`` lines of ``text``."""
    at = -1
    for _ in range(count):
        at = text.index("\n", at + 1)
    return at
