"""``fs.patch`` under ``ask`` (SPEC §5.5): waiting, reject, apply, conflict and $EDITOR."""

from __future__ import annotations

import hashlib
import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from tests._wait import wait_for

from .conftest import (
    AgentFactory,
    Bus,
    ConsoleFactory,
    attach_and_send,
    subprocess_env,
    write_scripted_project,
)

pytestmark = pytest.mark.integration


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def patch_turn(content: str, base: str) -> dict[str, Any]:
    call = {"name": "fs.patch", "args": {"path": "app.py", "content": content, "base_sha256": base}}
    return {"text": "Proposing a change.", "tool_calls": [call]}


def test_fs_patch_waits_for_the_owner_who_rejects_applies_or_edits(
    start_agent: AgentFactory, start_console: ConsoleFactory, bus: Bus, tmp_path: Path
) -> None:
    root = tmp_path / "p"
    root.mkdir()
    target = root / "app.py"
    target.write_text("a = 1\n")
    os.chmod(target, 0o640)
    turns = [
        patch_turn("a = 2\n", sha("a = 1\n")), {"text": "first handled"},
        patch_turn("a = 2\n", sha("a = 1\n")), {"text": "second handled"},
        patch_turn("a = 3\n", sha("a = 2\n")), {"text": "third handled"},
        patch_turn("a = 3\n", sha("a = 99\n")), {"text": "fourth handled"},
    ]  # fmt: skip
    write_scripted_project(root, "p", turns, allow=("fs.*",))
    start_agent("p/zeus", cwd=root)
    # The owner's editor: turns the proposed 3 into 33.
    console = start_console(env=subprocess_env(EDITOR="sed -i s/3/33/"))

    def waiting() -> bool:
        entry = bus.entry("p/zeus")
        return entry is not None and entry["state"] == "waiting"

    def proposals(n: int) -> None:
        wait_for(lambda: console.output().count("waiting for you:") >= n, 10, f"proposal {n}")

    # 1. reject: the file stays as it was.
    attach_and_send(console, "p/zeus", "change it")
    console.wait_line("wants to change app.py")
    wait_for(waiting, 10, "the agent to show waiting")
    console.wait_line("+a = 2")
    console.wait_line("-a = 1")
    console.send("/reject")
    console.wait_line("[A:p/zeus] first handled", timeout=15)
    assert target.read_text() == "a = 1\n"

    # 2. apply: changed atomically, mode kept.
    inode = target.stat().st_ino
    console.send("again")
    proposals(2)
    console.send("/apply")
    console.wait_line("[A:p/zeus] second handled", timeout=15)
    assert target.read_text() == "a = 2\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert target.stat().st_ino != inode  # replaced by rename, never rewritten in place

    # 3. the file changes while the owner looks at the diff: the apply is refused.
    console.send("once more")
    proposals(3)
    target.write_text("a = 99\n")
    console.send("/apply")
    console.wait_line("[A:p/zeus] third handled", timeout=15)
    assert target.read_text() == "a = 99\n"

    # 4. edit in $EDITOR: the owner's version is what lands.
    console.send("last time")
    proposals(4)
    console.send("/edit")
    console.wait_line("[A:p/zeus] fourth handled", timeout=15)
    assert target.read_text() == "a = 33\n"

    ends = [b for _, b in bus.events("p/zeus") if b["type"] == "tool.end"]
    assert [e.get("code") for e in ends] == ["tool.rejected", None, "fs.conflict", None]
    resolved = [b["decision"] for _, b in bus.events("p/zeus") if b["type"] == "approval.resolved"]
    assert resolved == ["reject", "approve", "approve", "edit"]


def test_os_exec_under_ask_runs_only_when_approved_and_a_timeout_rejects(
    start_agent: AgentFactory, start_console: ConsoleFactory, bus: Bus, tmp_path: Path
) -> None:
    def run(cmd: str) -> dict[str, Any]:
        return {"text": "May I?", "tool_calls": [{"name": "os.exec", "args": {"cmd": cmd}}]}

    root = write_scripted_project(
        tmp_path / "x",
        "x",
        [
            run("echo approved-run"),
            {"text": "one done"},
            run("echo never-ran"),
            {"text": "two done"},
        ],
        agent_yaml={"tools": {"approval": {"os.*": "ask"}, "approval_timeout_s": 5}},
    )
    start_agent("x/zeus", cwd=root)
    console = start_console()
    attach_and_send(console, "x/zeus", "first")
    console.wait_line("approval needed: os.exec")
    assert "approved-run" not in "".join(
        b.get("text", "") for _, b in bus.events("x/zeus") if b["type"] == "tool.output"
    )
    console.send("/approve")
    console.wait_line("[A:x/zeus] one done", timeout=15)
    console.wait_line(lambda line: line.endswith("approved-run"))

    console.send("second")  # nobody answers: rejected after approval_timeout_s
    console.wait_line("[A:x/zeus] two done", timeout=20)
    ends = [b for _, b in bus.events("x/zeus") if b["type"] == "tool.end"]
    assert [e.get("code") for e in ends] == [None, "tool.rejected"]
    assert "no answer within 5 s" in ends[1]["error"]
    assert "never-ran" not in console.output().replace("echo never-ran", "")


def test_the_iteration_limit_ends_a_runaway_task(
    start_agent: AgentFactory, start_console: ConsoleFactory, bus: Bus, tmp_path: Path
) -> None:
    loop = {"text": "Again.", "tool_calls": [{"name": "os.exec", "args": {"cmd": "true"}}]}
    root = write_scripted_project(
        tmp_path / "i", "i", [loop, loop, {"text": "next task"}], agent_yaml={"max_iterations": 2}
    )
    start_agent("i/zeus", cwd=root)
    console = start_console()
    attach_and_send(console, "i/zeus", "loop forever", "then this")
    console.wait_line("[A:i/zeus] next task", timeout=15)
    first, second = bus.task_end_list("i/zeus")
    assert first["ok"] is False and "iteration limit" in first["error"]
    assert first["iterations"] == 2
    assert second["ok"] is True


def test_sighup_while_busy_reloads_the_prompt_after_the_task(
    start_agent: AgentFactory, start_console: ConsoleFactory, bus: Bus, tmp_path: Path
) -> None:
    import signal

    # The task stays busy until the test creates `go`: the SIGHUP surely lands mid-task.
    wait = {"name": "os.exec", "args": {"cmd": "while [ ! -f go ]; do sleep 0.05; done"}}
    root = write_scripted_project(
        tmp_path / "h", "h", [{"text": "Waiting.", "tool_calls": [wait]}, {"text": "done"}]
    )
    agent = start_agent("h/zeus", cwd=root)
    console = start_console()
    attach_and_send(console, "h/zeus", "wait")
    console.wait_line("▶ $ while")
    agent.proc.send_signal(signal.SIGHUP)

    def prompt_events() -> list[tuple[int, dict[str, Any]]]:
        return [(o, b) for o, b in bus.events("h/zeus") if b["type"] == "prompt"]

    wait_for(prompt_events, 10, "the deferred reload notice")
    # The overlay changes on disk too: the 1 s poll sees it but must not repeat the notice.
    overlay = root / ".ateam/agents/zeus/system_overlay.md"
    overlay.write_text("Edited while busy.\n")
    time.sleep(2.5)  # two polls: a negative can only be checked by waiting
    (root / "go").touch()
    wait_for(lambda: bus.task_end_list("h/zeus"), 15, "the task to end")
    wait_for(lambda: len(prompt_events()) >= 2, 10, "the reload after the task")
    (deferred_at, deferred), (reloaded_at, reloaded) = prompt_events()
    task_end_at = next(o for o, b in bus.events("h/zeus") if b["type"] == "task.end")
    assert deferred["action"] == "reload_deferred" and deferred["reason"] == "SIGHUP"
    assert reloaded["action"] == "reloaded" and reloaded["changed"] is True
    assert deferred_at < task_end_at < reloaded_at
    assert agent.running()
