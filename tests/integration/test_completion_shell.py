"""``ateam completion bash|zsh|fish``: the script a shell sources, run by a real ``bash``
against a real bus — verbs, flags, live agent names and task ids."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import AgentFactory, run_ateam, subprocess_env, write_project

pytestmark = pytest.mark.integration


def complete(script: Path, words: list[str], *, cwd: Path, env: dict[str, str]) -> list[str]:
    """What bash offers for the last of ``words``, as a user's TAB would ask it."""
    quoted = " ".join(f"'{word}'" for word in words)
    program = (
        f"source {script}; COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; "
        'COMP_LINE="${COMP_WORDS[*]}"; COMP_POINT=${#COMP_LINE}; '
        '_shtab_ateam; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    done = subprocess.run(
        ["bash", "-c", program], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr  # nothing may land in the middle of a prompt
    return sorted(line for line in done.stdout.splitlines() if line)


@pytest.fixture
def script(tmp_path: Path) -> Path:
    made = run_ateam("completion", "bash")
    assert made.returncode == 0, made.stderr
    path = tmp_path / "ateam.bash"
    path.write_text(made.stdout)
    return path


def test_bash_completes_verbs_flags_agent_names_and_task_ids(
    script: Path, tmp_path: Path, start_agent: AgentFactory, redis_url: str
) -> None:
    root = write_project(tmp_path / "proj", "proj", agents=("zeus", "hera"))
    start_agent("proj/zeus", cwd=root)
    start_agent("other/ares")
    added = run_ateam("tasks", "add", "write", "docs", "--json", "--redis", redis_url, cwd=root)
    assert added.returncode == 0, added.stderr
    task = json.loads(added.stdout)["id"]
    env = subprocess_env(ATEAM_REDIS_URL=redis_url)

    assert complete(script, ["ateam", "at"], cwd=root, env=env) == ["attach"]
    assert complete(script, ["ateam", "st"], cwd=root, env=env) == ["start", "stop"]
    assert complete(script, ["ateam", "logs", "--fo"], cwd=root, env=env) == ["--follow"]
    assert complete(script, ["ateam", "kb", "s"], cwd=root, env=env) == ["search"]
    # Live names: the project's agents bare (running or only configured), others in full.
    assert complete(script, ["ateam", "send", "ze"], cwd=root, env=env) == ["zeus"]
    assert complete(script, ["ateam", "start", ""], cwd=root, env=env) == [
        "hera",
        "other/ares",
        "zeus",
    ]
    assert complete(script, ["ateam", "tail", "other/"], cwd=root, env=env) == ["other/ares"]
    assert complete(script, ["ateam", "tasks", "claim", "t-"], cwd=root, env=env) == [task]
    assert complete(script, ["ateam", "tasks", "claim", task, "--as", "h"], cwd=root, env=env) == [
        "hera"
    ]


def test_the_helper_starts_no_server_and_imports_nothing_heavy(tmp_path: Path) -> None:
    root = write_project(tmp_path / "proj", "proj", agents=("zeus", "hera"))
    env = subprocess_env()  # no URL, and no embedded server running in this home

    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "ateam", "__complete", "agents"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 0
    assert sorted(done.stdout.split()) == ["hera", "zeus"]
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines()}
    assert "ateam.client" in imported  # the measurement saw the imports at all
    heavy = {"textual", "ateam.cli.parser", "ateam.console", "ateam.agent", "chromadb", "shtab"}
    assert not heavy & imported
    status = run_ateam("server", "status", env=env)
    assert status.returncode == 1 and "not running" in status.stdout


@pytest.mark.parametrize(("shell", "flag"), [("zsh", "--follow"), ("fish", "-l follow")])
def test_zsh_and_fish_scripts_know_the_verbs_and_ask_for_live_names(shell: str, flag: str) -> None:
    made = run_ateam("completion", shell)

    assert made.returncode == 0, made.stderr
    for word in ("attach", "restart", "logs", flag, "__complete agents", "__complete tasks"):
        assert word in made.stdout, word
    assert "__complete" not in run_ateam("--help").stdout


def test_an_unknown_shell_is_refused_in_one_line() -> None:
    done = run_ateam("completion", "tcsh")

    assert done.returncode == 4 and done.stdout == ""
    assert "invalid choice: 'tcsh'" in done.stderr
