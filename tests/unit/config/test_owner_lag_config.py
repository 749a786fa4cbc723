"""``exec.owner_lag_bytes`` (issue 28 §3): its default, an agent's own, and bad values."""

from __future__ import annotations

from pathlib import Path

import pytest

from ateam.config import ConfigError, load_project
from ateam.constants import EVENT_LOG_MAX_BYTES, OWNER_LAG_BYTES


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_the_default_and_an_agents_own(tmp_path: Path) -> None:
    write(tmp_path / ".ateam/agents/zeus/agent.yaml", "exec: {owner_lag_bytes: 0}\n")
    write(tmp_path / ".ateam/agents/hera/agent.yaml", "model: echo\n")
    project = load_project(tmp_path)
    assert project.agent("hera").exec.owner_lag_bytes == OWNER_LAG_BYTES
    assert project.agent("zeus").exec.owner_lag_bytes == 0


@pytest.mark.parametrize("value", [-1, EVENT_LOG_MAX_BYTES // 2 + 1, "lots"])
def test_a_bound_the_stream_could_not_keep_is_refused_in_one_line(
    tmp_path: Path, value: object
) -> None:
    write(tmp_path / ".ateam/tools.yaml", f"exec: {{owner_lag_bytes: {value}}}\n")
    write(tmp_path / ".ateam/agents/zeus/agent.yaml", "model: echo\n")
    with pytest.raises(ConfigError) as caught:
        load_project(tmp_path).agent("zeus")
    message = str(caught.value)
    assert "\n" not in message and "owner_lag_bytes" in message
    assert caught.value.code == "config.invalid"
