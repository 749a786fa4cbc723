"""Fitting the working context's sections into a token budget: cut at a boundary, never over.

Pure functions over text and :func:`~ateam.providers.base.estimate_tokens`, used by
:meth:`ateam.agent.context.working.WorkingContext.render`: a section either fits whole, or its
lines are cut (at a line, sentence or word end, with a marker) to a fair share, or, for
constraints too many to list at all, what fits is listed with a note of how many are not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ateam.providers.base import estimate_tokens

__all__ = [
    "MIN_LINE_TOKENS",
    "Section",
    "cost",
    "cut_to",
    "fit_constraints",
    "fit_items",
    "fit_summary",
]

CUT_MARKER = " […]"
MIN_LINE_TOKENS = 8
"""Below this a shortened line no longer says anything; constraints then stop being listed."""

_SENTENCE_END = re.compile(r"[.!?;:](?=\s)")


@dataclass
class Section:
    """One part of the rendered block, with the counts :meth:`WorkingContext.stats` reports."""

    text: str = ""
    shown: int = 0
    cut: bool = False


def _section(heading: str, lines: list[str]) -> str:
    return "\n".join([heading, *lines]) if lines else ""


def _lines_cost(heading: str, lines: list[str]) -> int:
    """An upper bound of a section's tokens, the blank line before it included.

    ``estimate_tokens`` rounds each part up, so the parts' sum plus a token per joint
    is never less than the joined text's estimate.
    """
    if not lines:
        return 0
    return estimate_tokens(heading) + sum(estimate_tokens(line) + 1 for line in lines) + 1


def cost(section: Section) -> int:
    """What a chosen section takes from the room: its estimate and the blank line before."""
    return estimate_tokens(section.text) + 1 if section.text else 0


def fit_constraints(heading: str, lines: list[str], room: int) -> Section:
    """Every constraint, shortened only if together they exceed ``room``."""
    if not lines:
        return Section()
    if _lines_cost(heading, lines) <= room:
        return Section(_section(heading, lines), len(lines))
    share = (room - estimate_tokens(heading) - 1) // len(lines) - 1
    if share >= MIN_LINE_TOKENS:
        cut = [cut_to(line, share) for line in lines]
        return Section(_section(heading, cut), len(cut), cut=True)
    # So many that even a few words each won't fit: list what fits and say how many are
    # missing, rather than break the budget the whole prompt depends on.
    shown: list[str] = []
    for line in lines:
        candidate = [*shown, cut_to(line, MIN_LINE_TOKENS)]
        rest = len(lines) - len(candidate)
        if _lines_cost(heading, [*candidate, *_missing_note(rest)]) > room:
            break
        shown = candidate
    final = [*shown, *_missing_note(len(lines) - len(shown))]
    if _lines_cost(heading, final) > room:  # not even the note fits
        final = []
    return Section(_section(heading, final), len(shown), cut=True)


def _missing_note(count: int) -> list[str]:
    if not count:
        return []
    return [f"- ({count} more active constraints not shown: over the context budget)"]


def fit_items(heading: str, lines: list[str], room: int, cap: int) -> Section:
    """The newest lines, each cut to ``cap`` tokens, as many as fit ``room``."""
    cut = [cut_to(line, cap) for line in lines]
    kept = [line for line in cut if line]
    while kept and _lines_cost(heading, kept) > room:
        kept.pop()  # the oldest shown goes first
    return Section(_section(heading, kept), len(kept), cut=kept != lines)


def fit_summary(heading: str, summary: str, room: int) -> Section:
    """The summary under ``heading``, cut to ``room`` tokens."""
    text = cut_to(summary, room) if room > 0 else ""
    if not text:
        return Section(cut=bool(summary))
    return Section(f"{heading}\n{text}", 1, cut=text != summary.strip())


def cut_to(text: str, max_tokens: int) -> str:
    """``text`` within ``max_tokens``: whole, or cut at a line, sentence or word boundary.

    A cut text ends with a marker. Returns ``""`` when not even one word fits.
    """
    text = text.strip()
    if estimate_tokens(text) <= max_tokens:
        return text
    if max_tokens <= estimate_tokens(CUT_MARKER):
        return ""
    # The longest prefix that fits with the marker (the estimate grows with the length).
    low, high = 0, len(text)
    while low < high:
        mid = (low + high + 1) // 2
        if estimate_tokens(text[:mid].rstrip() + CUT_MARKER) <= max_tokens:
            low = mid
        else:
            high = mid - 1
    end = _boundary(text, low)
    head = text[:end].rstrip()
    return head + CUT_MARKER if head else ""


def _boundary(text: str, limit: int) -> int:
    """Where to cut ``text`` at or before ``limit``: prefer a line end, then a sentence
    end, when either keeps at least half; otherwise the last word end; 0 if none."""
    floor = limit // 2
    line_end = text.rfind("\n", 0, limit + 1)
    if line_end >= floor and line_end > 0:
        return line_end
    # Look one character past the limit: a sentence ends where whitespace follows.
    sentence_end = max(
        (m.end() for m in _SENTENCE_END.finditer(text, 0, min(len(text), limit + 1))), default=0
    )
    if sentence_end >= floor and 0 < sentence_end <= limit:
        return sentence_end
    if limit < len(text) and text[limit].isspace():
        return limit
    for index in range(limit - 1, 0, -1):
        if text[index].isspace():
            return index
    return 0
