"""Landing a branch in its base, or throwing it away.

A merge is first made in a scratch worktree cut from the base's tip; only a merge that
went through there moves the base, by a fast-forward of the main working tree (or of
the ref, when the base is not checked out). So the main tree is either merged or
byte-for-byte as it was: never half-merged, never with conflict markers.
"""

from __future__ import annotations

from dataclasses import dataclass

from ateam.worktrees.find import Work
from ateam.worktrees.repo import Repository

__all__ = ["Landed", "discard", "land"]


@dataclass(frozen=True)
class Landed:
    branch: str
    into: str
    commit: str
    """The base's new tip."""
    squashed: bool
    removed: bool
    """The worktree was removed and the branch deleted (not ``keep``)."""


def land(
    repo: Repository,
    work: Work,
    *,
    into: str | None = None,
    squash: bool = False,
    keep: bool = False,
    message: str = "",
) -> Landed:
    """Merge ``work``'s branch into ``into`` (default: its base).

    Refuses, changing nothing, when the worktree of ``work`` has uncommitted changes, when
    the main working tree has uncommitted changes (tracked files), when ``into`` is checked
    out in a worktree other than the main one, or when the merge conflicts (the files in
    ``detail["files"]``). A branch per agent keeps its worktree and branch, moved up to
    the merged base so its next diff starts afresh; a branch per task loses both unless
    ``keep``.

    Raises:
        TreeDirty, MergeConflict, WorkNotFound (``into`` missing), GitError.
    """
    raise NotImplementedError


def discard(repo: Repository, work: Work) -> None:
    """Remove ``work``'s worktree (uncommitted changes lost) and delete its branch."""
    raise NotImplementedError
