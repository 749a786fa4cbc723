"""An agent's work on its own git branch and worktree (issue 27): made, committed, shown,
landed or thrown away.

Git is driven as a command (``git -C DIR ...``), never through a library, so what ateam
does is exactly what a person would type, and a repository ateam touched stays an
ordinary repository. Everything here is synchronous and local to the filesystem; the
agent calls it in a thread, the front ends through :mod:`ateam.client.work`.

- :mod:`.repo`: a repository as ateam sees it (root, base branch, dirty or not).
- :mod:`.trees`: a worktree and branch per agent (``ateam/NAME``) or per board task
  (``ateam/NAME/TASK-ID``) under ``.ateam/worktrees/``; made or reused, committed, removed.
- :mod:`.find`: which branch a ``NAME`` or a ``TASK-ID`` names.
- :mod:`.changes`: what a branch changed against its base, committed and not, bounded.
- :mod:`.landing`: a merge tried first in a scratch worktree, so the main tree is
  either merged or untouched.
"""

from __future__ import annotations

from ateam.worktrees.changes import FileChange, WorkDiff, diff_of
from ateam.worktrees.find import Work, find_work, list_work
from ateam.worktrees.landing import Landed, discard, land
from ateam.worktrees.repo import Repository
from ateam.worktrees.trees import (
    Worktree,
    agent_branch,
    commit_all,
    ensure_worktree,
    remove_worktree,
    task_branch,
    worktree_path,
)

__all__ = [
    "FileChange",
    "Landed",
    "Repository",
    "Work",
    "WorkDiff",
    "Worktree",
    "agent_branch",
    "commit_all",
    "diff_of",
    "discard",
    "ensure_worktree",
    "find_work",
    "land",
    "list_work",
    "remove_worktree",
    "task_branch",
    "worktree_path",
]
