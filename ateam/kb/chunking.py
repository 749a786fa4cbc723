"""From a document's text to the chunks the knowledge base embeds (SPEC §10).

Three steps, each a pure function so they can be tested and reused alone:

* :func:`normalise` and :func:`content_hash` — the identity of a document. Two files
  that differ only in line endings, trailing spaces or runs of blank lines have the same
  hash, so the second is reported as a duplicate instead of being ingested twice.
* :func:`split_document` — the document's natural sections: Markdown and reStructuredText
  at headings, source code at top-level definitions (a table of per-language patterns),
  anything else as one section. Sections keep the file's own line numbers, so a search
  hit can point at ``path:12-40``.
* :func:`chunk` — sections packed into chunks of about ``target_tokens``. Small
  neighbouring sections share a chunk (a file of twenty three-line functions should not
  become twenty vectors); a section too big for one chunk is cut at line boundaries with
  ``overlap_tokens`` of its text repeated at the start of the next piece, so a passage
  that straddles a cut is still found whole in one of them.

Tokens are *estimated* at four characters each, the usual rule of thumb for English and
code with BPE tokenisers, and the same estimate ateam uses elsewhere
(:func:`ateam.providers.base.estimate_tokens`). No tokenizer download is needed, and the
bound is strict: no chunk is longer than ``4 * target_tokens`` characters.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import PurePath

__all__ = [
    "CHARS_PER_TOKEN",
    "DEFAULT_OVERLAP_TOKENS",
    "DEFAULT_TARGET_TOKENS",
    "Chunk",
    "Section",
    "chunk",
    "content_hash",
    "estimate_tokens",
    "normalise",
    "split_document",
]

CHARS_PER_TOKEN = 4
"""The token estimate: one token per four characters."""
DEFAULT_TARGET_TOKENS = 600
"""SPEC §10: chunks of about 600 tokens..."""
DEFAULT_OVERLAP_TOKENS = 80
"""...with about 80 tokens of overlap."""

_TITLE_MAX = 200
"""Titles are metadata shown in search hits; a packed chunk's list of titles is cut here."""


@dataclass(frozen=True)
class Section:
    """A natural part of a document: a heading's text, or one definition's code."""

    title: str
    """The heading (with its parents, ``Install / Linux``) or the definition's name;
    empty for the text before the first heading or definition."""
    lines: tuple[str, ...]
    """The section's lines, without line endings."""
    first_line: int
    """The 1-based line number of ``lines[0]`` in the document."""

    @property
    def last_line(self) -> int:
        return self.first_line + len(self.lines) - 1


@dataclass(frozen=True)
class Chunk:
    """One piece of a document, embedded and stored as one vector."""

    title: str
    """The title of the section it comes from, or the titles of the sections it packs."""
    text: str
    first_line: int
    """1-based, inclusive, in the document as it is on disk (after line-ending
    conversion)."""
    last_line: int

    @property
    def lines(self) -> str:
        """The line range as ``first-last``, the form stored in metadata."""
        return f"{self.first_line}-{self.last_line}"


def estimate_tokens(text: str) -> int:
    """The token estimate used for chunking: ``ceil(len(text) / 4)``."""
    return -(-len(text) // CHARS_PER_TOKEN)


# --- identity ---------------------------------------------------------------------------

_LINE_BREAK = re.compile(r"\r\n?")
_BLANK_RUN = re.compile(r"\n{3,}")


def normalise(text: str) -> str:
    """The form a document is hashed in: what an editor's whitespace settings can't change.

    CRLF and lone CR become LF, trailing spaces and tabs are stripped from every line,
    runs of blank lines shrink to one, and blank lines at the start and the end go.
    Indentation is kept: in Python or YAML it is content.
    """
    lines = _LINE_BREAK.sub("\n", text).split("\n")
    joined = "\n".join(line.rstrip(" \t\f\v") for line in lines)
    return _BLANK_RUN.sub("\n\n", joined).strip("\n")


def content_hash(text: str) -> str:
    """SHA-256 (hex) of the UTF-8 of :func:`normalise` ``(text)``: a document's identity."""
    return hashlib.sha256(normalise(text).encode("utf-8", "surrogatepass")).hexdigest()


# --- sections ---------------------------------------------------------------------------


def split_document(path: str | PurePath, text: str) -> list[Section]:
    """Split a document into its natural sections, chosen by the file's extension.

    Args:
        path: The file's path or name; only its suffix matters.
        text: The file's content; any line endings.

    Returns:
        The sections in document order; together they hold every line of the document.
        Empty for an empty text.
    """
    lines = _LINE_BREAK.sub("\n", text).split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline ends the last line, it does not start another
    if not lines:
        return []
    suffix = PurePath(path).suffix.lower()
    splitter = _SPLITTERS.get(suffix)
    if splitter is not None:
        return splitter(lines)
    language = _CODE.get(suffix)
    if language is not None:
        return _split_code(lines, language)
    return [Section("", tuple(lines), 1)]


def _sections(lines: list[str], heads: list[tuple[int, str]]) -> list[Section]:
    """Cut ``lines`` before each ``(index, title)`` head; text before the first is untitled."""
    starts = [(0, ""), *heads] if not heads or heads[0][0] > 0 else heads
    ends = [index for index, _ in starts[1:]] + [len(lines)]
    return [
        Section(title, tuple(lines[start:end]), start + 1)
        for (start, title), end in zip(starts, ends, strict=True)
    ]


_ATX = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t#]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def _split_markdown(lines: list[str]) -> list[Section]:
    """Markdown at ATX (``## Title``) and setext (underlined) headings, not inside fences.

    A title carries its parents (``Install / Linux``) so a hit deep in a document still
    says where it is.
    """
    heads: list[tuple[int, str]] = []
    trail: list[str] = []  # trail[level - 1] is the current heading at that level
    fence = ""
    # Whether the line above is paragraph text, which a "===" or "---" turns into a
    # heading; above a fence, a heading or a blank line, "---" is a thematic break.
    text_above = False
    # YAML front matter's closing "---" under "key: value" would read as a heading.
    for index in range(_front_matter_end(lines), len(lines)):
        line = lines[index]
        opened = _FENCE.match(line)
        if fence or opened:
            closes = bool(fence and opened and _closes(fence, opened.group(1)))
            fence = "" if closes else fence or (opened.group(1) if opened else "")
            text_above = False
            continue
        level, title, start = _markdown_heading(lines, index, text_above)
        text_above = not level and bool(line.strip())
        if level:
            del trail[level - 1 :]
            trail.extend([""] * (level - 1 - len(trail)))
            trail.append(title)
            heads.append((start, " / ".join(part for part in trail if part)))
    return _sections(lines, _drop_overlaps(heads))


def _closes(fence: str, marker: str) -> bool:
    """A fence closes with the same character, at least as many times."""
    return marker[0] == fence[0] and len(marker) >= len(fence)


def _front_matter_end(lines: list[str]) -> int:
    """The index after a leading ``---`` ... ``---`` block, or 0 if there is none."""
    if lines[0].rstrip() != "---":
        return 0
    closing = next((i for i in range(1, len(lines)) if lines[i].rstrip() in ("---", "...")), None)
    return closing + 1 if closing is not None else 0


def _markdown_heading(lines: list[str], index: int, text_above: bool) -> tuple[int, str, int]:
    """``(level, title, first line index)`` if a heading ends at ``index``, else level 0."""
    atx = _ATX.match(lines[index])
    if atx:
        return len(atx.group(1)), atx.group(2).strip(), index
    setext = _SETEXT.match(lines[index])
    if setext and text_above:
        return (1 if setext.group(1)[0] == "=" else 2), lines[index - 1].strip(), index - 1
    return 0, "", index


_RST_ADORNMENT = re.compile(r"""^([=\-`:'"~^_*+#<>.])\1{2,}\s*$""")


def _split_rst(lines: list[str]) -> list[Section]:
    """reStructuredText at section titles: a text line underlined (and maybe overlined)."""
    heads: list[tuple[int, str]] = []
    for index in range(1, len(lines)):
        title = lines[index - 1].strip()
        if not _RST_ADORNMENT.match(lines[index]) or not title or _RST_ADORNMENT.match(title):
            continue
        if len(lines[index].rstrip()) < len(title):
            continue
        overlined = index >= 2 and lines[index - 2].rstrip() == lines[index].rstrip()
        heads.append((index - 2 if overlined else index - 1, title))
    return _sections(lines, _drop_overlaps(heads))


def _drop_overlaps(heads: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Keep heads in strictly increasing line order (an overline can't start two sections)."""
    kept: list[tuple[int, str]] = []
    for head in heads:
        if not kept or head[0] > kept[-1][0]:
            kept.append(head)
    return kept


_SPLITTERS: dict[str, Callable[[list[str]], list[Section]]] = {
    ".md": _split_markdown,
    ".markdown": _split_markdown,
    ".mdx": _split_markdown,
    ".rst": _split_rst,
}


@dataclass(frozen=True)
class _Language:
    """How to find top-level definitions in one language."""

    head: re.Pattern[str]
    """Matches the first line of a definition at column 0; group ``name`` is its name."""
    lead: re.Pattern[str]
    """Lines directly above a head that belong to it: decorators, attributes, doc comments."""


def _language(head: str, lead: str) -> _Language:
    return _Language(re.compile(head), re.compile(lead))


_C_COMMENT = r"^(?://|/\*|\*|\s+\*)"
_JS = _language(
    r"^(?:export\s+(?:default\s+)?)?(?:declare\s+)?(?:abstract\s+)?(?:async\s+)?"
    r"(?:function\b\*?|(?:class|interface|enum|type|namespace)\b)\s*(?P<name>[\w$]*)"
    r"|^export\s+(?:const|let|var)\s+(?P<exported>[\w$]+)",
    _C_COMMENT + r"|^@",
)
_C = _language(
    # A function definition's head: a return type, a name and "(" with no ";" after it
    # (that would be a prototype); or a type definition.
    r"^(?:struct|union|enum|class|namespace|template)\b\s*(?P<name>\w*)"
    r"|^(?!(?:return|if|else|while|for|switch|do|case|goto|typedef)\b)"
    r"[A-Za-z_][\w\s\*&:<>,]*?\b(?P<fn>\w+)\s*\([^;]*$",
    _C_COMMENT + r"|^#\s*(?:if|ifdef|ifndef|pragma)\b",
)
_CODE: dict[str, _Language] = {
    ".py": _language(r"^(?:async\s+def|def|class)\s+(?P<name>\w+)", r"^(?:@|#)"),
    ".js": _JS,
    ".mjs": _JS,
    ".cjs": _JS,
    ".jsx": _JS,
    ".ts": _JS,
    ".tsx": _JS,
    ".go": _language(
        r"^(?:func\s+(?:\([^)]*\)\s*)?|type\s+)(?P<name>\w+)",
        r"^//",
    ),
    ".rs": _language(
        r"^(?:pub(?:\([^)]*\))?\s+)?(?:(?:async|const|unsafe|extern\s+\"C\")\s+)*"
        r"(?:(?:fn|struct|enum|trait|union|mod|type)\b|macro_rules!)\s*(?P<name>\w*)"
        r"|^(?:unsafe\s+)?impl\b(?:\s*<[^>]*>)?\s*(?P<impl>[\w:<>, ]*?)\s*(?:\{|where|$)",
        r"^(?://|#\[|#!\[)",
    ),
    ".java": _language(
        r"^(?:(?:public|protected|private|abstract|final|sealed|static)\s+)*"
        r"(?:class|interface|enum|record|@interface)\s+(?P<name>\w+)",
        _C_COMMENT + r"|^@",
    ),
    ".kt": _language(
        r"^(?:(?:public|internal|private|open|abstract|data|sealed|suspend|inline)\s+)*"
        r"(?:class|interface|object|fun|enum\s+class)\s+(?:<[^>]*>\s*)?(?P<name>[\w.]+)",
        _C_COMMENT + r"|^@",
    ),
    ".c": _C,
    ".h": _C,
    ".cc": _C,
    ".cpp": _C,
    ".hpp": _C,
    ".rb": _language(r"^(?:def|class|module)\s+(?P<name>[\w:.?!]+)", r"^#"),
    ".sh": _language(r"^(?:function\s+)?(?P<name>[\w-]+)\s*\(\)", r"^#"),
    ".bash": _language(r"^(?:function\s+)?(?P<name>[\w-]+)\s*\(\)", r"^#"),
}


_HEAD_MAX = 300
"""Longer lines are not tried as definition heads: real heads are short, and the C
pattern backtracks quadratically on a long line (minified code)."""


def _split_code(lines: list[str], language: _Language) -> list[Section]:
    heads: list[tuple[int, str]] = []
    for index, line in enumerate(lines):
        match = language.head.match(line) if len(line) <= _HEAD_MAX else None
        if match is None:
            continue
        name = next((value for value in match.groups() if value), "") or line.strip()
        start = index
        # Decorators and doc comments directly above belong to the definition, not to
        # the end of the one before it.
        while start > 0 and lines[start - 1] and language.lead.match(lines[start - 1]):
            start -= 1
        heads.append((max(start, heads[-1][0] + 1 if heads else 0), name[:_TITLE_MAX]))
    return _sections(lines, _drop_overlaps(heads))


# --- chunks -----------------------------------------------------------------------------


def chunk(
    sections: Iterable[Section],
    *,
    target_tokens: int = DEFAULT_TARGET_TOKENS,
    overlap_tokens: int = DEFAULT_OVERLAP_TOKENS,
) -> list[Chunk]:
    """Pack sections into chunks of at most ``target_tokens`` (estimated).

    Whole sections that fit are packed together while the sum fits; a section that does
    not fit is cut at line boundaries (a single over-long line, say minified code, at
    character boundaries) with about ``overlap_tokens`` of text carried from the end of
    each piece to the start of the next. Blank lines at the edges of a chunk are dropped
    and blank chunks are never made.

    Args:
        sections: From :func:`split_document`.
        target_tokens: The hard upper bound of a chunk, in estimated tokens.
        overlap_tokens: The overlap between consecutive pieces of one section; must be
            less than half of ``target_tokens`` so every piece makes progress.

    Raises:
        ValueError: The sizes are not positive, or the overlap is too large.
    """
    if target_tokens <= 0 or overlap_tokens < 0 or 2 * overlap_tokens >= target_tokens:
        raise ValueError("need target_tokens > 0 and 0 <= overlap_tokens < target_tokens / 2")
    budget = target_tokens * CHARS_PER_TOKEN
    overlap = overlap_tokens * CHARS_PER_TOKEN
    out: list[Chunk] = []
    packed: list[Section] = []
    packed_size = 0
    for section in sections:
        size = _size(section.lines)
        if size > budget:
            out.extend(_pack(packed))
            packed, packed_size = [], 0
            out.extend(_cut(section, budget, overlap))
        elif packed_size + size + 1 > budget:
            out.extend(_pack(packed))
            packed, packed_size = [section], size
        else:
            packed.append(section)
            packed_size += size + 1
    out.extend(_pack(packed))
    return out


def _size(lines: Iterable[str]) -> int:
    """Characters of the lines joined by newlines (one more per line, a harmless over-count)."""
    return sum(len(line) + 1 for line in lines)


def _pack(sections: list[Section]) -> list[Chunk]:
    if not sections:
        return []
    titles = ", ".join(dict.fromkeys(s.title for s in sections if s.title))
    numbered = [
        (section.first_line + offset, line)
        for section in sections
        for offset, line in enumerate(section.lines)
    ]
    made = _make(titles, numbered)
    return [made] if made else []


def _cut(section: Section, budget: int, overlap: int) -> list[Chunk]:
    """A section bigger than the budget as overlapping pieces of at most ``budget`` chars."""
    # Each piece must fit beside a full overlap, so every chunk adds new text.
    width = budget - overlap - 1
    pieces = [
        (section.first_line + offset, line[start : start + width])
        for offset, line in enumerate(section.lines)
        for start in range(0, max(len(line), 1), width)
    ]
    out: list[Chunk] = []
    start = 0
    while start < len(pieces):
        end, size = start, 0
        while end < len(pieces) and size + len(pieces[end][1]) + 1 <= budget:
            size += len(pieces[end][1]) + 1
            end += 1
        made = _make(section.title, pieces[start:end])
        if made:
            out.append(made)
        if end >= len(pieces):
            break
        back, carried = end, 0
        while back - 1 > start and carried + len(pieces[back - 1][1]) + 1 <= overlap:
            back -= 1
            carried += len(pieces[back][1]) + 1
        start = back
    return out


def _make(title: str, numbered: list[tuple[int, str]]) -> Chunk | None:
    """A chunk of ``(line number, text)`` pairs, blank edges trimmed; None if all blank."""
    kept = [index for index, (_, line) in enumerate(numbered) if line.strip()]
    if not kept:
        return None
    body = numbered[kept[0] : kept[-1] + 1]
    return Chunk(
        title=title[:_TITLE_MAX],
        text="\n".join(line for _, line in body),
        first_line=body[0][0],
        last_line=body[-1][0],
    )
