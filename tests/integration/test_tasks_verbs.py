"""``ateam tasks ls|add|claim|done`` (issue 12): ten claimant processes race for one task
and exactly one wins; the board shows the winner; only the winner may finish it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from .conftest import ateam_cmd, run_ateam, subprocess_env, write_project

pytestmark = pytest.mark.integration


def tasks(*args: str, redis_url: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_ateam("tasks", *args, "--redis", redis_url, cwd=cwd)


def test_ten_claimant_processes_one_winner(tmp_path: Path, redis_url: str) -> None:
    root = write_project(tmp_path / "proj", "proj")
    added = tasks(
        "add", "port", "the", "parser", "--priority", "3", "--json", redis_url=redis_url, cwd=root
    )
    assert added.returncode == 0, added.stderr
    task = json.loads(added.stdout)
    assert task["status"] == "open" and task["title"] == "port the parser"

    claimants = [
        subprocess.Popen(
            ateam_cmd("tasks", "claim", task["id"], "--as", f"proj/a{i}", "--redis", redis_url),
            cwd=root,
            env=subprocess_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(10)
    ]
    outcomes = [(i, *p.communicate(timeout=60), p.returncode) for i, p in enumerate(claimants)]

    winners = [(i, out) for i, out, _err, rc in outcomes if rc == 0]
    losers = [(err, rc) for _i, _out, err, rc in outcomes if rc != 0]
    assert len(winners) == 1 and len(losers) == 9, outcomes
    winner = f"proj/a{winners[0][0]}"
    assert winners[0][1].startswith(f"claimed {task['id']} by {winner}")
    for err, _rc in losers:
        line = err.strip()
        assert "\n" not in line and line.startswith("error [task.claimed]") and winner in line

    listed = tasks("ls", "--json", redis_url=redis_url, cwd=root)
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert row["id"] == task["id"] and row["status"] == "claimed" and row["assignee"] == winner

    other = "proj/a9" if winner != "proj/a9" else "proj/a0"
    refused = tasks("done", task["id"], "--as", other, redis_url=redis_url, cwd=root)
    assert refused.returncode != 0 and "task.claimed" in refused.stderr
    done = tasks(
        "done",
        task["id"],
        "--as",
        winner,
        "--result",
        "merged",
        "--json",
        redis_url=redis_url,
        cwd=root,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "done"
    table = tasks("ls", "--status", "done", redis_url=redis_url, cwd=root)
    assert task["id"] in table.stdout and "port the parser" in table.stdout


def test_bad_input_is_refused_and_changes_nothing(tmp_path: Path, redis_url: str) -> None:
    root = write_project(tmp_path / "proj", "proj")
    unknown_dep = tasks("add", "x", "--depends-on", "t-0123456789", redis_url=redis_url, cwd=root)
    assert unknown_dep.returncode == 4 and "t-0123456789" in unknown_dep.stderr
    missing = tasks("claim", "t-0123456789", "--as", "proj/a", redis_url=redis_url, cwd=root)
    assert missing.returncode != 0 and "task.not_found" in missing.stderr
    # A bare --as is an agent of the project here (proj/a): the task is what is missing.
    bare = tasks("claim", "t-0123456789", "--as", "a", redis_url=redis_url, cwd=root)
    assert bare.returncode != 0 and "task.not_found" in bare.stderr
    empty = tasks("ls", redis_url=redis_url, cwd=root)
    assert empty.returncode == 0 and "no tasks" in empty.stdout
    nowhere = run_ateam("tasks", "ls", "--redis", redis_url, cwd=tmp_path)
    assert nowhere.returncode == 4 and "no project here" in nowhere.stderr
