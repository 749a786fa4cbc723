"""A new project in one command (issue 10): ``ateam init``, then ``ateam up``, and the
project inferred from where a command runs (SPEC §2, §3)."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ateam.config import load_project
from ateam.config.schema import EmbeddingsProvider, Provider
from tests._wait import wait_for

from .conftest import (
    START_TIMEOUT_S,
    AgentFactory,
    AgentProcess,
    Bus,
    ateam_cmd,
    run_ateam,
    subprocess_env,
    wait_serving,
)

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "ateam" / "config" / "example"
"""The commented template, package data (the repository's ``.ateam.example`` links here)."""

TEMPLATE_FILES = {
    ".ateam/project.yaml",
    ".ateam/models.yaml",
    ".ateam/agents/zeus/agent.yaml",
    ".ateam/agents/zeus/system_base.md",
    ".ateam/agents/zeus/system_overlay.md",
    ".ateam/.gitignore",
}


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every entry under ``root``: a file's bytes, ``None`` for a directory."""
    return {
        str(path.relative_to(root)): None if path.is_dir() else path.read_bytes()
        for path in sorted(root.rglob("*"))
    }


def init(directory: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return run_ateam("init", str(directory), *args, cwd=cwd)


# --- what init writes ---------------------------------------------------------------------


def test_init_writes_a_project_that_loads_on_the_offline_model(tmp_path: Path) -> None:
    root = tmp_path / "app"

    result = init(root)

    assert result.returncode == 0, result.stderr
    assert {name for name, data in snapshot(root).items() if data is not None} == TEMPLATE_FILES
    assert "ateam up" in result.stdout
    project = load_project(root)
    assert (project.name, project.root, list(project.agents)) == ("app", root, ["zeus"])
    zeus = project.agent("zeus")
    assert zeus.model == project.default_model == "echo"
    assert zeus.model_entry().provider is Provider.ECHO
    assert project.embeddings is None  # the offline embedder
    assert {"kb.*", "fs.*"} <= set(zeus.tools_allow)
    assert "zeus" in zeus.base_prompt_path.read_text()


def test_init_takes_a_name_an_agent_and_an_empty_ateam_dir(tmp_path: Path) -> None:
    (tmp_path / "my dir" / ".ateam").mkdir(parents=True)

    bad = init(tmp_path / "my dir")
    assert bad.returncode == 4
    assert "invalid project name 'my dir'" in bad.stderr and "--name" in bad.stderr
    assert snapshot(tmp_path / "my dir") == {".ateam": None}

    result = init(tmp_path / "my dir", "--name", "shop", "--agent", "ares")

    assert result.returncode == 0, result.stderr
    project = load_project(tmp_path / "my dir")
    assert (project.name, list(project.agents)) == ("shop", ["ares"])
    assert (
        "shop/ares"
        in (tmp_path / "my dir" / ".ateam" / "agents" / "ares" / "agent.yaml").read_text()
    )


def test_init_example_writes_the_commented_template_that_the_package_carries(
    tmp_path: Path,
) -> None:
    # Run from outside the checkout: the files come with the installed package.
    result = init(tmp_path / "ref", "--example", "--name", "shop", cwd=tmp_path)

    assert result.returncode == 0, result.stderr
    written = {name: data for name, data in snapshot(tmp_path / "ref").items() if data is not None}
    shipped = {
        f".ateam/{path.relative_to(EXAMPLE)}": path.read_bytes()
        for path in EXAMPLE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert set(written) == set(shipped) | {".ateam/.gitignore"}
    assert written[".ateam/tools.yaml"] == shipped[".ateam/tools.yaml"]
    assert b"\nname: shop\n" in written[".ateam/project.yaml"]
    project = load_project(tmp_path / "ref")
    assert (project.name, list(project.agents), project.default_model) == (
        "shop",
        ["zeus"],
        "echo",
    )

    mixed = init(tmp_path / "other", "--example", "--runtime", "codex")
    assert mixed.returncode == 4 and "--example" in mixed.stderr
    assert not (tmp_path / "other").exists()
    again = init(tmp_path / "ref", "--example")
    assert again.returncode == 1 and "project.exists" in again.stderr


def test_the_commented_provider_entries_are_real_configuration(tmp_path: Path) -> None:
    root = tmp_path / "app"
    assert init(root).returncode == 0
    models = root / ".ateam" / "models.yaml"
    # Uncomment what a user would: the entries and the embeddings section, not the prose
    # or the optional lines commented inside them.
    entry = re.compile(r"^(  )?# ((- id:|embeddings:)|  +[a-z_]+:)", re.MULTILINE)
    models.write_text(entry.sub(lambda m: (m.group(1) or "") + m.group(2), models.read_text()))

    project = load_project(root)

    gpt, claude = project.models["gpt"], project.models["claude"]
    assert (gpt.provider, gpt.api_key_env, gpt.base_url) == (
        Provider.OPENAI,
        "OPENAI_API_KEY",
        None,
    )
    assert (claude.provider, claude.api_key_env) == (Provider.ANTHROPIC, "ANTHROPIC_API_KEY")
    assert project.embeddings is not None
    assert project.embeddings.provider is EmbeddingsProvider.OPENAI
    assert project.embeddings.api_key_env == "OPENAI_API_KEY"


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_gitignore_keeps_state_and_kb_stores_out_of_git(tmp_path: Path) -> None:
    root = tmp_path / "app"
    assert init(root).returncode == 0
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    candidates = [
        ".ateam/agents/zeus/state/queue.jsonl",
        ".ateam/agents/zeus/state/agent.log",
        ".ateam/agents/zeus/kb/chroma/chroma.sqlite3",
        ".ateam/kb/chroma/chroma.sqlite3",
        *sorted(TEMPLATE_FILES),
        ".ateam/agents/zeus/plan.md",
    ]

    checked = subprocess.run(
        ["git", "-C", str(root), "check-ignore", "--no-index", *candidates],
        capture_output=True,
        text=True,
    )

    assert checked.stdout.split() == candidates[:4]


@pytest.mark.parametrize(
    "occupied",
    ["a second init", "a .ateam with another file", "a .ateam that is a file"],
)
def test_init_never_overwrites_a_project(tmp_path: Path, occupied: str) -> None:
    root = tmp_path / "app"
    root.mkdir()
    if occupied == "a second init":
        assert init(root).returncode == 0
        (root / ".ateam" / "agents" / "zeus" / "agent.yaml").write_text("model: mine\n")
    elif occupied == "a .ateam with another file":
        (root / ".ateam").mkdir()
        (root / ".ateam" / "tools.yaml").write_text("tools: {allow: [os.exec]}\n")
    else:
        (root / ".ateam").write_text("not a directory\n")
    before = snapshot(root)

    result = init(root)

    assert result.returncode != 0
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error [project.exists]: ")
    assert str(root / ".ateam") in lines[0]
    assert result.stdout == ""
    assert snapshot(root) == before  # byte for byte, and no staging directory left


# --- init, then up ------------------------------------------------------------------------


@pytest.fixture
def down() -> Iterator[list[Path]]:
    """Projects to bring down at the end, whatever happened."""
    started: list[Path] = []
    yield started
    for root in started:
        run_ateam("up", str(root), "--down", timeout=60)


def test_init_then_up_runs_the_agent_and_a_bare_name_reaches_it(
    tmp_path: Path, redis_url: str, bus: Bus, down: list[Path]
) -> None:
    root = tmp_path / "app"
    assert init(root).returncode == 0
    down.append(root)

    up = run_ateam("up", str(root), "--detach", "--redis", redis_url, timeout=60)

    assert up.returncode == 0, up.stdout + up.stderr
    assert "app/zeus: started" in up.stdout
    deep = root / "src" / "deep"
    deep.mkdir(parents=True)
    send = run_ateam("send", "zeus", "hi", "from", "deep", "--redis", redis_url, cwd=deep)
    assert send.returncode == 0, send.stderr
    end = wait_for(
        lambda: bus.task_ends("app/zeus").get(send.stdout.strip()), START_TIMEOUT_S, "the task"
    )
    assert end["ok"] is True
    tail = run_ateam("tail", "zeus", "--from", "1", "--redis", redis_url, cwd=deep)
    assert "[A:app/zeus] echo: hi from deep" in tail.stdout.splitlines(), tail.stdout
    assert (root / ".ateam" / "agents" / "zeus" / "state" / "history.jsonl").exists()


# --- the project a command runs in ----------------------------------------------------------


@pytest.fixture
def start_in(own_redis: Any, bus: Bus, tmp_path: Path) -> Iterator[Any]:
    """``start_in(cwd, *args)``: ``ateam agent --no-repl *args`` run in ``cwd``, serving."""
    started: list[AgentProcess] = []

    def start(agent_id: str, cwd: Path, *args: str) -> AgentProcess:
        log = tmp_path / f"agent-{len(started)}.log"
        cmd = ateam_cmd("agent", "--no-repl", "--redis", own_redis.url, *args)
        with log.open("wb") as err:
            proc = subprocess.Popen(
                cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=err, stderr=err, env=subprocess_env()
            )
        agent = AgentProcess(agent_id, cmd, proc, log)
        started.append(agent)
        wait_serving(bus, agent)
        return agent

    yield start
    for agent in started:
        if agent.running():
            agent.kill9()


def test_the_project_is_inferred_from_the_nearest_project_yaml_and_project_overrides(
    tmp_path: Path, redis_url: str, bus: Bus, start_in: Any, start_agent: AgentFactory
) -> None:
    alpha, beta = tmp_path / "alpha", tmp_path / "beta"
    assert init(alpha).returncode == 0
    assert init(beta).returncode == 0
    deep = alpha / "src" / "deep"
    deep.mkdir(parents=True)
    # `ateam agent` without --project: the project is the one it is started in.
    start_in("alpha/zeus", deep, "--name", "zeus")
    start_agent("beta/zeus", cwd=beta)

    here = run_ateam("send", "zeus", "to", "alpha", "--redis", redis_url, cwd=deep)
    there = run_ateam(
        "send", "zeus", "to", "beta", "--project", "beta", "--redis", redis_url, cwd=deep
    )
    full = run_ateam("send", "beta/zeus", "by", "id", "--redis", redis_url, cwd=deep)

    for result in (here, there, full):
        assert result.returncode == 0, result.stderr
    wait_for(lambda: len(bus.task_ends("beta/zeus")) == 2, START_TIMEOUT_S, "beta's tasks")
    wait_for(lambda: bus.task_ends("alpha/zeus"), START_TIMEOUT_S, "alpha's task")
    assert set(bus.task_ends("alpha/zeus")) == {here.stdout.strip()}
    assert set(bus.task_ends("beta/zeus")) == {there.stdout.strip(), full.stdout.strip()}

    nowhere = tmp_path / "elsewhere"
    nowhere.mkdir()
    lost = run_ateam("send", "zeus", "hi", "--redis", redis_url, cwd=nowhere)
    assert lost.returncode == 4
    assert "no project here" in lost.stderr and "--project" in lost.stderr
    lost_agent = run_ateam(
        "agent", "--name", "zeus", "--no-repl", "--redis", redis_url, cwd=nowhere
    )
    assert lost_agent.returncode == 4
    assert "no project here" in lost_agent.stderr

    stop = run_ateam("stop", "zeus", "--redis", redis_url, cwd=deep)
    assert stop.returncode == 0, stop.stderr
    assert "stopped alpha/zeus" in stop.stdout
    assert bus.entry("alpha/zeus") is None
    assert bus.entry("beta/zeus") is not None
