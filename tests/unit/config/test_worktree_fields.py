"""``agent.yaml`` ``worktree``, ``commit`` and ``base_branch`` (issue 27): defaults, the
values each takes, and a one-line ``config.invalid`` for anything else."""

from __future__ import annotations

from pathlib import Path

import pytest

from ateam.config import ConfigError, load_project


def project_with(root: Path, agent_yaml: str) -> Path:
    (root / ".ateam" / "agents" / "zeus").mkdir(parents=True)
    (root / ".ateam" / "project.yaml").write_text("name: p\n")
    (root / ".ateam" / "agents" / "zeus" / "agent.yaml").write_text(agent_yaml)
    return root


def test_defaults_keep_the_agent_in_its_cwd_and_commit_at_each_task_end(tmp_path: Path) -> None:
    spec = load_project(project_with(tmp_path, "description: x\n")).agents["zeus"].spec
    assert (spec.worktree, spec.commit, spec.base_branch) == ("none", "on_task_done", None)


@pytest.mark.parametrize("mode", ["none", "agent", "task"])
@pytest.mark.parametrize("commit", ["on_task_done", "never"])
def test_each_mode_and_commit_setting_loads(tmp_path: Path, mode: str, commit: str) -> None:
    text = f"worktree: {mode}\ncommit: {commit}\nbase_branch: develop\n"
    spec = load_project(project_with(tmp_path, text)).agents["zeus"].spec
    assert (spec.worktree, spec.commit, spec.base_branch) == (mode, commit, "develop")


@pytest.mark.parametrize(
    ("line", "field"),
    [("worktree: tasks", "worktree"), ("worktree: true", "worktree"), ("commit: always", "commit")],
)
def test_other_values_are_one_line_config_errors(tmp_path: Path, line: str, field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_project(project_with(tmp_path, line + "\n"))
    message = caught.value.one_line()
    assert "\n" not in message and field in message
    assert caught.value.code == "config.invalid"
