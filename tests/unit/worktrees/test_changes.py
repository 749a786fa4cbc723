"""What a branch changed: committed, uncommitted and new files, binary ones, bounded."""

from __future__ import annotations

from pathlib import Path

import pytest

from ateam.errors import GitError
from ateam.worktrees import (
    Repository,
    commit_all,
    diff_of,
    ensure_worktree,
    find_work,
    remove_worktree,
    task_branch,
)
from tests.unit.worktrees.conftest import commit_file, run_git


@pytest.fixture
def tree(repo: Repository) -> Path:
    commit_file(repo.root, "gone.txt", "bye\n")
    return ensure_worktree(repo, task_branch("bob", "t-0a"), "main").path


def test_the_diff_holds_committed_uncommitted_untracked_and_binary_changes(
    repo: Repository, tree: Path
) -> None:
    (tree / "committed.txt").write_text("one\ntwo\n")
    commit_all(tree, "first", author="bob", email="bob@ateam")
    (tree / "README.md").write_text("hello\nmore\n")  # changed, not staged
    (tree / "gone.txt").unlink()
    (tree / "staged.txt").write_text("s\n")
    run_git(tree, "add", "staged.txt")
    (tree / "untracked.txt").write_text("u\n")
    (tree / "image.bin").write_bytes(b"\x00\x01\x02binary")
    index_before = (repo.root / ".git" / "worktrees" / "t-0a" / "index").read_bytes()
    base_moved = commit_file(repo.root, "later.txt", "on main after the cut\n")

    diff = diff_of(repo, find_work(repo, "t-0a"))

    assert diff.merge_base != base_moved  # the base's later commits are not the agent's
    assert {(f.path, f.status, f.insertions, f.deletions, f.binary) for f in diff.files} == {
        ("committed.txt", "A", 2, 0, False),
        ("README.md", "M", 1, 0, False),
        ("gone.txt", "D", 0, 1, False),
        ("staged.txt", "A", 1, 0, False),
        ("untracked.txt", "A", 1, 0, False),
        ("image.bin", "A", 0, 0, True),
    }
    assert diff.uncommitted
    assert diff.stat_line() == "6 files +5 -1"
    assert "+more\n" in diff.diff and "+u\n" in diff.diff
    assert "Binary files /dev/null and b/image.bin differ" in diff.diff
    assert "later.txt" not in diff.diff
    assert (diff.omitted_bytes, diff.note()) == (0, "")
    # The worktree's own index is as its agent left it: only staged.txt staged.
    assert (repo.root / ".git" / "worktrees" / "t-0a" / "index").read_bytes() == index_before
    assert run_git(tree, "diff", "--cached", "--name-only") == "staged.txt\n"
    wire = diff.to_wire()
    assert wire["stat"] == "6 files +5 -1" and wire["task_id"] == "t-0a"
    image = {"path": "image.bin", "status": "A", "insertions": 0, "deletions": 0, "binary": True}
    assert image in wire["files"]


def test_a_branch_without_worktree_shows_its_commits(repo: Repository, tree: Path) -> None:
    (tree / "a.txt").write_text("a\n")
    commit_all(tree, "a", author="bob", email="bob@ateam")
    remove_worktree(repo, task_branch("bob", "t-0a"), delete_branch=False)

    diff = diff_of(repo, find_work(repo, "t-0a"))

    assert [(f.path, f.status) for f in diff.files] == [("a.txt", "A")]
    assert not diff.uncommitted


def test_a_worktree_that_lost_its_git_file_shows_its_branch_not_the_main_tree(
    repo: Repository, tree: Path
) -> None:
    (tree / "a.txt").write_text("a\n")
    commit_all(tree, "a", author="bob", email="bob@ateam")
    (tree / ".git").unlink()  # git run there finds the main repository around it
    (repo.root / "mine.txt").write_text("a person's file\n")

    diff = diff_of(repo, find_work(repo, "t-0a"))

    assert [(f.path, f.status) for f in diff.files] == [("a.txt", "A")]


def test_nothing_changed_is_an_empty_diff(repo: Repository, tree: Path) -> None:
    diff = diff_of(repo, find_work(repo, "t-0a"))

    assert (diff.files, diff.diff, diff.uncommitted) == ((), "", False)
    assert diff.stat_line() == "0 files +0 -0"


def test_a_long_diff_is_cut_at_a_line_and_the_rest_counted(repo: Repository, tree: Path) -> None:
    (tree / "big.txt").write_text("".join(f"line {n:04}\n" for n in range(2000)))

    whole = diff_of(repo, find_work(repo, "t-0a"))
    cut = diff_of(repo, find_work(repo, "t-0a"), max_bytes=1000)

    assert len(cut.diff.encode()) <= 1000 and cut.diff.endswith("\n")
    assert whole.diff.startswith(cut.diff)
    assert cut.omitted_bytes == len(whole.diff.encode()) - len(cut.diff.encode()) > 0
    assert cut.note() == f"(… {cut.omitted_bytes} more bytes of diff not shown)"
    assert cut.files == whole.files  # the list of files is never cut


def test_a_base_that_is_gone_is_a_git_error(repo: Repository, tree: Path) -> None:
    run_git(repo.root, "branch", "release")
    run_git(repo.root, "config", "branch.ateam/bob/t-0a.ateambase", "release")
    work = find_work(repo, "t-0a")
    run_git(repo.root, "branch", "-D", "release")

    with pytest.raises(GitError, match="no commit in common"):
        diff_of(repo, work)
