"""``ateam diff|merge|discard`` (issue 27) as real processes, on real git repositories and
a real Redis: a task's branch seen, landed, refused without a trace, or thrown away."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pexpect
import pytest

from tests._gitwork import (
    commit_main,
    git,
    init_repo,
    snapshot,
    task_work,
    worktrees_and_branches,
)

from .conftest import run_ateam, subprocess_env, write_project

pytestmark = pytest.mark.integration


def ateam(root: Path, redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_ateam(*args, "--redis", redis_url, cwd=root)


def diff(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_ateam("diff", *args, cwd=root)


def one_line_error(done: subprocess.CompletedProcess[str], code: str) -> str:
    """The refusal: a non-zero exit, one ``error [code]`` line, no traceback."""
    assert done.returncode != 0, done.stdout
    line = done.stderr.strip()
    assert "\n" not in line and "Traceback" not in done.stderr, done.stderr
    assert line.startswith(f"error [{code}]: "), line
    return line


def add_task(root: Path, redis_url: str, title: str) -> dict[str, Any]:
    added = ateam(root, redis_url, "tasks", "add", title, "--json")
    assert added.returncode == 0, added.stderr
    task: dict[str, Any] = json.loads(added.stdout)
    return task


def board(root: Path, redis_url: str, task_id: str) -> dict[str, Any]:
    listed = ateam(root, redis_url, "tasks", "ls", "--json")
    assert listed.returncode == 0, listed.stderr
    return next(row for row in json.loads(listed.stdout) if row["id"] == task_id)


def finished_task(root: Path, redis_url: str, files: dict[str, str]) -> tuple[str, Path]:
    """A task zeus claimed, worked on its own branch and finished: its id and worktree."""
    task = add_task(root, redis_url, "write the parser")
    claimed = ateam(root, redis_url, "tasks", "claim", task["id"], "--as", "zeus")
    assert claimed.returncode == 0, claimed.stderr
    tree = task_work(root, "zeus", task["id"], files)
    done = ateam(root, redis_url, "tasks", "done", task["id"], "--as", "zeus", "--result", "ok")
    assert done.returncode == 0, done.stderr
    return task["id"], tree


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return init_repo(write_project(tmp_path / "p", "p"), {"a.txt": "one\ntwo\nthree\n"})


def test_diff_shows_a_tasks_files_then_its_diff_stat_and_json(root: Path, redis_url: str) -> None:
    task_id, tree = finished_task(
        root, redis_url, {"a.txt": "one\nTWO\nthree\n", "b.py": "x = 1\n"}
    )
    (tree / "c.txt").write_text("not committed yet\n")

    shown = diff(root, task_id)
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert out.startswith(f"ateam/zeus/{task_id} against main (3 files +3 -1, some not committed)")
    listing, _, body = out.partition("\n\n")
    assert listing.splitlines()[1:] == [
        "  M  a.txt  +1 -1",
        "  A  b.py  +1 -0",
        "  A  c.txt  +1 -0",
    ]
    assert "-two\n+TWO\n" in body and "+x = 1\n" in body and "+not committed yet\n" in body
    assert "\x1b[" not in out  # not a terminal: no colour

    stat = diff(root, task_id, "--stat")
    assert stat.returncode == 0 and stat.stdout == listing + "\n"

    wired = json.loads(diff(root, task_id, "--json").stdout)
    assert wired["branch"] == f"ateam/zeus/{task_id}" and wired["base"] == "main"
    assert wired["task_id"] == task_id and wired["uncommitted"] is True
    assert [f["path"] for f in wired["files"]] == ["a.txt", "b.py", "c.txt"]
    assert wired["omitted_bytes"] == 0 and "+TWO" in wired["diff"]

    cut = json.loads(diff(root, task_id, "--json", "--max-bytes", "20").stdout)
    assert len(cut["diff"].encode()) <= 20 and cut["omitted_bytes"] > 0 and cut["note"]
    plain = diff(root, task_id, "--max-bytes", "20").stdout
    assert plain.rstrip("\n").endswith(cut["note"])


def test_merge_lands_a_task_in_main_and_removes_its_worktree_and_branch(
    root: Path, redis_url: str
) -> None:
    task_id, tree = finished_task(root, redis_url, {"b.py": "x = 1\n"})
    before = board(root, redis_url, task_id)

    merged = ateam(root, redis_url, "merge", task_id)
    assert merged.returncode == 0, merged.stderr
    assert merged.stdout.startswith(f"ateam/zeus/{task_id} merged into main at ")
    assert (root / "b.py").read_text() == "x = 1\n"
    assert f"{task_id} done" in git(root, "log", "--format=%s", "main")
    assert not tree.exists()
    assert f"ateam/zeus/{task_id}" not in git(root, "branch", "--list", "ateam/*")
    assert git(root, "status", "--porcelain") == ""
    assert board(root, redis_url, task_id) == before  # the board is not changed by a merge
    # Gone, so a second merge is refused as unknown.
    one_line_error(ateam(root, redis_url, "merge", task_id), "work.not_found")


def test_merge_keep_and_squash(root: Path, redis_url: str) -> None:
    task_id, tree = finished_task(root, redis_url, {"b.py": "x = 1\n"})
    kept = ateam(root, redis_url, "merge", task_id, "--keep", "--json")
    assert kept.returncode == 0, kept.stderr
    landed = json.loads(kept.stdout)
    assert landed["removed"] is False and landed["into"] == "main"
    assert landed["commit"] == git(root, "rev-parse", "main").strip()
    assert tree.is_dir() and f"ateam/zeus/{task_id}" in git(root, "branch", "--list", "ateam/*")

    other, _ = finished_task(root, redis_url, {"c.py": "y = 2\n", "d.py": "z = 3\n"})
    head = git(root, "rev-parse", "main").strip()
    squashed = ateam(root, redis_url, "merge", other, "--squash")
    assert squashed.returncode == 0, squashed.stderr
    assert "squashed into main" in squashed.stdout
    # One new commit on main, with one parent: no merge commit, no branch history.
    assert git(root, "rev-list", "--parents", "-n", "1", "main").split()[1:] == [head]
    assert (root / "c.py").exists() and (root / "d.py").exists()


def test_a_conflicting_merge_is_refused_listing_the_files_and_main_is_untouched(
    root: Path, redis_url: str
) -> None:
    task_id, _ = finished_task(root, redis_url, {"a.txt": "one\nBRANCH\nthree\n", "n.txt": "n\n"})
    commit_main(root, {"a.txt": "one\nMAIN\nthree\n"})
    before = snapshot(root)

    refused = ateam(root, redis_url, "merge", task_id)
    line = one_line_error(refused, "git.conflict")
    assert "a.txt" in line and "n.txt" not in line
    assert snapshot(root) == before
    assert "<<<<<<<" not in (root / "a.txt").read_text()


def test_a_dirty_main_tree_and_a_claimed_task_are_refused_changing_nothing(
    root: Path, redis_url: str
) -> None:
    task_id, _ = finished_task(root, redis_url, {"b.py": "x = 1\n"})
    (root / "a.txt").write_text("edited by hand\n")
    before = snapshot(root)
    one_line_error(ateam(root, redis_url, "merge", task_id), "git.dirty")
    assert snapshot(root) == before
    git(root, "checkout", "--", "a.txt")

    busy = add_task(root, redis_url, "still going")
    claimed = ateam(root, redis_url, "tasks", "claim", busy["id"], "--as", "zeus")
    assert claimed.returncode == 0, claimed.stderr
    task_work(root, "zeus", busy["id"], {"e.py": "e = 1\n"})
    before = snapshot(root)
    line = one_line_error(ateam(root, redis_url, "merge", busy["id"]), "work.busy")
    assert "zeus" in line
    one_line_error(ateam(root, redis_url, "discard", busy["id"], "--yes"), "work.busy")
    assert snapshot(root) == before


def test_discard_removes_the_work_and_reopen_puts_the_task_back(root: Path, redis_url: str) -> None:
    task_id, tree = finished_task(root, redis_url, {"b.py": "x = 1\n"})
    refused = ateam(root, redis_url, "discard", task_id)  # stdin is not a terminal
    line = one_line_error(refused, "bad_request")
    assert "--yes" in line and refused.returncode == 4
    assert tree.is_dir()

    gone = ateam(root, redis_url, "discard", task_id, "--yes")
    assert gone.returncode == 0, gone.stderr
    assert not tree.exists() and git(root, "branch", "--list", "ateam/*") == ""
    assert board(root, redis_url, task_id)["status"] == "done"  # stays as it was

    again, tree = finished_task(root, redis_url, {"c.py": "y = 2\n"})
    reopened = ateam(root, redis_url, "discard", again, "--yes", "--reopen")
    assert reopened.returncode == 0, reopened.stderr
    assert f"reopened {again}" in reopened.stdout
    row = board(root, redis_url, again)
    assert row["status"] == "open" and row["assignee"] == "" and row["result"] == ""
    assert "discarded" in row["last_error"]
    assert not tree.exists() and git(root, "branch", "--list", "ateam/*") == ""
    assert not (root / "c.py").exists()


def test_bad_input_is_one_line_and_leaves_nothing_behind(
    root: Path, redis_url: str, tmp_path: Path
) -> None:
    task_id, _ = finished_task(root, redis_url, {"b.py": "x = 1\n"})
    before = worktrees_and_branches(root)
    for args in (("diff", "nobody"), ("merge", "t-0000000000"), ("discard", "nobody", "--yes")):
        done = ateam(root, redis_url, *args) if args[0] != "diff" else diff(root, *args[1:])
        one_line_error(done, "work.not_found")
        assert done.returncode == 4
    one_line_error(ateam(root, redis_url, "merge", task_id, "--into", "no-such"), "work.not_found")

    git(root, "checkout", "-q", "--detach")
    one_line_error(ateam(root, redis_url, "merge", task_id), "git.detached_head")
    git(root, "checkout", "-q", "main")
    assert worktrees_and_branches(root) == before

    plain = write_project(tmp_path / "plain", "plain")  # a project, no git
    one_line_error(diff(plain, "zeus"), "git.not_repository")
    one_line_error(ateam(plain, redis_url, "merge", "zeus"), "git.not_repository")
    assert not (plain / ".ateam" / "worktrees").exists()

    empty = write_project(tmp_path / "empty", "empty")  # git, but no commit yet
    git(empty, "init", "-q", "-b", "main")
    one_line_error(diff(empty, "zeus"), "git.no_commit")
    assert git(empty, "branch", "--list") == ""


def test_on_a_terminal_diff_is_coloured_and_discard_asks_first(root: Path, redis_url: str) -> None:
    task_id, tree = finished_task(root, redis_url, {"b.py": "x = 1\n"})

    def on_a_terminal(*args: str) -> pexpect.spawn:
        return pexpect.spawn(
            sys.executable,
            ["-m", "ateam", *args],
            cwd=str(root),
            env=subprocess_env(TERM="xterm-256color"),
            dimensions=(40, 120),
            encoding="utf-8",
            timeout=30,
        )

    shown = on_a_terminal("diff", task_id)
    shown.expect(pexpect.EOF)
    shown.close()
    assert shown.exitstatus == 0
    assert "\x1b[" in shown.before and "+x = 1" in shown.before  # coloured (Rich's diff lexer)

    asked = on_a_terminal("discard", task_id, "--redis", redis_url)
    asked.expect(r"delete branch ateam/zeus/\S+ and its worktree .*\[y/N\] ")
    asked.sendline("n")
    asked.expect("discard cancelled")
    asked.expect(pexpect.EOF)
    asked.close()
    assert asked.exitstatus != 0 and tree.is_dir()

    confirmed = on_a_terminal("discard", task_id, "--redis", redis_url)
    confirmed.expect(r"\[y/N\] ")
    confirmed.sendline("y")
    confirmed.expect(f"discarded ateam/zeus/{task_id}")
    confirmed.expect(pexpect.EOF)
    confirmed.close()
    assert confirmed.exitstatus == 0 and not tree.exists()


def test_shell_completion_offers_the_projects_branches(root: Path, redis_url: str) -> None:
    task_id, _ = finished_task(root, redis_url, {"b.py": "x = 1\n"})
    listed = run_ateam("__complete", "work", cwd=root)
    assert listed.returncode == 0 and listed.stdout.split() == [task_id]
    script = run_ateam("completion", "bash", cwd=root).stdout
    assert "__complete work" in script and "discard" in script
