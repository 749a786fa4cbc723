"""``run_agent``: what refuses an agent before it runs is one line and an agent exit code."""

from __future__ import annotations

from pathlib import Path

import pytest

from ateam.agent.runtime.main import AgentOptions, run_agent
from ateam.errors import UsageError
from ateam.exits import Exit


def test_a_bad_name_is_a_final_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    # 12, not the verbs' 4: a supervisor reads it as final and does not restart the agent.
    assert run_agent(AgentOptions(name="no/such", project="p")) == Exit.CONFIG_INVALID
    assert capsys.readouterr().err.startswith("error [config.invalid]")


def test_no_project_is_the_command_lines_mistake(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="no project here"):
        run_agent(AgentOptions(name="zeus"))
