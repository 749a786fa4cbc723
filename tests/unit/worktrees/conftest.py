"""Real git repositories in temporary directories, each alone: no system or global config."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from ateam.worktrees import Repository


def run_git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout


def commit_file(cwd: Path, name: str, text: str, message: str = "") -> str:
    path = cwd / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    run_git(cwd, "add", "-A")
    run_git(cwd, "commit", "-q", "-m", message or f"write {name}")
    return run_git(cwd, "rev-parse", "HEAD").strip()


def git_state(root: Path) -> dict[str, str]:
    """What a half-made worktree would show: worktrees, branches, config, status."""
    return {
        "worktrees": run_git(root, "worktree", "list", "--porcelain"),
        "branches": run_git(root, "for-each-ref", "--format=%(refname) %(objectname)"),
        "config": run_git(root, "config", "--local", "--list"),
        "status": run_git(root, "status", "--porcelain", "--ignored=no"),
    }


def fingerprint(root: Path) -> dict[str, str]:
    """A hash of every file of the main tree and of HEAD, the refs and the index."""
    found: dict[str, str] = {}
    git_dir = root / ".git"
    for path in sorted(root.rglob("*")):
        inside = path.relative_to(root)
        if not path.is_file() or path.is_symlink():
            continue
        top = inside.parts[0]
        # Git's own files that a merge elsewhere may touch without changing the main
        # tree: objects, logs of other worktrees, its packing bookkeeping.
        if top == ".git" and inside.parts[1] not in ("HEAD", "refs", "index", "packed-refs"):
            continue
        if top == ".ateam":
            continue
        found[str(inside)] = hashlib.sha256(path.read_bytes()).hexdigest()
    assert (git_dir / "HEAD").is_file()
    return found


@pytest.fixture(autouse=True)
def _git_alone(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    empty = tmp_path / "empty-gitconfig"
    empty.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(empty))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def repo_dir(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    run_git(root, "init", "-q", "-b", "main")
    run_git(root, "config", "user.name", "Person")
    run_git(root, "config", "user.email", "person@example.com")
    commit_file(root, "README.md", "hello\n", "init")
    return root.resolve()


@pytest.fixture
def repo(repo_dir: Path) -> Repository:
    return Repository.open(repo_dir)
