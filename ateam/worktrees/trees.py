"""A worktree and branch per agent or per board task, under ``.ateam/worktrees/``.

Names mirror each other: branch ``ateam/NAME`` lives in ``.ateam/worktrees/NAME``, branch
``ateam/NAME/TASK-ID`` in ``.ateam/worktrees/NAME/TASK-ID``. The base a branch was cut
from is kept in the repository's own config (``branch.<branch>.ateambase``), so any
front end finds it with git alone, and a branch without it was not made by ateam.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ateam.worktrees.repo import Repository

__all__ = [
    "Worktree",
    "agent_branch",
    "commit_all",
    "ensure_worktree",
    "remove_worktree",
    "task_branch",
    "worktree_path",
]


@dataclass(frozen=True)
class Worktree:
    """A worktree ateam made (or found again) for an agent or a task."""

    path: Path
    branch: str
    base: str
    reused: bool
    """Found already there (an agent restarted mid-task), not made now."""


def agent_branch(name: str) -> str:
    """``ateam/NAME``."""
    raise NotImplementedError


def task_branch(name: str, task_id: str) -> str:
    """``ateam/NAME/TASK-ID``."""
    raise NotImplementedError


def worktree_path(root: Path, branch: str) -> Path:
    """``ROOT/.ateam/worktrees/<branch without ateam/>``."""
    raise NotImplementedError


def ensure_worktree(repo: Repository, branch: str, base: str) -> Worktree:
    """The worktree of ``branch`` at :func:`worktree_path`, made from ``base``'s tip if new.

    Reused, not made twice, when the directory is already that branch's worktree, or
    when the branch exists (made by ateam) without one. Makes ``.ateam/worktrees/`` with
    a ``.gitignore`` of ``*`` so the main tree's ``git status`` stays clean. Nothing
    half-made is left on failure: no branch without its worktree, no stray directory.

    Raises:
        BranchExists: the branch exists but ateam did not make it, is checked out in
            another worktree, or its name is taken by a branch ``ateam/NAME``.
        GitError: git refused (its last line in the message).
    """
    raise NotImplementedError


def commit_all(tree: Path, message: str, *, author: str, email: str) -> str | None:
    """Commit everything in ``tree`` (new, changed, deleted files; hooks not run).

    Returns:
        The new commit's full hash, or ``None`` when there was nothing to commit.
    """
    raise NotImplementedError


def remove_worktree(repo: Repository, branch: str, *, delete_branch: bool) -> None:
    """Remove ``branch``'s worktree (with uncommitted changes, which are lost) and,
    if asked, the branch and its ``ateambase`` config. Missing pieces are not an error."""
    raise NotImplementedError
