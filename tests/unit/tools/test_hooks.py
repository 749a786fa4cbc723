"""The hook runner (issue 26): a command's exit status is its verdict; stdin, cwd and env."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest
import yaml

from ateam.config import load_project
from ateam.config.schema import HooksSpec
from ateam.errors import Code
from ateam.tools.exec_values import ExecLimits
from ateam.tools.hooks import EVENT_STRING_LIMIT, FEEDBACK_LIMIT, Hook, HookRunner, Verdict


def runner(tmp_path: Path, limits: ExecLimits | None = None, **hooks: object) -> HookRunner:
    return HookRunner(HooksSpec.model_validate(hooks), cwd=tmp_path, limits=limits or ExecLimits())


async def test_no_command_runs_nothing(tmp_path: Path) -> None:
    assert await runner(tmp_path).run(Hook.TASK_DONE, {}) is None
    assert await runner(tmp_path, task_done="  ").run(Hook.TASK_DONE, {}) is None


async def test_exit_0_accepts(tmp_path: Path) -> None:
    run = await runner(tmp_path, task_done="true").run(Hook.TASK_DONE, {})
    assert run is not None and run.verdict is Verdict.ACCEPTED and run.exit_code == 0


async def test_exit_2_refuses_with_its_stderr_as_feedback(tmp_path: Path) -> None:
    hook = "echo noise; echo 'tests fail: test_parse' >&2; exit 2"
    run = await runner(tmp_path, task_done=hook).run(Hook.TASK_DONE, {})
    assert run is not None and run.refused and not run.failed
    assert run.feedback == "tests fail: test_parse"  # stdout is not the feedback
    error = run.refusal()
    assert error.code == Code.HOOK_REFUSED and "tests fail: test_parse" in error.one_line()
    assert error.detail == {"hook": "task_done", "feedback": "tests fail: test_parse"}


async def test_exit_2_without_stderr_still_says_who_refused(tmp_path: Path) -> None:
    run = await runner(tmp_path, before_tool="exit 2").run(Hook.BEFORE_TOOL, {})
    assert run is not None and run.refused and "before_tool" in run.feedback


@pytest.mark.parametrize("command", ["exit 1", "echo broken >&2; exit 3", "kill -9 $$"])
async def test_any_other_exit_is_a_failure_not_a_refusal(tmp_path: Path, command: str) -> None:
    run = await runner(tmp_path, agent_idle=command).run(Hook.AGENT_IDLE, {})
    assert run is not None and run.verdict is Verdict.FAILED and not run.refused
    assert run.failure().code == Code.HOOK_FAILED


async def test_a_missing_command_is_a_failure(tmp_path: Path) -> None:
    run = await runner(tmp_path, task_done="no-such-gate-command-xyz").run(Hook.TASK_DONE, {})
    assert run is not None and run.failed and run.exit_code == 127
    assert "not found" in run.feedback


async def test_a_hook_past_its_timeout_is_killed_and_failed(tmp_path: Path) -> None:
    hook = "sleep 30 & sleep 30"  # a child of its own too: the whole group goes
    run = await runner(tmp_path, task_done=hook, timeout_s=0.3).run(Hook.TASK_DONE, {})
    assert run is not None and run.failed and run.exit_code is None
    assert "timed out" in run.feedback


async def test_the_event_is_json_on_stdin_and_it_runs_in_cwd(tmp_path: Path) -> None:
    hook = "cat > seen.json; pwd > where.txt"
    resolved = tmp_path.resolve()  # noqa: ASYNC240 (a test: nothing else waits)
    run = await runner(tmp_path, task_created=hook).run(Hook.TASK_CREATED, {"title": "port it"})
    assert run is not None and run.verdict is Verdict.ACCEPTED
    assert json.loads((tmp_path / "seen.json").read_text()) == {
        "hook": "task_created",
        "title": "port it",
    }
    assert Path((tmp_path / "where.txt").read_text().strip()) == resolved


async def test_a_hook_that_does_not_read_stdin_is_fine(tmp_path: Path) -> None:
    run = await runner(tmp_path, task_done="exit 0").run(Hook.TASK_DONE, {"answer": "x" * 500_000})
    assert run is not None and run.verdict is Verdict.ACCEPTED


async def test_the_environment_is_the_exec_policy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GATE_SECRET", "s3cret-value")
    monkeypatch.setenv("GATE_ALLOWED", "yes")
    hook = 'echo "secret=${GATE_SECRET:-none} allowed=${GATE_ALLOWED:-none}" >&2; exit 2'
    strict = runner(tmp_path, ExecLimits(env_allow=("GATE_ALLOWED",)), task_done=hook)
    run = await strict.run(Hook.TASK_DONE, {})
    assert run is not None and run.feedback == "secret=none allowed=yes"
    inherit = runner(tmp_path, ExecLimits(inherit_env=True), task_done=hook)
    run = await inherit.run(Hook.TASK_DONE, {})
    assert run is not None and run.feedback == "secret=s3cret-value allowed=yes"


def test_agent_hooks_lie_over_the_project_hook_by_hook(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ATEAM_HOME", str(tmp_path / "home"))
    ateam = tmp_path / "p" / ".ateam"
    (ateam / "agents" / "a").mkdir(parents=True)
    (ateam / "agents" / "b").mkdir(parents=True)
    project = {"name": "p", "hooks": {"task_done": "make test", "before_tool": "./guard"}}
    (ateam / "project.yaml").write_text(yaml.safe_dump(project))
    (ateam / "agents" / "a" / "agent.yaml").write_text(
        yaml.safe_dump({"hooks": {"task_done": "pytest -q", "before_tool": "", "timeout_s": 5}})
    )
    (ateam / "agents" / "b" / "agent.yaml").write_text("{}\n")
    config = load_project(tmp_path / "p")
    assert config.hooks.task_done == "make test"
    a, b = config.agent("a").hooks, config.agent("b").hooks
    assert (a.task_done, a.before_tool, a.timeout_s) == ("pytest -q", "", 5)
    assert (b.task_done, b.before_tool, b.timeout_s) == ("make test", "./guard", 60)


def test_an_unknown_hook_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ateam.errors import ConfigError

    monkeypatch.setenv("ATEAM_HOME", str(tmp_path / "home"))
    ateam = tmp_path / "p" / ".ateam"
    ateam.mkdir(parents=True)
    (ateam / "project.yaml").write_text("name: p\nhooks: {task_finished: make}\n")
    with pytest.raises(ConfigError, match="task_finished"):
        load_project(tmp_path / "p")


async def test_long_strings_of_the_event_are_clipped_on_stdin(tmp_path: Path) -> None:
    # before_tool carries the tool's arguments: a file written whole is one of them.
    event = {"tool": "fs.write", "args": {"path": "a.py", "content": "x" * 100_000}}
    hook = "cat > seen.json"
    run = await runner(tmp_path, before_tool=hook).run(Hook.BEFORE_TOOL, event)
    assert run is not None and run.verdict is Verdict.ACCEPTED
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["args"]["path"] == "a.py" and seen["tool"] == "fs.write"
    content = seen["args"]["content"]
    assert content.startswith("x" * EVENT_STRING_LIMIT)
    assert content.endswith(f"[{100_000 - EVENT_STRING_LIMIT} more characters clipped]")


async def test_a_hook_that_writes_megabytes_to_stderr_costs_only_its_tail(tmp_path: Path) -> None:
    # 20 MB of noise, then the reason: the feedback is the tail, and the agent never
    # held the noise (measured as Python allocations while the hook ran).
    hook = "head -c 20000000 /dev/zero | tr '\\0' n >&2; echo 'the real reason' >&2; exit 2"
    tracemalloc.start()
    try:
        run = await runner(tmp_path, task_done=hook).run(Hook.TASK_DONE, {})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert run is not None and run.refused
    assert run.feedback.endswith("the real reason") and len(run.feedback) <= FEEDBACK_LIMIT + 1
    assert peak < 2_000_000
