"""A teammate's notice (issue 26): "NAME finished / failed board task T" or "NAME is idle".

A notice is news for the agents that asked for it (``team: {notify: [...]}`` in the
sender's ``agent.yaml``, and a board task's creator for that task's end). It is not a
task: it goes into the receiver's next model context and the consoles show it. The
shape lives here, below the bus, because the sender, the bus store
(:mod:`ateam.bus.notices`), the receiver's context and the consoles read the same one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ateam.errors import BadRequest

__all__ = ["TEXT_MAX_CHARS", "NoticeKind", "TeamNotice", "notice_line", "one_line"]

TEXT_MAX_CHARS = 200
"""A notice carries a one-line result or error of at most this many characters."""


class NoticeKind(StrEnum):
    """What happened to the teammate."""

    FINISHED = "finished"
    FAILED = "failed"
    IDLE = "idle"


def one_line(text: str, limit: int = TEXT_MAX_CHARS) -> str:
    """``text`` on one line (runs of whitespace become one space), cut to ``limit``."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@dataclass(frozen=True)
class TeamNotice:
    """One notice, as stored on the bus and as every reader gets it."""

    id: str
    sender: str
    """The agent id the notice is about (``project/name``)."""
    kind: NoticeKind
    at: float
    """When it was sent (the sender's clock, seconds since the epoch)."""
    board_task: str = ""
    """The board task id, for ``finished`` and ``failed``."""
    title: str = ""
    text: str = ""
    """The one-line result (finished) or error (failed), already redacted."""
    raw: bytes = field(default=b"", compare=False, repr=False)
    """The stored bytes it was read from: what removes it from the store again."""

    def to_wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "sender": self.sender,
            "kind": str(self.kind),
            "at": self.at,
            "board_task": self.board_task,
            "title": self.title,
            "text": self.text,
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any], raw: bytes = b"") -> TeamNotice:
        """Rebuild a notice; unknown fields (newer senders) are ignored.

        Raises:
            BadRequest: a required field is missing or malformed.
        """
        try:
            return cls(
                id=str(data["id"]),
                sender=str(data["sender"]),
                kind=NoticeKind(data["kind"]),
                at=float(data["at"]),
                board_task=str(data.get("board_task") or ""),
                title=str(data.get("title") or ""),
                text=str(data.get("text") or ""),
                raw=raw,
            )
        except (KeyError, ValueError, TypeError) as exc:
            raise BadRequest(f"malformed team notice: {type(exc).__name__}: {exc}") from exc

    def line(self) -> str:
        """The notice in one line, for a model's context and a console alike."""
        return notice_line(self.sender, self.kind, self.board_task, self.title, self.text)


def notice_line(sender: str, kind: str, board_task: str, title: str, text: str) -> str:
    """What a notice says, from its fields (a console has them from an event)."""
    if kind == NoticeKind.IDLE:
        return f"{sender} is idle: nothing queued"
    task = f"board task {board_task}" + (f" ({title})" if title else "")
    said = f": {text}" if text else ""
    return f"{sender} {kind} {task}{said}"
