"""Agents that work in git worktrees (issue 27 §1), with real agents and real repositories.

``worktree: task`` agents pull board tasks on the ``scripted`` model and write files with
``fs.write``; the tests look where a user would: the files in each worktree and in the
main tree, ``git log`` and ``git worktree list``, ``ateam tasks ls`` and the agent's exit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests._wait import wait_for

from .conftest import (
    AgentFactory,
    Bus,
    ConsoleFactory,
    attach_and_send,
    run_ateam,
    wait_serving,
)

pytestmark = pytest.mark.integration

WAIT_S = 45.0
GREETING = "greeting.txt"


# --- a repository and a project ----------------------------------------------------------


def git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout


def git_repo(root: Path, *, commit: bool = True) -> Path:
    """A repository on ``main`` with one commit (a README), ``.ateam/`` ignored."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", "Tester")
    git(root, "config", "user.email", "tester@example.invalid")
    (root / ".gitignore").write_text(".ateam/\n")
    (root / "README.md").write_text("# the project\n")
    if commit:
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "first")
    return root


def project(root: Path, name: str, agents: dict[str, list[dict[str, Any]]], **spec: Any) -> Path:
    """``agents``: name → the scripted turns of its own model; ``spec`` goes in every
    ``agent.yaml`` (``worktree: task`` ...)."""
    ateam = root / ".ateam"
    ateam.mkdir(parents=True, exist_ok=True)
    (ateam / "project.yaml").write_text(yaml.safe_dump({"name": name, **spec.pop("project", {})}))
    models = [
        {"id": f"script-{agent}", "provider": "scripted", "script": f"{agent}.yaml"}
        for agent in agents
    ]
    (ateam / "models.yaml").write_text(yaml.safe_dump({"models": models}))
    for agent, turns in agents.items():
        (ateam / f"{agent}.yaml").write_text(yaml.safe_dump({"turns": turns}))
        (ateam / "agents" / agent).mkdir(parents=True)
        body = {"model": f"script-{agent}", "tools": {"allow": ["fs.*", "os.exec"]}, **spec}
        (ateam / "agents" / agent / "agent.yaml").write_text(yaml.safe_dump(body))
    return root


def write_turn(content: str, text: str = "Writing it.", then: str | None = None) -> dict[str, Any]:
    calls: list[dict[str, Any]] = [
        {"name": "fs.write", "args": {"path": GREETING, "content": content}}
    ]
    if then is not None:
        calls.append({"name": "os.exec", "args": {"cmd": then}})
    return {"text": text, "tool_calls": calls}


def tasks(root: Path, redis_url: str, *args: str) -> Any:
    done = run_ateam("tasks", *args, "--json", "--redis", redis_url, cwd=root)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def done_tasks(root: Path, redis_url: str, ids: set[str]) -> dict[str, dict[str, Any]] | None:
    rows = {row["id"]: row for row in tasks(root, redis_url, "ls")}
    if all(rows[i]["status"] == "done" for i in ids):
        return rows
    failed = [rows[i] for i in ids if rows[i]["status"] == "failed"]
    assert not failed, failed
    return None


def worktrees(root: Path) -> list[str]:
    """``git worktree list``: the directory of each, the main tree's first."""
    lines = git(root, "worktree", "list", "--porcelain").splitlines()
    return [line.removeprefix("worktree ") for line in lines if line.startswith("worktree ")]


def branches(root: Path) -> list[str]:
    return git(root, "branch", "--format=%(refname:short)").split()


# --- worktree: task ------------------------------------------------------------------------


def test_two_agents_pulling_tasks_at_once_never_meet_and_each_task_has_its_commit(
    start_agent: AgentFactory, redis_url: str, tmp_path: Path
) -> None:
    root = git_repo(tmp_path / "w")
    gate = tmp_path / "gate"
    gate.mkdir()

    def script(agent: str) -> list[dict[str, Any]]:
        # Each holds its task until both run: at once, and one task each.
        both = f"[ -f {gate}/a ] && [ -f {gate}/b ]"
        meet = f"touch {gate}/{agent}; until {both}; do sleep 0.05; done"
        return [write_turn(f"from {agent}\n", then=meet), {"text": f"Greeting written by {agent}."}]

    project(root, "w", {"a": script("a"), "b": script("b")}, worktree="task", take_tasks=True)
    start_agent("w/a", cwd=root)
    start_agent("w/b", cwd=root)
    first = tasks(root, redis_url, "add", "Write", "the", "first", "greeting")
    second = tasks(root, redis_url, "add", "Write", "the", "second", "greeting")
    ids = {first["id"], second["id"]}

    rows = wait_for(lambda: done_tasks(root, redis_url, ids), WAIT_S, "both tasks to be done")
    assert {rows[i]["assignee"] for i in ids} == {"w/a", "w/b"}  # one each, at once
    assert not (root / GREETING).exists()  # the main tree has neither edit
    titles = {first["id"]: "Write the first greeting", second["id"]: "Write the second greeting"}
    for task_id in ids:
        row = rows[task_id]
        name = row["assignee"].split("/")[1]
        work = row["work"]
        branch = f"ateam/{name}/{task_id}"
        assert work["branch"] == branch and work["base"] == "main"
        tree = Path(work["worktree"])
        assert tree == root / ".ateam" / "worktrees" / name / task_id
        assert (tree / GREETING).read_text() == f"from {name}\n"  # its own, not the other's
        assert len(work["commit"]) == 40
        assert (work["files"], work["insertions"], work["deletions"]) == (1, 1, 0)
        log = git(root, "log", "-1", "--format=%H%n%an <%ae>%n%s%n%b", branch).splitlines()
        assert log[:3] == [
            work["commit"],
            f"{name} (ateam) <{name}@w.ateam.invalid>",
            titles[task_id],
        ]
        assert f"Greeting written by {name}." in log
        assert git(root, "show", f"{branch}:{GREETING}") == f"from {name}\n"
        assert git(tree, "status", "--porcelain") == ""  # all of it committed
    assert git(root, "status", "--porcelain") == ""  # nor is the main tree dirtied

    table = run_ateam("tasks", "ls", "--redis", redis_url, cwd=root)
    assert table.returncode == 0, table.stderr
    for task_id in ids:
        work = rows[task_id]["work"]
        shown = f"{work['branch']} @{work['commit'][:10]} 1 file +1 -0"
        assert any(task_id in line and shown in line for line in table.stdout.splitlines())


def test_a_task_done_hook_judges_the_task_in_its_worktree(
    start_agent: AgentFactory, start_console: ConsoleFactory, redis_url: str, tmp_path: Path
) -> None:
    root = git_repo(tmp_path / "h")
    seen = tmp_path / "hook-cwd"
    # Refuses unless the file the task wrote is where it runs: only in the task's worktree.
    hook = f'pwd -P >> {seen}; test -f {GREETING} || {{ echo "no {GREETING} here" >&2; exit 2; }}'
    turns = [write_turn("hello\n"), {"text": "Done."}]
    project(
        root, "h", {"zeus": turns}, worktree="task", take_tasks=True,
        project={"hooks": {"task_done": hook}},
    )  # fmt: skip
    start_agent("h/zeus", cwd=root)
    task = tasks(root, redis_url, "add", "Say", "hello")

    rows = wait_for(lambda: done_tasks(root, redis_url, {task["id"]}), WAIT_S, "the task done")
    tree = Path(rows[task["id"]]["work"]["worktree"])
    assert seen.read_text().splitlines() == [os.path.realpath(tree)]  # asked once, there
    assert rows[task["id"]]["result"] == "Done."

    # /tasks shows the task's branch, commit and diffstat.
    work = rows[task["id"]]["work"]
    console = start_console()
    attach_and_send(console, "h/zeus", "/tasks")
    shown = console.wait_line(lambda line: line.startswith(task["id"]))
    assert f"{work['branch']} @{work['commit'][:10]} 1 file +1 -0" in shown


def test_a_before_tool_hook_judges_a_tasks_call_in_its_worktree(
    start_agent: AgentFactory, redis_url: str, tmp_path: Path
) -> None:
    root = git_repo(tmp_path / "b")
    seen = tmp_path / "hook-cwd"
    turns = [write_turn("hello\n"), {"text": "Done."}]
    project(
        root, "b", {"zeus": turns}, worktree="task", take_tasks=True,
        project={"hooks": {"before_tool": f"pwd -P >> {seen}"}},
    )  # fmt: skip
    start_agent("b/zeus", cwd=root)
    task = tasks(root, redis_url, "add", "Say", "hello")

    rows = wait_for(lambda: done_tasks(root, redis_url, {task["id"]}), WAIT_S, "the task done")
    tree = Path(rows[task["id"]]["work"]["worktree"])
    # Where the call it judges runs: a guard reading files judges the task's, not main's.
    assert seen.read_text().splitlines() == [os.path.realpath(tree)]


def test_an_agent_killed_mid_task_goes_on_in_the_same_worktree(
    start_agent: AgentFactory, bus: Bus, redis_url: str, tmp_path: Path
) -> None:
    root = git_repo(tmp_path / "k")
    mark = tmp_path / "started"
    # The first run waits (killed meanwhile); the run after the restart does not.
    wait = f"if [ -f {mark} ]; then echo again; else echo $$ > {mark}; exec sleep 120; fi"
    turns = [write_turn("hello\n", then=wait), {"text": "Written."}]
    project(root, "k", {"zeus": turns}, worktree="task", take_tasks=True)
    first = start_agent("k/zeus", cwd=root)
    task = tasks(root, redis_url, "add", "Say", "hello")
    branch = f"ateam/zeus/{task['id']}"
    tree = root / ".ateam" / "worktrees" / "zeus" / task["id"]

    wait_for(lambda: mark.exists() and mark.read_text().strip(), WAIT_S, "the task to be running")
    # Shown while it runs: its branch and worktree, nothing committed yet.
    running = next(row for row in tasks(root, redis_url, "ls") if row["id"] == task["id"])
    assert running["status"] == "claimed"
    assert running["work"]["branch"] == branch and running["work"]["commit"] == ""
    assert (tree / GREETING).exists()
    first.kill9()
    try:
        os.kill(int(mark.read_text()), signal.SIGKILL)  # its sleep, orphaned
    except (ProcessLookupError, ValueError):
        pass

    second = start_agent("k/zeus", cwd=root, wait=False)
    wait_serving(bus, second)
    rows = wait_for(lambda: done_tasks(root, redis_url, {task["id"]}), WAIT_S, "the task done")
    assert [str(tree)] == [w for w in worktrees(root) if w != str(root)]  # one, not a second
    assert branches(root) == sorted(["main", branch])
    assert rows[task["id"]]["work"]["worktree"] == str(tree)
    assert git(root, "show", f"{branch}:{GREETING}") == "hello\n"
    assert git(root, "log", "-1", "--format=%s", branch).strip() == "Say hello"


# --- refused at start -------------------------------------------------------------------


def refused_start(start_agent: AgentFactory, root: Path, agent: str) -> tuple[int, list[str]]:
    proc = start_agent(agent, cwd=root, wait=False)
    code = proc.wait_exit()
    return code, [line for line in proc.stderr().splitlines() if line.strip()]


@pytest.mark.parametrize("mode", ["task", "agent"])
def test_a_project_that_is_not_a_repository_is_refused_at_start(
    start_agent: AgentFactory, tmp_path: Path, mode: str
) -> None:
    root = tmp_path / "n"
    project(root, "n", {"zeus": []}, worktree=mode, take_tasks=True)
    code, lines = refused_start(start_agent, root, "n/zeus")
    assert code == 12
    assert len(lines) == 1 and "config.invalid" in lines[0] and "git repository" in lines[0]
    assert not (root / ".ateam" / "worktrees").exists()


@pytest.mark.parametrize("mode", ["task", "agent"])
@pytest.mark.parametrize("kind", ["no_commit", "detached_head"])
def test_a_repository_with_nothing_to_branch_from_is_refused_and_nothing_made(
    start_agent: AgentFactory, tmp_path: Path, mode: str, kind: str
) -> None:
    root = git_repo(tmp_path / "r", commit=kind != "no_commit")
    if kind == "detached_head":
        git(root, "checkout", "-q", "--detach")
    before = (worktrees(root), branches(root))
    project(root, "r", {"zeus": []}, worktree=mode, take_tasks=True)
    code, lines = refused_start(start_agent, root, "r/zeus")
    assert code == 12  # final: a supervisor does not restart it
    assert len(lines) == 1 and f"git.{kind}" in lines[0]
    assert (worktrees(root), branches(root)) == before
    assert not (root / ".ateam" / "worktrees").exists()


def test_a_base_branch_that_does_not_exist_is_refused_at_start(
    start_agent: AgentFactory, tmp_path: Path
) -> None:
    root = git_repo(tmp_path / "x")
    before = (worktrees(root), branches(root))
    project(root, "x", {"zeus": []}, worktree="agent", base_branch="develop")
    code, lines = refused_start(start_agent, root, "x/zeus")
    assert code == 12 and len(lines) == 1
    assert "config.invalid" in lines[0] and "develop" in lines[0]
    assert (worktrees(root), branches(root)) == before


def test_an_agent_branch_a_person_made_is_refused_at_start(
    start_agent: AgentFactory, tmp_path: Path
) -> None:
    root = git_repo(tmp_path / "b")
    git(root, "branch", "ateam/zeus")  # not ateam's: it has no recorded base
    before = (worktrees(root), branches(root))
    project(root, "b", {"zeus": []}, worktree="agent")
    code, lines = refused_start(start_agent, root, "b/zeus")
    assert code == 12 and len(lines) == 1 and "git.branch_exists" in lines[0]
    assert (worktrees(root), branches(root)) == before


# --- worktree: agent ----------------------------------------------------------------------


def test_an_agent_with_its_own_worktree_writes_there_and_commits_each_task(
    start_agent: AgentFactory, redis_url: str, tmp_path: Path
) -> None:
    root = git_repo(tmp_path / "o")
    turns = [write_turn("mine\n"), {"text": "Wrote it."}]
    project(root, "o", {"zeus": turns}, worktree="agent")
    start_agent("o/zeus", cwd=root)
    tree = root / ".ateam" / "worktrees" / "zeus"
    assert worktrees(root) == [str(root), str(tree)]  # made at start

    sent = run_ateam("send", "o/zeus", "Write my greeting\nin greeting.txt", "--wait",
                     "--redis", redis_url, cwd=root)  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    assert (tree / GREETING).read_text() == "mine\n"
    assert not (root / GREETING).exists()
    wait_for(
        lambda: git(root, "log", "-1", "--format=%s", "ateam/zeus").strip() == "Write my greeting",
        WAIT_S,
        "the task's commit on ateam/zeus",
    )
    assert git(root, "show", f"ateam/zeus:{GREETING}") == "mine\n"
    assert git(root, "log", "-1", "--format=%s", "main").strip() == "first"  # base untouched
