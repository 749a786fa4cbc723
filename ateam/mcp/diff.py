"""MCP ``agent_diff`` (issue 27): a branch's changes, bounded to fit a model's context."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from ateam.client import work_diff

__all__ = ["MCP_DIFF_MAX_BYTES", "DiffBytes", "WorkTarget", "agent_diff_of"]

MCP_DIFF_MAX_BYTES = 64 * 1024
"""The diff an answer carries by default: about what ``agent_tail`` sends in one page."""
MCP_DIFF_CEILING = 256 * 1024

WorkTarget = Annotated[
    str,
    Field(
        description="An agent (NAME or PROJECT/NAME: its branch ateam/NAME) or a board "
        "task id (t-…: its branch ateam/NAME/t-…)."
    ),
]
DiffBytes = Annotated[
    int | None,
    Field(
        description=f"At most this many bytes of diff (default {MCP_DIFF_MAX_BYTES}, "
        f"at most {MCP_DIFF_CEILING}).",
        ge=0,
        le=MCP_DIFF_CEILING,
    ),
]


async def agent_diff_of(target: str, project: str | None, max_bytes: int | None) -> dict[str, Any]:
    """``target``'s diff as :meth:`~ateam.worktrees.WorkDiff.to_wire` gives it.

    A ``PROJECT/NAME`` names the project too; else ``project``, else the one around the
    server's working directory.
    """
    named, slash, name = target.partition("/")
    if slash:
        project, target = named, name
    limit = MCP_DIFF_MAX_BYTES if max_bytes is None else max_bytes
    found = await work_diff(target, project=project, max_bytes=limit)
    return found.to_wire()
