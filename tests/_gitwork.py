"""Real git repositories for the tests of issue 27: a project under git, a task's branch
made as an agent makes it, and a snapshot of everything a refused merge must not touch."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from ateam.worktrees import Repository, commit_all, ensure_worktree, task_branch

AUTHOR = {
    "GIT_AUTHOR_NAME": "Test Person",
    "GIT_AUTHOR_EMAIL": "person@example.com",
    "GIT_COMMITTER_NAME": "Test Person",
    "GIT_COMMITTER_EMAIL": "person@example.com",
}


def git(root: Path, *args: str, check: bool = True) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **AUTHOR},
        check=False,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {done.stderr}")
    return done.stdout


def init_repo(root: Path, files: dict[str, str] | None = None) -> Path:
    """``root`` (holding a project already, or not) as a repository on ``main`` with one
    commit of everything in it, plus ``files``."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", AUTHOR["GIT_AUTHOR_NAME"])
    git(root, "config", "user.email", AUTHOR["GIT_AUTHOR_EMAIL"])
    for name, text in (files or {"README.txt": "hello\n"}).items():
        (root / name).write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "first")
    return root


def commit_main(root: Path, files: dict[str, str], message: str = "main moves") -> None:
    for name, text in files.items():
        (root / name).write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", message)


def task_work(root: Path, agent: str, task_id: str, files: dict[str, str]) -> Path:
    """What an agent with ``worktree: task`` leaves: branch ``ateam/AGENT/TASK`` cut from
    ``main`` with ``files`` written and committed. Returns the worktree."""
    repo = Repository.open(root)
    tree = ensure_worktree(repo, task_branch(agent, task_id), "main")
    for name, text in files.items():
        (tree.path / name).write_text(text)
    commit_all(tree.path, f"{task_id} done", author="zeus", email="zeus@example.com")
    return tree.path


def worktrees_and_branches(root: Path) -> tuple[str, str]:
    """``git worktree list`` and ``git branch``: what a refused command must not change."""
    return git(root, "worktree", "list", "--porcelain"), git(root, "branch", "--list", "-a")


def snapshot(root: Path) -> dict[str, str]:
    """Every file of the main working tree (hashed, worktrees left out), HEAD, every ref,
    the index's entries and the state files a half-made merge would leave."""
    seen: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if relative.startswith((".git/", ".ateam/worktrees/")) or not path.is_file():
            continue
        seen[relative] = hashlib.sha256(path.read_bytes()).hexdigest()
    seen["HEAD"] = git(root, "rev-parse", "HEAD") + git(
        root, "symbolic-ref", "-q", "HEAD", check=False
    )
    seen["refs"] = git(root, "for-each-ref", "--format=%(refname) %(objectname)")
    seen["index"] = git(root, "ls-files", "--stage")
    seen["status"] = git(root, "status", "--porcelain", "--untracked-files=all")
    for state in ("MERGE_HEAD", "MERGE_MSG", "SQUASH_MSG", "AUTO_MERGE"):
        seen[state] = str((root / ".git" / state).exists())
    seen["worktrees"], seen["branches"] = worktrees_and_branches(root)
    return seen
