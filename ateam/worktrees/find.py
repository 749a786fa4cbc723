"""Which branch a ``NAME`` or a ``TASK-ID`` names, found in the repository alone."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ateam.worktrees.repo import Repository

__all__ = ["Work", "find_work", "list_work"]


@dataclass(frozen=True)
class Work:
    """An ateam branch: whose, which task, where its worktree is."""

    branch: str
    base: str
    agent: str
    """The agent's name (``NAME`` of ``ateam/NAME[/TASK-ID]``)."""
    task_id: str | None
    """The board task, for a branch per task."""
    worktree: Path | None
    """Its worktree, ``None`` when it has none (removed, or kept with the branch only)."""


def list_work(repo: Repository) -> list[Work]:
    """Every branch ateam made in ``repo`` (those with an ``ateambase``), sorted by name."""
    raise NotImplementedError


def find_work(repo: Repository, target: str) -> Work:
    """The branch ``target`` names: a task id (``t-…``, its branch ``ateam/*/t-…``) or an
    agent name (its branch ``ateam/NAME``).

    Raises:
        WorkNotFound: no such branch; for an agent that works a branch per task, the
            message lists its task branches to choose from.
        UsageError: ``target`` is not a valid agent name or task id.
    """
    raise NotImplementedError
