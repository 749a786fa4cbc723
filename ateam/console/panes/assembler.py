"""Streamed text (model tokens, tool output) joined into whole lines, one agent at a time."""

from __future__ import annotations

from dataclasses import dataclass, field

from ateam.console.panes.lines import LINE_MAX, Kind, Lines, chop, lines_of


@dataclass
class LineAssembler:
    """One agent's text stream: the line still being written, and where it began."""

    agent: str
    parts: list[str] = field(default_factory=list)
    size: int = 0
    began: int = 0
    """Offset of the first event that contributed to the unfinished line."""
    kind: Kind = Kind.MODEL

    def feed(self, text: str, offset: int, kind: Kind) -> list[Lines]:
        """Add a chunk of text; return the lines it completes."""
        if not self.parts:
            self.began, self.kind = offset, kind
        first_nl = text.find("\n")
        if first_nl < 0:
            self.parts.append(text)
            self.size += len(text)
            if self.size <= LINE_MAX:
                return []
            # No newline for too long: cut the line rather than let it grow.
            pieces = chop("".join(self.parts))
            done = [lines_of(self.agent, self.began, "\n".join(pieces[:-1]), "", self.kind)]
            self._restart(pieces[-1], offset, kind)
            return done
        last_nl = text.rfind("\n")
        head = "".join(self.parts) + text[:first_nl] if self.parts else text[:first_nl]
        if self.began == offset and self.kind == kind:
            done = [lines_of(self.agent, offset, head + text[first_nl:last_nl], "", kind)]
        else:
            done = [Lines(self.agent, self.began, head, 1, "", self.kind)]
            if last_nl > first_nl:
                middle = text[first_nl + 1 : last_nl]
                done.append(lines_of(self.agent, offset, middle, "", kind))
        pieces = chop(text[last_nl + 1 :])
        if len(pieces) > 1:
            done.append(lines_of(self.agent, offset, "\n".join(pieces[:-1]), "", kind))
        self._restart(pieces[-1], offset, kind)
        return done

    def _restart(self, rest: str, offset: int, kind: Kind) -> None:
        self.parts = [rest] if rest else []
        self.size = len(rest)
        self.began = offset
        self.kind = kind

    def take(self) -> Lines | None:
        """The unfinished line, now treated as finished (before a boundary is drawn)."""
        if not self.parts:
            return None
        line = Lines(self.agent, self.began, "".join(self.parts), 1, "", self.kind)
        self._restart("", 0, Kind.MODEL)
        return line

    @property
    def partial(self) -> str:
        return "".join(self.parts)

    @property
    def unsettled(self) -> int | None:
        return self.began if self.parts else None
