"""Landing a branch: merged whole in the base, or refused with the main tree untouched."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ateam.errors import GitError, MergeConflict, TreeDirty, UsageError, WorkNotFound
from ateam.worktrees import (
    Repository,
    Work,
    agent_branch,
    commit_all,
    diff_of,
    discard,
    ensure_worktree,
    find_work,
    land,
    task_branch,
)
from tests.unit.worktrees.conftest import commit_file, fingerprint, git_state, run_git


def _task_with_change(repo: Repository, name: str = "notes.txt", text: str = "agent\n") -> Path:
    tree = ensure_worktree(repo, task_branch("bob", "t-0a"), "main").path
    (tree / name).write_text(text)
    commit_all(tree, "Task: notes", author="bob", email="bob@ateam")
    return tree


def _log(root: Path, ref: str = "HEAD") -> list[str]:
    """The subjects of ``ref`` and of its parents, first parent first."""
    return run_git(root, "log", "-1", "--format=%s", ref).splitlines() + [
        run_git(root, "log", "-1", "--format=%s", parent).strip()
        for parent in run_git(root, "log", "-1", "--format=%P", ref).split()
    ]


def test_a_task_lands_in_the_checked_out_base_and_its_branch_goes(repo: Repository) -> None:
    tree = _task_with_change(repo)
    commit_file(repo.root, "meanwhile.txt", "base moved on\n")  # no conflict: still lands

    landed = land(repo, find_work(repo, "t-0a"))

    assert landed.into == "main" and landed.removed and not landed.squashed
    assert landed.commit == run_git(repo.root, "rev-parse", "HEAD").strip()
    assert _log(repo.root) == [
        "Merge ateam/bob/t-0a into main (task t-0a)",
        "write meanwhile.txt",
        "Task: notes",
    ]
    assert (repo.root / "notes.txt").read_text() == "agent\n"
    assert run_git(repo.root, "status", "--porcelain") == ""
    assert not tree.exists() and not repo.branch_exists("ateam/bob/t-0a")
    assert run_git(repo.root, "worktree", "list", "--porcelain").count("worktree ") == 1


def test_a_branch_lands_in_a_branch_not_checked_out(repo: Repository) -> None:
    run_git(repo.root, "branch", "release")
    _task_with_change(repo)
    head_before = run_git(repo.root, "rev-parse", "HEAD").strip()

    landed = land(repo, find_work(repo, "t-0a"), into="release", keep=True, message="Ship it")

    assert _log(repo.root, "release") == ["Ship it", "init", "Task: notes"]
    assert run_git(repo.root, "rev-parse", "release").strip() == landed.commit
    assert run_git(repo.root, "rev-parse", "HEAD").strip() == head_before
    assert not (repo.root / "notes.txt").exists()  # the main tree was not touched
    assert not landed.removed and repo.branch_exists("ateam/bob/t-0a")  # keep


def test_squash_makes_one_commit(repo: Repository) -> None:
    tree = _task_with_change(repo)
    (tree / "second.txt").write_text("2\n")
    commit_all(tree, "second", author="bob", email="bob@ateam")

    landed = land(repo, find_work(repo, "t-0a"), squash=True)

    assert landed.squashed
    assert _log(repo.root) == ["Merge ateam/bob/t-0a into main (task t-0a)", "init"]
    assert run_git(repo.root, "rev-list", "--count", "--merges", "HEAD").strip() == "0"
    assert sorted(p.name for p in repo.root.glob("*.txt")) == ["notes.txt", "second.txt"]


@pytest.mark.parametrize("setting", ["false", "only"])
def test_the_users_merge_ff_setting_does_not_break_a_land(repo: Repository, setting: str) -> None:
    # merge.ff=false (always a merge commit) is a common setting; git refuses it with
    # --squash ("options '--squash' and '--no-ff.' cannot be used together").
    run_git(repo.root, "config", "merge.ff", setting)
    _task_with_change(repo)

    landed = land(repo, find_work(repo, "t-0a"), squash=True)

    assert landed.squashed and (repo.root / "notes.txt").read_text() == "agent\n"
    assert run_git(repo.root, "rev-list", "--count", "--merges", "HEAD").strip() == "0"


@pytest.mark.parametrize("squash", [False, True])
def test_an_agents_branch_stays_and_starts_afresh(repo: Repository, squash: bool) -> None:
    tree = ensure_worktree(repo, agent_branch("ada"), "main").path
    (tree / "ada.txt").write_text("ada\n")
    commit_all(tree, "ada's work", author="ada", email="ada@ateam")

    landed = land(repo, find_work(repo, "ada"), squash=squash)

    assert not landed.removed and tree.is_dir()
    assert run_git(tree, "rev-parse", "HEAD").strip() == landed.commit
    assert diff_of(repo, find_work(repo, "ada")).files == ()


@pytest.mark.parametrize("squash", [False, True])
def test_a_conflict_is_refused_and_the_main_tree_is_byte_for_byte_unchanged(
    repo: Repository, squash: bool
) -> None:
    tree = _task_with_change(repo, "README.md", "agent's words\n")
    commit_file(repo.root, "README.md", "person's words\n")
    (repo.root / "untracked.txt").write_text("mine\n")
    before = fingerprint(repo.root)
    state = git_state(repo.root)

    with pytest.raises(MergeConflict, match=r"conflicts in README\.md") as caught:
        land(repo, find_work(repo, "t-0a"), squash=squash)

    assert caught.value.detail["files"] == ["README.md"]
    assert caught.value.code == "git.conflict"
    assert fingerprint(repo.root) == before
    assert git_state(repo.root) == state
    assert tree.is_dir() and repo.branch_exists("ateam/bob/t-0a")  # the work is kept


def test_a_dirty_main_tree_is_refused(repo: Repository) -> None:
    _task_with_change(repo)
    (repo.root / "README.md").write_text("half-edited\n")
    before = fingerprint(repo.root)
    state = git_state(repo.root)

    with pytest.raises(TreeDirty, match=r"main working tree .* README\.md") as caught:
        land(repo, find_work(repo, "t-0a"))

    assert caught.value.code == "git.dirty"
    assert fingerprint(repo.root) == before and git_state(repo.root) == state


def test_an_untracked_file_the_merge_would_overwrite_is_refused(repo: Repository) -> None:
    _task_with_change(repo, "notes.txt", "agent\n")
    (repo.root / "notes.txt").write_text("the person's own, never added\n")
    before = fingerprint(repo.root)
    state = git_state(repo.root)

    with pytest.raises(TreeDirty, match=r"would be overwritten: notes\.txt"):
        land(repo, find_work(repo, "t-0a"))

    assert fingerprint(repo.root) == before and git_state(repo.root) == state
    assert (repo.root / "notes.txt").read_text() == "the person's own, never added\n"


def test_uncommitted_work_in_the_worktree_is_refused(repo: Repository) -> None:
    tree = _task_with_change(repo)
    (tree / "forgotten.txt").write_text("not committed\n")
    state = git_state(repo.root)

    with pytest.raises(TreeDirty, match=r"not committed in .*: forgotten\.txt") as caught:
        land(repo, find_work(repo, "t-0a"))

    assert caught.value.detail["files"] == ["forgotten.txt"]
    assert git_state(repo.root) == state


def test_a_missing_target_and_a_target_checked_out_elsewhere(
    repo: Repository, tmp_path: Path
) -> None:
    _task_with_change(repo)
    work = find_work(repo, "t-0a")
    with pytest.raises(WorkNotFound, match="branch nope does not exist"):
        land(repo, work, into="nope")
    with pytest.raises(UsageError, match="cannot land in itself"):
        land(repo, work, into=work.branch)

    run_git(repo.root, "worktree", "add", "-q", "-b", "release", str(tmp_path / "rel"))
    state = git_state(repo.root)
    with pytest.raises(GitError, match="release is checked out in"):
        land(repo, work, into="release")
    assert git_state(repo.root) == state


def test_discard_removes_worktree_and_branch(repo: Repository) -> None:
    before = git_state(repo.root)
    tree = _task_with_change(repo)
    (tree / "unsaved.txt").write_text("lost\n")

    discard(repo, find_work(repo, "t-0a"))

    assert git_state(repo.root) == before
    assert not tree.exists()


def test_a_worktree_removed_by_hand_does_not_block_its_committed_branch(
    repo: Repository,
) -> None:
    tree = _task_with_change(repo)
    shutil.rmtree(tree)  # a person tidying up; git still lists it until pruned

    landed = land(repo, find_work(repo, "t-0a"))

    assert landed.removed and (repo.root / "notes.txt").read_text() == "agent\n"
    assert "t-0a" not in run_git(repo.root, "worktree", "list", "--porcelain")


def test_a_nul_in_a_task_title_or_answer_is_no_crash(repo: Repository) -> None:
    # Board titles and a model's answer may hold a NUL; git's argv may not.
    tree = ensure_worktree(repo, task_branch("bob", "t-0a"), "main").path
    (tree / "notes.txt").write_text("agent\n")
    assert commit_all(tree, "title\0with a nul", author="bob", email="bob@ateam")
    assert run_git(tree, "log", "-1", "--format=%s").strip() == "titlewith a nul"

    land(repo, find_work(repo, "t-0a"), message="merge\0it (t-0a)")
    assert run_git(repo.root, "log", "-1", "--format=%s").strip() == "mergeit (t-0a)"
    with pytest.raises(UsageError, match="NUL"):
        land(repo, _task(repo), into="ma\0in")


def _task(repo: Repository) -> Work:
    tree = ensure_worktree(repo, task_branch("bob", "t-0b"), "main").path
    (tree / "more.txt").write_text("more\n")
    commit_all(tree, "more", author="bob", email="bob@ateam")
    return find_work(repo, "t-0b")


@pytest.mark.parametrize("bare", [False, True])
def test_a_project_in_a_linked_worktree_of_its_own_is_its_own_main_tree(
    repo_dir: Path, tmp_path: Path, bare: bool
) -> None:
    # People who run several agents often keep each checkout in a worktree of one
    # repository (or of a bare one): the project's checkout is then a linked worktree.
    if bare:
        origin = tmp_path / "bare.git"
        run_git(tmp_path, "clone", "-q", "--bare", str(repo_dir), str(origin))
        run_git(origin, "config", "user.name", "Person")
        run_git(origin, "config", "user.email", "person@example.com")
    else:
        origin = repo_dir
    project = tmp_path / "feature-checkout"
    run_git(origin, "worktree", "add", "-q", "-b", "feature", str(project), "main")
    main_before = run_git(origin, "rev-parse", "refs/heads/main")

    repo = Repository.open(project)
    assert repo.root == project.resolve() and repo.current_branch() == "feature"
    tree = ensure_worktree(repo, task_branch("bob", "t-0a"), repo.current_branch()).path
    assert tree.is_relative_to(project.resolve() / ".ateam" / "worktrees")
    assert Repository.open(tree).root == repo.root  # from its agent's worktree too
    (tree / "notes.txt").write_text("agent\n")
    commit_all(tree, "Task: notes", author="bob", email="bob@ateam")

    landed = land(repo, find_work(repo, "t-0a"))

    assert landed.into == "feature" and (project / "notes.txt").read_text() == "agent\n"
    assert run_git(project, "status", "--porcelain") == ""  # the checkout moved with it
    assert run_git(origin, "rev-parse", "refs/heads/main") == main_before
