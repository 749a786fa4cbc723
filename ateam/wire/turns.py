"""One turn of an agent's history (SPEC §5.3): the line on disk and the ``history.tail`` row.

The agent writes each turn as this model and reads its history back as it; a client
reads a ``history.tail`` reply as the same model. Fields a newer agent adds are kept as
extra, and :meth:`Turn.line` writes exactly the fields a turn was given, so an old line
read and written again stays as it was. A line that fits nothing is skipped by the
reader, never turned into an error.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from ateam._json import JsonObject

__all__ = ["ToolCallRecord", "Turn", "parse_turn", "parse_turns"]


class ToolCallRecord(BaseModel):
    """One tool call an assistant turn asked for, as recorded with it."""

    # defer_build: built at the first turn read, not at import (issue 28 §2): an agent
    # with no history reads none before it serves.
    model_config = ConfigDict(extra="allow", frozen=True, defer_build=True)

    id: str = ""
    name: str = ""
    args: JsonObject = {}

    @field_validator("args", mode="before")
    @classmethod
    def _no_args(cls, value: object) -> object:
        # Written as null by some models for a call without arguments.
        return {} if value is None else value


class Turn(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True, defer_build=True)

    ts: float = 0.0
    role: str = "?"
    """``user``, ``assistant``, ``tool`` or ``system``."""
    source: str = ""
    content: str = ""
    tokens_in: int = 0
    tokens_out: int = 0
    model: str | None = None
    task_id: str | None = None
    trace_id: str | None = None
    fence: int | None = None
    tool_call_id: str | None = None
    name: str | None = None
    ok: bool | None = None
    tool_calls: list[ToolCallRecord] = []
    """The calls an assistant turn asked for, in order."""
    final: bool = False
    """An assistant turn that answered the task: no tool calls, no error, no interruption."""

    def line(self) -> JsonObject:
        """The turn as its history line holds it: the fields it was given, extras included.

        Defaults it was not given stay out, so the line is as short as the writer made it
        and an older agent reads it as before.
        """
        return self.model_dump(mode="json", exclude_unset=True)

    def with_fields(self, **fields: object) -> Turn:
        """A copy with ``fields`` set (and written by :meth:`line`), checked like a new turn."""
        return Turn.model_validate({**self.line(), **fields})


def parse_turn(raw: Mapping[str, object]) -> Turn | None:
    """``raw`` (one decoded history line) as a turn; ``None`` if it does not fit one."""
    try:
        return Turn.model_validate(raw)
    except ValidationError:
        return None


def parse_turns(raw: object) -> list[Turn]:
    """The turns of a ``history.tail`` reply; entries that are not turns are left out."""
    turns: list[Turn] = []
    for entry in raw if isinstance(raw, list) else []:
        turn = parse_turn(entry) if isinstance(entry, Mapping) else None
        if turn is not None:
            turns.append(turn)
    return turns
