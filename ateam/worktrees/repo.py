"""A git repository as ateam sees it: where its top is, its base branch, whether it is clean."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["Repository"]


@dataclass(frozen=True)
class Repository:
    """The repository around a project's root (the main working tree)."""

    root: Path
    """Top level of the main working tree (``git rev-parse --show-toplevel``)."""

    @classmethod
    def open(cls, path: Path) -> Repository:
        """The repository ``path`` lies in, checked usable for worktrees.

        Raises:
            NotARepository: ``path`` is in no git repository (or git is not installed).
            NoCommitYet: the repository has no commit.
        """
        raise NotImplementedError

    def current_branch(self) -> str:
        """The branch checked out in the main working tree.

        Raises:
            DetachedHead: HEAD is detached.
        """
        raise NotImplementedError

    def base_branch(self, configured: str | None = None) -> str:
        """``configured`` if given (it must exist), else :meth:`current_branch`.

        Raises:
            DetachedHead: nothing configured and HEAD detached.
            WorkNotFound: the configured branch does not exist.
        """
        raise NotImplementedError

    def branch_exists(self, branch: str) -> bool:
        raise NotImplementedError

    def dirty_files(self, tree: Path | None = None) -> list[str]:
        """Tracked files with uncommitted changes (staged or not) in ``tree`` (default: the
        main working tree); untracked files do not count."""
        raise NotImplementedError
