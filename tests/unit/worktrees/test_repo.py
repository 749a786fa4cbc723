"""Repository: found from anywhere inside, refused when git cannot cut a branch from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from ateam.errors import DetachedHead, NoCommitYet, NotARepository, WorkNotFound
from ateam.worktrees import Repository, ensure_worktree, task_branch
from tests.unit.worktrees.conftest import commit_file, run_git


def test_open_finds_the_top_from_a_subdirectory(repo_dir: Path) -> None:
    (repo_dir / "src" / "deep").mkdir(parents=True)

    assert Repository.open(repo_dir / "src" / "deep").root == repo_dir


def test_open_from_an_agents_worktree_finds_the_main_tree(repo: Repository) -> None:
    tree = ensure_worktree(repo, task_branch("bob", "t-0a"), "main")

    assert Repository.open(tree.path).root == repo.root


def test_a_directory_outside_git_is_not_a_repository(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()

    with pytest.raises(NotARepository, match="is not in a git repository"):
        Repository.open(plain)


def test_no_git_on_path_is_not_a_repository(
    repo_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))

    with pytest.raises(NotARepository, match="git is not installed"):
        Repository.open(repo_dir)


def test_a_repository_without_a_commit_is_refused(tmp_path: Path) -> None:
    run_git(tmp_path, "init", "-q", "-b", "main")

    with pytest.raises(NoCommitYet) as caught:
        Repository.open(tmp_path)
    assert caught.value.code == "git.no_commit"


def test_a_detached_head_has_no_current_branch(repo: Repository) -> None:
    run_git(repo.root, "checkout", "-q", "--detach")

    with pytest.raises(DetachedHead):
        repo.current_branch()
    with pytest.raises(DetachedHead):
        repo.base_branch()
    assert repo.base_branch("main") == "main"  # a configured base does not need HEAD


def test_base_branch_is_the_checked_out_one_or_the_configured_one(repo: Repository) -> None:
    run_git(repo.root, "branch", "release")

    assert repo.base_branch() == "main"
    assert repo.base_branch("release") == "release"
    with pytest.raises(WorkNotFound, match="'nope' does not exist"):
        repo.base_branch("nope")


def test_branch_exists(repo: Repository) -> None:
    assert repo.branch_exists("main")
    assert not repo.branch_exists("ateam/bob")


def test_dirty_files_count_tracked_changes_only(repo: Repository) -> None:
    commit_file(repo.root, "b.txt", "b\n")
    assert repo.dirty_files() == []

    (repo.root / "new.txt").write_text("untracked\n")
    assert repo.dirty_files() == []

    (repo.root / "README.md").write_text("changed\n")
    (repo.root / "b.txt").unlink()
    assert sorted(repo.dirty_files()) == ["README.md", "b.txt"]
