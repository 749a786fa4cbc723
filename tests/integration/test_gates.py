"""Quality-gate hooks with real agents on the scripted model (issue 26 §3).

Each hook is a real shell command in ``project.yaml`` ``hooks:``; the tests check what a
user would: the board, the event stream, the history file and the exit of ``ateam``.
"""

from __future__ import annotations

import json
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
    history_turns,
    run_ateam,
    write_scripted_project,
)

pytestmark = pytest.mark.integration

WAIT_S = 30.0


def with_hooks(root: Path, name: str, **hooks: str) -> Path:
    """Give ``root``'s project.yaml the ``hooks`` section."""
    path = root / ".ateam" / "project.yaml"
    path.write_text(yaml.safe_dump({"name": name, "hooks": hooks}))
    return root


def exec_turn(cmd: str, text: str = "Running it.") -> dict[str, Any]:
    return {"text": text, "tool_calls": [{"name": "os.exec", "args": {"cmd": cmd}}]}


def tasks(root: Path, redis_url: str, *args: str) -> Any:
    done = run_ateam("tasks", *args, "--json", "--redis", redis_url, cwd=root)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def of_type(bus: Bus, agent: str, kind: str) -> list[dict[str, Any]]:
    return [body for _, body in bus.events(agent) if body.get("type") == kind]


def verdict(note: str) -> str:
    """What a hook's ``system`` turn in the history says happened."""
    words = ("asked about", "refused", "accepted", "failed")
    return next(word for word in words if word in note).split()[0]


def board_task(root: Path, redis_url: str, task_id: str) -> dict[str, Any]:
    rows: list[dict[str, Any]] = tasks(root, redis_url, "ls")
    return next(row for row in rows if row["id"] == task_id)


def test_a_refused_task_done_keeps_the_task_and_the_agent_on_it_until_it_passes(
    start_agent: AgentFactory, bus: Bus, redis_url: str, tmp_path: Path
) -> None:
    # The gate passes once fixed.txt exists; the model writes it after reading why not.
    gate = 'test -f fixed.txt || { echo "tests fail: fixed.txt is missing" >&2; exit 2; }'
    turns = [
        {"text": "Done, I think."},
        exec_turn("touch fixed.txt", "The gate says fixed.txt is missing; creating it."),
        {"text": "Fixed and done."},
    ]
    root = write_scripted_project(tmp_path / "g", "g", turns, agent_yaml={"take_tasks": True})
    with_hooks(root, "g", task_done=gate)
    start_agent("g/zeus", cwd=root)
    task = tasks(root, redis_url, "add", "fix", "the", "parser")

    done = wait_for(
        lambda: (row := board_task(root, redis_url, task["id"]))["status"] == "done" and row,
        WAIT_S,
        "the gated task to be done",
    )
    assert done["result"] == "Fixed and done."  # not the refused first answer
    assert done["assignee"] == "g/zeus"
    assert (root / "fixed.txt").exists()

    runs = [r for r in of_type(bus, "g/zeus", "hook.run") if r["hook"] == "task_done"]
    assert [(r["refused"], r["exit"]) for r in runs] == [(True, 2), (False, 0)]
    assert runs[0]["feedback"] == "tests fail: fixed.txt is missing"
    # One task throughout: one start, the same queue item in every round.
    starts = of_type(bus, "g/zeus", "task.start")
    assert len(starts) == 1 and {r["task_id"] for r in runs} == {starts[0]["task_id"]}

    turns_kept = history_turns(root)
    fed = [t for t in turns_kept if t["role"] == "user" and t["source"] == "hook:task_done"]
    assert len(fed) == 1 and "tests fail: fixed.txt is missing" in fed[0]["content"]
    assert fed[0]["task_id"] == starts[0]["task_id"]
    records = [t for t in turns_kept if t["role"] == "system" and t["source"] == "hook:task_done"]
    assert [verdict(t["content"]) for t in records] == ["asked", "refused", "asked", "accepted"]


def test_a_task_done_gate_that_never_passes_fails_the_task_after_three_refusals(
    start_agent: AgentFactory, bus: Bus, redis_url: str, tmp_path: Path
) -> None:
    turns = [{"text": f"Attempt {n}."} for n in range(1, 6)]
    root = write_scripted_project(tmp_path / "n", "n", turns, agent_yaml={"take_tasks": True})
    with_hooks(root, "n", task_done='echo "still red" >&2; exit 2')
    start_agent("n/zeus", cwd=root)
    task = tasks(root, redis_url, "add", "make", "it", "green")

    failed = wait_for(
        lambda: (row := board_task(root, redis_url, task["id"]))["status"] == "failed" and row,
        WAIT_S,
        "the task to fail on the gate",
    )
    assert "hook.refused" in failed["reason"] and "still red" in failed["reason"]
    runs = [r for r in of_type(bus, "n/zeus", "hook.run") if r["hook"] == "task_done"]
    assert len(runs) == 3 and all(r["refused"] for r in runs)
    warns = [w for w in of_type(bus, "n/zeus", "warn") if w.get("code") == "hook.refused"]
    assert len(warns) == 1 and "still red" in warns[0]["msg"]


def test_a_before_tool_refusal_is_the_tool_result_and_the_tool_does_not_run(
    start_agent: AgentFactory, bus: Bus, redis_url: str, tmp_path: Path
) -> None:
    guard = (
        "if grep -q 'rm -rf'; then echo 'no rm -rf here; delete files one by one' >&2; exit 2; fi"
    )
    turns = [exec_turn("rm -rf build"), exec_turn("echo fine"), {"text": "Understood."}]
    root = write_scripted_project(tmp_path / "t", "t", turns)
    with_hooks(root, "t", before_tool=guard)
    (root / "build").mkdir()
    start_agent("t/zeus", cwd=root)
    sent = run_ateam("send", "t/zeus", "clean up", "--redis", redis_url, cwd=root)
    assert sent.returncode == 0, sent.stderr

    wait_for(lambda: of_type(bus, "t/zeus", "task.end"), WAIT_S, "the task to end")
    assert (root / "build").is_dir()  # refused: never run
    ends = of_type(bus, "t/zeus", "tool.end")
    assert [(e["ok"], e.get("code")) for e in ends] == [(False, "hook.refused"), (True, None)]
    results = [t for t in history_turns(root) if t["role"] == "tool"]
    assert results[0]["content"].startswith("error [hook.refused]")
    assert "no rm -rf here; delete files one by one" in results[0]["content"]
    runs = of_type(bus, "t/zeus", "hook.run")
    assert [(r["tool"], r["refused"]) for r in runs] == [("os.exec", True), ("os.exec", False)]


def test_a_refused_task_created_writes_nothing_and_says_why_in_one_line(
    redis_url: str, tmp_path: Path
) -> None:
    gate = "grep -q urgent || { echo 'say why it is urgent' >&2; exit 2; }"
    root = with_hooks(write_scripted_project(tmp_path / "c", "c", []), "c", task_created=gate)

    refused = run_ateam("tasks", "add", "tidy", "up", "--redis", redis_url, cwd=root)
    assert refused.returncode != 0
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error [hook.refused]")
    assert "say why it is urgent" in lines[0]
    assert tasks(root, redis_url, "ls") == []

    added = tasks(root, redis_url, "add", "urgent:", "the", "build", "is", "red")
    assert added["title"] == "urgent: the build is red"
    assert [row["id"] for row in tasks(root, redis_url, "ls")] == [added["id"]]


def test_a_task_added_from_outside_the_project_is_judged_once_an_agent_of_it_ran(
    start_agent: AgentFactory, redis_url: str, tmp_path: Path
) -> None:
    # A coding agent's own `ateam mcp`, or a verb run with --project from elsewhere, has
    # no project around its working directory: the agent's start notes where it lives.
    gate = "grep -q urgent || { echo 'say why it is urgent' >&2; exit 2; }"
    root = with_hooks(write_scripted_project(tmp_path / "o", "o", []), "o", task_created=gate)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    start_agent("o/zeus", cwd=root)

    add = ("tasks", "add", "tidy", "up", "--project", "o", "--redis", redis_url)
    refused = run_ateam(*add, cwd=elsewhere)
    assert refused.returncode != 0
    assert refused.stderr.strip().startswith("error [hook.refused]"), refused.stderr
    assert "say why it is urgent" in refused.stderr
    assert tasks(root, redis_url, "ls") == []


def test_the_tasks_add_tool_is_gated_by_task_created(
    start_agent: AgentFactory, bus: Bus, redis_url: str, tmp_path: Path
) -> None:
    gate = "grep -q '\"detail\": \"\"' && { echo 'give the task a detail' >&2; exit 2; } || exit 0"
    add = {"name": "tasks.add", "args": {"title": "write docs"}}
    turns = [{"text": "Adding.", "tool_calls": [add]}, {"text": "It was refused."}]
    root = write_scripted_project(tmp_path / "a", "a", turns, allow=("tasks.*",))
    with_hooks(root, "a", task_created=gate)
    start_agent("a/zeus", cwd=root)
    sent = run_ateam("send", "a/zeus", "plan the docs", "--redis", redis_url, cwd=root)
    assert sent.returncode == 0, sent.stderr

    wait_for(lambda: of_type(bus, "a/zeus", "task.end"), WAIT_S, "the task to end")
    result = next(t for t in history_turns(root) if t["role"] == "tool")
    assert result["content"].startswith("error [hook.refused]")
    assert "give the task a detail" in result["content"]
    assert tasks(root, redis_url, "ls") == []


def test_an_agent_idle_refusal_is_the_next_input_once_per_finished_task(
    start_agent: AgentFactory, bus: Bus, redis_url: str, tmp_path: Path
) -> None:
    turns = [{"text": "Hello."}, {"text": "Changelog updated."}]
    root = write_scripted_project(tmp_path / "i", "i", turns)
    # Always refuses: the bound, not the hook, ends the loop.
    with_hooks(root, "i", agent_idle="echo 'update the changelog first' >&2; exit 2")
    start_agent("i/zeus", cwd=root)
    sent = run_ateam("send", "i/zeus", "say hello", "--redis", redis_url, cwd=root)
    assert sent.returncode == 0, sent.stderr

    wait_for(lambda: len(of_type(bus, "i/zeus", "task.end")) == 2, WAIT_S, "two tasks")
    wait_for(lambda: (bus.entry("i/zeus") or {}).get("state") == "idle", WAIT_S, "the agent idle")
    starts = of_type(bus, "i/zeus", "task.start")
    assert [s["source"] for s in starts] == ["cli", "hook:agent_idle"]
    assert "update the changelog first" in starts[1]["text"]
    runs = [r for r in of_type(bus, "i/zeus", "hook.run") if r["hook"] == "agent_idle"]
    assert len(runs) == 1 and runs[0]["refused"]
    assert len(of_type(bus, "i/zeus", "task.start")) == 2  # went idle, no third round


def test_a_hook_that_exits_1_is_reported_as_failed_and_does_not_refuse(
    start_agent: AgentFactory, bus: Bus, redis_url: str, tmp_path: Path
) -> None:
    root = write_scripted_project(
        tmp_path / "f", "f", [{"text": "All done."}], agent_yaml={"take_tasks": True}
    )
    with_hooks(root, "f", task_done="echo 'pytest: command not configured' >&2; exit 1")
    start_agent("f/zeus", cwd=root)
    task = tasks(root, redis_url, "add", "ship", "it")

    done = wait_for(
        lambda: (row := board_task(root, redis_url, task["id"]))["status"] == "done" and row,
        WAIT_S,
        "the task to be done despite the broken hook",
    )
    assert done["result"] == "All done."
    runs = of_type(bus, "f/zeus", "hook.run")
    assert [(r["hook"], r["failed"], r["refused"], r["exit"]) for r in runs] == [
        ("task_done", True, False, 1)
    ]
    warns = [w for w in of_type(bus, "f/zeus", "warn") if w.get("code") == "hook.failed"]
    assert len(warns) == 1 and "pytest: command not configured" in warns[0]["msg"]
    kept = [t for t in history_turns(root) if t["source"] == "hook:task_done"]
    assert [(t["role"], verdict(t["content"])) for t in kept] == [
        ("system", "asked"),
        ("system", "failed"),
    ]


def test_the_gates_example_fixes_its_bug_before_the_task_is_done(
    start_agent: AgentFactory, bus: Bus, redis_url: str, tmp_path: Path
) -> None:
    import shutil

    root = tmp_path / "gates"
    shutil.copytree(Path(__file__).parents[2] / "examples/gates", root)
    start_agent("gates/coder", cwd=root)
    task = tasks(root, redis_url, "add", "make", "add", "work")

    done = wait_for(
        lambda: (row := board_task(root, redis_url, task["id"]))["status"] == "done" and row,
        WAIT_S,
        "the example's task to pass its gate",
    )
    assert done["result"] == "Fixed: add() adds, and the tests pass."
    assert "return a + b" in (root / "calc.py").read_text()
    runs = of_type(bus, "gates/coder", "hook.run")
    assert [r["refused"] for r in runs] == [True, False]
    assert "test_adds" in runs[0]["feedback"]


def test_a_coding_agent_gets_a_refused_task_done_as_its_next_prompt(
    start_agent: AgentFactory, bus: Bus, redis_url: str, tmp_path: Path
) -> None:
    from .conftest import write_acp_project

    script = {
        "prompts": [
            {"steps": [{"text": "Done quickly."}]},
            {"steps": [{"text": "Added the test; done."}]},
        ]
    }
    project = write_acp_project(tmp_path / "r", "r", script, agent_yaml={"take_tasks": True})
    # Refuses the first answer only (it leaves itself a mark), accepts the next.
    gate = "test -f .asked && exit 0; touch .asked; echo 'add a regression test' >&2; exit 2"
    with_hooks(project.root, "r", task_done=gate)
    start_agent("r/zeus", cwd=project.root)
    task = tasks(project.root, redis_url, "add", "fix", "the", "flaky", "test")

    done = wait_for(
        lambda: (
            (row := board_task(project.root, redis_url, task["id"]))["status"] == "done" and row
        ),
        WAIT_S,
        "the coding agent's task to pass its gate",
    )
    assert done["result"] == "Added the test; done."
    first, second = project.sent("session/prompt")
    assert "fix the flaky test" in first["text"]
    assert "add a regression test" in second["text"]
    assert len(of_type(bus, "r/zeus", "task.start")) == 1


def test_the_tasks_done_tool_is_gated_by_task_done(
    start_agent: AgentFactory, bus: Bus, redis_url: str, tmp_path: Path
) -> None:
    root = write_scripted_project(tmp_path / "d", "d", [], allow=("tasks.*",))
    with_hooks(root, "d", task_done="echo 'the tests are red' >&2; exit 2")
    task = tasks(root, redis_url, "add", "fix", "the", "build")
    claim = {"name": "tasks.claim", "args": {"id": task["id"]}}
    done = {"name": "tasks.done", "args": {"id": task["id"], "result": "fixed"}}
    turns = [{"text": "Taking it.", "tool_calls": [claim, done]}, {"text": "Not yet."}]
    (root / ".ateam" / "script.yaml").write_text(yaml.safe_dump({"turns": turns}))
    start_agent("d/zeus", cwd=root)
    sent = run_ateam("send", "d/zeus", "fix the build", "--redis", redis_url, cwd=root)
    assert sent.returncode == 0, sent.stderr

    wait_for(lambda: of_type(bus, "d/zeus", "task.end"), WAIT_S, "the task to end")
    results = [t for t in history_turns(root) if t["role"] == "tool"]
    assert [t["ok"] for t in results] == [True, False]
    assert results[1]["content"].startswith("error [hook.refused]")
    assert "the tests are red" in results[1]["content"]
    row = board_task(root, redis_url, task["id"])
    assert (row["status"], row["assignee"]) == ("claimed", "d/zeus")


def test_a_refused_tasks_add_in_the_console_is_one_line_and_writes_nothing(
    start_agent: AgentFactory, start_console: ConsoleFactory, redis_url: str, tmp_path: Path
) -> None:
    # The console runs in tmp_path: here that is the project root, whose hooks it finds.
    gate = "grep -q urgent || { echo 'say why it is urgent' >&2; exit 2; }"
    root = with_hooks(write_scripted_project(tmp_path, "k", []), "k", task_created=gate)
    start_agent("k/zeus", cwd=root)
    console = start_console()
    attach_and_send(console, "k/zeus", "/tasks add tidy up")
    error = console.wait_line("error [")
    assert error.startswith("error [hook.refused]") and "say why it is urgent" in error
    assert console.wait_exit() != 0  # a console on a pipe stops at an error
    assert tasks(root, redis_url, "ls") == []


def test_a_failed_task_created_hook_adds_the_task_and_says_so(
    redis_url: str, tmp_path: Path
) -> None:
    root = write_scripted_project(tmp_path / "e", "e", [])
    with_hooks(root, "e", task_created="echo 'gate script missing' >&2; exit 1")
    added = run_ateam("tasks", "add", "tidy", "up", "--redis", redis_url, cwd=root)
    assert added.returncode == 0, added.stderr
    assert added.stdout.startswith("added t-")
    assert "error [hook.failed]" in added.stderr and "gate script missing" in added.stderr
    assert [row["title"] for row in tasks(root, redis_url, "ls")] == ["tidy up"]


def test_an_agent_killed_while_task_done_runs_judges_the_answer_again_after_restart(
    start_agent: AgentFactory, bus: Bus, redis_url: str, tmp_path: Path
) -> None:
    # The first run marks that it started and hangs until the agent is killed; the run
    # after the restart accepts. Settling the task at restart with the unjudged answer
    # would mark it done with no accepted run at all.
    gate = "test -f asked && exit 0; touch asked; sleep 60"
    turns = [{"text": "Done."}]
    root = write_scripted_project(tmp_path / "k", "k", turns, agent_yaml={"take_tasks": True})
    with_hooks(root, "k", task_done=gate)
    agent = start_agent("k/zeus", cwd=root)
    task = tasks(root, redis_url, "add", "ship", "it")
    wait_for(lambda: (root / "asked").exists(), WAIT_S, "the gate to be running")
    agent.kill9()
    start_agent("k/zeus", cwd=root)

    done = wait_for(
        lambda: (row := board_task(root, redis_url, task["id"]))["status"] == "done" and row,
        WAIT_S,
        "the task to be done after the restart",
    )
    assert done["result"] == "Done."
    runs = [r for r in of_type(bus, "k/zeus", "hook.run") if r["hook"] == "task_done"]
    assert [(r["refused"], r["failed"], r["exit"]) for r in runs] == [(False, False, 0)]


@pytest.mark.parametrize(("verb", "runs_expected"), [("done", 1), ("fail", 0)])
def test_a_board_task_the_model_ended_with_a_tool_is_not_judged_again_at_its_final_answer(
    verb: str,
    runs_expected: int,
    start_agent: AgentFactory,
    bus: Bus,
    redis_url: str,
    tmp_path: Path,
) -> None:
    # Accepts its first run and refuses any later one: a second run is a second asking.
    gate = "test -f ran && { echo 'asked again' >&2; exit 2; }; touch ran"
    root = write_scripted_project(
        tmp_path / "o", "o", [], agent_yaml={"take_tasks": True}, allow=("tasks.*",)
    )
    with_hooks(root, "o", task_done=gate)
    task = tasks(root, redis_url, "add", "ship", "it")
    args = (
        {"id": task["id"], "result": "shipped"}
        if verb == "done"
        else {
            "id": task["id"],
            "reason": "cannot ship",
        }
    )
    ended = {"name": f"tasks.{verb}", "args": args}
    turns = [{"text": "Ending it.", "tool_calls": [ended]}, {"text": "All done."}]
    (root / ".ateam" / "script.yaml").write_text(yaml.safe_dump({"turns": turns}))
    start_agent("o/zeus", cwd=root)

    wait_for(lambda: of_type(bus, "o/zeus", "task.end"), WAIT_S, "the task to end")
    row = board_task(root, redis_url, task["id"])
    assert row["status"] == ("done" if verb == "done" else "failed")
    runs = [r for r in of_type(bus, "o/zeus", "hook.run") if r["hook"] == "task_done"]
    assert [r["refused"] for r in runs] == [False] * runs_expected
    fed = [
        t for t in history_turns(root) if t["source"] == "hook:task_done" and t["role"] == "user"
    ]
    assert fed == []  # no "not done yet" round
    assert len(of_type(bus, "o/zeus", "task.start")) == 1


def test_a_tasks_done_call_on_a_task_done_already_does_not_ask_the_gate_again(
    start_agent: AgentFactory, bus: Bus, redis_url: str, tmp_path: Path
) -> None:
    gate = "test -f ran && { echo 'asked again' >&2; exit 2; }; touch ran"
    root = write_scripted_project(tmp_path / "w", "w", [], allow=("tasks.*",))
    with_hooks(root, "w", task_done=gate)
    task = tasks(root, redis_url, "add", "fix", "the", "build")
    claim = {"name": "tasks.claim", "args": {"id": task["id"]}}
    done = {"name": "tasks.done", "args": {"id": task["id"], "result": "fixed"}}
    turns = [
        {"text": "Taking it.", "tool_calls": [claim]},
        {"text": "Done.", "tool_calls": [done]},
        {"text": "Once more, to be sure.", "tool_calls": [done]},
        {"text": "Fixed."},
    ]
    (root / ".ateam" / "script.yaml").write_text(yaml.safe_dump({"turns": turns}))
    start_agent("w/zeus", cwd=root)
    sent = run_ateam("send", "w/zeus", "fix the build", "--redis", redis_url, cwd=root)
    assert sent.returncode == 0, sent.stderr

    wait_for(lambda: of_type(bus, "w/zeus", "task.end"), WAIT_S, "the task to end")
    results = [t for t in history_turns(root) if t["role"] == "tool"]
    assert [t["ok"] for t in results] == [True, True, False]
    assert results[2]["content"].startswith("error [task.claimed]")  # what the board says
    runs = [r for r in of_type(bus, "w/zeus", "hook.run") if r["hook"] == "task_done"]
    assert [r["refused"] for r in runs] == [False]
    assert board_task(root, redis_url, task["id"])["status"] == "done"
