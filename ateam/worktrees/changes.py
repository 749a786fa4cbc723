"""What a branch changed against its base: committed, and not yet committed in its worktree."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ateam.worktrees.find import Work
from ateam.worktrees.repo import Repository

__all__ = ["DIFF_MAX_BYTES", "FileChange", "WorkDiff", "diff_of"]

DIFF_MAX_BYTES = 256 * 1024
"""The unified diff kept by default; the rest is counted in ``omitted_bytes``."""


@dataclass(frozen=True)
class FileChange:
    path: str
    status: str
    """``A`` added, ``M`` modified, ``D`` deleted, ``R`` renamed (git's letters)."""
    insertions: int
    deletions: int
    """Both 0 for a binary file (``binary`` set)."""
    binary: bool = False


@dataclass(frozen=True)
class WorkDiff:
    """A branch's changes against the point where it left its base."""

    branch: str
    base: str
    merge_base: str
    """The commit the diff is taken from (``git merge-base BASE BRANCH``)."""
    files: tuple[FileChange, ...]
    diff: str
    """The unified diff (untracked files of the worktree included), at most ``max_bytes``."""
    omitted_bytes: int = 0
    """How much of the diff was left out (0: all of it is here)."""
    uncommitted: bool = False
    """Part of it is not committed yet (changes in the worktree)."""
    task_id: str | None = None
    agent: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def insertions(self) -> int:
        return sum(f.insertions for f in self.files)

    @property
    def deletions(self) -> int:
        return sum(f.deletions for f in self.files)

    def stat_line(self) -> str:
        """``3 files +10 -2``."""
        raise NotImplementedError

    def note(self) -> str:
        """What was left out, for people: ``""`` or ``(… 12345 more bytes of diff not shown)``."""
        raise NotImplementedError

    def to_wire(self) -> dict[str, Any]:
        """``{branch, base, merge_base, task_id, agent, files: [{path, status, insertions,
        deletions, binary}], stat, diff, omitted_bytes, uncommitted, note}``."""
        raise NotImplementedError


def diff_of(repo: Repository, work: Work, *, max_bytes: int = DIFF_MAX_BYTES) -> WorkDiff:
    """``work``'s changes against its base's merge base: the branch's commits plus, when it
    has a worktree, what is changed or new there and not committed (read through a
    private index, so the worktree's own index is not touched).

    Raises:
        GitError: git refused.
    """
    raise NotImplementedError
