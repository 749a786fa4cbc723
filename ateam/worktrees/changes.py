"""What a branch changed against its base: committed, and not yet committed in its worktree."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ateam.constants import DIFF_MAX_BYTES
from ateam.errors import GitError
from ateam.worktrees._git import git, output, to_file
from ateam.worktrees.find import Work
from ateam.worktrees.repo import Repository
from ateam.worktrees.trees import is_own_top

__all__ = ["DIFF_MAX_BYTES", "FileChange", "WorkDiff", "diff_of"]


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
        noun = "file" if len(self.files) == 1 else "files"
        return f"{len(self.files)} {noun} +{self.insertions} -{self.deletions}"

    def note(self) -> str:
        """What was left out, for people: ``""`` or ``(… 12345 more bytes of diff not shown)``."""
        if not self.omitted_bytes:
            return ""
        return f"(… {self.omitted_bytes} more bytes of diff not shown)"

    def to_wire(self) -> dict[str, Any]:
        """``{branch, base, merge_base, task_id, agent, files: [{path, status, insertions,
        deletions, binary}], stat, diff, omitted_bytes, uncommitted, note}``."""
        return {
            "branch": self.branch,
            "base": self.base,
            "merge_base": self.merge_base,
            "task_id": self.task_id,
            "agent": self.agent,
            "files": [
                {
                    "path": f.path,
                    "status": f.status,
                    "insertions": f.insertions,
                    "deletions": f.deletions,
                    "binary": f.binary,
                }
                for f in self.files
            ],
            "stat": self.stat_line(),
            "diff": self.diff,
            "omitted_bytes": self.omitted_bytes,
            "uncommitted": self.uncommitted,
            "note": self.note(),
        }


def diff_of(repo: Repository, work: Work, *, max_bytes: int = DIFF_MAX_BYTES) -> WorkDiff:
    """``work``'s changes against its base's merge base: the branch's commits plus, when it
    has a worktree, what is changed or new there and not committed (read through a
    private index, so the worktree's own index is not touched).

    Raises:
        GitError: git refused.
    """
    branch, base = f"refs/heads/{work.branch}", f"refs/heads/{work.base}"
    found = git(repo.root, "merge-base", base, branch, check=False)
    if found.returncode != 0 or not found.stdout.strip():
        raise GitError(
            f"{work.branch} and its base {work.base} have no commit in common "
            "(or one of them is gone)",
            detail={"branch": work.branch, "base": work.base},
        )
    merge_base = found.stdout.strip()
    tree = work.worktree
    if tree is not None and not (tree.is_dir() and is_own_top(tree)):
        tree = None  # gone, or without its .git: the branch's commits are what there is
    with tempfile.TemporaryDirectory(prefix="ateam-diff-") as scratch:
        if tree is None:
            cwd, target, uncommitted = repo.root, branch, False
        else:
            cwd, target = tree, _snapshot(tree, Path(scratch) / "index")
            uncommitted = target != output(tree, "rev-parse", "HEAD^{tree}")
        files = _files(cwd, merge_base, target)
        text, omitted = _bounded_diff(cwd, merge_base, target, max_bytes, Path(scratch))
    return WorkDiff(
        branch=work.branch,
        base=work.base,
        merge_base=merge_base,
        files=files,
        diff=text,
        omitted_bytes=omitted,
        uncommitted=uncommitted,
        task_id=work.task_id,
        agent=work.agent,
    )


_DIFF_OPTIONS = ("-M", "--no-ext-diff", "--no-textconv", "--no-color")
"""Renames found; no external diff or text conversion: what is shown is what would land."""


def _snapshot(tree: Path, index: Path) -> str:
    """The tree object of everything in the worktree ``tree`` now, committed or not.

    Built in a copy of its index, so its own index (what its agent staged) stays as it
    is; the copy keeps git's record of file times, so unchanged files are not read again.
    """
    own = Path(output(tree, "rev-parse", "--path-format=absolute", "--git-path", "index"))
    private = {"GIT_INDEX_FILE": str(index)}
    if own.is_file():
        shutil.copyfile(own, index)
    else:
        git(tree, "read-tree", "HEAD", env=private)
    git(tree, "add", "-A", env=private)
    return output(tree, "write-tree", env=private)


def _files(cwd: Path, old: str, new: str) -> tuple[FileChange, ...]:
    numbers = _numstat(output(cwd, "diff", *_DIFF_OPTIONS, "--numstat", "-z", old, new))
    statuses = output(cwd, "diff", *_DIFF_OPTIONS, "--name-status", "-z", old, new).split("\0")
    changes: list[FileChange] = []
    fields = iter(statuses)
    for status in fields:
        if not status:
            continue
        path = next(fields, "")
        if status[0] in "RC":
            path = next(fields, "")  # -z: a rename's old path, then its new one
        added, removed = numbers.get(path, ("0", "0"))
        binary = added == "-"
        changes.append(
            FileChange(
                path=path,
                status=status[0],
                insertions=0 if binary else int(added),
                deletions=0 if binary else int(removed),
                binary=binary,
            )
        )
    return tuple(changes)


def _numstat(text: str) -> dict[str, tuple[str, str]]:
    """``{path: (added, removed)}`` from ``--numstat -z``; ``-`` for a binary file."""
    found: dict[str, tuple[str, str]] = {}
    fields = iter(text.split("\0"))
    for field_ in fields:
        if not field_:
            continue
        added, removed, path = field_.split("\t", 2)
        if not path:
            next(fields, "")  # a rename: empty path, then its old and new paths
            path = next(fields, "")
        found[path] = (added, removed)
    return found


def _bounded_diff(cwd: Path, old: str, new: str, max_bytes: int, scratch: Path) -> tuple[str, int]:
    """The unified diff, cut at the last whole line within ``max_bytes``, and the bytes
    left out. It goes through a file: a diff of a vendored tree can be larger than memory."""
    with (scratch / "diff").open("w+b") as sink:
        to_file(cwd, sink, "diff", *_DIFF_OPTIONS, old, new)
        total = os.fstat(sink.fileno()).st_size  # git wrote through the descriptor
        sink.seek(0)
        head = sink.read(max_bytes + 1)
    if total <= max_bytes:
        return head.decode("utf-8", "replace"), 0
    kept = head[: head.rfind(b"\n", 0, max_bytes) + 1]
    return kept.decode("utf-8", "replace"), total - len(kept)
