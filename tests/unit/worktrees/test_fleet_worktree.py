"""`/spawn --worktree` makes its worktree through ateam.worktrees: one `ateam diff` knows."""

from __future__ import annotations

from pathlib import Path

import pytest

from ateam import fleet
from ateam.errors import UsageError
from ateam.worktrees import Repository, diff_of, find_work
from tests.unit.worktrees.conftest import git_state, run_git


def test_a_spawned_agents_worktree_is_work_ateam_knows(repo: Repository) -> None:
    (repo.root / "src").mkdir()
    plan = fleet.plan_worktree(repo.root / "src", "hermes", repo.root)
    assert plan.path == repo.root / ".ateam" / "worktrees" / "hermes"
    assert plan.cwd == plan.path / "src"

    fleet.add_worktree(plan)

    work = find_work(repo, "hermes")
    assert (work.branch, work.base, work.worktree) == ("ateam/hermes", "main", plan.path)
    (plan.path / "new.txt").write_text("x\n")
    assert [f.path for f in diff_of(repo, work).files] == ["new.txt"]
    with pytest.raises(UsageError, match="already exists"):
        fleet.plan_worktree(repo.root, "hermes", repo.root)


def test_a_detached_head_still_gets_a_worktree_at_head(repo: Repository) -> None:
    run_git(repo.root, "checkout", "-q", "--detach")
    head = run_git(repo.root, "rev-parse", "HEAD").strip()

    fleet.add_worktree(fleet.plan_worktree(repo.root, "hermes", repo.root))

    tree = repo.root / ".ateam" / "worktrees" / "hermes"
    assert run_git(tree, "rev-parse", "HEAD").strip() == head
    assert run_git(tree, "symbolic-ref", "--short", "HEAD").strip() == "ateam/hermes"


def test_outside_the_project_the_worktree_goes_beside_the_repository(
    repo: Repository, tmp_path: Path
) -> None:
    before = git_state(repo.root)
    plan = fleet.plan_worktree(repo.root, "hermes", None)

    fleet.add_worktree(plan)

    assert plan.path == repo.root.parent / f"{repo.root.name}-hermes"
    assert run_git(plan.path, "symbolic-ref", "--short", "HEAD").strip() == "ateam/hermes"
    assert git_state(repo.root)["status"] == before["status"]
