"""Landing a branch in its base, or throwing it away.

A merge is first made in a scratch worktree cut from the base's tip; only a merge that
went through there moves the base, by a fast-forward of the main working tree (or of
the ref, when the base is not checked out). So the main tree is either merged or
byte-for-byte as it was: never half-merged, never with conflict markers.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ateam.errors import GitError, MergeConflict, TreeDirty, UsageError, WorkNotFound
from ateam.worktrees._git import Listed, git, last_line, output, worktrees
from ateam.worktrees.find import Work
from ateam.worktrees.repo import Repository, changed_files
from ateam.worktrees.trees import remove_worktree

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

    The merge runs without hooks: the checks belong to the ``task_done`` gate, which ran
    in the task's worktree on exactly this change.

    Raises:
        TreeDirty, MergeConflict, WorkNotFound (``into`` missing), GitError.
    """
    target = into or work.base
    if target == work.branch:
        raise UsageError(f"{work.branch} cannot land in itself; name another branch")
    if not repo.branch_exists(work.branch):
        raise WorkNotFound(f"branch {work.branch} does not exist", detail={"branch": work.branch})
    if not repo.branch_exists(target):
        raise WorkNotFound(f"branch {target} does not exist", detail={"branch": target})
    # A worktree whose directory a person removed holds nothing uncommitted any more:
    # forgotten first, so its branch's commits land rather than being refused for it.
    git(repo.root, "worktree", "prune")
    listed = worktrees(repo.root)
    _refuse_unready(repo, work, target, listed)
    old = output(repo.root, "rev-parse", "--verify", f"refs/heads/{target}^{{commit}}")
    text = message.replace("\0", "").strip() or _default_message(work, target)  # task titles
    with _scratch(repo, old) as scratch:
        new = _merge(scratch, work, target, text, squash=squash)
        if new != old:
            _advance(repo, target, old, new, in_main=_in_root(repo, listed) == target)
    removed = work.task_id is not None and not keep
    if removed:
        remove_worktree(repo, work.branch, delete_branch=True)
    elif work.task_id is None and target == work.base:
        _catch_up(repo, work, new)
    return Landed(branch=work.branch, into=target, commit=new, squashed=squash, removed=removed)


_NO_HOOKS = ("-c", "core.hooksPath=/dev/null")
"""The scratch worktree is ateam's own: a checkout or merge hook there would run on a
tree nobody will see. The final fast-forward of the main tree runs its hooks as usual."""


def _default_message(work: Work, into: str) -> str:
    task = f" (task {work.task_id})" if work.task_id else ""
    return f"Merge {work.branch} into {into}{task}"


def _refuse_unready(repo: Repository, work: Work, into: str, listed: list[Listed]) -> None:
    """Every reason to change nothing, checked before anything is changed."""
    own = next((w for w in listed if w.branch == work.branch), None)
    if own is not None and own.path.resolve() != repo.root:
        unsaved = changed_files(own.path)
        if unsaved:
            raise TreeDirty(
                f"{work.branch} has changes not committed in {own.path}: {_some(unsaved)}",
                detail={"files": unsaved, "worktree": str(own.path)},
            )
    dirty = repo.dirty_files()
    if dirty:
        raise TreeDirty(
            f"the main working tree {repo.root} has uncommitted changes: {_some(dirty)}",
            detail={"files": dirty, "worktree": str(repo.root)},
        )
    holder = next((w for w in listed if w.branch == into and w.path.resolve() != repo.root), None)
    if holder is not None:
        raise GitError(
            f"{into} is checked out in {holder.path}, not in the main working tree; "
            "land it from there, or check it out in the main tree",
            detail={"branch": into, "worktree": str(holder.path)},
        )


def _in_root(repo: Repository, listed: list[Listed]) -> str | None:
    """The branch checked out in the project's checkout (``None``: detached)."""
    return next((w.branch for w in listed if w.path.resolve() == repo.root), None)


def _some(files: list[str], shown: int = 5) -> str:
    more = f" and {len(files) - shown} more" if len(files) > shown else ""
    return ", ".join(files[:shown]) + more


@contextlib.contextmanager
def _scratch(repo: Repository, commit: str) -> Iterator[Path]:
    """A detached worktree at ``commit`` in a temporary directory, gone afterwards
    whatever happened (and its entry pruned, so no trace is left in the repository)."""
    holder = Path(tempfile.mkdtemp(prefix="ateam-land-"))
    path = holder / "tree"
    try:
        git(repo.root, *_NO_HOOKS, "worktree", "add", "--detach", "--quiet", str(path), commit)
        yield path
    finally:
        git(repo.root, "worktree", "remove", "--force", "--force", str(path), check=False)
        shutil.rmtree(holder, ignore_errors=True)
        git(repo.root, "worktree", "prune", check=False)


def _merge(scratch: Path, work: Work, into: str, message: str, *, squash: bool) -> str:
    """Merge in the scratch worktree; its new ``HEAD``.

    Raises:
        MergeConflict: the files that conflict; the scratch is thrown away as it is.
    """
    ref = f"refs/heads/{work.branch}"  # never a tag of the same name
    if squash:
        # --ff: a user's merge.ff=false is --no-ff, which git refuses with --squash.
        tried = git(scratch, *_NO_HOOKS, "merge", "--squash", "--ff", ref, check=False)
    else:
        args = ("merge", "--no-ff", "--no-edit", "-m", message, ref)
        tried = git(scratch, *_NO_HOOKS, *args, check=False)
    if tried.returncode != 0:
        conflicted = output(scratch, "diff", "--name-only", "--diff-filter=U").splitlines()
        if not conflicted:
            said = last_line(tried.stderr or tried.stdout)
            raise GitError(f"git merge failed: {said}", detail={"branch": work.branch})
        git(scratch, "merge", "--abort", check=False)
        raise MergeConflict(
            f"{work.branch} does not merge cleanly into {into}; conflicts in {_some(conflicted)}",
            detail={"files": conflicted, "branch": work.branch, "into": into},
        )
    if squash and git(scratch, "diff", "--cached", "--quiet", check=False).returncode != 0:
        git(scratch, *_NO_HOOKS, "commit", "-q", "-m", message)
    return output(scratch, "rev-parse", "HEAD")


def _advance(repo: Repository, into: str, old: str, new: str, *, in_main: bool) -> None:
    """Move ``into`` from ``old`` to the merge ``new``: only a fast-forward, so the main
    tree gets the merge whole or not at all."""
    if in_main:
        _refuse_overwrite(repo, old, new)
        git(repo.root, "merge", "--ff-only", "--quiet", new)
    else:
        # With OLD given, git refuses if the branch moved since the merge began.
        git(
            repo.root,
            "update-ref",
            "-m",
            f"ateam: land into {into}",
            f"refs/heads/{into}",
            new,
            old,
        )


def _refuse_overwrite(repo: Repository, old: str, new: str) -> None:
    """Untracked files of the main tree that the merge would bring in tracked: git would
    refuse the fast-forward anyway, but with "Aborting" as its last word."""
    added = output(repo.root, "diff", "--name-only", "-z", "--diff-filter=A", old, new)
    there = [p for p in added.split("\0") if p and os.path.lexists(repo.root / p)]
    if not there:
        return
    listed = output(repo.root, "ls-files", "-z", "--others", "--exclude-standard", "--", *there)
    untracked = [p for p in listed.split("\0") if p]
    if untracked:
        raise TreeDirty(
            f"untracked files in the main working tree {repo.root} would be overwritten: "
            f"{_some(untracked)}",
            detail={"files": untracked, "worktree": str(repo.root)},
        )


def _catch_up(repo: Repository, work: Work, tip: str) -> None:
    """Move a branch per agent to its base's new tip, so its next diff starts empty.

    Only when nothing is left uncommitted in its worktree: the agent may be working."""
    own = next((w for w in worktrees(repo.root) if w.branch == work.branch), None)
    if own is None:
        git(repo.root, "branch", "--force", work.branch, tip)
        return
    if changed_files(own.path):
        return
    # After a squash the branch is no ancestor of the tip: --keep resets, safely.
    if git(own.path, "merge", "--ff-only", "--quiet", tip, check=False).returncode != 0:
        git(own.path, "reset", "--keep", "--quiet", tip)


def discard(repo: Repository, work: Work) -> None:
    """Remove ``work``'s worktree (uncommitted changes lost) and delete its branch."""
    remove_worktree(repo, work.branch, delete_branch=True)
