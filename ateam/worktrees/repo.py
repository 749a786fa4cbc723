"""A git repository as ateam sees it: where its top is, its base branch, whether it is clean."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ateam.config import CONFIG_DIR
from ateam.errors import DetachedHead, GitError, NoCommitYet, NotARepository, WorkNotFound
from ateam.worktrees._git import Listed, git, output, worktrees

__all__ = ["Repository"]


@dataclass(frozen=True)
class Repository:
    """The repository around a project's root (the main working tree)."""

    root: Path
    """Top level of the project's checkout (``git rev-parse --show-toplevel``): the main
    working tree, or the linked worktree the project is kept in; never an agent's."""

    @classmethod
    def open(cls, path: Path) -> Repository:
        """The repository ``path`` lies in, checked usable for worktrees.

        Raises:
            NotARepository: ``path`` is in no git repository (or git is not installed).
            NoCommitYet: the repository has no commit.
        """
        found = git(path, "rev-parse", "--show-toplevel", check=False)
        top = found.stdout.strip()
        if found.returncode != 0 or not top:
            if "work tree" in found.stderr:  # a bare repository, or inside its .git
                raise NotARepository(f"{path} is in a bare repository: there is no working tree")
            raise NotARepository(f"{path} is not in a git repository")
        root = _owner(Path(top).resolve(), worktrees(path))
        if git(root, "rev-parse", "--verify", "--quiet", "HEAD^{commit}", check=False).returncode:
            raise NoCommitYet(f"the repository at {root} has no commit yet")
        return cls(root=root)

    def current_branch(self) -> str:
        """The branch checked out in the main working tree.

        Raises:
            DetachedHead: HEAD is detached.
        """
        found = git(self.root, "symbolic-ref", "--quiet", "--short", "HEAD", check=False)
        if found.returncode != 0:
            raise DetachedHead(f"HEAD of {self.root} is detached: there is no branch to start from")
        return found.stdout.strip()

    def base_branch(self, configured: str | None = None) -> str:
        """``configured`` if given (it must exist), else :meth:`current_branch`.

        Raises:
            DetachedHead: nothing configured and HEAD detached.
            WorkNotFound: the configured branch does not exist.
        """
        if not configured:
            return self.current_branch()
        if not self.branch_exists(configured):
            raise WorkNotFound(
                f"base branch {configured!r} does not exist in {self.root}",
                detail={"branch": configured},
            )
        return configured

    def branch_exists(self, branch: str) -> bool:
        ref = f"refs/heads/{branch}"
        return git(self.root, "show-ref", "--verify", "--quiet", ref, check=False).returncode == 0

    def tip(self, branch: str) -> str:
        """The full hash of ``branch``'s newest commit.

        Raises:
            GitError: no such branch.
        """
        return output(self.root, "rev-parse", "--verify", f"refs/heads/{branch}")

    def dirty_files(self, tree: Path | None = None) -> list[str]:
        """Tracked files with uncommitted changes (staged or not) in ``tree`` (default: the
        main working tree); untracked files do not count."""
        return _changed(self.root if tree is None else tree, untracked=False)


def _owner(top: Path, listed: list[Listed]) -> Path:
    """The project's own checkout around ``top``: ``top`` itself (the main working tree,
    or a linked worktree a person keeps the project in), unless ``top`` is a worktree
    ateam made in another checkout's ``.ateam/worktrees/`` (an agent's): then that one."""
    for entry in listed:
        owner = entry.path.resolve()
        if not entry.bare and owner != top and top.is_relative_to(owner / CONFIG_DIR / "worktrees"):
            return owner
    return top


def _changed(tree: Path, *, untracked: bool) -> list[str]:
    """Paths ``git status`` reports in ``tree``, untracked ones (every file) if asked."""
    flag = "--untracked-files=all" if untracked else "--untracked-files=no"
    text = output(tree, "status", "--porcelain=v1", "-z", flag)
    paths: list[str] = []
    items = iter(text.split("\0"))
    for item in items:
        if len(item) < 4:
            continue
        paths.append(item[3:])
        if item[0] in "RC":
            next(items, None)  # -z gives a rename's old path as a field of its own
    return paths


def changed_files(tree: Path) -> list[str]:
    """Everything not committed in ``tree``: changed, staged, deleted and untracked files.

    Raises:
        GitError: ``tree`` is not a working tree git can read.
    """
    if not tree.is_dir():
        raise GitError(f"{tree} is not there: its worktree was removed by hand?")
    return _changed(tree, untracked=True)
