"""What an agent's or a board task's own branch holds, as the board records it (issue 27).

Written by the agent at the end of a task that ran in a worktree (``worktree: agent|task``
in ``agent.yaml``) into the board task's ``work`` field, read by ``tasks ls``, ``/tasks``
and the MCP board tools. Below the bus: the agent that writes it and the front ends that
read it share this one shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ateam.errors import BadRequest

__all__ = ["WorkRecord"]


@dataclass(frozen=True)
class WorkRecord:
    """A branch of an agent's work: where it is, what it was cut from, what it changed."""

    branch: str
    """``ateam/NAME`` (a worktree per agent) or ``ateam/NAME/TASK-ID`` (per task)."""
    base: str
    """The branch it was cut from and merges back into."""
    worktree: str = ""
    """Absolute path of its worktree; empty once the worktree is removed."""
    commit: str = ""
    """The commit made at the task's end (full hash); empty when nothing was committed."""
    files: int = 0
    """Files changed against the base (committed and not)."""
    insertions: int = 0
    deletions: int = 0

    def stat_line(self) -> str:
        """``3 files +10 -2``, as ``git diff --shortstat`` would count them."""
        noun = "file" if self.files == 1 else "files"
        return f"{self.files} {noun} +{self.insertions} -{self.deletions}"

    def summary(self) -> str:
        """One line for a table: branch, short commit, diffstat."""
        commit = f" @{self.commit[:10]}" if self.commit else " (uncommitted)"
        return f"{self.branch}{commit} {self.stat_line()}"

    def to_wire(self) -> dict[str, Any]:
        return {
            "branch": self.branch,
            "base": self.base,
            "worktree": self.worktree,
            "commit": self.commit,
            "files": self.files,
            "insertions": self.insertions,
            "deletions": self.deletions,
        }

    @classmethod
    def from_wire(cls, data: object) -> WorkRecord:
        """Rebuild a record; unknown fields are ignored.

        Raises:
            BadRequest: not a map, or ``branch``/``base`` missing.
        """
        if not isinstance(data, dict):
            raise BadRequest(f"malformed work record: {type(data).__name__}, not a map")
        try:
            return cls(
                branch=str(data["branch"]),
                base=str(data["base"]),
                worktree=str(data.get("worktree") or ""),
                commit=str(data.get("commit") or ""),
                files=int(data.get("files") or 0),
                insertions=int(data.get("insertions") or 0),
                deletions=int(data.get("deletions") or 0),
            )
        except (KeyError, ValueError, TypeError) as exc:
            raise BadRequest(f"malformed work record: {type(exc).__name__}: {exc}") from exc
