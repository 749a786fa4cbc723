"""A worktree and branch per agent or per board task, under ``.ateam/worktrees/``.

Names mirror each other: branch ``ateam/NAME`` lives in ``.ateam/worktrees/NAME``, branch
``ateam/NAME/TASK-ID`` in ``.ateam/worktrees/NAME/TASK-ID``. The base a branch was cut
from is kept in the repository's own config (``branch.<branch>.ateambase``), so any
front end finds it with git alone, and a branch without it was not made by ateam.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ateam.config import CONFIG_DIR
from ateam.errors import BranchExists, GitError
from ateam.worktrees._git import Listed, git, output, worktrees
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


BRANCH_PREFIX = "ateam/"
BASE_KEY = "ateambase"
"""``branch.<branch>.ateambase``: the base it was cut from, and the mark of an ateam branch."""
WORKTREES_DIR = "worktrees"


def agent_branch(name: str) -> str:
    """``ateam/NAME``."""
    return f"{BRANCH_PREFIX}{name}"


def task_branch(name: str, task_id: str) -> str:
    """``ateam/NAME/TASK-ID``."""
    return f"{BRANCH_PREFIX}{name}/{task_id}"


def worktrees_root(root: Path) -> Path:
    """``ROOT/.ateam/worktrees``: where every worktree ateam makes lives."""
    return root / CONFIG_DIR / WORKTREES_DIR


def worktree_path(root: Path, branch: str) -> Path:
    """``ROOT/.ateam/worktrees/<branch without ateam/>``."""
    return worktrees_root(root) / branch.removeprefix(BRANCH_PREFIX)


def recorded_base(repo: Repository, branch: str) -> str | None:
    """The ``ateambase`` of ``branch``; ``None`` when ateam did not make it."""
    found = git(repo.root, "config", "--get", f"branch.{branch}.{BASE_KEY}", check=False)
    if found.returncode != 0:
        return None
    return found.stdout.strip() or None


def worktree_of(repo: Repository, branch: str) -> Listed | None:
    """Where ``branch`` is checked out, if anywhere."""
    return next((w for w in worktrees(repo.root) if w.branch == branch), None)


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
    path = worktree_path(repo.root, branch)
    # A worktree whose directory is gone (removed by hand, a crash mid-removal) would
    # still hold its branch: forget it first.
    git(repo.root, "worktree", "prune")
    if repo.branch_exists(branch):
        return _reuse(repo, branch, path)
    _refuse_blocked(repo, branch)
    with _undo_on_failure(repo, branch, path):
        _ignore_worktrees(repo.root)
        # The mark first: a kill between the two leaves a branch ateam still knows as its own.
        git(repo.root, "config", f"branch.{branch}.{BASE_KEY}", base)
        # A tag of the base's name must not win over the branch (git looks at tags first).
        start = f"refs/heads/{base}" if repo.branch_exists(base) else base
        git(repo.root, "worktree", "add", "--no-track", "-b", branch, str(path), start)
    return Worktree(path=path, branch=branch, base=base, reused=False)


def _reuse(repo: Repository, branch: str, path: Path) -> Worktree:
    recorded = recorded_base(repo, branch)
    if recorded is None:
        raise BranchExists(
            f"branch {branch} already exists and ateam did not make it",
            detail={"branch": branch},
        )
    listed = worktree_of(repo, branch)
    if listed is not None and listed.path.resolve() == path.resolve():
        _finish_checkout(path)
        return Worktree(path=path, branch=branch, base=recorded, reused=True)
    if listed is not None:
        raise BranchExists(
            f"branch {branch} is checked out in {listed.path}, not in {path}",
            detail={"branch": branch, "worktree": str(listed.path)},
        )
    # The branch outlived its worktree (kept after a merge, or removed by hand): its
    # commits are the work so far, so it gets a worktree again rather than a new branch.
    with _undo_on_failure(repo, branch, path):
        _ignore_worktrees(repo.root)
        git(repo.root, "worktree", "add", str(path), branch)
    return Worktree(path=path, branch=branch, base=recorded, reused=True)


def _finish_checkout(path: Path) -> None:
    """A worktree whose ``git worktree add`` was killed while it checked out has no index
    yet (git writes it last) and only some of its files: its commit would delete the rest.
    Its checkout is done now; nothing of the agent's is there to lose, as no task ran in it.
    """
    index = Path(output(path, "rev-parse", "--path-format=absolute", "--git-path", "index"))
    if index.is_file():
        return
    git(path, "-c", "core.hooksPath=/dev/null", "reset", "--hard", "--quiet")
    locked = index.with_name("locked")  # git's mark of a worktree still being made
    with contextlib.suppress(OSError):
        if locked.read_text(encoding="utf-8").strip() == "initializing":
            locked.unlink()


def _refuse_blocked(repo: Repository, branch: str) -> None:
    """Git keeps refs as files: ``ateam/bob`` and ``ateam/bob/t-1`` cannot both exist."""
    names = output(repo.root, "for-each-ref", "--format=%(refname)", "refs/heads/").split("\n")
    for name in (n.removeprefix("refs/heads/") for n in names if n):
        if name.startswith(f"{branch}/") or branch.startswith(f"{name}/"):
            raise BranchExists(
                f"branch {branch} cannot be made: branch {name} takes its name "
                "(git cannot hold a branch and a folder of branches of one name)",
                detail={"branch": branch, "blocked_by": name},
            )


def _ignore_worktrees(root: Path) -> None:
    directory = worktrees_root(root)
    ignore = directory / ".gitignore"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if not ignore.exists():
            # The worktrees sit inside the main checkout: keep them out of its `git status`.
            # The directory and this file stay even when nothing else does: ignored,
            # harmless, and another agent may be adding its worktree beside ours just now.
            ignore.write_text("*\n", encoding="utf-8")
    except OSError as exc:
        raise GitError(f"cannot make {ignore}: {exc.strerror}") from None


@contextlib.contextmanager
def _undo_on_failure(repo: Repository, branch: str, path: Path) -> Iterator[None]:
    """On an exception, take back what the block made: the branch, its config, the
    worktree and the directories made for it; what was there before stays."""
    had_branch = repo.branch_exists(branch)
    had_config = recorded_base(repo, branch) is not None
    made_dirs = [d for d in (path, *path.parents) if not d.exists()]
    try:
        yield
    except BaseException:
        # The first failure is the one to report; a second one while undoing is not.
        with contextlib.suppress(GitError):
            _undo(repo, branch, path, had_branch=had_branch, had_config=had_config)
        for directory in made_dirs:  # deepest first; a directory someone filled stays
            with contextlib.suppress(OSError):
                directory.rmdir()
        raise


def _undo(repo: Repository, branch: str, path: Path, *, had_branch: bool, had_config: bool) -> None:
    listed = worktree_of(repo, branch)
    if listed is not None and listed.path.resolve() == path.resolve():
        git(repo.root, "worktree", "remove", "--force", "--force", str(path), check=False)
    git(repo.root, "worktree", "prune", check=False)
    if not had_branch and repo.branch_exists(branch):
        git(repo.root, "branch", "-D", branch, check=False)
    if not had_config:
        _forget_branch_config(repo, branch)


def _forget_branch_config(repo: Repository, branch: str) -> None:
    git(repo.root, "config", "--unset", f"branch.{branch}.{BASE_KEY}", check=False)
    prefix = f"branch.{branch}.".lower()
    listed = git(repo.root, "config", "--local", "--name-only", "--list", check=False).stdout
    if not any(key.lower().startswith(prefix) for key in listed.splitlines()):
        # An empty [branch "…"] header would be all that is left of it.
        git(repo.root, "config", "--remove-section", f"branch.{branch}", check=False)


def commit_all(tree: Path, message: str, *, author: str, email: str) -> str | None:
    """Commit everything in ``tree`` (new, changed, deleted files; hooks not run).

    Returns:
        The new commit's full hash, or ``None`` when there was nothing to commit.
    """
    _check_top(tree)
    git(tree, "add", "-A")
    if git(tree, "diff", "--cached", "--quiet", check=False).returncode == 0:
        return None
    # The identity comes from the caller, so a repository with no user.name still commits,
    # and the commit says which agent made it. Signing is off: an agent holds no key, and
    # a passphrase prompt with nobody to answer it would only hang.
    who = {
        "GIT_AUTHOR_NAME": author,
        "GIT_AUTHOR_EMAIL": email,
        "GIT_COMMITTER_NAME": author,
        "GIT_COMMITTER_EMAIL": email,
    }
    text = message.replace("\0", "").strip() or f"Work of {author}"  # a NUL ends a C string
    git(tree, "-c", "commit.gpgSign=false", "commit", "--no-verify", "-q", "-m", text, env=who)
    return output(tree, "rev-parse", "HEAD")


def is_own_top(tree: Path) -> bool:
    """``tree`` is the top of a checkout of its own. Without its ``.git`` file (a task's
    ``rm -rf .git``) git run there finds the main repository around it instead."""
    found = git(tree, "rev-parse", "--show-toplevel", check=False)
    top = found.stdout.strip()
    return found.returncode == 0 and bool(top) and Path(top).resolve() == tree.resolve()


def _check_top(tree: Path) -> None:
    """Raises GitError unless :func:`is_own_top`: a commit there would be the main tree's."""
    if not is_own_top(tree):
        raise GitError(f"{tree} is not a worktree's top any more (its .git is gone?)")


def remove_worktree(repo: Repository, branch: str, *, delete_branch: bool) -> None:
    """Remove ``branch``'s worktree (with uncommitted changes, which are lost) and,
    if asked, the branch and its ``ateambase`` config. Missing pieces are not an error."""
    listed = worktree_of(repo, branch)
    if listed is not None and listed.path.resolve() != repo.root:
        # Twice --force: a locked worktree goes too; the work in it is already given up.
        git(repo.root, "worktree", "remove", "--force", "--force", str(listed.path))
        _drop_empty_parents(repo.root, listed.path)
    git(repo.root, "worktree", "prune")
    if not delete_branch:
        return
    if repo.branch_exists(branch):
        # `git branch -D` drops the branch's config section too.
        git(repo.root, "branch", "-D", branch)
    else:
        _forget_branch_config(repo, branch)


def _drop_empty_parents(root: Path, path: Path) -> None:
    """``.ateam/worktrees/NAME`` once its last task's worktree is gone."""
    top = worktrees_root(root).resolve()
    for directory in path.resolve().parents:
        if directory == top or top not in directory.parents:
            return
        try:
            os.rmdir(directory)
        except OSError:
            return
