"""One turn of an agent's history (SPEC §5.3), as ``history.tail`` returns it.

History lines are JSON on disk; this model is how a reader (the client, a console)
sees one. Fields a newer agent adds are kept as extra; a line that fits nothing is
skipped by the history itself before it ever gets here.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError


class Turn(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

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


def parse_turns(raw: Any) -> list[Turn]:
    """The turns of a ``history.tail`` reply; entries that are not turns are left out."""
    turns: list[Turn] = []
    for entry in raw if isinstance(raw, list) else []:
        try:
            turns.append(Turn.model_validate(entry))
        except ValidationError:
            continue
    return turns
