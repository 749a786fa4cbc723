"""A worktree and branch per agent or task: made, reused, refused, and never half-made."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ateam.errors import BranchExists, GitError
from ateam.worktrees import (
    Repository,
    agent_branch,
    commit_all,
    ensure_worktree,
    remove_worktree,
    task_branch,
    worktree_path,
)
from ateam.worktrees._git import git
from tests.unit.worktrees.conftest import commit_file, git_state, run_git


def test_branch_and_path_names(tmp_path: Path) -> None:
    assert agent_branch("bob") == "ateam/bob"
    assert task_branch("bob", "t-0a1b") == "ateam/bob/t-0a1b"
    assert worktree_path(tmp_path, "ateam/bob/t-0a1b") == (
        tmp_path / ".ateam" / "worktrees" / "bob" / "t-0a1b"
    )


def test_a_new_worktree_is_cut_from_the_base_and_remembers_it(repo: Repository) -> None:
    run_git(repo.root, "checkout", "-q", "-b", "release")
    tip = commit_file(repo.root, "release.txt", "r\n")
    run_git(repo.root, "checkout", "-q", "main")

    tree = ensure_worktree(repo, task_branch("bob", "t-0a"), "release")

    assert tree.path == repo.root / ".ateam" / "worktrees" / "bob" / "t-0a"
    assert (tree.branch, tree.base, tree.reused) == ("ateam/bob/t-0a", "release", False)
    assert run_git(tree.path, "rev-parse", "HEAD").strip() == tip
    assert run_git(repo.root, "config", "branch.ateam/bob/t-0a.ateambase").strip() == "release"
    assert f"worktree {tree.path}\n" in run_git(repo.root, "worktree", "list", "--porcelain")
    assert (repo.root / ".ateam" / "worktrees" / ".gitignore").read_text() == "*\n"
    assert run_git(repo.root, "status", "--porcelain") == ""  # the main tree stays clean


def test_ensure_twice_reuses_the_worktree(repo: Repository) -> None:
    first = ensure_worktree(repo, agent_branch("bob"), "main")
    (first.path / "work.txt").write_text("in progress\n")

    again = ensure_worktree(repo, agent_branch("bob"), "main")

    assert again.reused and again.path == first.path
    assert (again.path / "work.txt").read_text() == "in progress\n"
    assert run_git(repo.root, "worktree", "list").count("[ateam/bob]") == 1


def test_a_branch_whose_worktree_is_gone_gets_it_back(repo: Repository) -> None:
    branch = task_branch("bob", "t-0a")
    tree = ensure_worktree(repo, branch, "main")
    commit_all(tree.path, "half done", author="bob", email="bob@ateam")
    work = run_git(tree.path, "rev-parse", "HEAD").strip()
    shutil.rmtree(tree.path)  # as a crash or a person might leave it

    again = ensure_worktree(repo, branch, "other-base-ignored")

    assert again.reused and again.base == "main"  # the recorded base wins
    assert run_git(again.path, "rev-parse", "HEAD").strip() == work
    assert run_git(repo.root, "worktree", "list").count(f"[{branch}]") == 1


def test_a_kill_between_the_mark_and_the_branch_is_no_obstacle(repo: Repository) -> None:
    branch = task_branch("bob", "t-0a")
    run_git(repo.root, "config", f"branch.{branch}.ateambase", "main")  # and then kill -9

    tree = ensure_worktree(repo, branch, "main")

    assert not tree.reused and tree.path.is_dir()


def test_a_kill_during_the_checkout_of_the_worktree_is_finished_not_taken_as_is(
    repo: Repository,
) -> None:
    # `git worktree add` killed while it checks out: the entry and the branch are there,
    # the files and the index not (what `--no-checkout` leaves). Taken as it is, the
    # task's commit would delete every file of the project.
    branch = task_branch("bob", "t-0a")
    path = repo.root / ".ateam" / "worktrees" / "bob" / "t-0a"
    run_git(repo.root, "config", f"branch.{branch}.ateambase", "main")
    run_git(repo.root, "worktree", "add", "-q", "--no-checkout", "-b", branch, str(path), "main")

    tree = ensure_worktree(repo, branch, "main")

    assert tree.reused and tree.path == path
    assert (path / "README.md").read_text() == "hello\n"
    assert run_git(path, "status", "--porcelain") == ""
    assert commit_all(path, "nothing", author="bob", email="bob@ateam") is None


def test_agents_starting_tasks_together_each_get_theirs(repo: Repository) -> None:
    branches = [task_branch(name, f"t-0{n}") for n, name in enumerate(["ada", "bob", "cy", "di"])]
    with ThreadPoolExecutor(len(branches)) as pool:
        made = list(pool.map(lambda b: ensure_worktree(repo, b, "main"), branches))

    assert [t.branch for t in made] == branches
    listing = run_git(repo.root, "worktree", "list")
    assert all(listing.count(f"[{b}]") == 1 for b in branches)
    bases = run_git(repo.root, "config", "--get-regexp", "ateambase").splitlines()
    assert sorted(bases) == sorted(f"branch.{b}.ateambase main" for b in branches)


def test_a_kept_branch_gets_its_worktree_again(repo: Repository) -> None:
    branch = agent_branch("bob")
    ensure_worktree(repo, branch, "main")
    remove_worktree(repo, branch, delete_branch=False)
    assert repo.branch_exists(branch)

    again = ensure_worktree(repo, branch, "main")

    assert again.reused and again.path.is_dir()


def test_a_branch_ateam_did_not_make_is_refused(repo: Repository) -> None:
    run_git(repo.root, "branch", "ateam/bob")
    before = git_state(repo.root)

    with pytest.raises(BranchExists, match="ateam did not make it") as caught:
        ensure_worktree(repo, agent_branch("bob"), "main")

    assert caught.value.code == "git.branch_exists"
    assert git_state(repo.root) == before
    assert not worktree_path(repo.root, "ateam/bob").exists()


def test_a_branch_checked_out_elsewhere_is_refused(repo: Repository, tmp_path: Path) -> None:
    branch = agent_branch("bob")
    ensure_worktree(repo, branch, "main")
    remove_worktree(repo, branch, delete_branch=False)
    elsewhere = tmp_path / "elsewhere"
    run_git(repo.root, "worktree", "add", "-q", str(elsewhere), branch)
    before = git_state(repo.root)

    with pytest.raises(BranchExists, match="is checked out in"):
        ensure_worktree(repo, branch, "main")

    assert git_state(repo.root) == before
    assert not worktree_path(repo.root, branch).exists()


@pytest.mark.parametrize(
    ("existing", "wanted"),
    [("ateam/bob", "ateam/bob/t-0a"), ("ateam/bob/t-0a", "ateam/bob")],
)
def test_a_name_taken_by_a_branch_or_folder_of_branches_is_refused(
    repo: Repository, existing: str, wanted: str
) -> None:
    ensure_worktree(repo, existing, "main")
    before = git_state(repo.root)

    with pytest.raises(BranchExists, match=f"branch {existing} takes its name"):
        ensure_worktree(repo, wanted, "main")

    assert git_state(repo.root) == before


def test_a_failed_add_takes_back_the_branch_and_its_config(repo: Repository) -> None:
    before = git_state(repo.root)

    with pytest.raises(GitError, match="git worktree failed"):
        ensure_worktree(repo, task_branch("bob", "t-0a"), "no-such-base")

    assert git_state(repo.root) == before
    assert not (repo.root / ".ateam" / "worktrees" / "bob").exists()


def test_a_stray_directory_in_the_way_is_left_and_nothing_else(repo: Repository) -> None:
    path = worktree_path(repo.root, "ateam/bob/t-0a")
    path.mkdir(parents=True)
    (path / "someone's.txt").write_text("mine\n")
    before = git_state(repo.root)

    with pytest.raises(GitError, match="already exists"):
        ensure_worktree(repo, task_branch("bob", "t-0a"), "main")

    after = git_state(repo.root)
    assert before.pop("status") == "?? .ateam/\n"
    assert after.pop("status") == ""  # .ateam/worktrees/ is ignored from now on
    assert after == before
    assert (path / "someone's.txt").read_text() == "mine\n"


def test_commit_all_commits_new_changed_and_deleted_files_as_the_agent(
    repo: Repository,
) -> None:
    commit_file(repo.root, "old.txt", "old\n")
    tree = ensure_worktree(repo, agent_branch("bob"), "main")
    # No identity in the repository, and git told not to guess one: the agent's is used.
    run_git(repo.root, "config", "--unset", "user.name")
    run_git(repo.root, "config", "--unset", "user.email")
    run_git(repo.root, "config", "user.useConfigOnly", "true")
    hooks = repo.root / ".git" / "hooks"
    hooks.mkdir(exist_ok=True)
    (hooks / "pre-commit").write_text("#!/bin/sh\nexit 1\n")
    (hooks / "pre-commit").chmod(0o755)
    assert commit_all(tree.path, "nothing yet", author="bob", email="bob@ateam") is None

    (tree.path / "new.txt").write_text("new\n")
    (tree.path / "README.md").write_text("changed\n")
    (tree.path / "old.txt").unlink()
    commit = commit_all(tree.path, "Task: tidy\n\ndone", author="bob", email="bob@ateam")

    assert commit == run_git(tree.path, "rev-parse", "HEAD").strip()
    shown = run_git(tree.path, "show", "--name-status", "--format=%an <%ae>|%cn|%s", "HEAD")
    assert shown.splitlines()[0] == "bob <bob@ateam>|bob|Task: tidy"
    assert sorted(shown.split("\n\n", 1)[1].split()) == sorted(
        ["A", "new.txt", "M", "README.md", "D", "old.txt"]
    )
    assert run_git(tree.path, "status", "--porcelain") == ""
    assert commit_all(tree.path, "again", author="bob", email="bob@ateam") is None


def test_commit_all_never_commits_in_the_main_tree_when_the_worktree_lost_its_git_file(
    repo: Repository,
) -> None:
    # A task's `rm -rf .git` (or a person's) leaves a plain directory inside the main
    # tree: git run there finds the main repository, and `add -A` takes all of it.
    tree = ensure_worktree(repo, task_branch("bob", "t-0a"), "main").path
    (tree / "work.txt").write_text("agent\n")
    (tree / ".git").unlink()
    (repo.root / "mine.txt").write_text("a person's file, not for an agent's commit\n")
    before = run_git(repo.root, "rev-parse", "HEAD")

    with pytest.raises(GitError, match="not a worktree"):
        commit_all(tree, "task", author="bob", email="bob@ateam")

    assert run_git(repo.root, "rev-parse", "HEAD") == before
    assert run_git(repo.root, "diff", "--cached", "--name-only") == ""


def test_remove_worktree_and_branch_leaves_no_trace(repo: Repository) -> None:
    before = git_state(repo.root)
    branch = task_branch("bob", "t-0a")
    tree = ensure_worktree(repo, branch, "main")
    (tree.path / "unsaved.txt").write_text("lost\n")

    remove_worktree(repo, branch, delete_branch=True)

    assert git_state(repo.root) == before
    assert not (repo.root / ".ateam" / "worktrees" / "bob").exists()
    remove_worktree(repo, branch, delete_branch=True)  # missing pieces are no error


def test_remove_worktree_keeps_the_branch_unless_asked(repo: Repository) -> None:
    branch = agent_branch("bob")
    tree = ensure_worktree(repo, branch, "main")

    remove_worktree(repo, branch, delete_branch=False)

    assert not tree.path.exists()
    assert repo.branch_exists(branch)
    assert run_git(repo.root, "config", f"branch.{branch}.ateambase").strip() == "main"


def test_config_writes_at_once_all_land(repo: Repository) -> None:
    """Git gives up at once on a locked config; the runner tries again."""
    keys = [f"branch.ateam/a{n}.ateambase" for n in range(16)]
    with ThreadPoolExecutor(len(keys)) as pool:
        list(pool.map(lambda key: git(repo.root, "config", key, "main"), keys))

    bases = run_git(repo.root, "config", "--get-regexp", "ateambase").splitlines()
    assert sorted(bases) == sorted(f"{key} main" for key in keys)


def test_the_base_branch_wins_over_a_tag_of_its_name(repo: Repository) -> None:
    run_git(repo.root, "tag", "main")  # at the first commit
    tip = commit_file(repo.root, "later.txt", "later\n")

    tree = ensure_worktree(repo, agent_branch("bob"), "main")

    assert run_git(tree.path, "rev-parse", "HEAD").strip() == tip
