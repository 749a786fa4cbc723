"""Which branch a name or a task id names: found with git alone."""

from __future__ import annotations

import pytest

from ateam.errors import AmbiguousName, UsageError, WorkNotFound
from ateam.worktrees import (
    Repository,
    agent_branch,
    ensure_worktree,
    find_work,
    list_work,
    remove_worktree,
    task_branch,
)
from tests.unit.worktrees.conftest import run_git


def test_list_work_names_only_ateams_branches(repo: Repository) -> None:
    run_git(repo.root, "branch", "ateam/someone-elses")  # no ateambase: not ateam's
    ensure_worktree(repo, agent_branch("ada"), "main")
    bob = ensure_worktree(repo, task_branch("bob", "t-0a1b"), "main")
    remove_worktree(repo, agent_branch("ada"), delete_branch=False)

    found = list_work(repo)

    assert [(w.branch, w.base, w.agent, w.task_id) for w in found] == [
        ("ateam/ada", "main", "ada", None),
        ("ateam/bob/t-0a1b", "main", "bob", "t-0a1b"),
    ]
    assert found[0].worktree is None
    assert found[1].worktree == bob.path


def test_find_by_agent_task_id_prefix_or_branch(repo: Repository) -> None:
    ensure_worktree(repo, agent_branch("ada"), "main")
    ensure_worktree(repo, task_branch("bob", "t-0a1b"), "main")
    ensure_worktree(repo, task_branch("bob", "t-99"), "main")

    assert find_work(repo, "ada").branch == "ateam/ada"
    assert find_work(repo, "t-0a1b").branch == "ateam/bob/t-0a1b"
    assert find_work(repo, "t-0a").branch == "ateam/bob/t-0a1b"
    assert find_work(repo, "bob/t-99").branch == "ateam/bob/t-99"
    assert find_work(repo, "ateam/bob/t-99").branch == "ateam/bob/t-99"


def test_an_agent_with_task_branches_is_told_to_name_one(repo: Repository) -> None:
    ensure_worktree(repo, task_branch("bob", "t-0a1b"), "main")
    ensure_worktree(repo, task_branch("bob", "t-99"), "main")

    with pytest.raises(WorkNotFound, match="name one: t-0a1b, t-99") as caught:
        find_work(repo, "bob")
    assert caught.value.detail["tasks"] == ["t-0a1b", "t-99"]
    assert caught.value.code == "work.not_found"


def test_unknown_and_invalid_targets(repo: Repository) -> None:
    with pytest.raises(WorkNotFound, match="agent nobody"):
        find_work(repo, "nobody")
    with pytest.raises(WorkNotFound, match="task t-0fff"):
        find_work(repo, "t-0fff")
    with pytest.raises(UsageError, match="neither an agent name nor a task id"):
        find_work(repo, "../etc")


def test_a_task_prefix_that_fits_two_is_ambiguous(repo: Repository) -> None:
    ensure_worktree(repo, task_branch("bob", "t-0a1"), "main")
    ensure_worktree(repo, task_branch("bob", "t-0a2"), "main")

    with pytest.raises(AmbiguousName, match="t-0a1, t-0a2"):
        find_work(repo, "t-0a")
