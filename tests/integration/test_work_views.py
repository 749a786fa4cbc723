"""An agent's work seen and landed from every front end (issue 27): a real agent on the
scripted model writing a board task's file in its own worktree, then ``ateam diff`` and
``ateam merge``; ``/diff``, ``/merge`` and ``/discard`` in the plain console; MCP
``agent_diff`` through a real ``ateam mcp`` process."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import TextContent

from tests._gitwork import git, init_repo, task_work
from tests._wait import wait_for

from .conftest import (
    AgentFactory,
    Bus,
    ConsoleProcess,
    ateam_cmd,
    run_ateam,
    subprocess_env,
    write_project,
    write_scripted_project,
)

pytestmark = pytest.mark.integration

WAIT_S = 60.0


def ateam(root: Path, redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    done = run_ateam(*args, "--redis", redis_url, cwd=root)
    assert done.returncode == 0, done.stderr
    return done


def board_row(root: Path, redis_url: str, task_id: str) -> dict[str, Any]:
    rows = json.loads(ateam(root, redis_url, "tasks", "ls", "--json").stdout)
    row: dict[str, Any] = next(r for r in rows if r["id"] == task_id)
    return row


def finished(root: Path, redis_url: str, title: str, files: dict[str, str]) -> str:
    """A task zeus claimed, worked on its own branch (as its agent would) and finished."""
    task_id: str = json.loads(ateam(root, redis_url, "tasks", "add", title, "--json").stdout)["id"]
    ateam(root, redis_url, "tasks", "claim", task_id, "--as", "zeus")
    task_work(root, "zeus", task_id, files)
    ateam(root, redis_url, "tasks", "done", task_id, "--as", "zeus")
    return task_id


def test_a_real_agent_works_a_task_on_its_branch_and_it_is_diffed_and_merged(
    start_agent: AgentFactory, redis_url: str, tmp_path: Path
) -> None:
    turns = [
        {
            "text": "Writing it.",
            "tool_calls": [
                {"name": "fs.write", "args": {"path": "feature.txt", "content": "by zeus\n"}}
            ],
        },
        {"text": "Wrote feature.txt."},
    ]
    root = write_scripted_project(
        tmp_path / "w",
        "w",
        turns,
        allow=("fs.write",),
        agent_yaml={"take_tasks": True, "worktree": "task"},
    )
    init_repo(root)
    start_agent("w/zeus", cwd=root)
    added = ateam(root, redis_url, "tasks", "add", "write", "the", "feature", "--json")
    task_id = json.loads(added.stdout)["id"]

    done = wait_for(
        lambda: (row := board_row(root, redis_url, task_id))["status"] == "done" and row,
        WAIT_S,
        "the agent to finish the task",
    )
    assert done["work"]["branch"] == f"ateam/zeus/{task_id}"
    assert not (root / "feature.txt").exists()  # written in the task's worktree only

    shown = run_ateam("diff", task_id, cwd=root)  # git alone: no bus needed
    assert shown.returncode == 0, shown.stderr
    assert f"ateam/zeus/{task_id} against main" in shown.stdout
    assert "  A  feature.txt  +1 -0" in shown.stdout and "+by zeus" in shown.stdout
    # From outside the project: --project finds it where the agent's start noted its root.
    elsewhere = run_ateam("diff", task_id, "--project", "w", "--stat", cwd=tmp_path)
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert "  A  feature.txt  +1 -0" in elsewhere.stdout

    merged = ateam(root, redis_url, "merge", task_id)
    assert "merged into main" in merged.stdout
    assert (root / "feature.txt").read_text() == "by zeus\n"
    assert "feature.txt" in git(root, "log", "--name-only", "-n", "3", "main")
    assert git(root, "branch", "--list", "ateam/*") == ""


def start_console_in(root: Path, redis_url: str, tmp_path: Path) -> ConsoleProcess:
    stderr_path = tmp_path / "console.stderr"
    with stderr_path.open("wb") as err:
        proc = subprocess.Popen(
            ateam_cmd("console", "--no-ui", "--redis", redis_url),
            cwd=root,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=subprocess_env(),
        )
    return ConsoleProcess(proc, stderr_path)


def test_diff_merge_and_discard_in_the_plain_console(
    own_redis: Any, redis_url: str, tmp_path: Path
) -> None:
    root = init_repo(write_project(tmp_path / "c", "c"), {"a.txt": "a\n"})
    first = finished(root, redis_url, "first", {"b.py": "x = 1\n"})
    second = finished(root, redis_url, "second", {"c.py": "y = 2\n"})

    console = start_console_in(root, redis_url, tmp_path)
    try:
        console.session  # noqa: B018 (waits for the console to be up)
        console.send(f"/diff {first}")
        console.wait_line(f"ateam/zeus/{first} against main (1 file +1 -0)")
        console.wait_line("  A  b.py  +1 -0")
        console.wait_line("+x = 1")

        console.send(f"/merge {first}")
        console.wait_line(f"ateam/zeus/{first} merged into main at ")
        assert (root / "b.py").read_text() == "x = 1\n"
        assert f"{first} done" in git(root, "log", "--format=%s", "main")

        console.send(f"/discard {second}")
        console.send("no")  # the question, answered: anything but yes changes nothing
        console.wait_line("discard cancelled")
        assert f"ateam/zeus/{second}" in git(root, "branch", "--list", "ateam/*")
        console.send(f"/discard {second} --reopen")
        console.send("yes")
        console.wait_line(f"discarded ateam/zeus/{second}")
        console.wait_line(f"reopened {second}: second")
        assert git(root, "branch", "--list", "ateam/*") == ""
        assert board_row(root, redis_url, second)["status"] == "open"
    finally:
        console.close_stdin()
        console.wait_exit()
    assert "Traceback" not in console.output() + console.stderr_path.read_text()


async def test_agent_diff_over_mcp_is_bounded_with_a_note(redis_url: str, tmp_path: Path) -> None:
    root = init_repo(write_project(tmp_path / "m", "m"), {"a.txt": "a\n"})
    task_id = finished(
        root, redis_url, "big", {"big.txt": "".join(f"line {n}\n" for n in range(500))}
    )
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "ateam", "mcp", "--project", "m", "--redis", redis_url],
        env=subprocess_env(),
        cwd=root,
    )
    with (tmp_path / "mcp.stderr").open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            whole = await session.call_tool("agent_diff", {"target": task_id})
            assert not whole.is_error, whole.content
            found = whole.structured_content
            assert isinstance(found, dict)
            assert found["branch"] == f"ateam/zeus/{task_id}" and found["omitted_bytes"] == 0
            assert [f["path"] for f in found["files"]] == ["big.txt"]
            assert found["files"][0]["insertions"] == 500 and "+line 499" in found["diff"]

            cut = await session.call_tool("agent_diff", {"target": task_id, "max_bytes": 100})
            small = cut.structured_content
            assert isinstance(small, dict)
            assert len(small["diff"].encode()) <= 100 and small["omitted_bytes"] > 0
            assert small["note"] and str(small["omitted_bytes"]) in small["note"]
            assert small["files"] == found["files"]  # the list of files is never cut

            unknown = await session.call_tool("agent_diff", {"target": "nobody"})
            [content] = unknown.content
            assert unknown.is_error and isinstance(content, TextContent)
            assert content.text.startswith("work.not_found: ")
    assert "Traceback" not in (tmp_path / "mcp.stderr").read_text()


def test_an_agents_own_branch_is_not_landed_or_discarded_while_it_works(
    start_agent: AgentFactory, bus: Bus, redis_url: str, tmp_path: Path
) -> None:
    # worktree: agent; the agent proposes a patch and waits for its approval: still working.
    base = hashlib.sha256(b"a = 1\n").hexdigest()
    patch = {
        "name": "fs.patch",
        "args": {"path": "a.py", "content": "a = 2\n", "base_sha256": base},
    }
    root = write_scripted_project(
        tmp_path / "g",
        "g",
        [{"text": "May I?", "tool_calls": [patch]}],
        allow=("fs.*",),
        agent_yaml={"worktree": "agent"},
    )
    init_repo(root, {"a.py": "a = 1\n"})
    start_agent("g/zeus", cwd=root)
    ateam(root, redis_url, "send", "g/zeus", "make a two")
    wait_for(lambda: (bus.entry("g/zeus") or {}).get("state") == "waiting", WAIT_S, "zeus to wait")
    branches = git(root, "branch", "--list", "ateam/*")
    assert "ateam/zeus" in branches

    for args in (("merge", "zeus"), ("discard", "zeus", "--yes")):
        refused = run_ateam(*args, "--redis", redis_url, cwd=root)
        line = refused.stderr.strip()
        assert refused.returncode != 0 and line.startswith("error [work.busy]: g/zeus is waiting")
        assert "\n" not in line
    assert git(root, "branch", "--list", "ateam/*") == branches
    assert (root / ".ateam" / "worktrees" / "zeus").is_dir()

    # /diff alone: the attached agent's own branch (nothing applied yet: the patch waits).
    console = start_console_in(root, redis_url, tmp_path)
    try:
        console.send("/attach g/zeus")
        console.wait_line("attached to g/zeus")
        console.send("/diff")
        console.wait_line("ateam/zeus against main: no changes")
    finally:
        console.close_stdin()
        console.wait_exit()
